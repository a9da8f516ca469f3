// sampled_heap: allocations of known sizes from known functions, many of them small, for
// sampling by bytes (ebrec --alloc-sampler preload) and its estimates.
//
// usage: sampled_heap [--churn N] [--threads T] [--fork] [--exit CODE] [--bench N] [--wait]
//   --churn N    small_churn's calls (default 2000000)
//   --threads T  also run thread_churn in T threads (default 0)
//   --fork       also fork a child that runs child_blocks(), waits for it, checks its status
//   --exit CODE  exit with CODE after printing EXPECT (default 0)
//   --bench N    only time N x (malloc(64) + free) and print `BENCH <ns per pair>`, no EXPECT
//   --wait       print `READY <pid>`, then block until SIGUSR1 arrives
//
// Call tree (every named function is noinline):
//   main -> run() ->
//     big_blocks()    64 x malloc(1 MiB), kept (never freed: leaked)
//     small_churn()   N x malloc(64), each freed right away
//     medium()        20000 x operator new[](16384), each deleted right away
//     kinds()         one call each of calloc(1024, 1024), realloc(NULL, 1 MiB) then realloc
//                     of it to 2 MiB, posix_memalign(64, 1 MiB), aligned_alloc(4096, 1 MiB),
//                     memalign(4096, 1 MiB), valloc(1 MiB), reallocarray(NULL, 1024, 1024):
//                     all freed
//     thread_churn()  (--threads) 100000 x malloc(128), freed, in each thread
//     child_blocks()  (--fork, in the child) 16 x malloc(1 MiB), freed, then _exit(7)
//
// Last line on stdout:
// EXPECT {"program":"sampled_heap","pid":P,"functions":{"big_blocks":{"calls":64,
//   "bytes":67108864,"size":1048576},"small_churn":{...},"medium":{...},
//   "thread_churn":{...}},"leaked_bytes":67108864,"checksum":C,"child_status":S}
// checksum: a sum over bytes the program wrote and read back (the same with or without a
// shim between it and malloc). child_status: the child's exit code (7), -1 without --fork.

#include <malloc.h>
#include <sys/wait.h>

#include <thread>

#include "common.h"

namespace {
constexpr int kBig = 64, kBigSize = 1 << 20;
constexpr int kSmallSize = 64;
constexpr int kMedium = 20000, kMediumSize = 16384;
constexpr int kThreadAllocs = 100000, kThreadSize = 128;
ebt::Site g_big, g_small, g_medium, g_thread;
uint64_t g_checksum = 0;
void* g_kept[kBig];
}  // namespace

