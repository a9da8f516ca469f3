// selfstack: takes what `ebrec --stack-mode dwarf` takes at an event — rip, rsp, rbp and
// the top of the user stack — from inside itself, deep in call chains that cross libc and
// libstdc++ (built without frame pointers), together with glibc's backtrace() at the same
// point (libgcc's CFI unwinder), so the offline unwinder can be checked against it
// without BPF.
//
// Captures (each ends in capture(NAME), which also calls backtrace()):
//   "qsort":     main → run_scenarios → via_function → std::function<void(int)> →
//                level_lambda → via_qsort → qsort (libc: qsort_r, msort_with_tmp…) →
//                compare → capture
//   "call_once": main → run_scenarios → via_call_once → std::call_once → pthread_once
//                (libc: __pthread_once_slow) → the callback libstdc++'s header passes
//                it → lambda → once_body → capture
//   "signal":    main → run_scenarios → via_signal → raise (libc) → [signal frame,
//                __restore_rt] → on_signal → capture
//   "thread":    clone3 → start_thread (libc) → execute_native_thread_routine
//                (libstdc++) → thread_main → deep(3) → deep(2) → deep(1) → deep(0) →
//                capture
//   "fault":     main → run_scenarios → via_fault → selfstack_fault_first, whose first
//                instruction faults → [signal frame] → on_segv → capture (then
//                siglongjmp back). The byte before the faulting instruction belongs to
//                another function with another CFA rule, so an unwinder that looks up
//                `pc - 1` after a signal frame (right for return addresses, wrong for an
//                interrupted instruction) goes astray.
//
// Options:
//   --out DIR    write DIR/NAME.stack (the bytes from rsp up) and DIR/NAME.maps
//                (/proc/self/maps at the capture) for each capture
//   --bytes N    copy at most N bytes of stack (default 65536, at most 262144); never past
//                the end of the stack's mapping
//   --wait       print READY and wait for SIGUSR1 first
//
// EXPECT {"program":"selfstack","pid":P,"bytes":N,"captures":[{"name","rip","rsp","rbp",
//   "size","stack","maps","backtrace":["0x…",…]}]}; "stack"/"maps" are null without --out.
// backtrace[0] is the return address into capture() after its backtrace() call, so it
// differs from "rip"; backtrace[1…] are the frames an unwinder must find from the copy.
#include <execinfo.h>
#include <fcntl.h>
#include <setjmp.h>

#include <functional>
#include <mutex>
#include <thread>

#include "common.h"

namespace selfstack {

const char kUsage[] = "selfstack [--out DIR] [--bytes N] [--wait]";
constexpr size_t kMaxBytes = 262144;
constexpr int kMaxCaptures = 8;
constexpr int kMaxFrames = 256;

struct Capture {
  const char* name = nullptr;
  uint64_t rip = 0, rsp = 0, rbp = 0;
  size_t size = 0;
  int frames = 0;
  void* backtrace[kMaxFrames];
  std::string maps;
};

size_t g_bytes = 65536;
Capture g_captures[kMaxCaptures];
int g_count = 0;
unsigned char g_stack[kMaxCaptures][kMaxBytes];
char g_maps[1 << 16];

// Reads /proc/self/maps into g_maps with plain system calls (no allocation: capture()
// may run in a signal handler) and returns its length.
size_t read_maps() {
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  size_t n = 0;
  while (n + 1 < sizeof g_maps) {
    ssize_t r = read(fd, g_maps + n, sizeof g_maps - 1 - n);
    if (r <= 0) break;
    n += size_t(r);
  }
  close(fd);
  g_maps[n] = '\0';
  return n;
}

// The end of the mapping that holds `addr`, from g_maps; 0 if none does.
uint64_t mapping_end(uint64_t addr) {
  for (const char* line = g_maps; *line;) {
    char* end = nullptr;
    uint64_t lo = strtoull(line, &end, 16);
    if (*end == '-') {
      uint64_t hi = strtoull(end + 1, nullptr, 16);
      if (lo <= addr && addr < hi) return hi;
    }
    const char* nl = strchr(line, '\n');
    if (!nl) break;
    line = nl + 1;
  }
  return 0;
}

// Takes the registers, then the stack bytes from rsp up and glibc's backtrace. Calls
// made after the registers are read only write below rsp, so the copy is the stack as it
// was at `rip`.
EBT_NOINLINE void capture(const char* name) {
  uint64_t rip, rsp, rbp;
  asm volatile(
      "lea 0(%%rip), %0\n\t"
      "mov %%rsp, %1\n\t"
      "mov %%rbp, %2"
      : "=r"(rip), "=r"(rsp), "=r"(rbp));
  if (g_count == kMaxCaptures) abort();
  Capture& c = g_captures[g_count];
  size_t maps_len = read_maps();
  uint64_t end = mapping_end(rsp);
  size_t room = end > rsp ? size_t(end - rsp) : 0;
  c.size = room < g_bytes ? room : g_bytes;
  memcpy(g_stack[g_count], reinterpret_cast<const void*>(rsp), c.size);
  c.frames = backtrace(c.backtrace, kMaxFrames);
  c.name = name;
  c.rip = rip;
  c.rsp = rsp;
  c.rbp = rbp;
  c.maps.assign(g_maps, maps_len);
  g_count++;
  ebt::no_tail_call();
}

// --- qsort, through std::function ---

bool g_in_qsort = false;

EBT_NOINLINE int compare(const void* a, const void* b) {
  if (g_in_qsort) {
    g_in_qsort = false;
    capture("qsort");
  }
  int x = *static_cast<const int*>(a), y = *static_cast<const int*>(b);
  return (x > y) - (x < y);
}

EBT_NOINLINE void via_qsort(int n) {
  int values[16];
  for (int i = 0; i < 16; i++) values[i] = (i * 7 + n) % 16;
  g_in_qsort = true;
  qsort(values, 16, sizeof values[0], compare);
  ebt::escape(values);
  ebt::no_tail_call();
}

EBT_NOINLINE void level_lambda(int n) {
  via_qsort(n + 1);
  ebt::no_tail_call();
}

EBT_NOINLINE void via_function(int n) {
  std::function<void(int)> f = [](int d) { level_lambda(d); };
  // The call goes through the stored invoker, not an inlined lambda.
  ebt::escape(&f);
  f(n);
  ebt::no_tail_call();
}

// --- std::call_once: a callback under libc's pthread_once ---

std::once_flag g_once;

EBT_NOINLINE void once_body() {
  capture("call_once");
  ebt::no_tail_call();
}

EBT_NOINLINE void via_call_once() {
  std::call_once(g_once, [] { once_body(); });
  ebt::no_tail_call();
}

// --- a signal handler: the signal frame of __restore_rt ---

void on_signal(int) {
  capture("signal");
  ebt::no_tail_call();
}

EBT_NOINLINE void via_signal() {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR2, &sa, nullptr);
  raise(SIGUSR2);
  ebt::no_tail_call();
}

