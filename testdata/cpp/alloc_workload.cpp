// alloc_workload: allocations with exactly known call sites, counts and sizes.
//
// usage: alloc_workload [--rounds R] [--wait]
//   --rounds R  rounds to run (default 10)
//   --wait      print `READY <pid>`, then block until SIGUSR1 arrives
//
// Call tree (every named function is noinline):
//   main -> run_alloc(R) -> per round, in this order:
//     Warehouse::restock()  100 x malloc(4096)
//     reserve_block()        50 x operator new[](8192)   (new char[8192])
//     make_table()           20 x calloc(16, 1024)
//     grow_buffer()           1 x malloc(1000), then 10 x realloc to
//                             2000, 4000, ..., 20000 (+2000 per step)
//     small_allocs()       1000 x malloc(64), each freed right away
//     aligned_allocs()        5 x posix_memalign(64, 8192)
//                             5 x aligned_alloc(4096, 16384)
//     leak_some()             round 0 only: 7 x malloc(5000), never freed
//     leak_more()             round 0 only: 3 x operator new[](12000), never freed
//     release_round()         frees everything above except small_allocs' blocks
//                             (already freed) and the leaks
// Everything allocated in a round is live at once until release_round(), so
// the live size peaks just before each release_round().
//
// Last line on stdout (one line; shown wrapped here), numbers for R = 10:
// EXPECT {"program":"alloc_workload","pid":P,"rounds":10,
//   "functions":{
//     "<function>":{"<symbol>":{"calls":n,"bytes":b[,"size":s][,...extras]},...},
//     ...},
//   "leaked_count":10,"leaked_bytes":71000,"round_live_bytes":1289760}
// where
//   <function>  the demangled name without parameters, e.g. "Warehouse::restock"
//   <symbol>    the allocator entry point called from that function: "malloc",
//               "calloc", "realloc", "posix_memalign", "aligned_alloc",
//               "operator new[]", "free", "operator delete[]"
//   calls       total calls over all rounds
//   bytes       total requested bytes (calloc: nmemb * size; free / delete[]:
//               requested size of the blocks freed; realloc: new sizes)
//   size        present only when every call requested the same size
// Extras: every allocating symbol has "leaked" (blocks never freed); calloc
// has "nmemb" and "elem_size"; posix_memalign / aligned_alloc have "align";
// realloc has "sizes" (the new sizes within one round, in call order).
// operator new[] / delete[] reach malloc / free inside libstdc++, so a tracer
// on malloc sees those calls too (one level deeper).
// leaked_count / leaked_bytes: blocks never freed (7 x 5000 + 3 x 12000).
// round_live_bytes: requested bytes live just before each release_round(),
// not counting the leaks.

#include <new>

#include "common.h"

namespace {
constexpr int kRestock = 100, kRestockSize = 4096;
constexpr int kBlocks = 50, kBlockSize = 8192;
constexpr int kTables = 20, kTableNmemb = 16, kTableElem = 1024;
constexpr int kGrowStart = 1000, kGrowSteps = 10, kGrowStep = 2000;
constexpr int kSmall = 1000, kSmallSize = 64;
constexpr int kMemalign = 5, kMemalignAlign = 64, kMemalignSize = 8192;
constexpr int kAligned = 5, kAlignedAlign = 4096, kAlignedSize = 16384;
constexpr int kLeakSome = 7, kLeakSomeSize = 5000;
constexpr int kLeakMore = 3, kLeakMoreSize = 12000;

// Counters, updated right next to each call so the EXPECT line reports what
// actually ran.
struct Counters {
  ebt::Site restock_malloc, block_new, table_calloc, grow_malloc, grow_realloc, small_malloc,
      small_free, memalign, aligned, leak_malloc, leak_new, release_free, release_delete;
  int64_t live_bytes = 0;  // requested, excluding leaks
  int64_t round_live_bytes = -1;
  int64_t leaked_count = 0, leaked_bytes = 0;
  std::vector<int64_t> grow_sizes;  // round 0 only
} g;

[[noreturn]] void oom(const char* what) {
  fprintf(stderr, "alloc_workload: %s failed\n", what);
  exit(1);
}
}  // namespace

