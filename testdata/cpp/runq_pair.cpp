// runq_pair: two CPU-bound threads pinned to one CPU for a known time, so each
// waits on that CPU's run queue while the other runs, for checking run-queue
// latency (time runnable but not running) per thread and function.
//
// usage: runq_pair [--seconds S] [--cpu C] [--wait]
//   --seconds S  how long both threads burn, in seconds, fractions allowed (default 2)
//   --cpu C      the CPU both threads are pinned to (default 0); it must be one
//                the process may run on
//   --wait       print `READY <pid>`, then block until SIGUSR1 arrives
//
// Call tree (every named function is noinline and not a tail call):
//   main -> run_pair: starts two threads and waits for both
//     A: runq::thread_main -> runq::burner_a(deadline)
//     B: runq::thread_main -> runq::burner_b(deadline)
//   Each thread pins itself to CPU C (pthread_setaffinity_np) before anything else,
//   then all three meet at a barrier; main then takes the start time and both
//   threads burn until start + S seconds. The burners are loops of pure arithmetic
//   (no syscalls, no memory traffic) that read CLOCK_MONOTONIC (vDSO, no syscall)
//   every 1024 iterations. Neither ever blocks while burning, so whenever one is
//   off CPU it is runnable: preempted by the other, on C's run queue.
//
// Last line on stdout (one line; shown wrapped here):
// EXPECT {"program":"runq_pair","pid":P,"cpu":C,"seconds":S,
//   "tids":{"a":TA,"b":TB},"cpu_ns":{"a":..,"b":..},
//   "involuntary_switches":{"a":..,"b":..},"wall_ns":W}
// where cpu_ns is each thread's CLOCK_THREAD_CPUTIME_ID around its burner call,
// involuntary_switches its getrusage(RUSAGE_THREAD) ru_nivcsw around the same call
// (how often it was preempted), and W the CLOCK_MONOTONIC time from the common
// start to both threads having finished. With both on one CPU,
// cpu_ns.a + cpu_ns.b <= W, and each thread's run-queue wait is about W - its cpu_ns.

#include <sched.h>
#include <sys/resource.h>

#include <atomic>
#include <thread>

#include "common.h"

namespace runq {

struct Burn {
  long tid = 0;
  int64_t cpu_ns = 0;
  int64_t nivcsw = 0;
  uint64_t result = 0;
};

// Shared by both threads: set by main after the barrier.
std::atomic<int64_t> deadline_ns{0};
pthread_barrier_t barrier;

__attribute__((always_inline)) inline int64_t thread_cpu_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

__attribute__((always_inline)) inline int64_t thread_nivcsw() {
  struct rusage ru;
  getrusage(RUSAGE_THREAD, &ru);
  return ru.ru_nivcsw;
}

EBT_NOINLINE uint64_t burner_a(int64_t deadline) {
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (;;) {
    for (int i = 0; i < 1024; i++) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      asm volatile("" : "+r"(x));
    }
    if (ebt::now_ns() >= deadline) break;
  }
  ebt::no_tail_call();
  return x;
}

EBT_NOINLINE uint64_t burner_b(int64_t deadline) {
  uint64_t x = 1, y = 0x2545f4914f6cdd1dull;
  for (;;) {
    for (int i = 0; i < 1024; i++) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      y += x >> 29;
      asm volatile("" : "+r"(x), "+r"(y));
    }
    if (ebt::now_ns() >= deadline) break;
  }
  ebt::no_tail_call();
  return x ^ y;
}

EBT_NOINLINE void thread_main(int cpu, bool is_a, Burn* out) {
  out->tid = ebt::gettid_();
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  int err = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  if (err != 0) {
    fprintf(stderr, "runq_pair: cannot pin thread to CPU %d: %s\n", cpu, strerror(err));
    exit(1);
  }
  pthread_barrier_wait(&barrier);  // both pinned
  pthread_barrier_wait(&barrier);  // main has set the deadline
  const int64_t deadline = deadline_ns.load();
  const int64_t cpu0 = thread_cpu_ns();
  const int64_t sw0 = thread_nivcsw();
  out->result = is_a ? burner_a(deadline) : burner_b(deadline);
  out->cpu_ns = thread_cpu_ns() - cpu0;
  out->nivcsw = thread_nivcsw() - sw0;
  ebt::escape(&out->result);
  ebt::no_tail_call();
}

}  // namespace runq

EBT_NOINLINE void run_pair(double seconds, int cpu) {
  runq::Burn a, b;
  pthread_barrier_init(&runq::barrier, nullptr, 3);
  std::thread ta(runq::thread_main, cpu, true, &a);
  std::thread tb(runq::thread_main, cpu, false, &b);
  pthread_barrier_wait(&runq::barrier);
  const int64_t start = ebt::now_ns();
  runq::deadline_ns.store(start + int64_t(seconds * 1e9));
  pthread_barrier_wait(&runq::barrier);
  ta.join();
  tb.join();
  const int64_t wall = ebt::now_ns() - start;
  pthread_barrier_destroy(&runq::barrier);

  ebt::Json j;
  j.begin_object()
      .str("program", "runq_pair")
      .num("pid", getpid())
      .num("cpu", cpu)
      .real("seconds", seconds)
      .begin_object("tids")
      .num("a", a.tid)
      .num("b", b.tid)
      .end_object()
      .begin_object("cpu_ns")
      .num("a", a.cpu_ns)
      .num("b", b.cpu_ns)
      .end_object()
      .begin_object("involuntary_switches")
      .num("a", a.nivcsw)
      .num("b", b.nivcsw)
      .end_object()
      .num("wall_ns", wall)
      .end_object();
  j.print_expect();
}

int main(int argc, char** argv) {
  const char* usage = "runq_pair [--seconds S] [--cpu C] [--wait]";
  double seconds = 2;
  int64_t cpu = 0;
  bool wait = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--seconds") == 0) {
      seconds = ebt::arg_f64(argc, argv, &i, usage);
    } else if (strcmp(argv[i], "--cpu") == 0) {
      cpu = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--wait") == 0) {
      wait = true;
    } else {
      ebt::usage_error(usage, "unknown argument", argv[i]);
    }
  }
  if (seconds > 3600) ebt::usage_error(usage, "--seconds must be at most 3600", nullptr);
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) {
    perror("sched_getaffinity");
    return 1;
  }
  if (cpu >= CPU_SETSIZE || !CPU_ISSET(int(cpu), &allowed)) {
    ebt::usage_error(usage, "--cpu is not a CPU this process may run on", nullptr);
  }
  if (wait) ebt::wait_for_sigusr1();
  run_pair(seconds, int(cpu));
  return 0;
}
