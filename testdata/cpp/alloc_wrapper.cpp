// alloc_wrapper: allocations made through the program's own allocator wrappers, for the
// "blame the caller" reports (`ebsym top --by site`, `ebsym leaks --by site`, the
// summary's alloc finding): the site of an allocation is the function that asked for the
// memory, not the wrapper that passed the size on. Each phase runs in its own thread,
// named as it starts (pthread_setname_np), so the rows' `thread` is known too.
//
// usage: alloc_wrapper [--wait]
//   --wait  print `READY <pid>`, then block until SIGUSR1 arrives
//
// Call tree (every named function is noinline and not a tail call), one phase after the
// other:
//   thread "parser":   parse_headers() -> 300 x my_alloc(48)      (2 kept, leaked)
//   thread "body-1":   read_body()     -> 120 x my_alloc(2000)    (5 kept, leaked)
//   thread "indexer":  build_index()   -> 50 x pool_take(256) -> malloc: pool_take has one
//                      caller, so it is no wrapper by shape: `--wrapper 'pool_take*'`
//                      makes build_index the site
//   thread "records":  new_records()   -> 40 x new Record[4] (operator new[]: 4 x 24 B)
// my_alloc(size) only passes the size on to malloc, for two callers: a wrapper by shape.
//
// Last line on stdout:
// EXPECT {"program":"alloc_wrapper","pid":P,"sites":{"parse_headers":{"calls":300,
//   "bytes":14400,"leaked_count":2,"leaked_bytes":96,"thread":"parser"},...}}

#include <pthread.h>

#include <thread>

#include "common.h"

namespace {
constexpr int kHeaders = 300, kHeaderSize = 48, kHeadersKept = 2;
constexpr int kBodies = 120, kBodySize = 2000, kBodiesKept = 5;
constexpr int kIndex = 50, kIndexSize = 256;
constexpr int kRecords = 40, kRecordsEach = 4;
void* g_kept[kHeadersKept + kBodiesKept];
int g_nkept = 0;
uint64_t g_checksum = 0;

struct Record {
  int64_t id;
  int64_t a;
  int64_t b;
};
static_assert(sizeof(Record) == 24, "Record is 24 bytes");
}  // namespace

static void touch(void* p, size_t n) {
  char* c = static_cast<char*>(p);
  c[0] = 1;
  c[n - 1] = 2;
  g_checksum += uint8_t(c[0]) + uint8_t(c[n - 1]);
  ebt::escape(p);
}

// The program's own wrapper: a size in, malloc's block out.
EBT_NOINLINE void* my_alloc(size_t n) {
  void* p = malloc(n);
  if (!p) abort();
  ebt::no_tail_call();
  return p;
}

// A wrapper with one caller: by shape, it is that caller's helper (the site).
EBT_NOINLINE void* pool_take(size_t n) {
  void* p = malloc(n);
  if (!p) abort();
  ebt::no_tail_call();
  return p;
}

EBT_NOINLINE void parse_headers() {
  for (int i = 0; i < kHeaders; i++) {
    void* p = my_alloc(kHeaderSize);
    touch(p, kHeaderSize);
    if (i < kHeadersKept)
      g_kept[g_nkept++] = p;
    else
      free(p);
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void read_body() {
  for (int i = 0; i < kBodies; i++) {
    void* p = my_alloc(kBodySize);
    touch(p, kBodySize);
    if (i < kBodiesKept)
      g_kept[g_nkept++] = p;
    else
      free(p);
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void build_index() {
  for (int i = 0; i < kIndex; i++) {
    void* p = pool_take(kIndexSize);
    touch(p, kIndexSize);
    free(p);
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void new_records() {
  for (int i = 0; i < kRecords; i++) {
    Record* r = new Record[kRecordsEach];
    touch(r, sizeof(Record) * kRecordsEach);
    delete[] r;
  }
  ebt::no_tail_call();
}

// Runs `f` on a thread named `name`, and waits for it.
static void on_thread(const char* name, void (*f)()) {
  std::thread t([name, f] {
    pthread_setname_np(pthread_self(), name);
    f();
  });
  t.join();
}

static void site(ebt::Json& j, const char* name, int64_t calls, int64_t bytes,
                 int64_t leaked_count, int64_t leaked_bytes, const char* thread) {
  j.begin_object(name)
      .num("calls", calls)
      .num("bytes", bytes)
      .num("leaked_count", leaked_count)
      .num("leaked_bytes", leaked_bytes)
      .str("thread", thread)
      .end_object();
}

int main(int argc, char** argv) {
  const char* usage = "alloc_wrapper [--wait]";
  bool wait = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--wait"))
      wait = true;
    else
      ebt::usage_error(usage, "unknown argument", argv[i]);
  }
  if (wait) ebt::wait_for_sigusr1();
  on_thread("parser", parse_headers);
  on_thread("body-1", read_body);
  on_thread("indexer", build_index);
  on_thread("records", new_records);
  ebt::Json j;
  j.begin_object()
      .str("program", "alloc_wrapper")
      .num("pid", getpid())
      .num("checksum", int64_t(g_checksum))
      .begin_object("sites");
  site(j, "parse_headers", kHeaders, int64_t(kHeaders) * kHeaderSize, kHeadersKept,
       int64_t(kHeadersKept) * kHeaderSize, "parser");
  site(j, "read_body", kBodies, int64_t(kBodies) * kBodySize, kBodiesKept,
       int64_t(kBodiesKept) * kBodySize, "body-1");
  site(j, "build_index", kIndex, int64_t(kIndex) * kIndexSize, 0, 0, "indexer");
  site(j, "new_records", kRecords, int64_t(kRecords) * kRecordsEach * int64_t(sizeof(Record)), 0,
       0, "records");
  j.end_object().end_object().print_expect();
  return 0;
}
