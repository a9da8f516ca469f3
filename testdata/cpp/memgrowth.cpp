// memgrowth: memory growth with exactly known sizes and first touches.
//
// usage: memgrowth [--map-mib M] [--touch-pages P] [--heap-blocks B] [--wait]
//   --map-mib M        size of one anonymous mapping (default 64)
//   --touch-pages P    pages of it written once each, in order (default 1000)
//   --heap-blocks B    100 KiB malloc blocks kept live (default 200; below glibc's
//                      mmap threshold, so the heap grows with brk)
//   --wait             print `READY <pid>`, then block until SIGUSR1 arrives
//
// Call tree (every named function is noinline):
//   main -> grow::map_region(M)      one mmap(M MiB, PROT_READ|PROT_WRITE, MAP_PRIVATE|
//                                    MAP_ANONYMOUS), madvise(MADV_NOHUGEPAGE) so each
//                                    page is its own fault
//        -> grow::touch_pages(p, P)  writes one byte in each of the first P pages: P
//                                    first-touch page faults, all in touch_pages
//        -> grow::heap_grow(B)       B x malloc(102400), each written in full
//        -> grow::unmap_region(p, M) munmap of the whole mapping
//
// Last line on stdout:
// EXPECT {"program":"memgrowth","pid":P,"page_size":4096,"map_bytes":67108864,
//   "map_address":"0x…","touched_pages":1000,"heap_bytes":20480000,"unmapped_bytes":67108864}

#include <sys/mman.h>

#include "common.h"

namespace grow {

EBT_NOINLINE char* map_region(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror("mmap");
    exit(1);
  }
  madvise(p, bytes, MADV_NOHUGEPAGE);
  ebt::no_tail_call();
  return static_cast<char*>(p);
}

EBT_NOINLINE void touch_pages(char* p, long pages, long page_size) {
  for (long i = 0; i < pages; i++) {
    p[i * page_size] = 1;
    ebt::escape(p + i * page_size);
  }
  ebt::no_tail_call();
}

EBT_NOINLINE int64_t heap_grow(long blocks, std::vector<void*>* keep) {
  int64_t bytes = 0;
  for (long i = 0; i < blocks; i++) {
    void* b = malloc(102400);
    if (!b) {
      perror("malloc");
      exit(1);
    }
    memset(b, 1, 102400);
    ebt::escape(b);
    keep->push_back(b);
    bytes += 102400;
  }
  ebt::no_tail_call();
  return bytes;
}

EBT_NOINLINE void unmap_region(char* p, size_t bytes) {
  munmap(p, bytes);
  ebt::no_tail_call();
}

}  // namespace grow

int main(int argc, char** argv) {
  const char* usage = "memgrowth [--map-mib M] [--touch-pages P] [--heap-blocks B] [--wait]";
  long map_mib = 64, pages = 1000, blocks = 200;
  bool wait = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--map-mib")) {
      map_mib = long(ebt::arg_u64(argc, argv, &i, usage));
    } else if (!strcmp(argv[i], "--touch-pages")) {
      pages = long(ebt::arg_u64(argc, argv, &i, usage));
    } else if (!strcmp(argv[i], "--heap-blocks")) {
      blocks = long(ebt::arg_u64(argc, argv, &i, usage));
    } else if (!strcmp(argv[i], "--wait")) {
      wait = true;
    } else {
      ebt::usage_error(usage, "unknown argument", argv[i]);
    }
  }
  const long page_size = sysconf(_SC_PAGESIZE);
  const size_t bytes = size_t(map_mib) << 20;
  if (size_t(pages) * size_t(page_size) > bytes) ebt::usage_error(usage, "more pages than mapped", nullptr);
  if (wait) ebt::wait_for_sigusr1();
  std::vector<void*> keep;
  keep.reserve(size_t(blocks));
  char* p = grow::map_region(bytes);
  grow::touch_pages(p, pages, page_size);
  int64_t heap = grow::heap_grow(blocks, &keep);
  grow::unmap_region(p, bytes);
  ebt::Json j;
  j.begin_object()
      .str("program", "memgrowth")
      .num("pid", getpid())
      .num("page_size", page_size)
      .num("map_bytes", int64_t(bytes))
      .hex("map_address", p)
      .num("touched_pages", pages)
      .num("heap_bytes", heap)
      .num("unmapped_bytes", int64_t(bytes))
      .end_object()
      .print_expect();
  for (void* b : keep) free(b);
  return 0;
}
