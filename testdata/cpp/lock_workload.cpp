// lock_workload: mutex contention and condition-variable hand-offs with known
// counts and hold times.
//
// usage: lock_workload [--threads T] [--iters N] [--hold-us H] [--condvar] [--wait]
//   --threads T  worker threads in mutex mode (default 4)
//   --iters N    iterations per worker; in condvar mode, items handed over (default 20)
//   --hold-us H  microseconds the lock is held per acquisition (default 2000)
//   --condvar    run the producer/consumer mode instead of the mutex mode
//   --wait       print `READY <pid>`, then block until SIGUSR1 arrives
//
// Mutex mode (default). Call tree (every named function is noinline):
//   main -> run_ledger -> T threads: ledger_worker -> N x {
//     Ledger::post()   locks the global `std::mutex g_ledger_mutex`, busy-waits
//                      (on CLOCK_MONOTONIC, never sleeps) H us holding it, unlocks
//     Ledger::audit()  busy-waits 100 us without the lock }
// Everything is serialized on g_ledger_mutex, so the run takes at least
// T * N * H us (0.16 s with the defaults), and all but the first acquisition
// are likely to block in the kernel (futex) when T > 1.
//
// Condvar mode. One producer and one consumer thread share a `Queue`:
//   producer_loop -> N x { nanosleep 1 ms; Queue::push() (lock, append,
//                          unlock, notify_one) }
//   consumer_loop -> N x Queue::pop() (lock, cv.wait while empty, take, unlock)
//
// Last line on stdout (one line; shown wrapped here):
// mutex mode:
// EXPECT {"program":"lock_workload","mode":"mutex","pid":P,"threads":T,
//   "iters":N,"hold_us":H,"outside_us":100,"acquisitions":T*N,
//   "mutex":"0x...","total_wait_us":w,"max_wait_us":m,"total_hold_us":h}
// condvar mode:
// EXPECT {"program":"lock_workload","mode":"condvar","pid":P,"threads":2,
//   "iters":N,"sleep_us":1000,"pushes":N,"pops":N,"notifies":N,"waits":k,
//   "mutex":"0x...","condvar":"0x..."}
// where
//   mutex         runtime address of the std::mutex (the pthread_mutex_t the
//                 tracer sees as the first argument of pthread_mutex_lock and
//                 in the futex address); condvar likewise for pthread_cond_*
//   total_wait_us / max_wait_us  time spent in lock() as measured by the
//                 program itself (sum over all acquisitions / worst single one)
//   total_hold_us time from lock() returning to just before unlock(), summed
//                 (about T * N * H)
//   waits         times the consumer called cv.wait (found the queue empty);
//                 measured, typically == N because the producer sleeps first

#include <condition_variable>
#include <mutex>
#include <thread>

#include "common.h"

std::mutex g_ledger_mutex;

namespace {
constexpr int64_t kOutsideUs = 100;
constexpr int64_t kSleepUs = 1000;
}  // namespace

struct WorkerStats {
  int64_t acquisitions = 0;
  int64_t wait_ns = 0;
  int64_t max_wait_ns = 0;
  int64_t hold_ns = 0;
};

class Ledger {
 public:
  EBT_NOINLINE static void post(int64_t hold_us, WorkerStats& st);
  EBT_NOINLINE static void audit();

 private:
  static int64_t balance_;
};

int64_t Ledger::balance_ = 0;

void Ledger::post(int64_t hold_us, WorkerStats& st) {
  const int64_t t0 = ebt::now_ns();
  g_ledger_mutex.lock();
  const int64_t t1 = ebt::now_ns();
  ebt::spin_for_us(hold_us);
  balance_ += 1;
  // Read the clock before unlock: unlock may wake a waiter that preempts us.
  const int64_t t2 = ebt::now_ns();
  g_ledger_mutex.unlock();
  st.acquisitions += 1;
  st.wait_ns += t1 - t0;
  if (t1 - t0 > st.max_wait_ns) st.max_wait_ns = t1 - t0;
  st.hold_ns += t2 - t1;
}

void Ledger::audit() { ebt::spin_for_us(kOutsideUs); }