EBT_NOINLINE void big_blocks() {
  for (int i = 0; i < kBig; i++) {
    char* p = static_cast<char*>(malloc(kBigSize));
    if (!p) abort();
    p[0] = char(i);
    p[kBigSize - 1] = char(i);
    g_checksum += uint8_t(p[0]) + uint8_t(p[kBigSize - 1]);
    g_kept[i] = p;
    g_big.add(kBigSize);
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void small_churn(int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    char* p = static_cast<char*>(malloc(kSmallSize));
    if (!p) abort();
    p[0] = char(i);
    ebt::escape(p);
    g_checksum += uint8_t(p[0]);
    free(p);
  }
  g_small.calls = n;
  g_small.bytes = n * kSmallSize;
  g_small.size = kSmallSize;
  ebt::no_tail_call();
}

EBT_NOINLINE void medium() {
  for (int i = 0; i < kMedium; i++) {
    char* p = new char[kMediumSize];
    p[kMediumSize / 2] = char(i);
    ebt::escape(p);
    g_checksum += uint8_t(p[kMediumSize / 2]);
    delete[] p;
    g_medium.add(kMediumSize);
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void kinds() {
  const size_t mb = 1 << 20;
  void* c = calloc(1024, 1024);
  void* r = realloc(nullptr, mb);
  r = realloc(r, 2 * mb);
  void* pm = nullptr;
  if (posix_memalign(&pm, 64, mb) != 0) abort();
  void* aa = aligned_alloc(4096, mb);
  void* ma = memalign(4096, mb);
  void* va = valloc(mb);
  void* ra = reallocarray(nullptr, 1024, 1024);
  if (!c || !r || !aa || !ma || !va || !ra) abort();
  if ((uintptr_t(pm) & 63) || (uintptr_t(aa) & 4095) || (uintptr_t(ma) & 4095) ||
      (uintptr_t(va) & 4095))
    abort();
  g_checksum += static_cast<unsigned char*>(c)[mb - 1];  // calloc'd: 0
  for (void* p : {c, r, pm, aa, ma, va, ra}) free(p);
  ebt::no_tail_call();
}

EBT_NOINLINE void thread_churn() {
  for (int i = 0; i < kThreadAllocs; i++) {
    char* p = static_cast<char*>(malloc(kThreadSize));
    if (!p) abort();
    p[1] = char(i);
    ebt::escape(p);
    free(p);
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void child_blocks() {
  for (int i = 0; i < 16; i++) {
    char* p = static_cast<char*>(malloc(kBigSize));
    if (!p) _exit(1);
    p[0] = 1;
    ebt::escape(p);
    free(p);
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void run(int64_t churn, int threads) {
  big_blocks();
  small_churn(churn);
  medium();
  kinds();
  if (threads > 0) {
    std::vector<std::thread> ts;
    for (int i = 0; i < threads; i++) ts.emplace_back(thread_churn);
    for (auto& t : ts) t.join();
    g_thread.calls = int64_t(threads) * kThreadAllocs;
    g_thread.bytes = g_thread.calls * kThreadSize;
    g_thread.size = kThreadSize;
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void bench(int64_t n) {
  const int64_t t0 = ebt::now_ns();
  for (int64_t i = 0; i < n; i++) {
    void* p = malloc(kSmallSize);
    ebt::escape(p);
    free(p);
  }
  const int64_t t1 = ebt::now_ns();
  printf("BENCH %.2f\n", double(t1 - t0) / double(n));
}

int main(int argc, char** argv) {
  const char* usage =
      "sampled_heap [--churn N] [--threads T] [--fork] [--exit CODE] [--bench N] [--wait]";
  int64_t churn = 2000000, threads = 0, code = 0, bench_n = 0;
  bool do_fork = false, wait = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--churn") == 0) {
      churn = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--threads") == 0) {
      threads = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--exit") == 0) {
      code = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--bench") == 0) {
      bench_n = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--fork") == 0) {
      do_fork = true;
    } else if (strcmp(argv[i], "--wait") == 0) {
      wait = true;
    } else {
      ebt::usage_error(usage, "unknown argument", argv[i]);
    }
  }
  if (wait) ebt::wait_for_sigusr1();
  if (bench_n > 0) {
    bench(bench_n);
    return 0;
  }
  int child_status = -1;
  if (do_fork) {
    const pid_t pid = fork();
    if (pid < 0) abort();
    if (pid == 0) {
      child_blocks();
      _exit(7);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    child_status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  run(churn, int(threads));
  ebt::Json j;
  j.begin_object().str("program", "sampled_heap").num("pid", getpid()).begin_object("functions");
  const struct {
    const char* name;
    const ebt::Site& s;
  } sites[] = {{"big_blocks", g_big},
               {"small_churn", g_small},
               {"medium", g_medium},
               {"thread_churn", g_thread}};
  for (const auto& s : sites) {
    j.begin_object(s.name);
    s.s.write_fields(j);
    j.end_object();
  }
  j.end_object()
      .num("leaked_bytes", int64_t(kBig) * kBigSize)
      .num("checksum", int64_t(g_checksum))
      .num("child_status", child_status)
      .end_object();
  j.print_expect();
  return int(code);
}
