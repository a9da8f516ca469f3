// request_server: worker threads serving requests marked with USDT probes of their own
// (<sys/sdt.h>), a few of them slow for a planted cause, so that `ebsym requests` can be
// checked against known answers. Request ids are 0..N-1, handed out in order to the
// workers; request `id` is slow by `id % 100`:
//   10  waits for the ledger mutex, which the thread named "holder" holds for 20 ms
//       (rsrv::wait_for_ledger; the holder takes it on the request's signal)
//   20  writes 64 KiB to a file in --dir and fsyncs it (rsrv::persist_order)
//   30  burns 10 ms of CPU (rsrv::compute_discount)
//   40  waits 10 ms on a condition variable for a timer (rsrv::await_timer)
// every other request spins ~20 us (rsrv::quick_lookup).
//
// usage: request_server [--requests N] [--workers W] [--dir D] [--wait]
//   --requests N  requests served in all (default 800)
//   --workers W   worker threads, named worker-0.. (default 4)
//   --dir D       where request 20 writes (default .)
//   --wait        print `READY <pid>`, then block until SIGUSR1 arrives
//
// Probes (provider rsrv): rsrv:request__start(id, kind), rsrv:request__done(id, kind),
// around rsrv::handle_request(id) (noinline: also a boundary for --request func:).
//
// Last line on stdout:
// EXPECT {"program":"request_server","pid":P,"requests":N,"workers":W,
//   "slow":{"lock":L,"fsync":F,"cpu":C,"condvar":V}}

#include <fcntl.h>
#include <pthread.h>
#include <sys/sdt.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common.h"

namespace rsrv {

std::mutex ledger;
std::mutex hold_m;
std::condition_variable hold_cv;
int hold_requests = 0;   // requests for the holder to take the ledger
bool holding = false;    // the holder has it
bool stopping = false;
std::string dir = ".";
std::atomic<long> next_id{0};
std::atomic<long> slow_lock{0}, slow_fsync{0}, slow_cpu{0}, slow_condvar{0};

EBT_NOINLINE void holder_loop() {
  pthread_setname_np(pthread_self(), "holder");
  std::unique_lock<std::mutex> g(hold_m);
  for (;;) {
    hold_cv.wait(g, [] { return hold_requests > 0 || stopping; });
    if (hold_requests == 0 && stopping) break;
    hold_requests--;
    std::lock_guard<std::mutex> l(ledger);
    holding = true;
    hold_cv.notify_all();
    g.unlock();
    struct timespec ts = {0, 20 * 1000000L};
    nanosleep(&ts, nullptr);
    g.lock();
    holding = false;
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void wait_for_ledger() {
  {
    std::unique_lock<std::mutex> g(hold_m);
    hold_requests++;
    hold_cv.notify_all();
    hold_cv.wait(g, [] { return holding; });
  }
  std::lock_guard<std::mutex> l(ledger);  // blocks until the holder lets go
  slow_lock++;
  ebt::no_tail_call();
}

EBT_NOINLINE void persist_order(long id) {
  std::string path = dir + "/order-" + std::to_string(id);
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) {
    perror("open");
    exit(1);
  }
  std::vector<char> buf(64 << 10, 'o');
  if (write(fd, buf.data(), buf.size()) != ssize_t(buf.size())) {
    perror("write");
    exit(1);
  }
  fsync(fd);
  close(fd);
  unlink(path.c_str());
  slow_fsync++;
  ebt::no_tail_call();
}

EBT_NOINLINE void compute_discount() {
  ebt::spin_for_us(10000);
  slow_cpu++;
  ebt::no_tail_call();
}

EBT_NOINLINE void await_timer() {
  std::mutex m;
  std::condition_variable cv;
  std::unique_lock<std::mutex> g(m);
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(10);
  while (cv.wait_until(g, until) != std::cv_status::timeout) {
  }
  slow_condvar++;
  ebt::no_tail_call();
}

EBT_NOINLINE void quick_lookup() {
  ebt::spin_for_us(20);
  ebt::no_tail_call();
}

EBT_NOINLINE void handle_request(long id) {
  int kind = int(id % 100);
  DTRACE_PROBE2(rsrv, request__start, id, kind);
  switch (kind) {
    case 10: wait_for_ledger(); break;
    case 20: persist_order(id); break;
    case 30: compute_discount(); break;
    case 40: await_timer(); break;
    default: quick_lookup();
  }
  DTRACE_PROBE2(rsrv, request__done, id, kind);
  ebt::no_tail_call();
}

EBT_NOINLINE void worker_loop(int w, long requests) {
  std::string name = "worker-" + std::to_string(w);
  pthread_setname_np(pthread_self(), name.c_str());
  for (;;) {
    long id = next_id++;
    if (id >= requests) break;
    handle_request(id);
  }
  ebt::no_tail_call();
}

}  // namespace rsrv

int main(int argc, char** argv) {
  const char* usage = "request_server [--requests N] [--workers W] [--dir D] [--wait]";
  long requests = 800, workers = 4;
  bool wait = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--requests")) {
      requests = long(ebt::arg_u64(argc, argv, &i, usage));
    } else if (!strcmp(argv[i], "--workers")) {
      workers = long(ebt::arg_u64(argc, argv, &i, usage));
    } else if (!strcmp(argv[i], "--dir")) {
      if (++i >= argc) ebt::usage_error(usage, "--dir needs a value", nullptr);
      rsrv::dir = argv[i];
    } else if (!strcmp(argv[i], "--wait")) {
      wait = true;
    } else {
      ebt::usage_error(usage, "unknown argument", argv[i]);
    }
  }
  if (workers < 1 || workers > 64) ebt::usage_error(usage, "--workers: 1 to 64", nullptr);
  if (wait) ebt::wait_for_sigusr1();
  std::thread holder(rsrv::holder_loop);
  std::vector<std::thread> ts;
  for (long w = 0; w < workers; w++) ts.emplace_back(rsrv::worker_loop, int(w), requests);
  for (auto& t : ts) t.join();
  {
    std::lock_guard<std::mutex> g(rsrv::hold_m);
    rsrv::stopping = true;
    rsrv::hold_cv.notify_all();
  }
  holder.join();
  ebt::Json j;
  j.begin_object()
      .str("program", "request_server")
      .num("pid", getpid())
      .num("requests", requests)
      .num("workers", workers)
      .begin_object("slow")
      .num("lock", rsrv::slow_lock.load())
      .num("fsync", rsrv::slow_fsync.load())
      .num("cpu", rsrv::slow_cpu.load())
      .num("condvar", rsrv::slow_condvar.load())
      .end_object()
      .end_object()
      .print_expect();
  return 0;
}