EBT_NOINLINE void ledger_worker(int64_t iters, int64_t hold_us, WorkerStats* st) {
  for (int64_t i = 0; i < iters; i++) {
    Ledger::post(hold_us, *st);
    Ledger::audit();
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void run_ledger(int64_t threads, int64_t iters, int64_t hold_us) {
  std::vector<WorkerStats> stats(threads);
  std::vector<std::thread> workers;
  workers.reserve(threads);
  for (int64_t t = 0; t < threads; t++) {
    workers.emplace_back(ledger_worker, iters, hold_us, &stats[t]);
  }
  for (auto& w : workers) w.join();

  WorkerStats sum;
  for (const auto& s : stats) {
    sum.acquisitions += s.acquisitions;
    sum.wait_ns += s.wait_ns;
    sum.hold_ns += s.hold_ns;
    if (s.max_wait_ns > sum.max_wait_ns) sum.max_wait_ns = s.max_wait_ns;
  }
  ebt::Json j;
  j.begin_object()
      .str("program", "lock_workload")
      .str("mode", "mutex")
      .num("pid", getpid())
      .num("threads", threads)
      .num("iters", iters)
      .num("hold_us", hold_us)
      .num("outside_us", kOutsideUs)
      .num("acquisitions", sum.acquisitions)
      .hex("mutex", &g_ledger_mutex)
      .num("total_wait_us", sum.wait_ns / 1000)
      .num("max_wait_us", sum.max_wait_ns / 1000)
      .num("total_hold_us", sum.hold_ns / 1000)
      .end_object();
  j.print_expect();
}

class Queue {
 public:
  EBT_NOINLINE void push(int64_t v);
  EBT_NOINLINE int64_t pop();

  std::mutex mu;
  std::condition_variable cv;
  int64_t pushes = 0, pops = 0, notifies = 0, waits = 0;

 private:
  // A fixed ring instead of std::deque so push/pop never allocate.
  static constexpr int kCap = 64;
  int64_t items_[kCap];
  int head_ = 0, size_ = 0;
};

void Queue::push(int64_t v) {
  std::unique_lock<std::mutex> lk(mu);
  while (size_ == kCap) {
    // Only if the consumer stalls for kCap sleeps; stay correct anyway.
    lk.unlock();
    sched_yield();
    lk.lock();
  }
  items_[(head_ + size_) % kCap] = v;
  size_ += 1;
  pushes += 1;
  notifies += 1;
  lk.unlock();
  cv.notify_one();
  ebt::no_tail_call();
}

int64_t Queue::pop() {
  std::unique_lock<std::mutex> lk(mu);
  while (size_ == 0) {
    waits += 1;
    cv.wait(lk);
  }
  const int64_t v = items_[head_];
  head_ = (head_ + 1) % kCap;
  size_ -= 1;
  pops += 1;
  return v;
}

EBT_NOINLINE void producer_loop(Queue* q, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    struct timespec ts = {0, kSleepUs * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    q->push(i);
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void consumer_loop(Queue* q, int64_t n) {
  int64_t sum = 0;
  for (int64_t i = 0; i < n; i++) sum += q->pop();
  if (sum != n * (n - 1) / 2) {
    fprintf(stderr, "lock_workload: consumer got wrong items\n");
    exit(1);
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void run_condvar(int64_t iters) {
  Queue q;
  std::thread consumer(consumer_loop, &q, iters);
  std::thread producer(producer_loop, &q, iters);
  producer.join();
  consumer.join();

  ebt::Json j;
  j.begin_object()
      .str("program", "lock_workload")
      .str("mode", "condvar")
      .num("pid", getpid())
      .num("threads", 2)
      .num("iters", iters)
      .num("sleep_us", kSleepUs)
      .num("pushes", q.pushes)
      .num("pops", q.pops)
      .num("notifies", q.notifies)
      .num("waits", q.waits)
      .hex("mutex", &q.mu)
      .hex("condvar", &q.cv)
      .end_object();
  j.print_expect();
}

int main(int argc, char** argv) {
  const char* usage =
      "lock_workload [--threads T] [--iters N] [--hold-us H] [--condvar] [--wait]";
  int64_t threads = 4, iters = 20, hold_us = 2000;
  bool condvar = false, wait = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--threads") == 0) {
      threads = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--iters") == 0) {
      iters = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--hold-us") == 0) {
      hold_us = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--condvar") == 0) {
      condvar = true;
    } else if (strcmp(argv[i], "--wait") == 0) {
      wait = true;
    } else {
      ebt::usage_error(usage, "unknown argument", argv[i]);
    }
  }
  if (threads < 1 || threads > 1024) ebt::usage_error(usage, "--threads must be 1..1024", nullptr);
  if (wait) ebt::wait_for_sigusr1();
  if (condvar) {
    run_condvar(iters);
  } else {
    run_ledger(threads, iters, hold_us);
  }
  return 0;
}
