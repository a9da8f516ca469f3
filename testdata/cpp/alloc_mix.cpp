// alloc_mix: allocations of three sizes in known functions, for sampling by bytes and for
// the cost of the allocator probes (most calls small and freed at once, as in a service).
//
// usage: alloc_mix [--small N] [--medium N] [--big N] [--wait]
//
// Call tree (every named function is noinline):
//   main -> small_churn(N)  N x malloc(64), each freed right away   (default 1,000,000)
//        -> medium_blocks(N) N x malloc(16384), each freed right away (default 20,000)
//        -> big_blocks(N)    N x malloc(1 MiB), never freed           (default 64)
//
// Last line: EXPECT {"program":"alloc_mix","pid":P,"functions":{
//   "small_churn":{"malloc":{"calls":N,"bytes":64N,"size":64}},
//   "medium_blocks":{"malloc":{"calls":N,"bytes":16384N,"size":16384}},
//   "big_blocks":{"malloc":{"calls":N,"bytes":1048576N,"size":1048576}}},
//   "leaked_count":N_big,"leaked_bytes":1048576 N_big}

#include "common.h"

namespace {
constexpr int64_t kSmall = 64, kMedium = 16384, kBig = 1 << 20;

[[noreturn]] void oom() {
  fprintf(stderr, "alloc_mix: malloc failed\n");
  exit(1);
}
}  // namespace

EBT_NOINLINE void small_churn(int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    void* p = malloc(kSmall);
    if (!p) oom();
    ebt::escape(p);
    free(p);
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void medium_blocks(int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    void* p = malloc(kMedium);
    if (!p) oom();
    ebt::escape(p);
    free(p);
  }
  ebt::no_tail_call();
}

static void* g_big[4096];

EBT_NOINLINE void big_blocks(int64_t n) {
  for (int64_t i = 0; i < n && i < 4096; i++) {
    void* p = malloc(kBig);
    if (!p) oom();
    ebt::escape(p);
    g_big[i] = p;
  }
  ebt::no_tail_call();
}

static void site(ebt::Json& j, const char* function, int64_t calls, int64_t size) {
  j.begin_object(function).begin_object("malloc");
  j.num("calls", calls).num("bytes", calls * size).num("size", size);
  j.end_object().end_object();
}

int main(int argc, char** argv) {
  const char* usage = "alloc_mix [--small N] [--medium N] [--big N] [--wait]";
  int64_t small = 1000000, medium = 20000, big = 64;
  bool wait = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--small") == 0) {
      small = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--medium") == 0) {
      medium = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--big") == 0) {
      big = int64_t(ebt::arg_u64(argc, argv, &i, usage));
      if (big > 4096) ebt::usage_error(usage, "--big is at most", "4096");
    } else if (strcmp(argv[i], "--wait") == 0) {
      wait = true;
    } else {
      ebt::usage_error(usage, "unknown argument", argv[i]);
    }
  }
  if (wait) ebt::wait_for_sigusr1();
  small_churn(small);
  medium_blocks(medium);
  big_blocks(big);
  ebt::Json j;
  j.begin_object().str("program", "alloc_mix").num("pid", getpid()).begin_object("functions");
  site(j, "small_churn", small, kSmall);
  site(j, "medium_blocks", medium, kMedium);
  site(j, "big_blocks", big, kBig);
  j.end_object().num("leaked_count", big).num("leaked_bytes", big * kBig).end_object();
  j.print_expect();
  return 0;
}
