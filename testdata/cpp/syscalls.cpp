// syscalls: one thread making syscalls of known numbers, kinds and durations, for
// checking syscall latency (counts per syscall, durations, the calling function)
// and block I/O (the writes an fsync causes, on a known device).
//
// usage: syscalls [--sleeps N] [--sleep-ms MS] [--fast F] [--fsyncs M] [--dir DIR]
//                 [--pairs P] [--wait]
//   --sleeps N     calls of sys::sleeper (default 10)
//   --sleep-ms MS  milliseconds each sleeper sleeps (default 5)
//   --fast F       getppid syscalls made by sys::fast_calls (default 100000)
//   --fsyncs M     calls of sys::syncer (default 0)
//   --dir DIR      where the file sys::syncer writes is created (default: the current
//                  directory). For block I/O, pass a directory on a real block device
//                  (e.g. under /var/tmp), not a tmpfs.
//   --pairs P      calls of sys::nap_a and then sys::nap_b, P each, alternating (default
//                  0); each calls sys::sleeper(MS). The two are the same code (apart from
//                  a constant) with the same frame size, called from the same place of
//                  sys::pair_loop: sleeper's syscall is made at the same pc and with the
//                  same stack and frame pointers under either, and only the return
//                  address into nap_a or nap_b on the stack tells them apart
//   --wait         print `READY <pid>`, then block until SIGUSR1 arrives
//
// The syscalls are made by inline `syscall` instructions in the named functions
// themselves, so each function is the leaf user frame of its syscalls in every
// stack mode (no libc wrapper without a frame pointer in between), and each sets
// up rbp on entry (frame_on_entry), so a frame-pointer walk from the syscall
// finds its caller too. Only sys::fast_calls makes getppid (nr 110), only
// sys::sleeper makes nanosleep (nr 35, not glibc's clock_nanosleep), and only
// sys::syncer makes fsync (nr 74) and the write (nr 1) of the file; every other
// syscall of the program is made by libc.
//
// Call tree (every named function is noinline and not a tail call), all on the
// main thread, in this order:
//   main -> run_syscalls
//     phase 1: sys::fast_calls(F): F x getppid
//     phase 2: sys::sleep_loop -> N x sys::sleeper(MS): one nanosleep(MS ms)
//     phase 2b, only when P > 0: sys::pair_loop -> P x (sys::nap_a(MS) -> sys::sleeper(MS),
//       then sys::nap_b(MS) -> sys::sleeper(MS))
//     phase 3, only when M > 0: the file DIR/syscalls.<pid>.tmp is created
//       (O_CREAT|O_EXCL), then sys::sync_loop -> M x sys::syncer(fd): one write of
//       4096 bytes (appending: the file grows by 4096 each time), then one fsync;
//       then the file is closed and removed.
//
// Last line on stdout (one line; shown wrapped here):
// EXPECT {"program":"syscalls","pid":P,"tid":T,"sleeps":N,"sleep_ms":MS,
//   "sleep_durations_ns":[...],"fast":F,"fsyncs":M,"fsync_durations_ns":[...],
//   "file":"DIR/syscalls.<pid>.tmp","dev":"MAJ:MIN","bytes_per_fsync":4096,"pairs":P}
// where T is the thread making all of the calls above (the main thread, T == P),
// each sleep duration is measured by sys::sleep_loop around the call of
// sys::sleeper, each fsync duration by sys::syncer around the fsync syscall alone
// (both with CLOCK_MONOTONIC), and "dev" is the file's st_dev as major:minor in
// decimal (on ext4 or xfs the disk's device, as in /proc/partitions and block
// tracepoints; on btrfs or overlayfs an anonymous 0:N instead). With M == 0 no
// file is made: "file" and "dev" are null and fsync_durations_ns is empty.

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "common.h"

