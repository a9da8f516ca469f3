// arena_known: a tiny arena (`pool::Arena`, a bump allocator over malloc'd chunks) whose
// allocations, frees, temporaries and leaks are known exactly, for `ebrec record --alloc
// --alloc-fn 'pool::Arena::Allocate:1:pool::Arena::Free:1'`. One thread.
//
// usage: arena_known [--wait]
//   --wait  print `READY <pid>`, then block until SIGUSR1 arrives
//
// pool::Arena::Allocate(unsigned long) and pool::Arena::Free(void*) are noinline members:
// `this` is argument 0, the size (and the freed pointer) argument 1. Allocate takes a new
// 16 KiB chunk from malloc when the current one is full (pool::Arena::grow), so the first
// block of every chunk is at the chunk's own address: the arena's blocks must be an address
// space of their own. The chunks are freed at the end (release_chunks, with free).
//
// Call tree (every named function is noinline), in this order:
//   main -> run() ->
//     arena_leak()     2 x Allocate(200), never freed: 400 bytes leaked
//     arena_temp()     300 x { p = Allocate(64); Free(p) }: 300 temporary
//     arena_keep()     100 x Allocate(128), kept
//     arena_release()  frees the 100 (none temporary)
//     release_chunks() frees the chunks (malloc's blocks)
//
// Last line on stdout:
// EXPECT {"program":"arena_known","pid":P,"calls":402,"bytes":32400,"frees":400,
//   "temporary":300,"leaked_bytes":400,"leaked_count":2,"chunks":C,
//   "functions":{"arena_leak":{"calls":2,"bytes":400,"temporary":0,"leaked_bytes":400},...}}

#include "common.h"

namespace pool {

class Arena {
 public:
  void* Allocate(size_t n);
  void Free(void* p);
  void release_chunks();
  int chunks() const { return nchunks_; }

 private:
  void grow();
  static constexpr size_t kChunk = 16 << 10;
  static constexpr int kMaxChunks = 64;
  char* chunk_[kMaxChunks] = {};
  int nchunks_ = 0;
  size_t used_ = kChunk;
  int64_t frees_ = 0;
};

EBT_NOINLINE void Arena::grow() {
  if (nchunks_ == kMaxChunks) abort();
  char* c = static_cast<char*>(malloc(kChunk));
  if (!c) abort();
  chunk_[nchunks_++] = c;
  used_ = 0;
  ebt::no_tail_call();
}

EBT_NOINLINE void* Arena::Allocate(size_t n) {
  n = (n + 15) & ~size_t(15);
  if (used_ + n > kChunk) grow();
  void* p = chunk_[nchunks_ - 1] + used_;
  used_ += n;
  ebt::escape(p);
  return p;
}

EBT_NOINLINE void Arena::Free(void* p) {
  // A bump arena reuses nothing: Free only counts.
  ebt::escape(p);
  frees_++;
}

EBT_NOINLINE void Arena::release_chunks() {
  for (int i = 0; i < nchunks_; i++) free(chunk_[i]);
  ebt::no_tail_call();
}

}  // namespace pool

namespace {
constexpr int kLeaks = 2, kLeakSize = 200;
constexpr int kTemps = 300, kTempSize = 64;
constexpr int kKeep = 100, kKeepSize = 128;
pool::Arena g_arena;
void* g_leaks[kLeaks];
void* g_keep[kKeep];
uint64_t g_checksum = 0;
}  // namespace

static void touch(void* p, size_t n) {
  char* c = static_cast<char*>(p);
  c[0] = 1;
  c[n - 1] = 2;
  g_checksum += uint8_t(c[0]) + uint8_t(c[n - 1]);
  ebt::escape(p);
}

EBT_NOINLINE void arena_leak() {
  for (int i = 0; i < kLeaks; i++) {
    g_leaks[i] = g_arena.Allocate(kLeakSize);
    touch(g_leaks[i], kLeakSize);
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void arena_temp() {
  for (int i = 0; i < kTemps; i++) {
    void* p = g_arena.Allocate(kTempSize);
    touch(p, kTempSize);
    g_arena.Free(p);
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void arena_keep() {
  for (int i = 0; i < kKeep; i++) {
    g_keep[i] = g_arena.Allocate(kKeepSize);
    touch(g_keep[i], kKeepSize);
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void arena_release() {
  for (int i = 0; i < kKeep; i++) g_arena.Free(g_keep[i]);
  ebt::no_tail_call();
}

EBT_NOINLINE void run() {
  arena_leak();
  arena_temp();
  arena_keep();
  arena_release();
  g_arena.release_chunks();
  ebt::no_tail_call();
}

static void site(ebt::Json& j, const char* name, int64_t calls, int64_t bytes, int64_t temporary,
                 int64_t leaked) {
  j.begin_object(name)
      .num("calls", calls)
      .num("bytes", bytes)
      .num("temporary", temporary)
      .num("leaked_bytes", leaked)
      .end_object();
}

int main(int argc, char** argv) {
  const char* usage = "arena_known [--wait]";
  bool wait = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--wait"))
      wait = true;
    else
      ebt::usage_error(usage, "unknown argument", argv[i]);
  }
  if (wait) ebt::wait_for_sigusr1();
  run();
  const int64_t leaked = int64_t(kLeaks) * kLeakSize;
  ebt::Json j;
  j.begin_object()
      .str("program", "arena_known")
      .num("pid", getpid())
      .num("calls", kLeaks + kTemps + kKeep)
      .num("bytes", leaked + int64_t(kTemps) * kTempSize + int64_t(kKeep) * kKeepSize)
      .num("frees", kTemps + kKeep)
      .num("temporary", kTemps)
      .num("leaked_bytes", leaked)
      .num("leaked_count", kLeaks)
      .num("chunks", g_arena.chunks())
      .num("checksum", int64_t(g_checksum))
      .begin_object("functions");
  site(j, "arena_leak", kLeaks, leaked, 0, leaked);
  site(j, "arena_temp", kTemps, int64_t(kTemps) * kTempSize, kTemps, 0);
  site(j, "arena_keep", kKeep, int64_t(kKeep) * kKeepSize, 0, 0);
  j.end_object().end_object().print_expect();
  return 0;
}
