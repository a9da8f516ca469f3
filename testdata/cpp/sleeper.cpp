// sleeper: a function that sleeps a known time a known number of times, on
// several threads at once, and a recursive one, for checking function latency
// tracing (ebrec --func) and off-CPU time (ebrec --offcpu).
//
// usage: sleeper [--calls N] [--ms M] [--threads T] [--depth D] [--throws K] [--routes R]
//                [--wait]
//   --calls N    calls of sleeper::nap per thread (default 20)
//   --ms M       milliseconds each nap (and each recursion level) sleeps (default 10)
//   --threads T  threads calling nap at the same time (default 2)
//   --depth D    recursion depth of sleeper::recurse (default 5)
//   --throws K   before its naps, each thread calls sleeper::fail(5) K times: fail
//                recurses 5 levels and the innermost throws, so 6 nested calls of
//                fail end by an exception, never by a return (default 0)
//   --routes R   before its naps, each thread calls sleeper::route(i) R times: a
//                switch that gcc compiles to a jump table (an indirect jump), whose
//                cases call sleeper::tick (default 0)
//   --wait       print `READY <pid>`, then block until SIGUSR1 arrives
//
// Call tree (every named function is noinline and not a tail call):
//   main -> run_sleeper
//     -> T threads started together, each: sleeper::nap_loop(N, M)
//          -> K x sleeper::fail(5) -> fail(4) -> ... -> fail(0) throws, caught in nap_loop
//          -> R x sleeper::route(i) -> sleeper::tick(...) in most cases
//          -> N x sleeper::nap(M)          nanosleep(M ms), restarted on EINTR
//     -> then, on the main thread: sleeper::recurse(D, M)
//          recurse(d): nanosleep(M ms), then recurse(d - 1) if d > 0
//        so recurse is entered D + 1 times, nested; the call at depth d (the
//        outermost has d = D) lasts about (d + 1) * M ms.
//   recurse sleeps with its own nanosleep, not through nap: nap's calls are
//   exactly T * N.
//
// Last line on stdout (one line; shown wrapped here):
// EXPECT {"program":"sleeper","pid":P,"ms":M,"threads":T,"calls_per_thread":N,
//   "nap":{"calls":T*N,"total_ns":t,"min_ns":a,"max_ns":b,"tids":[...]},
//   "recurse":{"depth":D,"calls":D+1,"tid":t,"durations_ns":[outermost, ..., innermost]},
//   "fail":{"throws":T*K,"calls":T*K*6},"route":{"calls":T*R}}
// where every duration is measured by the caller around the call with
// CLOCK_MONOTONIC (nap) or by each level around its own body (recurse), and
// tids are the threads that called nap.

#include <atomic>
#include <stdexcept>
#include <thread>

#include "common.h"

namespace sleeper {

__attribute__((always_inline)) inline void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

EBT_NOINLINE void nap(int ms) {
  asm volatile("" ::: "memory");
  sleep_ms(ms);
  ebt::no_tail_call();
}

// Left by an exception: no call of fail ever returns (it could: the compiler cannot know
// `throwing`, so fail has a ret like any function that sometimes throws).
volatile bool throwing = true;

EBT_NOINLINE void fail(int depth) {
  asm volatile("" ::: "memory");
  if (depth > 0) fail(depth - 1);
  if (throwing) throw std::runtime_error("sleeper::fail");
  ebt::no_tail_call();
}

// A dense switch: gcc -O2 makes it a jump table, `jmp *%rax` (`notrack jmp` with CET),
// so a tool cannot find all the ways out of route by reading its code linearly. Each case
// does something different, so it stays a switch (no table of values).
volatile int64_t routed[8];

EBT_NOINLINE void tick(int64_t k) {
  asm volatile("" ::: "memory");
  routed[k & 7] += 1;
}

EBT_NOINLINE void route(int64_t op) {
  switch (op & 7) {
    case 0: tick(3); break;
    case 1: routed[1] ^= 5; break;
    case 2: tick(routed[2] + 1); break;
    case 3: routed[3] -= 7; tick(6); break;
    case 4: tick(routed[4] * 3); break;
    case 5: routed[5] += routed[6]; break;
    case 6: tick(1); routed[6] += 2; break;
    default: routed[7] += 11; tick(0); break;
  }
  ebt::no_tail_call();
}

struct NapStats {
  int64_t calls = 0, total_ns = 0, min_ns = INT64_MAX, max_ns = 0;
  long tid = 0;
};

EBT_NOINLINE void nap_loop(int64_t calls, int ms, int64_t throws, int64_t routes, NapStats* st) {
  st->tid = ebt::gettid_();
  for (int64_t i = 0; i < routes; i++) route(i);
  for (int64_t i = 0; i < throws; i++) {
    try {
      fail(5);
    } catch (const std::runtime_error&) {
    }
  }
  for (int64_t i = 0; i < calls; i++) {
    const int64_t t0 = ebt::now_ns();
    nap(ms);
    const int64_t d = ebt::now_ns() - t0;
    st->calls += 1;
    st->total_ns += d;
    st->min_ns = d < st->min_ns ? d : st->min_ns;
    st->max_ns = d > st->max_ns ? d : st->max_ns;
  }
  ebt::no_tail_call();
}

// durations[d] is the duration of the call at depth d.
EBT_NOINLINE void recurse(int depth, int ms, int64_t* durations) {
  const int64_t t0 = ebt::now_ns();
  asm volatile("" ::: "memory");
  sleep_ms(ms);
  if (depth > 0) recurse(depth - 1, ms, durations);
  durations[depth] = ebt::now_ns() - t0;
  ebt::no_tail_call();
}

}  // namespace sleeper

