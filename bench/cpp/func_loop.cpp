// func_loop: call one small noinline C++ function, bench::work(int), N times and time the calls,
// so a tracer's cost per traced call (uprobe + uretprobe, ebrec --func) shows.
//
//   func_loop [--iters N]
//
// bench::work (mangled _ZN5bench4workEi) does a few ns of arithmetic. The loop is timed with
// clock_gettime around it, so tracer start-up and shutdown are not counted: CLOCK_MONOTONIC gives
// ns_per_call, CLOCK_THREAD_CPUTIME_ID cpu_ns_per_call (the thread's CPU time, which includes the
// probes' traps and BPF programs, but not time lost to other processes on a busy machine).
// Prints one line:
//   "func_loop: iters=N ns_per_call=X cpu_ns_per_call=Y cpu_ms=Z checksum=C"
// (cpu_ms: user + system time of the whole process, from getrusage).
//
// Build: c++ -O2 -g -fno-omit-frame-pointer -o func_loop func_loop.cpp

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <sys/resource.h>

namespace bench {

// A few ns: eight rounds of a dependent multiply-add on a volatile local. The volatile keeps the
// compiler from treating it as a pure function (hoisting, merging or cloning calls) and gives it
// a stack slot, hence the usual frame-pointer prologue: its first instruction is `push %rbp`,
// which the kernel's uprobe code emulates, as for most functions of a -fno-omit-frame-pointer
// build (a first instruction it cannot emulate would add a single-step trap to every call).
__attribute__((noinline)) int work(int x) {
  volatile unsigned v = unsigned(x);
  for (int i = 0; i < 8; i++) v = v * 2654435761u + 0x9e3779b9u;
  return int(v >> 1);
}

}  // namespace bench

namespace {

double now_ns(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return double(ts.tv_sec) * 1e9 + double(ts.tv_nsec);
}

long parse_long(const char *flag, const char *v) {
  char *end = nullptr;
  errno = 0;
  long n = strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || n <= 0) {
    fprintf(stderr, "func_loop: bad value for %s: %s\n", flag, v);
    exit(2);
  }
  return n;
}

}  // namespace

int main(int argc, char **argv) {
  long iters = 1000000;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (i + 1 < argc && strcmp(a, "--iters") == 0) {
      iters = parse_long(a, argv[++i]);
    } else {
      fprintf(stderr, "usage: func_loop [--iters N]\n");
      return 2;
    }
  }
  uint64_t sum = 0;
  double t0 = now_ns(CLOCK_MONOTONIC), c0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
  for (long i = 0; i < iters; i++) sum += unsigned(bench::work(int(i)));
  double c1 = now_ns(CLOCK_THREAD_CPUTIME_ID), t1 = now_ns(CLOCK_MONOTONIC);
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  double cpu_ms = double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
                  double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
  printf("func_loop: iters=%ld ns_per_call=%.1f cpu_ns_per_call=%.1f cpu_ms=%.0f checksum=%016llx\n",
         iters, (t1 - t0) / double(iters), (c1 - c0) / double(iters), cpu_ms,
         (unsigned long long)sum);
  return 0;
}
