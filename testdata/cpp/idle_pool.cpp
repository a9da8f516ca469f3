// idle_pool: a service that is mostly idle, with one real contention, for
// checking that the reports tell idle waits from waits inside work (ebsym top
// --kind offcpu|lock, ebsym locks, the summary).
//
// usage: idle_pool [--seconds S] [--wait]
//   --seconds S  how long the driver submits work (default 1.0)
//   --wait       print `READY <pid>`, then block until SIGUSR1 arrives
//
// Threads (every named function is noinline and not a tail call):
//   pool workers (4): pool::ThreadPool::worker_loop -> pool::ThreadPool::get_task
//       std::condition_variable::wait until a task is queued: idle (a thread
//       pool waiting for a task). Each task runs contend::Ledger::add, which
//       locks the one ledger mutex and holds it ~2 ms, 5 times: the driver
//       queues two tasks at once, so two workers contend on that mutex
//       (contention: futex waits on `ledger_mutex`, woken by the holder).
//   listener: net::accept_loop -> accept() on a listening socket on 127.0.0.1
//       that no client connects to: idle (accept wait), until shutdown().
//   event loop: net::event_loop -> epoll_wait() on an epoll set with the
//       listening socket and an eventfd: idle (epoll wait), until the eventfd
//       is written at the end.
//   timer: timers::TimerThread::run -> std::this_thread::sleep_for(20 ms)
//       ticks: idle (a timer thread waiting for its next timer).
//   driver (main thread): driver::submit_rounds queues two tasks every 50 ms
//       for S seconds (its nanosleep between rounds is not idle: no rule names
//       it), then waits for the queue to drain and stops everything.
//
// Last line on stdout (one line; shown wrapped here):
// EXPECT {"program":"idle_pool","pid":P,"ms":S*1000,"rounds":R,"tasks":T,
//   "worker_tids":[...],"accept_tid":A,"epoll_tid":E,"timer_tid":M,
//   "ticks":K,"ledger_mutex":"0x...","pool_condvar":"0x...","ledger_total":N}

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "common.h"

namespace contend {

struct Ledger {
  std::mutex mu;
  int64_t total = 0;

  // Holds the ledger mutex ~2 ms, `times` times: the other task's worker
  // waits for it meanwhile.
  EBT_NOINLINE void add(int times) {
    for (int i = 0; i < times; i++) {
      std::lock_guard<std::mutex> lk(mu);
      ebt::spin_for_us(2000);
      total += 1;
    }
    ebt::no_tail_call();
  }
};

}  // namespace contend

namespace pool {

class ThreadPool {
 public:
  explicit ThreadPool(int n) {
    for (int i = 0; i < n; i++) threads_.emplace_back([this] { worker_loop(); });
  }

  void submit(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      queue_.push_back(std::move(task));
      pending_ += 1;
    }
    cv_.notify_one();
  }

  // Waits (spinning on an atomic, not the pool's condvar) until every task ran.
  void drain() {
    while (pending_.load() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  std::vector<long> tids() {
    std::lock_guard<std::mutex> lk(mu_);
    return tids_;
  }

  size_t started() {
    std::lock_guard<std::mutex> lk(mu_);
    return tids_.size();
  }

  std::condition_variable* condvar() { return &cv_; }

 private:
  // The idle wait: blocks until a task is queued (or the pool stops).
  EBT_NOINLINE bool get_task(std::function<void()>* out) {
    std::unique_lock<std::mutex> lk(mu_);
    while (queue_.empty() && !stopping_) cv_.wait(lk);
    if (queue_.empty()) return false;
    *out = std::move(queue_.front());
    queue_.pop_front();
    return true;
  }

  EBT_NOINLINE void worker_loop() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      tids_.push_back(ebt::gettid_());
    }
    std::function<void()> task;
    while (get_task(&task)) {
      task();
      pending_ -= 1;
    }
    ebt::no_tail_call();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::atomic<int64_t> pending_{0};
  bool stopping_ = false;
  std::vector<long> tids_;
  std::vector<std::thread> threads_;
};

}  // namespace pool

