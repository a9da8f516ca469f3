// clock_loop: one thread reading the clock in a hot loop, for naming the frames
// a profile of clock-heavy code holds: the vDSO's (clock_gettime with
// CLOCK_MONOTONIC runs in the kernel's vDSO, no system call) and, beside them,
// libstdc++'s (std::hash<std::string>, i.e. std::_Hash_bytes in
// libstdc++.so).
//
// usage: clock_loop [--seconds S] [--rounds N] [--wait]
//   --seconds S    how long to run, may be fractional (default 2)
//   --rounds N     stop after N rounds, if that comes first (default 0: no limit)
//   --wait         print `READY <pid>`, then block until SIGUSR1 arrives
//
// Call tree (every named function is noinline):
//   main -> run_clock -> until S seconds have passed (or N rounds ran), rounds of
//                          clockloop::timed_round()   (probe it with --func: a
//                                                      return probe stays pending
//                                                      while the round runs)
//                            -> clockloop::read_clock(n)   n x clock_gettime(CLOCK_MONOTONIC)
//                            -> clockloop::hash_text(n)    n x std::hash<std::string>
//                            -> clockloop::tick(x)         100 times: a function that
//                                                          calls nothing (--func gives it
//                                                          a return probe), ~1 ns unprobed
// A round lasts ~2 ms, about two thirds of it in read_clock.
//
// Last line on stdout:
// EXPECT {"program":"clock_loop","pid":P,"tid":T,"seconds":S,"rounds":R,
//   "clock_reads":C,"hashes":H,"ticks":K}
// where rounds is the number of timed_round calls, clock_reads the
// clock_gettime calls made by read_clock, hashes the strings hashed and ticks
// the tick calls.

#include "common.h"

#include <functional>

namespace clockloop {

// n readings of CLOCK_MONOTONIC (the vDSO's __vdso_clock_gettime); returns a
// value that depends on all of them.
EBT_NOINLINE int64_t read_clock(int64_t n) {
  int64_t sum = 0;
  for (int64_t i = 0; i < n; i++) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    sum += ts.tv_nsec;
  }
  ebt::no_tail_call();
  return sum;
}

// n hashes of a 256-byte string (std::_Hash_bytes, in libstdc++.so).
EBT_NOINLINE uint64_t hash_text(int64_t n, const std::string& text) {
  uint64_t h = 0;
  for (int64_t i = 0; i < n; i++) {
    ebt::escape(text.data());
    h ^= std::hash<std::string>{}(text) + uint64_t(i);
  }
  ebt::no_tail_call();
  return h;
}

// Calls nothing: a --func on it gets a uretprobe, whose trampoline the thread
// then returns through 100 times a round.
EBT_NOINLINE uint64_t tick(uint64_t x) {
  asm volatile("" : "+r"(x));
  return x + 1;
}

struct Counts {
  int64_t rounds = 0;
  int64_t clock_reads = 0;
  int64_t hashes = 0;
  int64_t ticks = 0;
};

// One round: the clock, then the hashes.
EBT_NOINLINE uint64_t timed_round(Counts* c, const std::string& text) {
  const int64_t reads = 40000, hashes = 4000, ticks = 100;
  uint64_t v = uint64_t(read_clock(reads));
  v ^= hash_text(hashes, text);
  for (int64_t i = 0; i < ticks; i++) v = tick(v);
  c->rounds++;
  c->clock_reads += reads;
  c->hashes += hashes;
  c->ticks += ticks;
  ebt::no_tail_call();
  return v;
}

}  // namespace clockloop

EBT_NOINLINE uint64_t run_clock(double seconds, int64_t rounds, clockloop::Counts* c) {
  std::string text(256, 'x');
  for (size_t i = 0; i < text.size(); i++) text[i] = char('a' + i % 26);
  const int64_t end = ebt::now_ns() + int64_t(seconds * 1e9);
  uint64_t v = 0;
  while (ebt::now_ns() < end && (rounds == 0 || c->rounds < rounds)) {
    v ^= clockloop::timed_round(c, text);
  }
  ebt::no_tail_call();
  return v;
}

int main(int argc, char** argv) {
  const char* usage = "clock_loop [--seconds S] [--rounds N] [--wait]";
  double seconds = 2;
  int64_t rounds = 0;
  bool wait = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--seconds") == 0) {
      seconds = ebt::arg_f64(argc, argv, &i, usage);
    } else if (strcmp(argv[i], "--rounds") == 0) {
      rounds = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--wait") == 0) {
      wait = true;
    } else {
      ebt::usage_error(usage, "unknown argument", argv[i]);
    }
  }
  if (wait) ebt::wait_for_sigusr1();
  clockloop::Counts c;
  uint64_t v = run_clock(seconds, rounds, &c);
  ebt::escape(&v);
  ebt::Json j;
  j.begin_object()
      .str("program", "clock_loop")
      .num("pid", getpid())
      .num("tid", ebt::gettid_())
      .real("seconds", seconds)
      .num("rounds", c.rounds)
      .num("clock_reads", c.clock_reads)
      .num("hashes", c.hashes)
      .num("ticks", c.ticks)
      .end_object()
      .print_expect();
  return 0;
}
