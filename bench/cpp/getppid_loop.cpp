// getppid_loop: N raw getppid system calls in a tight loop, timed, so a syscall tracer's cost per
// call (raw_syscalls:sys_enter + sys_exit programs, ebrec --syscalls) shows.
//
//   getppid_loop [--iters N] [--wait-fifo PATH]
//
// getppid is about the cheapest system call there is (no argument, no lock, no vDSO version), so
// the loop is mostly kernel entry and exit plus whatever the tracer's programs add. It is called
// through syscall(SYS_getppid), not glibc's getppid(), so that nothing can cache it. --wait-fifo
// blocks on PATH until a byte is written to it, so a tracer attached by pid can be ready before
// the loop starts. The loop is timed with clock_gettime around it (tracer start-up and shutdown
// are not counted): CLOCK_MONOTONIC gives ns_per_call, CLOCK_THREAD_CPUTIME_ID cpu_ns_per_call
// (the thread's CPU time, which includes the tracer's BPF programs, but not the time lost to
// other processes on a busy machine). Prints one line:
//   "getppid_loop: iters=N ns_per_call=X cpu_ns_per_call=Y cpu_ms=Z ppid=P"
// (cpu_ms: user + system time of the whole process, from getrusage).
//
// Build: c++ -O2 -g -fno-omit-frame-pointer -o getppid_loop getppid_loop.cpp

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

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
    fprintf(stderr, "getppid_loop: bad value for %s: %s\n", flag, v);
    exit(2);
  }
  return n;
}

__attribute__((noinline)) long syscall_loop(long iters) {
  long ppid = 0;
  for (long i = 0; i < iters; i++) ppid = syscall(SYS_getppid);
  return ppid;
}

}  // namespace

int main(int argc, char **argv) {
  long iters = 1000000;
  const char *fifo = nullptr;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (i + 1 < argc && strcmp(a, "--iters") == 0) {
      iters = parse_long(a, argv[++i]);
    } else if (i + 1 < argc && strcmp(a, "--wait-fifo") == 0) {
      fifo = argv[++i];
    } else {
      fprintf(stderr, "usage: getppid_loop [--iters N] [--wait-fifo PATH]\n");
      return 2;
    }
  }
  if (fifo != nullptr) {
    int fd = open(fifo, O_RDONLY);
    if (fd < 0) {
      perror("getppid_loop: open fifo");
      return 1;
    }
    char c;
    if (read(fd, &c, 1) != 1) {
      fprintf(stderr, "getppid_loop: fifo closed before the start signal\n");
      return 1;
    }
    close(fd);
  }
  double t0 = now_ns(CLOCK_MONOTONIC), c0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
  long ppid = syscall_loop(iters);
  double c1 = now_ns(CLOCK_THREAD_CPUTIME_ID), t1 = now_ns(CLOCK_MONOTONIC);
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  double cpu_ms = double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
                  double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
  printf("getppid_loop: iters=%ld ns_per_call=%.1f cpu_ns_per_call=%.1f cpu_ms=%.0f ppid=%ld\n",
         iters, (t1 - t0) / double(iters), (c1 - c0) / double(iters), cpu_ms, ppid);
  return 0;
}