namespace net {

// The idle accept: no client ever connects; shutdown() ends it (EINVAL).
EBT_NOINLINE void accept_loop(int fd, std::atomic<long>* tid) {
  tid->store(ebt::gettid_());
  for (;;) {
    int c = accept(fd, nullptr, nullptr);
    if (c < 0) break;
    close(c);
  }
  ebt::no_tail_call();
}

// The idle event loop: nothing happens on its fds until the eventfd is written.
EBT_NOINLINE void event_loop(int ep, int stop_fd, std::atomic<long>* tid) {
  tid->store(ebt::gettid_());
  for (;;) {
    struct epoll_event ev[4];
    int n = epoll_wait(ep, ev, 4, -1);
    bool stop = false;
    for (int i = 0; i < n; i++) stop |= ev[i].data.fd == stop_fd;
    if (stop) break;
  }
  ebt::no_tail_call();
}

}  // namespace net

namespace timers {

struct TimerThread {
  std::atomic<bool> stop{false};
  std::atomic<long> tid{0};
  int64_t ticks = 0;

  // Sleeps until its next 20 ms tick, and ticks.
  EBT_NOINLINE void run() {
    tid.store(ebt::gettid_());
    while (!stop.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      ticks += 1;
    }
    ebt::no_tail_call();
  }
};

}  // namespace timers

namespace driver {

// Two tasks at once every 50 ms for `seconds`: the two workers that take them
// contend on the ledger.
EBT_NOINLINE int64_t submit_rounds(pool::ThreadPool* p, contend::Ledger* ledger, double seconds) {
  const int64_t end = ebt::now_ns() + int64_t(seconds * 1e9);
  int64_t rounds = 0;
  while (ebt::now_ns() < end) {
    for (int i = 0; i < 2; i++) p->submit([ledger] { ledger->add(5); });
    rounds += 1;
    struct timespec ts = {0, 50 * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
  }
  ebt::no_tail_call();
  return rounds;
}

}  // namespace driver

EBT_NOINLINE void run_idle_pool(double seconds) {
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  if (lfd < 0 || bind(lfd, (struct sockaddr*)&a, sizeof a) != 0 || listen(lfd, 16) != 0) {
    perror("idle_pool: listen");
    exit(1);
  }
  int ep = epoll_create1(0);
  int stop_fd = eventfd(0, 0);
  for (int fd : {lfd, stop_fd}) {
    struct epoll_event ev = {};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
  }
  std::atomic<long> accept_tid{0}, epoll_tid{0};
  std::thread listener(net::accept_loop, lfd, &accept_tid);
  std::thread loop(net::event_loop, ep, stop_fd, &epoll_tid);
  timers::TimerThread timer;
  std::thread ticker([&timer] { timer.run(); });
  contend::Ledger ledger;
  pool::ThreadPool workers(4);
  while (workers.started() < 4 || accept_tid.load() == 0 || epoll_tid.load() == 0 ||
         timer.tid.load() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  const int64_t rounds = driver::submit_rounds(&workers, &ledger, seconds);
  workers.drain();

  timer.stop.store(true);
  ticker.join();
  shutdown(lfd, SHUT_RDWR);
  listener.join();
  uint64_t one = 1;
  if (write(stop_fd, &one, sizeof one) != sizeof one) perror("idle_pool: eventfd");
  loop.join();
  std::vector<long> tids = workers.tids();
  workers.stop();
  close(lfd);
  close(ep);
  close(stop_fd);

  ebt::Json j;
  j.begin_object()
      .str("program", "idle_pool")
      .num("pid", getpid())
      .num("ms", int64_t(seconds * 1000))
      .num("rounds", rounds)
      .num("tasks", rounds * 2)
      .begin_array("worker_tids");
  for (long t : tids) j.num(t);
  j.end_array()
      .num("accept_tid", accept_tid.load())
      .num("epoll_tid", epoll_tid.load())
      .num("timer_tid", timer.tid.load())
      .num("ticks", timer.ticks)
      .hex("ledger_mutex", &ledger.mu)
      .hex("pool_condvar", workers.condvar())
      .num("ledger_total", ledger.total)
      .end_object();
  j.print_expect();
}

int main(int argc, char** argv) {
  const char* usage = "idle_pool [--seconds S] [--wait]";
  double seconds = 1.0;
  bool wait = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--seconds") == 0) {
      seconds = ebt::arg_f64(argc, argv, &i, usage);
    } else if (strcmp(argv[i], "--wait") == 0) {
      wait = true;
    } else {
      ebt::usage_error(usage, "unknown argument", argv[i]);
    }
  }
  if (seconds > 600) ebt::usage_error(usage, "--seconds must be at most 600", nullptr);
  if (wait) ebt::wait_for_sigusr1();
  run_idle_pool(seconds);
  return 0;
}