class Warehouse {
 public:
  EBT_NOINLINE void restock();
  void* shelves[kRestock];
};

struct Round {
  Warehouse warehouse;
  char* blocks[kBlocks];
  void* tables[kTables];
  void* buffer;
  int64_t buffer_size;
  void* memaligned[kMemalign];
  void* aligned[kAligned];
};

void Warehouse::restock() {
  for (int i = 0; i < kRestock; i++) {
    void* p = malloc(kRestockSize);
    if (!p) oom("malloc");
    ebt::escape(p);
    shelves[i] = p;
    g.restock_malloc.add(kRestockSize);
    g.live_bytes += kRestockSize;
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void reserve_block(Round& r) {
  for (int i = 0; i < kBlocks; i++) {
    char* p = new char[kBlockSize];
    ebt::escape(p);
    r.blocks[i] = p;
    g.block_new.add(kBlockSize);
    g.live_bytes += kBlockSize;
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void make_table(Round& r) {
  for (int i = 0; i < kTables; i++) {
    void* p = calloc(kTableNmemb, kTableElem);
    if (!p) oom("calloc");
    ebt::escape(p);
    r.tables[i] = p;
    g.table_calloc.add(kTableNmemb * kTableElem);
    g.live_bytes += kTableNmemb * kTableElem;
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void grow_buffer(Round& r) {
  int64_t size = kGrowStart;
  void* p = malloc(size);
  if (!p) oom("malloc");
  ebt::escape(p);
  g.grow_malloc.add(size);
  g.live_bytes += size;
  const bool record = g.grow_sizes.empty();
  for (int i = 1; i <= kGrowSteps; i++) {
    const int64_t new_size = int64_t(i) * kGrowStep;
    void* q = realloc(p, new_size);
    if (!q) oom("realloc");
    ebt::escape(q);
    p = q;
    g.grow_realloc.add(new_size);
    g.live_bytes += new_size - size;
    size = new_size;
    if (record) g.grow_sizes.push_back(new_size);
  }
  r.buffer = p;
  r.buffer_size = size;
  ebt::no_tail_call();
}

EBT_NOINLINE void small_allocs() {
  for (int i = 0; i < kSmall; i++) {
    void* p = malloc(kSmallSize);
    if (!p) oom("malloc");
    static_cast<volatile char*>(p)[0] = char(i);
    ebt::escape(p);
    g.small_malloc.add(kSmallSize);
    free(p);
    g.small_free.add(kSmallSize);
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void aligned_allocs(Round& r) {
  for (int i = 0; i < kMemalign; i++) {
    void* p = nullptr;
    if (posix_memalign(&p, kMemalignAlign, kMemalignSize) != 0) oom("posix_memalign");
    ebt::escape(p);
    r.memaligned[i] = p;
    g.memalign.add(kMemalignSize);
    g.live_bytes += kMemalignSize;
  }
  for (int i = 0; i < kAligned; i++) {
    void* p = aligned_alloc(kAlignedAlign, kAlignedSize);
    if (!p) oom("aligned_alloc");
    ebt::escape(p);
    r.aligned[i] = p;
    g.aligned.add(kAlignedSize);
    g.live_bytes += kAlignedSize;
  }
  ebt::no_tail_call();
}

// The leaks keep no pointer anywhere, so valgrind reports them as
// "definitely lost".
EBT_NOINLINE void leak_some() {
  for (int i = 0; i < kLeakSome; i++) {
    void* p = malloc(kLeakSomeSize);
    if (!p) oom("malloc");
    ebt::escape(p);
    g.leak_malloc.add(kLeakSomeSize);
    g.leaked_count += 1;
    g.leaked_bytes += kLeakSomeSize;
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void leak_more() {
  for (int i = 0; i < kLeakMore; i++) {
    char* p = new char[kLeakMoreSize];
    ebt::escape(p);
    g.leak_new.add(kLeakMoreSize);
    g.leaked_count += 1;
    g.leaked_bytes += kLeakMoreSize;
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void release_round(Round& r) {
  g.round_live_bytes = g.live_bytes;
  auto release = [](void* p, int64_t size) {
    free(p);
    g.release_free.add(size);
    g.live_bytes -= size;
  };
  for (void* p : r.warehouse.shelves) release(p, kRestockSize);
  for (char* p : r.blocks) {
    delete[] p;
    g.release_delete.add(kBlockSize);
    g.live_bytes -= kBlockSize;
  }
  for (void* p : r.tables) release(p, kTableNmemb * kTableElem);
  release(r.buffer, r.buffer_size);
  for (void* p : r.memaligned) release(p, kMemalignSize);
  for (void* p : r.aligned) release(p, kAlignedSize);
  ebt::no_tail_call();
}

EBT_NOINLINE void run_alloc(int64_t rounds) {
  for (int64_t round = 0; round < rounds; round++) {
    Round r;
    r.warehouse.restock();
    reserve_block(r);
    make_table(r);
    grow_buffer(r);
    small_allocs();
    aligned_allocs(r);
    if (round == 0) {
      leak_some();
      leak_more();
    }
    release_round(r);
  }
  ebt::no_tail_call();
}

namespace {
void site(ebt::Json& j, const char* symbol, const ebt::Site& s, int64_t leaked) {
  j.begin_object(symbol);
  s.write_fields(j);
  if (leaked >= 0) j.num("leaked", leaked);
}

void print_expect(int64_t rounds) {
  ebt::Json j;
  j.begin_object()
      .str("program", "alloc_workload")
      .num("pid", getpid())
      .num("rounds", rounds)
      .begin_object("functions");

  j.begin_object("Warehouse::restock");
  site(j, "malloc", g.restock_malloc, 0);
  j.end_object().end_object();

  j.begin_object("reserve_block");
  site(j, "operator new[]", g.block_new, 0);
  j.end_object().end_object();

  j.begin_object("make_table");
  site(j, "calloc", g.table_calloc, 0);
  j.num("nmemb", kTableNmemb).num("elem_size", kTableElem).end_object().end_object();

  j.begin_object("grow_buffer");
  site(j, "malloc", g.grow_malloc, 0);
  j.end_object();
  site(j, "realloc", g.grow_realloc, 0);
  j.begin_array("sizes");
  for (int64_t s : g.grow_sizes) j.num(s);
  j.end_array().end_object().end_object();

  j.begin_object("small_allocs");
  site(j, "malloc", g.small_malloc, 0);
  j.end_object();
  site(j, "free", g.small_free, -1);
  j.end_object().end_object();

  j.begin_object("aligned_allocs");
  site(j, "posix_memalign", g.memalign, 0);
  j.num("align", kMemalignAlign).end_object();
  site(j, "aligned_alloc", g.aligned, 0);
  j.num("align", kAlignedAlign).end_object().end_object();

  j.begin_object("leak_some");
  site(j, "malloc", g.leak_malloc, g.leak_malloc.calls);
  j.end_object().end_object();

  j.begin_object("leak_more");
  site(j, "operator new[]", g.leak_new, g.leak_new.calls);
  j.end_object().end_object();

  j.begin_object("release_round");
  site(j, "free", g.release_free, -1);
  j.end_object();
  site(j, "operator delete[]", g.release_delete, -1);
  j.end_object().end_object();

  j.end_object()  // functions
      .num("leaked_count", g.leaked_count)
      .num("leaked_bytes", g.leaked_bytes)
      .num("round_live_bytes", g.round_live_bytes < 0 ? 0 : g.round_live_bytes)
      .end_object();
  j.print_expect();
}
}  // namespace

int main(int argc, char** argv) {
  const char* usage = "alloc_workload [--rounds R] [--wait]";
  int64_t rounds = 10;
  bool wait = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--rounds") == 0) {
      rounds = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--wait") == 0) {
      wait = true;
    } else {
      ebt::usage_error(usage, "unknown argument", argv[i]);
    }
  }
  g.grow_sizes.reserve(kGrowSteps);
  if (wait) ebt::wait_for_sigusr1();
  run_alloc(rounds);
  print_expect(rounds);
  return 0;
}
