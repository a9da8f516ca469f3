// malloc_loop: time malloc(64)+free in a tight loop, called at a chosen stack depth.
//
//   malloc_loop [--iters N] [--depth D] [--size BYTES] [--wait-fifo PATH]
//
// --depth D runs the loop from D frames of noinline recursion (1 = called from main), so a
// tracer that walks the user stack has D + a few frames to walk. --wait-fifo blocks on PATH
// until a byte is written to it, so a tracer attached by pid can be ready before the loop starts.
// Prints one line: "malloc_loop: iters=N depth=D size=S ns_per_malloc=X" (malloc+free pair,
// clock_gettime(CLOCK_MONOTONIC) around the loop).
//
// Build: c++ -O2 -g -fno-omit-frame-pointer -o malloc_loop malloc_loop.cpp

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <unistd.h>

namespace {

long g_iters = 2000000;
size_t g_size = 64;

// Keeps the compiler from removing a malloc/free pair or merging frames.
inline void escape(void *p) { asm volatile("" : : "r"(p) : "memory"); }

double now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) * 1e9 + double(ts.tv_nsec);
}

__attribute__((noinline)) double malloc_loop() {
  double t0 = now_ns();
  for (long i = 0; i < g_iters; i++) {
    void *p = malloc(g_size);
    escape(p);
    free(p);
  }
  double t1 = now_ns();
  return (t1 - t0) / double(g_iters);
}

// One frame per level; the work after the call keeps it from becoming a tail call.
__attribute__((noinline)) double recurse(int depth) {
  double r = depth <= 1 ? malloc_loop() : recurse(depth - 1);
  asm volatile("" : : : "memory");
  return r;
}

long parse_long(const char *flag, const char *v) {
  char *end = nullptr;
  errno = 0;
  long n = strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || n <= 0) {
    fprintf(stderr, "malloc_loop: bad value for %s: %s\n", flag, v);
    exit(2);
  }
  return n;
}

}  // namespace

int main(int argc, char **argv) {
  int depth = 1;
  const char *fifo = nullptr;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (i + 1 < argc && strcmp(a, "--iters") == 0) {
      g_iters = parse_long(a, argv[++i]);
    } else if (i + 1 < argc && strcmp(a, "--depth") == 0) {
      depth = int(parse_long(a, argv[++i]));
    } else if (i + 1 < argc && strcmp(a, "--size") == 0) {
      g_size = size_t(parse_long(a, argv[++i]));
    } else if (i + 1 < argc && strcmp(a, "--wait-fifo") == 0) {
      fifo = argv[++i];
    } else {
      fprintf(stderr,
              "usage: malloc_loop [--iters N] [--depth D] [--size BYTES] [--wait-fifo PATH]\n");
      return 2;
    }
  }
  if (fifo != nullptr) {
    int fd = open(fifo, O_RDONLY);
    if (fd < 0) {
      perror("malloc_loop: open fifo");
      return 1;
    }
    char c;
    if (read(fd, &c, 1) != 1) {
      fprintf(stderr, "malloc_loop: fifo closed before the start signal\n");
      return 1;
    }
    close(fd);
  }
  double ns = recurse(depth);
  printf("malloc_loop: iters=%ld depth=%d size=%zu ns_per_malloc=%.1f\n", g_iters, depth, g_size,
         ns);
  return 0;
}