// --- a fault at a function's first instruction ---

}  // namespace selfstack

// selfstack_before's last byte is under CFA = rsp + 16; selfstack_fault_first starts
// right after it, at CFA = rsp + 8, and faults at once (reads address 0).
extern "C" void selfstack_fault_first();
asm(R"(
  .text
  .p2align 4
  .type selfstack_before, @function
selfstack_before:
  .cfi_startproc
  push %rbx
  .cfi_adjust_cfa_offset 8
  .cfi_offset %rbx, -16
  ud2
  .cfi_endproc
  .size selfstack_before, .-selfstack_before
  .globl selfstack_fault_first
  .type selfstack_fault_first, @function
selfstack_fault_first:
  .cfi_startproc
  movq 0, %rax
  ret
  .cfi_endproc
  .size selfstack_fault_first, .-selfstack_fault_first
)");

namespace selfstack {

sigjmp_buf g_jump;
struct sigaction g_old_segv;

void on_segv(int) {
  capture("fault");
  siglongjmp(g_jump, 1);
}

EBT_NOINLINE void via_fault() {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_segv;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &g_old_segv);
  if (sigsetjmp(g_jump, 1) == 0) selfstack_fault_first();
  sigaction(SIGSEGV, &g_old_segv, nullptr);
  ebt::no_tail_call();
}

// --- a thread: libstdc++'s execute_native_thread_routine, libc's start_thread ---

EBT_NOINLINE void deep(int n) {
  if (n == 0) {
    capture("thread");
  } else {
    deep(n - 1);
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void thread_main() {
  deep(3);
  ebt::no_tail_call();
}

EBT_NOINLINE void run_scenarios() {
  via_function(1);
  via_call_once();
  via_signal();
  std::thread t(thread_main);
  t.join();
  via_fault();
  ebt::no_tail_call();
}

bool write_file(const std::string& path, const void* data, size_t n) {
  FILE* f = fopen(path.c_str(), "wb");
  if (!f) return false;
  bool ok = fwrite(data, 1, n, f) == n;
  return fclose(f) == 0 && ok;
}

}  // namespace selfstack

using namespace selfstack;

int main(int argc, char** argv) {
  const char* out = nullptr;
  bool wait = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--out") == 0) {
      if (i + 1 >= argc) ebt::usage_error(kUsage, "missing value for", argv[i]);
      out = argv[++i];
    } else if (strcmp(argv[i], "--bytes") == 0) {
      g_bytes = ebt::arg_u64(argc, argv, &i, kUsage);
      if (g_bytes > kMaxBytes) ebt::usage_error(kUsage, "too many bytes", argv[i]);
    } else if (strcmp(argv[i], "--wait") == 0) {
      wait = true;
    } else {
      ebt::usage_error(kUsage, "unknown argument", argv[i]);
    }
  }
  if (wait) ebt::wait_for_sigusr1();
  // The first backtrace() loads libgcc_s: do it now, not inside a capture.
  void* warm[4];
  backtrace(warm, 4);

  run_scenarios();

  ebt::Json j;
  j.begin_object().str("program", "selfstack").num("pid", getpid()).num("bytes", int64_t(g_bytes));
  j.begin_array("captures");
  for (int i = 0; i < g_count; i++) {
    const Capture& c = g_captures[i];
    j.begin_object().str("name", c.name);
    j.hex("rip", reinterpret_cast<void*>(c.rip));
    j.hex("rsp", reinterpret_cast<void*>(c.rsp));
    j.hex("rbp", reinterpret_cast<void*>(c.rbp));
    j.num("size", int64_t(c.size));
    if (out) {
      std::string base = std::string(out) + "/" + c.name;
      if (!write_file(base + ".stack", g_stack[i], c.size) ||
          !write_file(base + ".maps", c.maps.data(), c.maps.size())) {
        fprintf(stderr, "error: cannot write %s.*: %s\n", base.c_str(), strerror(errno));
        return 1;
      }
      j.str("stack", (base + ".stack").c_str()).str("maps", (base + ".maps").c_str());
    } else {
      j.null("stack").null("maps");
    }
    j.begin_array("backtrace");
    for (int k = 0; k < c.frames; k++) j.hex(nullptr, c.backtrace[k]);
    j.end_array().end_object();
  }
  j.end_array().end_object();
  j.print_expect();
  return 0;
}
