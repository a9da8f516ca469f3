// usdt_loop: N "requests", each a USDT start/done pair around a few ns of work, timed, so a
// tracer's cost per request (the two USDT traps plus its programs: bpftrace pairing them,
// ebrec record --request usdt:bench:request__start,request__done) shows.
//
//   usdt_loop [--iters N] [--threads T]
//
// Request i is DTRACE_PROBE1(bench, request__start, i), then bench::work(i) (noinline, a few ns
// of arithmetic, as func_loop's), then DTRACE_PROBE1(bench, request__done, i). The probes are
// plain <sys/sdt.h> USDT probes (no semaphore): a nop each, untraced; an int3 trap each once a
// uprobe is attached. With --threads T (default 1) T threads run the N requests, each its own
// share (N/T, the first N%T threads one more; request ids are unique), started together.
// The loops are timed with clock_gettime around them, so tracer start-up and shutdown are not
// counted: CLOCK_MONOTONIC (from all threads ready to all done) gives ns_per_request (wall time
// / N), CLOCK_THREAD_CPUTIME_ID around each thread's loop cpu_ns_per_request (the threads' CPU
// time summed / N: includes the traps and BPF programs, but not time lost to other processes on
// a busy machine). Prints one line:
//   "usdt_loop: iters=N ns_per_request=X cpu_ns_per_request=Y cpu_ms=Z checksum=C"
// (cpu_ms: user + system time of the whole process, from getrusage).
//
// Build: c++ -O2 -g -fno-omit-frame-pointer -pthread -o usdt_loop usdt_loop.cpp
// (needs <sys/sdt.h>: Debian's systemtap-sdt-dev)

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/sdt.h>
#include <vector>

namespace bench {

// A few ns: as func_loop's bench::work, eight rounds of a dependent multiply-add on a volatile
// local (the volatile keeps the compiler from treating it as a pure function).
__attribute__((noinline)) int work(long x) {
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
    fprintf(stderr, "usdt_loop: bad value for %s: %s\n", flag, v);
    exit(2);
  }
  return n;
}

pthread_barrier_t ready;

struct Share {
  long first = 0, count = 0;  // request ids [first, first + count)
  uint64_t sum = 0;
  double cpu_ns = 0;
};

void run(Share *s) {
  uint64_t sum = 0;
  double c0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
  for (long i = s->first, end = s->first + s->count; i < end; i++) {
    DTRACE_PROBE1(bench, request__start, i);
    sum += unsigned(bench::work(i));
    DTRACE_PROBE1(bench, request__done, i);
  }
  s->cpu_ns = now_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
  s->sum = sum;
}

void *thread_main(void *arg) {
  pthread_barrier_wait(&ready);
  run(static_cast<Share *>(arg));
  return nullptr;
}

}  // namespace

int main(int argc, char **argv) {
  long iters = 1000000, threads = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (i + 1 < argc && strcmp(a, "--iters") == 0) {
      iters = parse_long(a, argv[++i]);
    } else if (i + 1 < argc && strcmp(a, "--threads") == 0) {
      threads = parse_long(a, argv[++i]);
    } else {
      fprintf(stderr, "usage: usdt_loop [--iters N] [--threads T]\n");
      return 2;
    }
  }
  if (threads > iters) threads = iters;
  std::vector<Share> shares(static_cast<size_t>(threads));
  for (long t = 0, next = 0; t < threads; t++) {
    shares[size_t(t)].first = next;
    shares[size_t(t)].count = iters / threads + (t < iters % threads ? 1 : 0);
    next += shares[size_t(t)].count;
  }
  double t0, t1;
  if (threads == 1) {
    // In the main thread, as func_loop: no thread start in the timing.
    t0 = now_ns(CLOCK_MONOTONIC);
    run(&shares[0]);
    t1 = now_ns(CLOCK_MONOTONIC);
  } else {
    pthread_barrier_init(&ready, nullptr, unsigned(threads + 1));
    std::vector<pthread_t> tids(static_cast<size_t>(threads));
    for (long t = 0; t < threads; t++) {
      int err = pthread_create(&tids[size_t(t)], nullptr, thread_main, &shares[size_t(t)]);
      if (err != 0) {
        fprintf(stderr, "usdt_loop: pthread_create: %s\n", strerror(err));
        return 1;
      }
    }
    pthread_barrier_wait(&ready);
    t0 = now_ns(CLOCK_MONOTONIC);
    for (pthread_t tid : tids) pthread_join(tid, nullptr);
    t1 = now_ns(CLOCK_MONOTONIC);
    pthread_barrier_destroy(&ready);
  }
  uint64_t sum = 0;
  double cpu_ns = 0;
  for (const Share &s : shares) {
    sum += s.sum;
    cpu_ns += s.cpu_ns;
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  double cpu_ms = double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
                  double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
  printf("usdt_loop: iters=%ld ns_per_request=%.1f cpu_ns_per_request=%.1f cpu_ms=%.0f "
         "checksum=%016llx\n",
         iters, (t1 - t0) / double(iters), cpu_ns / double(iters), cpu_ms,
         (unsigned long long)sum);
  return 0;
}