namespace sys {

constexpr int64_t kBytesPerFsync = 4096;

__attribute__((always_inline)) inline long raw_syscall3(long nr, long a, long b, long c) {
  long ret;
  asm volatile("syscall"
               : "=a"(ret)
               : "a"(nr), "D"(a), "S"(b), "d"(c)
               : "rcx", "r11", "memory");
  return ret;
}

// Called first in every function that makes inline syscalls. Taking the frame's
// address makes g++ set up rbp on entry: otherwise a function whose syscall path
// needs no stack gets no frame (a leaf) or one set up only on its error path
// (shrink-wrapping), even with -fno-omit-frame-pointer, and a frame-pointer walk
// from its syscall would skip its caller.
__attribute__((always_inline)) inline void frame_on_entry() {
  ebt::escape(__builtin_frame_address(0));
}

EBT_NOINLINE void fast_calls(int64_t n) {
  frame_on_entry();
  for (int64_t i = 0; i < n; i++) {
    raw_syscall3(SYS_getppid, 0, 0, 0);
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void sleeper(int ms) {
  frame_on_entry();
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  // nanosleep writes the remaining time to ts when interrupted; nothing here
  // expects a signal, so this is one call.
  while (raw_syscall3(SYS_nanosleep, long(&ts), long(&ts), 0) == -EINTR) {
  }
  ebt::no_tail_call();
}

// Returns the duration of the fsync syscall.
EBT_NOINLINE int64_t syncer(int fd) {
  frame_on_entry();
  static char block[kBytesPerFsync];
  memset(block, 's', sizeof block);
  long n = raw_syscall3(SYS_write, fd, long(block), long(sizeof block));
  if (n != long(sizeof block)) {
    fprintf(stderr, "syscalls: write returned %ld\n", n);
    exit(1);
  }
  const int64_t t0 = ebt::now_ns();
  long r = raw_syscall3(SYS_fsync, fd, 0, 0);
  const int64_t t1 = ebt::now_ns();
  if (r != 0) {
    fprintf(stderr, "syscalls: fsync: %s\n", strerror(int(-r)));
    exit(1);
  }
  ebt::no_tail_call();
  return t1 - t0;
}

EBT_NOINLINE void sleep_loop(int64_t n, int ms, std::vector<int64_t>* d) {
  for (int64_t i = 0; i < n; i++) {
    const int64_t t0 = ebt::now_ns();
    sleeper(ms);
    d->push_back(ebt::now_ns() - t0);
  }
  ebt::no_tail_call();
}

// The same code but for the constant each passes to escape (so that no pass folds them).
EBT_NOINLINE void nap_a(int ms) {
  frame_on_entry();
  ebt::escape(reinterpret_cast<const void*>(uintptr_t(0xa)));
  sleeper(ms);
  ebt::no_tail_call();
}

EBT_NOINLINE void nap_b(int ms) {
  frame_on_entry();
  ebt::escape(reinterpret_cast<const void*>(uintptr_t(0xb)));
  sleeper(ms);
  ebt::no_tail_call();
}

EBT_NOINLINE void pair_loop(int64_t n, int ms) {
  for (int64_t i = 0; i < n; i++) {
    nap_a(ms);
    nap_b(ms);
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void sync_loop(int fd, int64_t n, std::vector<int64_t>* d) {
  for (int64_t i = 0; i < n; i++) {
    d->push_back(syncer(fd));
  }
  ebt::no_tail_call();
}

int64_t pairs = 0;

}  // namespace sys

EBT_NOINLINE void run_syscalls(int64_t sleeps, int sleep_ms, int64_t fast, int64_t fsyncs,
                               const char* dir) {
  const long tid = ebt::gettid_();
  std::vector<int64_t> sleep_ns, fsync_ns;
  sleep_ns.reserve(size_t(sleeps));
  fsync_ns.reserve(size_t(fsyncs));

  sys::fast_calls(fast);
  sys::sleep_loop(sleeps, sleep_ms, &sleep_ns);
  sys::pair_loop(sys::pairs, sleep_ms);

  std::string path;
  char dev[32] = "";
  if (fsyncs > 0) {
    path = std::string(dir) + "/syscalls." + std::to_string(getpid()) + ".tmp";
    int fd = open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0) {
      fprintf(stderr, "syscalls: cannot create %s: %s\n", path.c_str(), strerror(errno));
      exit(1);
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
      perror("fstat");
      exit(1);
    }
    snprintf(dev, sizeof dev, "%u:%u", major(st.st_dev), minor(st.st_dev));
    sys::sync_loop(fd, fsyncs, &fsync_ns);
    close(fd);
    if (unlink(path.c_str()) != 0) {
      fprintf(stderr, "syscalls: cannot remove %s: %s\n", path.c_str(), strerror(errno));
      exit(1);
    }
  }

  ebt::Json j;
  j.begin_object()
      .str("program", "syscalls")
      .num("pid", getpid())
      .num("tid", tid)
      .num("sleeps", sleeps)
      .num("sleep_ms", sleep_ms)
      .begin_array("sleep_durations_ns");
  for (int64_t v : sleep_ns) j.num(v);
  j.end_array().num("fast", fast).num("fsyncs", fsyncs).begin_array("fsync_durations_ns");
  for (int64_t v : fsync_ns) j.num(v);
  j.end_array();
  if (fsyncs > 0) {
    j.str("file", path.c_str()).str("dev", dev);
  } else {
    j.null("file").null("dev");
  }
  j.num("bytes_per_fsync", sys::kBytesPerFsync).num("pairs", sys::pairs).end_object();
  j.print_expect();
}

int main(int argc, char** argv) {
  const char* usage =
      "syscalls [--sleeps N] [--sleep-ms MS] [--fast F] [--fsyncs M] [--dir DIR] [--pairs P] "
      "[--wait]";
  int64_t sleeps = 10, sleep_ms = 5, fast = 100000, fsyncs = 0;
  const char* dir = ".";
  bool wait = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--sleeps") == 0) {
      sleeps = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--sleep-ms") == 0) {
      sleep_ms = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--fast") == 0) {
      fast = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--fsyncs") == 0) {
      fsyncs = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--dir") == 0) {
      if (i + 1 >= argc) ebt::usage_error(usage, "missing value for", argv[i]);
      dir = argv[++i];
    } else if (strcmp(argv[i], "--pairs") == 0) {
      sys::pairs = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--wait") == 0) {
      wait = true;
    } else {
      ebt::usage_error(usage, "unknown argument", argv[i]);
    }
  }
  if (sleep_ms > 60000) ebt::usage_error(usage, "--sleep-ms must be at most 60000", nullptr);
  if (sleeps > 100000 || fsyncs > 100000 || sys::pairs > 100000) {
    ebt::usage_error(usage, "--sleeps, --fsyncs, --pairs: at most 100000", nullptr);
  }
  if (fast > (int64_t(1) << 40)) ebt::usage_error(usage, "--fast: at most 2^40", nullptr);
  if (wait) ebt::wait_for_sigusr1();
  run_syscalls(sleeps, int(sleep_ms), fast, fsyncs, dir);
  return 0;
}
