// heap_known: allocations whose temporaries, peak and leaks are known exactly, for
// `ebsym heap` (heaptrack's numbers). One thread; nothing else allocates between the
// phases (no output until the end), so the order of events is the program's.
//
// usage: heap_known [--wait] [--linger-ms N]
//   --wait          print `READY <pid>`, then block until SIGUSR1 arrives
//   --linger-ms N   after release_peak, sleep N ms before exiting (no allocation): the
//                   leaked and the runtime's blocks stay live well clear of the peak in time
//
// Call tree (every named function is noinline), in this order:
//   main -> run() ->
//     leak_some()    3 x malloc(1000), never freed: leaked, to act on
//     temp_loop()    1000 x { malloc(48); free } : 1000 temporary
//     tiny()         400 x { malloc(0..7); free }: 400 temporary, 1,400 bytes; what a
//                    sampler of bytes would mostly miss (--sample-bytes 1 keeps them all)
//     pairs()        500 x { a = malloc(80); b = malloc(96); free(a); free(b) }: none
//                    temporary (b comes between a and its free; a free before b's)
//     grow()         200 x { p = malloc(32); p = realloc(p, 4096); free(p) }: realloc is a
//                    free of p then an allocation, so both blocks are temporary (400), as
//                    heaptrack counts them; 400 calls
//     hold_peak()    8 x malloc(1 MiB), kept
//     hold_other()   4 x malloc(256 KiB), kept: the heap's peak is here, 9 MiB above
//                    what the runtime holds
//     release_peak() frees the 12 blocks (none temporary)
//
// Last line on stdout:
// EXPECT {"program":"heap_known","pid":P,"calls":N,"temporary":T,"peak_program_bytes":B,
//   "leaked_bytes":3000,"functions":{"leak_some":{"calls":3,"bytes":3000,"temporary":0,
//   "peak_bytes":3000,"leaked_bytes":3000},...}}
// calls and temporary: the program's own (the runtime's allocations come on top);
// peak_program_bytes: the program's bytes live at the peak (the runtime's on top).

#include "common.h"

namespace {
constexpr int kLeaks = 3, kLeakSize = 1000;
constexpr int kTemps = 1000, kTempSize = 48;
constexpr int kTiny = 400;  // sizes 0, 1, ..., 7 in turn
constexpr int64_t kTinyBytes = int64_t(kTiny) / 8 * (0 + 1 + 2 + 3 + 4 + 5 + 6 + 7);
constexpr int kPairs = 500, kPairA = 80, kPairB = 96;
constexpr int kGrows = 200, kGrowFrom = 32, kGrowTo = 4096;
constexpr int kPeak = 8, kPeakSize = 1 << 20;
constexpr int kOther = 4, kOtherSize = 256 << 10;
void* g_leaks[kLeaks];
void* g_peak[kPeak];
void* g_other[kOther];
uint64_t g_checksum = 0;
}  // namespace

static void touch(void* p, size_t n) {
  char* c = static_cast<char*>(p);
  c[0] = 1;
  c[n - 1] = 2;
  g_checksum += uint8_t(c[0]) + uint8_t(c[n - 1]);
  ebt::escape(p);
}