EBT_NOINLINE void run_sleeper(int64_t calls, int ms, int64_t threads, int depth, int64_t throws,
                              int64_t routes) {
  std::vector<sleeper::NapStats> stats(threads);
  std::vector<std::thread> workers;
  std::atomic<int64_t> ready{0};
  for (int64_t t = 0; t < threads; t++) {
    workers.emplace_back([&, t] {
      // Start together, so the naps overlap.
      ready.fetch_add(1);
      while (ready.load() < threads) {
      }
      sleeper::nap_loop(calls, ms, throws, routes, &stats[t]);
    });
  }
  for (auto& w : workers) w.join();

  std::vector<int64_t> durations(depth + 1, 0);
  sleeper::recurse(depth, ms, durations.data());

  sleeper::NapStats sum;
  for (const auto& s : stats) {
    sum.calls += s.calls;
    sum.total_ns += s.total_ns;
    sum.min_ns = s.min_ns < sum.min_ns ? s.min_ns : sum.min_ns;
    sum.max_ns = s.max_ns > sum.max_ns ? s.max_ns : sum.max_ns;
  }
  ebt::Json j;
  j.begin_object()
      .str("program", "sleeper")
      .num("pid", getpid())
      .num("ms", ms)
      .num("threads", threads)
      .num("calls_per_thread", calls)
      .begin_object("nap")
      .num("calls", sum.calls)
      .num("total_ns", sum.total_ns)
      .num("min_ns", sum.calls > 0 ? sum.min_ns : 0)
      .num("max_ns", sum.max_ns)
      .begin_array("tids");
  for (const auto& s : stats) j.num(s.tid);
  j.end_array()
      .end_object()
      .begin_object("recurse")
      .num("depth", depth)
      .num("calls", depth + 1)
      .num("tid", ebt::gettid_())
      .begin_array("durations_ns");
  for (int d = depth; d >= 0; d--) j.num(durations[d]);
  j.end_array()
      .end_object()
      .begin_object("fail")
      .num("throws", threads * throws)
      .num("calls", threads * throws * 6)
      .end_object()
      .begin_object("route")
      .num("calls", threads * routes)
      .end_object()
      .end_object();
  j.print_expect();
}

int main(int argc, char** argv) {
  const char* usage =
      "sleeper [--calls N] [--ms M] [--threads T] [--depth D] [--throws K] [--routes R] "
      "[--wait]";
  int64_t calls = 20, ms = 10, threads = 2, depth = 5, throws = 0, routes = 0;
  bool wait = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--calls") == 0) {
      calls = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--ms") == 0) {
      ms = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--threads") == 0) {
      threads = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--depth") == 0) {
      depth = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--throws") == 0) {
      throws = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--routes") == 0) {
      routes = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--wait") == 0) {
      wait = true;
    } else {
      ebt::usage_error(usage, "unknown argument", argv[i]);
    }
  }
  if (threads < 1 || threads > 64) ebt::usage_error(usage, "--threads must be 1..64", nullptr);
  if (ms > 60000) ebt::usage_error(usage, "--ms must be at most 60000", nullptr);
  if (depth > 1000) ebt::usage_error(usage, "--depth must be at most 1000", nullptr);
  if (wait) ebt::wait_for_sigusr1();
  if (throws > 1000000) ebt::usage_error(usage, "--throws must be at most 1000000", nullptr);
  if (routes > 100000000) ebt::usage_error(usage, "--routes must be at most 100000000", nullptr);
  run_sleeper(calls, int(ms), threads, int(depth), throws, routes);
  return 0;
}
