// spin: a busy C++ program for CPU-sampling benchmarks: a fixed amount of work, split between two
// noinline functions, on several threads; prints its own wall time and operations per second.
//
//   spin [--threads T] [--ops N] [--wait-fifo PATH]
//
// Each of T threads (default: the number of online CPUs) runs N operations (default 20,000,000);
// one operation is a call of spin::hot (16 rounds of a multiply-xorshift mix: about two thirds of
// the time; perf measured 71%) and then of spin::cold (8 rounds), both noinline, called from
// spin::worker. Both are leaves that need no stack, so gcc gives them no frame even with
// -fno-omit-frame-pointer: a frame-pointer unwinder (perf -g, ebrec) sees hot or cold and then
// worker's caller, without worker, whichever tool it is.
// --wait-fifo blocks on PATH until a byte is written to it, so a tracer attached by pid can be
// ready before the work starts. The clock runs from the start of the threads to the last join, so
// tracer start-up and shutdown are not counted. Prints one line:
//   "spin: threads=T ops=N wall_ms=X cpu_ms=U ops_per_s=Y ns_per_op=Z checksum=C"
// (cpu_ms: user + system time of the whole process, from getrusage; ops_per_s over all threads;
// ns_per_op = wall time / ops per thread).
//
// Build: c++ -O2 -g -fno-omit-frame-pointer -pthread -o spin spin.cpp

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <sys/resource.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace spin {

// ROUNDS rounds of a multiply-xorshift mix: a few ns per round, no memory traffic.
template <int ROUNDS> inline uint64_t mix(uint64_t x) {
  for (int i = 0; i < ROUNDS; i++) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 29;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 32;
  }
  return x;
}

// The two functions a profile should split about 2:1. noinline and the asm (which the compiler
// must assume reads and changes x) keep each a real call with its own frame.
__attribute__((noinline)) uint64_t hot(uint64_t x) {
  x = mix<16>(x);
  asm volatile("" : "+r"(x));
  return x;
}

__attribute__((noinline)) uint64_t cold(uint64_t x) {
  x = mix<8>(x);
  asm volatile("" : "+r"(x));
  return x;
}

__attribute__((noinline)) void worker(long ops, uint64_t seed, uint64_t *out) {
  uint64_t x = seed;
  for (long i = 0; i < ops; i++) {
    x = hot(x + uint64_t(i));
    x = cold(x);
  }
  *out = x;
}

}  // namespace spin

namespace {

double now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) * 1e9 + double(ts.tv_nsec);
}

long parse_long(const char *flag, const char *v) {
  char *end = nullptr;
  errno = 0;
  long n = strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || n <= 0) {
    fprintf(stderr, "spin: bad value for %s: %s\n", flag, v);
    exit(2);
  }
  return n;
}

}  // namespace

int main(int argc, char **argv) {
  long threads = sysconf(_SC_NPROCESSORS_ONLN);
  long ops = 20000000;
  const char *fifo = nullptr;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (i + 1 < argc && strcmp(a, "--threads") == 0) {
      threads = parse_long(a, argv[++i]);
    } else if (i + 1 < argc && strcmp(a, "--ops") == 0) {
      ops = parse_long(a, argv[++i]);
    } else if (i + 1 < argc && strcmp(a, "--wait-fifo") == 0) {
      fifo = argv[++i];
    } else {
      fprintf(stderr, "usage: spin [--threads T] [--ops N] [--wait-fifo PATH]\n");
      return 2;
    }
  }
  if (threads < 1) threads = 1;
  if (fifo != nullptr) {
    int fd = open(fifo, O_RDONLY);
    if (fd < 0) {
      perror("spin: open fifo");
      return 1;
    }
    char c;
    if (read(fd, &c, 1) != 1) {
      fprintf(stderr, "spin: fifo closed before the start signal\n");
      return 1;
    }
    close(fd);
  }
  std::vector<uint64_t> results(size_t(threads), 0);
  std::vector<std::thread> pool;
  double t0 = now_ns();
  for (long t = 0; t < threads; t++) {
    pool.emplace_back(spin::worker, ops, uint64_t(t) + 1, &results[size_t(t)]);
  }
  for (auto &th : pool) th.join();
  double t1 = now_ns();
  uint64_t sum = 0;
  for (uint64_t r : results) sum ^= r;
  double wall = t1 - t0;
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  double cpu_ms = double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
                  double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
  printf("spin: threads=%ld ops=%ld wall_ms=%.1f cpu_ms=%.0f ops_per_s=%.0f ns_per_op=%.2f "
         "checksum=%016llx\n",
         threads, ops, wall / 1e6, cpu_ms, double(ops) * double(threads) / (wall / 1e9),
         wall / double(ops), (unsigned long long)sum);
  return 0;
}
