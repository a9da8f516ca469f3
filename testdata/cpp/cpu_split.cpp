// cpu_split: one thread burning CPU in two functions in a known ratio, for
// checking on-CPU sampling (ebrec --cpu) against the program's own clock.
//
// usage: cpu_split [--seconds S] [--share-a PCT] [--wait]
//   --seconds S    how long to burn, may be fractional (default 3)
//   --share-a PCT  percent of the work done in split::hot_a (default 75; the
//                  rest in split::hot_b), 1..99
//   --wait         print `READY <pid>`, then block until SIGUSR1 arrives
//
// Call tree (every named function is noinline, no calls inside the hot ones):
//   main -> run_split -> split::calibrate()  ~20 ms: iterations per ms
//                     -> until S seconds have passed, rounds of
//                          split::hot_a(a)   a = PCT * k iterations
//                          split::hot_b(b)   b = (100 - PCT) * k iterations
//                        with k chosen so a round lasts ~4 ms.
// Both hot functions run the same dependent multiply chain, so CPU time is
// proportional to iterations. Each call is timed with CLOCK_THREAD_CPUTIME_ID
// (the thread's own CPU time, not wall time).
//
// Last line on stdout (one line; shown wrapped here):
// EXPECT {"program":"cpu_split","pid":P,"tid":T,"seconds":S,
//   "intended_share_a":0.75,"intended_share_b":0.25,
//   "functions":{"split::hot_a":{"calls":n,"iterations":i,"cpu_ns":c},
//                "split::hot_b":{"calls":n,"iterations":i,"cpu_ns":c}},
//   "measured_share_a":x,"measured_share_b":y,"total_cpu_ns":t}
// where tid is the burning thread (the main thread), calls are equal for both
// functions, and measured_share_a = hot_a cpu_ns / (hot_a + hot_b cpu_ns): the
// shares a profiler should find among samples in hot_a and hot_b.
// total_cpu_ns is the thread's CPU time over the whole run (calibration and
// loop overhead included).

#include "common.h"

namespace split {

// The work: a dependent multiply / xor-shift chain that cannot be vectorized
// or folded; the asm keeps the compiler from reasoning about x.
__attribute__((always_inline)) inline uint64_t burn(uint64_t x, int64_t iterations) {
  for (int64_t i = 0; i < iterations; i++) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    x ^= x >> 29;
    asm volatile("" : "+r"(x));
  }
  return x;
}

EBT_NOINLINE uint64_t hot_a(uint64_t seed, int64_t iterations) {
  asm volatile("" ::: "memory");
  return burn(seed, iterations);
}

EBT_NOINLINE uint64_t hot_b(uint64_t seed, int64_t iterations) {
  asm volatile("" ::: "memory");
  return burn(seed ^ 0x9e3779b97f4a7c15ULL, iterations);
}

// Iterations per millisecond of thread CPU time.
EBT_NOINLINE int64_t calibrate() {
  int64_t iterations = 0;
  uint64_t x = 1;
  struct timespec t0, t1;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
  int64_t spent = 0;
  while (spent < 20 * 1000 * 1000) {
    x = burn(x, 10000);
    iterations += 10000;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
    spent = (int64_t(t1.tv_sec) - t0.tv_sec) * 1000000000 + (t1.tv_nsec - t0.tv_nsec);
  }
  ebt::escape(&x);
  return iterations * 1000000 / spent;
}

}  // namespace split

namespace {

int64_t thread_cpu_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

struct Stats {
  int64_t calls = 0, iterations = 0, cpu_ns = 0;
};

}  // namespace

EBT_NOINLINE void run_split(double seconds, int64_t share_a) {
  const int64_t start_cpu = thread_cpu_ns();
  const int64_t per_ms = split::calibrate();
  // A round is ~4 ms: k iterations per percent point.
  const int64_t k = per_ms * 4 / 100 > 0 ? per_ms * 4 / 100 : 1;
  const int64_t a_iters = share_a * k, b_iters = (100 - share_a) * k;
  Stats a, b;
  uint64_t x = 42;
  const int64_t deadline = ebt::now_ns() + int64_t(seconds * 1e9);
  while (ebt::now_ns() < deadline) {
    int64_t t0 = thread_cpu_ns();
    x = split::hot_a(x, a_iters);
    int64_t t1 = thread_cpu_ns();
    x = split::hot_b(x, b_iters);
    int64_t t2 = thread_cpu_ns();
    a.calls += 1;
    a.iterations += a_iters;
    a.cpu_ns += t1 - t0;
    b.calls += 1;
    b.iterations += b_iters;
    b.cpu_ns += t2 - t1;
  }
  ebt::escape(&x);
  const int64_t total = thread_cpu_ns() - start_cpu;
  const double both = double(a.cpu_ns + b.cpu_ns);
  ebt::Json j;
  j.begin_object()
      .str("program", "cpu_split")
      .num("pid", getpid())
      .num("tid", ebt::gettid_())
      .real("seconds", seconds)
      .real("intended_share_a", share_a / 100.0)
      .real("intended_share_b", (100 - share_a) / 100.0)
      .begin_object("functions");
  for (auto [name, s] : {std::pair<const char*, Stats*>{"split::hot_a", &a}, {"split::hot_b", &b}}) {
    j.begin_object(name)
        .num("calls", s->calls)
        .num("iterations", s->iterations)
        .num("cpu_ns", s->cpu_ns)
        .end_object();
  }
  j.end_object()
      .real("measured_share_a", both > 0 ? a.cpu_ns / both : 0)
      .real("measured_share_b", both > 0 ? b.cpu_ns / both : 0)
      .num("total_cpu_ns", total)
      .end_object();
  j.print_expect();
}

int main(int argc, char** argv) {
  const char* usage = "cpu_split [--seconds S] [--share-a PCT] [--wait]";
  double seconds = 3;
  int64_t share_a = 75;
  bool wait = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--seconds") == 0) {
      seconds = ebt::arg_f64(argc, argv, &i, usage);
    } else if (strcmp(argv[i], "--share-a") == 0) {
      share_a = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--wait") == 0) {
      wait = true;
    } else {
      ebt::usage_error(usage, "unknown argument", argv[i]);
    }
  }
  if (share_a < 1 || share_a > 99) ebt::usage_error(usage, "--share-a must be 1..99", nullptr);
  if (seconds > 3600) ebt::usage_error(usage, "--seconds must be at most 3600", nullptr);
  if (wait) ebt::wait_for_sigusr1();
  run_split(seconds, share_a);
  return 0;
}
