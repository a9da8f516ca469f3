// Helpers shared by the ebtrace test programs: argument parsing, the
// `--wait` handshake, optimizer barriers, busy-waiting and the one-line
// `EXPECT {json}` summary every program prints last.
//
// Header-only on purpose: each program is a single translation unit so the
// Rust side (`testdata/src/lib.rs`) can build it with one g++ call.
#pragma once

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <string>
#include <vector>

// Every function a test looks for in a stack carries this. `noipa` implies
// noinline and noclone and also stops identical-code folding and
// interprocedural assumptions, so each named frame exists exactly once
// under its plain name (no `.constprop.0` / `.isra.0` clones).
#define EBT_NOINLINE __attribute__((noinline, noipa))

namespace ebt {

// Makes the optimizer assume `p` (and all memory) is read by unknown code,
// so an allocation whose pointer is passed here cannot be elided.
inline void escape(const void* p) { asm volatile("" : : "g"(p) : "memory"); }

// Placed after the last call of a function so that call is not turned into
// a sibling call (a jmp), which would drop the caller's frame from stacks.
inline void no_tail_call() { asm volatile("" ::: "memory"); }

inline int64_t now_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Busy-waits (stays on CPU) for `us` microseconds. Inlined into the caller so
// CPU samples land in the caller's distinctively named frame.
__attribute__((always_inline)) inline void spin_for_us(int64_t us) {
  const int64_t end = now_ns() + us * 1000;
  while (now_ns() < end) {
    asm volatile("" ::: "memory");
  }
}

inline long gettid_() { return syscall(SYS_gettid); }

[[noreturn]] inline void usage_error(const char* usage, const char* msg, const char* arg) {
  fprintf(stderr, "error: %s%s%s\nusage: %s\n", msg, arg ? ": " : "", arg ? arg : "", usage);
  exit(2);
}

// Parses the value after flag argv[*i] as an unsigned integer and advances *i.
inline uint64_t arg_u64(int argc, char** argv, int* i, const char* usage) {
  if (*i + 1 >= argc) usage_error(usage, "missing value for", argv[*i]);
  const char* v = argv[++*i];
  char* end = nullptr;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || v[0] == '-') usage_error(usage, "not a number", v);
  return x;
}

inline double arg_f64(int argc, char** argv, int* i, const char* usage) {
  if (*i + 1 >= argc) usage_error(usage, "missing value for", argv[*i]);
  const char* v = argv[++*i];
  char* end = nullptr;
  errno = 0;
  double x = strtod(v, &end);
  if (errno != 0 || end == v || *end != '\0' || !(x >= 0)) usage_error(usage, "not a number", v);
  return x;
}

// `--wait`: SIGUSR1 is blocked *before* READY is printed, so a signal sent
// as soon as the tracer reads READY stays pending instead of killing us.
// Must run before any thread is created. The previous mask is restored so a
// later exec (forker --exec) starts with the usual mask.
inline void wait_for_sigusr1() {
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set, &old);
  printf("READY %d\n", int(getpid()));
  fflush(stdout);
  int sig = 0;
  while (sigwait(&set, &sig) != 0 || sig != SIGUSR1) {
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

// Minimal JSON writer for the EXPECT line. `key` is null for array elements
// and the top-level object.
class Json {
 public:
  Json& begin_object(const char* key = nullptr) {
    prefix(key);
    s_ += '{';
    first_.push_back(true);
    return *this;
  }
  Json& end_object() {
    s_ += '}';
    first_.pop_back();
    return *this;
  }
  Json& begin_array(const char* key) {
    prefix(key);
    s_ += '[';
    first_.push_back(true);
    return *this;
  }
  Json& end_array() {
    s_ += ']';
    first_.pop_back();
    return *this;
  }
  Json& num(const char* key, int64_t v) {
    prefix(key);
    s_ += std::to_string(v);
    return *this;
  }
  Json& num(int64_t v) { return num(nullptr, v); }
  Json& real(const char* key, double v) {
    prefix(key);
    char buf[64];
    snprintf(buf, sizeof buf, "%.6g", v);
    s_ += buf;
    return *this;
  }
  Json& str(const char* key, const char* v) {
    prefix(key);
    quote(v);
    return *this;
  }
  Json& str(const char* v) { return str(nullptr, v); }
  Json& hex(const char* key, const void* p) {
    char buf[32];
    snprintf(buf, sizeof buf, "0x%lx", (unsigned long)(uintptr_t)p);
    return str(key, buf);
  }
  Json& null(const char* key) {
    prefix(key);
    s_ += "null";
    return *this;
  }

  // Prints `EXPECT <json>` as one line and flushes: the last thing a
  // program writes to stdout (forker --exec: the last before exec).
  void print_expect() {
    printf("EXPECT %s\n", s_.c_str());
    fflush(stdout);
  }

 private:
  void prefix(const char* key) {
    if (!first_.empty()) {
      if (!first_.back()) s_ += ',';
      first_.back() = false;
    }
    if (key) {
      quote(key);
      s_ += ':';
    }
  }
  void quote(const char* v) {
    s_ += '"';
    for (const char* c = v; *c; ++c) {
      unsigned char u = (unsigned char)*c;
      if (u == '"' || u == '\\') {
        s_ += '\\';
        s_ += char(u);
      } else if (u < 0x20) {
        char buf[8];
        snprintf(buf, sizeof buf, "\\u%04x", u);
        s_ += buf;
      } else {
        s_ += char(u);
      }
    }
    s_ += '"';
  }

  std::string s_;
  std::vector<bool> first_;
};

// Statistics for one (calling function, allocator symbol) pair, written as
//   {"calls":n,"bytes":b[,"size":s]}
// where `size` appears only when every call requested the same size.
struct Site {
  int64_t calls = 0;
  int64_t bytes = 0;
  int64_t size = -1;  // -1: no call yet; -2: sizes differ

  void add(int64_t n) {
    calls += 1;
    bytes += n;
    size = (size == -1 || size == n) ? n : -2;
  }
  // Writes the fields; the caller opened the object and closes it, so it
  // can append site-specific fields.
  void write_fields(Json& j) const {
    j.num("calls", calls).num("bytes", bytes);
    if (size >= 0) j.num("size", size);
  }
};

}  // namespace ebt
