// condvar_block: a thread blocked on a std::condition_variable for a known
// time until another thread wakes it, for checking off-CPU time (ebrec
// --offcpu): the blocking stack and the waker.
//
// usage: condvar_block [--ms M] [--rounds R] [--wait]
//   --ms M      how long the waker sleeps before each notify (default 200)
//   --rounds R  wait / notify rounds (default 1)
//   --wait      print `READY <pid>`, then block until SIGUSR1 arrives
//
// Call tree (every named function is noinline and not a tail call):
//   main -> run_condvar -> two threads, R rounds each:
//     waiter: cv::waiter_loop -> cv::wait_for_signal()
//               locks the mutex, std::condition_variable::wait until the
//               round's flag is set (pthread_cond_wait -> futex wait)
//     waker:  cv::waker_loop -> cv::signal_after(M)
//               waits until the waiter is in wait_for_signal, nanosleep(M ms),
//               then locks, sets the flag, unlocks and notify_one
//   The waiter is off CPU for ~M ms per round in wait_for_signal, woken by the
//   waker thread; the waker itself is off CPU ~M ms in nanosleep (a different
//   stack: signal_after).
//
// Last line on stdout (one line; shown wrapped here):
// EXPECT {"program":"condvar_block","pid":P,"ms":M,"rounds":R,
//   "waiter_tid":A,"waker_tid":B,"blocked_ns":[per round],"total_blocked_ns":t,
//   "spurious_wakeups":s,"mutex":"0x...","condvar":"0x..."}
// where blocked_ns is measured by the waiter with CLOCK_MONOTONIC from just
// before it starts waiting to just after the wait returns with the flag set,
// and spurious_wakeups counts wait() returns without the flag (normally 0).

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "common.h"

namespace cv {

struct Channel {
  std::mutex mu;
  std::condition_variable cv;
  int64_t signaled = 0;          // guarded by mu: rounds signaled so far
  std::atomic<int64_t> waiting{0};  // rounds the waiter has started waiting for
  int64_t spurious = 0;
};

// Blocks until round `round` is signaled; returns the blocked time.
EBT_NOINLINE int64_t wait_for_signal(Channel* ch, int64_t round) {
  std::unique_lock<std::mutex> lk(ch->mu);
  const int64_t t0 = ebt::now_ns();
  ch->waiting.store(round + 1);
  while (ch->signaled <= round) {
    ch->cv.wait(lk);
    if (ch->signaled <= round) ch->spurious += 1;
  }
  const int64_t blocked = ebt::now_ns() - t0;
  asm volatile("" ::: "memory");
  return blocked;
}

EBT_NOINLINE void signal_after(Channel* ch, int ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
  {
    std::lock_guard<std::mutex> lk(ch->mu);
    ch->signaled += 1;
  }
  ch->cv.notify_one();
  ebt::no_tail_call();
}

EBT_NOINLINE void waiter_loop(Channel* ch, int64_t rounds, long* tid, std::vector<int64_t>* blocked) {
  *tid = ebt::gettid_();
  for (int64_t r = 0; r < rounds; r++) blocked->push_back(wait_for_signal(ch, r));
  ebt::no_tail_call();
}

EBT_NOINLINE void waker_loop(Channel* ch, int64_t rounds, int ms, long* tid) {
  *tid = ebt::gettid_();
  for (int64_t r = 0; r < rounds; r++) {
    // The waiter has the mutex or is waiting: once it has announced round r
    // and released the mutex (inside wait), it is blocked.
    while (ch->waiting.load() <= r) {
      std::this_thread::yield();
    }
    { std::lock_guard<std::mutex> lk(ch->mu); }
    signal_after(ch, ms);
  }
  ebt::no_tail_call();
}

}  // namespace cv

EBT_NOINLINE void run_condvar(int ms, int64_t rounds) {
  cv::Channel ch;
  long waiter_tid = 0, waker_tid = 0;
  std::vector<int64_t> blocked;
  std::thread waiter(cv::waiter_loop, &ch, rounds, &waiter_tid, &blocked);
  std::thread waker(cv::waker_loop, &ch, rounds, ms, &waker_tid);
  waiter.join();
  waker.join();

  int64_t total = 0;
  ebt::Json j;
  j.begin_object()
      .str("program", "condvar_block")
      .num("pid", getpid())
      .num("ms", ms)
      .num("rounds", rounds)
      .num("waiter_tid", waiter_tid)
      .num("waker_tid", waker_tid)
      .begin_array("blocked_ns");
  for (int64_t b : blocked) {
    j.num(b);
    total += b;
  }
  j.end_array()
      .num("total_blocked_ns", total)
      .num("spurious_wakeups", ch.spurious)
      .hex("mutex", &ch.mu)
      .hex("condvar", &ch.cv)
      .end_object();
  j.print_expect();
}

int main(int argc, char** argv) {
  const char* usage = "condvar_block [--ms M] [--rounds R] [--wait]";
  int64_t ms = 200, rounds = 1;
  bool wait = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--ms") == 0) {
      ms = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--rounds") == 0) {
      rounds = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--wait") == 0) {
      wait = true;
    } else {
      ebt::usage_error(usage, "unknown argument", argv[i]);
    }
  }
  if (ms > 60000) ebt::usage_error(usage, "--ms must be at most 60000", nullptr);
  if (rounds < 1 || rounds > 10000) ebt::usage_error(usage, "--rounds must be 1..10000", nullptr);
  if (wait) ebt::wait_for_sigusr1();
  run_condvar(int(ms), rounds);
  return 0;
}