EBT_NOINLINE void leak_some() {
  for (int i = 0; i < kLeaks; i++) {
    g_leaks[i] = malloc(kLeakSize);
    if (!g_leaks[i]) abort();
    touch(g_leaks[i], kLeakSize);
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void temp_loop() {
  for (int i = 0; i < kTemps; i++) {
    void* p = malloc(kTempSize);
    if (!p) abort();
    touch(p, kTempSize);
    free(p);
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void tiny() {
  for (int i = 0; i < kTiny; i++) {
    size_t n = size_t(i % 8);
    void* p = malloc(n);
    if (!p) abort();
    if (n) touch(p, n);
    ebt::escape(p);
    free(p);
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void pairs() {
  for (int i = 0; i < kPairs; i++) {
    void* a = malloc(kPairA);
    void* b = malloc(kPairB);
    if (!a || !b) abort();
    touch(a, kPairA);
    touch(b, kPairB);
    free(a);
    free(b);
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void grow() {
  for (int i = 0; i < kGrows; i++) {
    void* p = malloc(kGrowFrom);
    if (!p) abort();
    touch(p, kGrowFrom);
    void* q = realloc(p, kGrowTo);
    if (!q) abort();
    touch(q, kGrowTo);
    free(q);
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void hold_peak() {
  for (int i = 0; i < kPeak; i++) {
    g_peak[i] = malloc(kPeakSize);
    if (!g_peak[i]) abort();
    touch(g_peak[i], kPeakSize);
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void hold_other() {
  for (int i = 0; i < kOther; i++) {
    g_other[i] = malloc(kOtherSize);
    if (!g_other[i]) abort();
    touch(g_other[i], kOtherSize);
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void release_peak() {
  for (int i = 0; i < kPeak; i++) free(g_peak[i]);
  for (int i = 0; i < kOther; i++) free(g_other[i]);
  ebt::no_tail_call();
}

EBT_NOINLINE void run() {
  leak_some();
  temp_loop();
  tiny();
  pairs();
  grow();
  hold_peak();
  hold_other();
  release_peak();
  ebt::no_tail_call();
}

static void site(ebt::Json& j, const char* name, int64_t calls, int64_t bytes, int64_t temporary,
                 int64_t peak, int64_t leaked) {
  j.begin_object(name)
      .num("calls", calls)
      .num("bytes", bytes)
      .num("temporary", temporary)
      .num("peak_bytes", peak)
      .num("leaked_bytes", leaked)
      .end_object();
}

int main(int argc, char** argv) {
  const char* usage = "heap_known [--wait] [--linger-ms N]";
  bool wait = false;
  long linger_ms = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--wait"))
      wait = true;
    else if (!strcmp(argv[i], "--linger-ms") && i + 1 < argc)
      linger_ms = strtol(argv[++i], nullptr, 10);
    else
      ebt::usage_error(usage, "unknown argument", argv[i]);
  }
  if (wait) ebt::wait_for_sigusr1();
  run();
  if (linger_ms > 0) {
    struct timespec ts = {linger_ms / 1000, (linger_ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0) {
    }
  }
  const int64_t leaked = int64_t(kLeaks) * kLeakSize;
  const int64_t calls = kLeaks + kTemps + kTiny + 2 * kPairs + 2 * kGrows + kPeak + kOther;
  const int64_t temporary = kTemps + kTiny + 2 * kGrows;
  const int64_t peak = leaked + int64_t(kPeak) * kPeakSize + int64_t(kOther) * kOtherSize;
  ebt::Json j;
  j.begin_object()
      .str("program", "heap_known")
      .num("pid", getpid())
      .num("calls", calls)
      .num("temporary", temporary)
      .num("peak_program_bytes", peak)
      .num("leaked_bytes", leaked)
      .num("checksum", int64_t(g_checksum))
      .begin_object("functions");
  site(j, "leak_some", kLeaks, leaked, 0, leaked, leaked);
  site(j, "temp_loop", kTemps, int64_t(kTemps) * kTempSize, kTemps, 0, 0);
  site(j, "tiny", kTiny, kTinyBytes, kTiny, 0, 0);
  site(j, "pairs", 2 * kPairs, int64_t(kPairs) * (kPairA + kPairB), 0, 0, 0);
  site(j, "grow", 2 * kGrows, int64_t(kGrows) * (kGrowFrom + kGrowTo), 2 * kGrows, 0, 0);
  site(j, "hold_peak", kPeak, int64_t(kPeak) * kPeakSize, 0, int64_t(kPeak) * kPeakSize, 0);
  site(j, "hold_other", kOther, int64_t(kOther) * kOtherSize, 0, int64_t(kOther) * kOtherSize,
       0);
  j.end_object().end_object().print_expect();
  return 0;
}
