// isra_pool: a pool allocator whose free function GCC clones (its `this` is unused, so the
// only copy of `store::Pool::drop(void*)` is `[clone .constprop.0]`, which takes the
// pointer in the first register): the case where an argument index of the source is not
// the clone's. `--alloc-fn 'store::(anonymous namespace)::Pool::grab:1:...::drop:1'`
// would read the wrong register for every free; ebrec refuses it without --clone-args.
//
// usage: isra_pool [--blocks N] [--wait]
//   --blocks N   blocks grabbed, then dropped, from the pool (default 2500)
//   --wait       print `READY <pid>`, then block until SIGUSR1 arrives
//
// Call tree: main -> N x Pool::grab(size) (malloc; sizes 64..70), then N x Pool::drop(p)
// (free): nothing is left.
//
// Last line on stdout:
// EXPECT {"program":"isra_pool","pid":P,"grabs":N,"drops":N,"bytes":B}
// where bytes is the sum of the sizes grabbed.

#include "common.h"

#include <vector>

namespace store {
namespace {
// (Plain noinline, not EBT_NOINLINE's noipa: the clone is the point.)
struct Pool {
  long grabbed = 0;
  __attribute__((noinline)) void* grab(unsigned long size) {
    grabbed++;
    return malloc(size);
  }
  __attribute__((noinline)) void drop(void* p) { free(p); }
};
}  // namespace
}  // namespace store

int main(int argc, char** argv) {
  const char* usage = "isra_pool [--blocks N] [--wait]";
  int64_t n = 2500;
  bool wait = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--blocks") == 0) {
      n = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--wait") == 0) {
      wait = true;
    } else {
      ebt::usage_error(usage, "unknown argument", argv[i]);
    }
  }
  if (wait) ebt::wait_for_sigusr1();
  store::Pool pool;
  std::vector<void*> v;
  int64_t bytes = 0;
  for (int64_t i = 0; i < n; i++) {
    v.push_back(pool.grab(64 + i % 7));
    bytes += 64 + i % 7;
  }
  for (void* p : v) pool.drop(p);
  ebt::Json j;
  j.begin_object()
      .str("program", "isra_pool")
      .num("pid", getpid())
      .num("grabs", pool.grabbed)
      .num("drops", n)
      .num("bytes", bytes)
      .end_object()
      .print_expect();
  return 0;
}
