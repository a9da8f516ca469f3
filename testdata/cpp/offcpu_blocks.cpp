// offcpu_blocks: threads that block in known functions for known times, and a
// ping-pong of short blocks, for checking off-CPU time (ebrec --offcpu): the
// blocks' durations, their user and kernel stacks, the waker and its stack,
// and that short blocks are dropped.
//
// usage: offcpu_blocks [--naps N] [--ms M] [--rounds R] [--writer-ms W] [--pingpong P] [--wait]
//   --naps N       calls of offcpu::sleeper_a (default 5)
//   --ms M         milliseconds each sleeper_a sleeps (default 20)
//   --rounds R     pipe rounds of reader_b / writer_c (default 3)
//   --writer-ms W  milliseconds writer_c sleeps, once reader_b is about to read, before
//                  it writes the byte that wakes reader_b (default 25)
//   --pingpong P   round trips of the ping-pong, before the rest (default 20000)
//   --wait         print `READY <pid>`, then block until SIGUSR1 arrives
//
// The syscalls are made by inline `syscall` instructions in the named
// functions themselves, so each function is the leaf user frame of its block
// in every stack mode (no libc wrapper without a frame pointer in between).
//
// Call tree (every named function is noinline and not a tail call):
//   main -> run_offcpu
//     phase 1, two threads: offcpu::pingpong_d and offcpu::pingpong_e: P round trips
//       over two pipes, each a 1-byte write and a blocking 1-byte read: blocks of
//       microseconds (both threads are off CPU ~2P times in all)
//     phase 2, three threads at once:
//       A: offcpu::sleeper_loop -> N x offcpu::sleeper_a(M): nanosleep(M ms)
//       B: offcpu::reader_loop  -> R x offcpu::reader_b(fd): read(fd, 1 byte), blocks
//       C: offcpu::writer_loop  -> R x offcpu::writer_c(fd, W): waits until B is about
//          to read, nanosleep(W ms) (a block of C's own, in writer_c), then write(fd,
//          1 byte): that wakes B, so B's waker is C, with writer_c in its stack
//
// Last line on stdout (one line; shown wrapped here):
// EXPECT {"program":"offcpu_blocks","pid":P,"ms":M,"writer_ms":W,
//   "sleeper":{"tid":A,"naps":N,"durations_ns":[...]},
//   "reader":{"tid":B,"rounds":R,"durations_ns":[...]},
//   "writer":{"tid":C},"pingpong":{"tids":[D,E],"round_trips":P}}
// where each duration is measured by the caller around the call with
// CLOCK_MONOTONIC. Each thread names itself (pthread_setname_np) as it starts: sleeper,
// reader, writer, pingpong-1, pingpong-2 (the thread-name reports fold the last two to
// pingpong-*).

#include <pthread.h>

#include <atomic>
#include <thread>

#include "common.h"

namespace offcpu {

__attribute__((always_inline)) inline long raw_syscall3(long nr, long a, long b, long c) {
  long ret;
  asm volatile("syscall"
               : "=a"(ret)
               : "a"(nr), "D"(a), "S"(b), "d"(c)
               : "rcx", "r11", "memory");
  return ret;
}

__attribute__((always_inline)) inline void raw_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (raw_syscall3(SYS_nanosleep, long(&ts), long(&ts), 0) == -EINTR) {
  }
}

EBT_NOINLINE void sleeper_a(int ms) {
  asm volatile("" ::: "memory");
  raw_sleep_ms(ms);
  ebt::no_tail_call();
}

EBT_NOINLINE void reader_b(int fd) {
  char c;
  while (raw_syscall3(SYS_read, fd, long(&c), 1) == -EINTR) {
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void writer_c(int fd, int ms) {
  raw_sleep_ms(ms);
  char c = 'x';
  raw_syscall3(SYS_write, fd, long(&c), 1);
  ebt::no_tail_call();
}

EBT_NOINLINE void pingpong_d(int in, int out, int64_t trips) {
  char c = 'd';
  for (int64_t i = 0; i < trips; i++) {
    raw_syscall3(SYS_write, out, long(&c), 1);
    raw_syscall3(SYS_read, in, long(&c), 1);
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void pingpong_e(int in, int out, int64_t trips) {
  char c = 'e';
  for (int64_t i = 0; i < trips; i++) {
    raw_syscall3(SYS_read, in, long(&c), 1);
    raw_syscall3(SYS_write, out, long(&c), 1);
  }
  ebt::no_tail_call();
}

std::atomic<int64_t> reading{0};  // rounds reader_b has started

EBT_NOINLINE void sleeper_loop(int64_t naps, int ms, long* tid, std::vector<int64_t>* d) {
  pthread_setname_np(pthread_self(), "sleeper");
  *tid = ebt::gettid_();
  for (int64_t i = 0; i < naps; i++) {
    const int64_t t0 = ebt::now_ns();
    sleeper_a(ms);
    d->push_back(ebt::now_ns() - t0);
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void reader_loop(int fd, int64_t rounds, long* tid, std::vector<int64_t>* d) {
  pthread_setname_np(pthread_self(), "reader");
  *tid = ebt::gettid_();
  for (int64_t r = 0; r < rounds; r++) {
    const int64_t t0 = ebt::now_ns();
    reading.store(r + 1);
    reader_b(fd);
    d->push_back(ebt::now_ns() - t0);
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void writer_loop(int fd, int64_t rounds, int ms, long* tid) {
  pthread_setname_np(pthread_self(), "writer");
  *tid = ebt::gettid_();
  for (int64_t r = 0; r < rounds; r++) {
    while (reading.load() <= r) {
      std::this_thread::yield();
    }
    writer_c(fd, ms);
  }
  ebt::no_tail_call();
}

}  // namespace offcpu

EBT_NOINLINE void run_offcpu(int64_t naps, int ms, int64_t rounds, int writer_ms,
                             int64_t trips) {
  int de[2], ed[2], rw[2];
  if (pipe(de) != 0 || pipe(ed) != 0 || pipe(rw) != 0) {
    perror("pipe");
    exit(1);
  }
  long tid_d = 0, tid_e = 0;
  {
    std::thread d([&] {
      pthread_setname_np(pthread_self(), "pingpong-1");
      tid_d = ebt::gettid_();
      offcpu::pingpong_d(ed[0], de[1], trips);
    });
    std::thread e([&] {
      pthread_setname_np(pthread_self(), "pingpong-2");
      tid_e = ebt::gettid_();
      offcpu::pingpong_e(de[0], ed[1], trips);
    });
    d.join();
    e.join();
  }
  long tid_a = 0, tid_b = 0, tid_c = 0;
  std::vector<int64_t> naps_ns, reads_ns;
  std::thread a(offcpu::sleeper_loop, naps, ms, &tid_a, &naps_ns);
  std::thread b(offcpu::reader_loop, rw[0], rounds, &tid_b, &reads_ns);
  std::thread c(offcpu::writer_loop, rw[1], rounds, writer_ms, &tid_c);
  a.join();
  b.join();
  c.join();

  ebt::Json j;
  j.begin_object()
      .str("program", "offcpu_blocks")
      .num("pid", getpid())
      .num("ms", ms)
      .num("writer_ms", writer_ms)
      .begin_object("sleeper")
      .num("tid", tid_a)
      .num("naps", naps)
      .begin_array("durations_ns");
  for (int64_t v : naps_ns) j.num(v);
  j.end_array()
      .end_object()
      .begin_object("reader")
      .num("tid", tid_b)
      .num("rounds", rounds)
      .begin_array("durations_ns");
  for (int64_t v : reads_ns) j.num(v);
  j.end_array()
      .end_object()
      .begin_object("writer")
      .num("tid", tid_c)
      .end_object()
      .begin_object("pingpong")
      .begin_array("tids")
      .num(tid_d)
      .num(tid_e)
      .end_array()
      .num("round_trips", trips)
      .end_object()
      .end_object();
  j.print_expect();
}

int main(int argc, char** argv) {
  const char* usage =
      "offcpu_blocks [--naps N] [--ms M] [--rounds R] [--writer-ms W] [--pingpong P] [--wait]";
  int64_t naps = 5, ms = 20, rounds = 3, writer_ms = 25, trips = 20000;
  bool wait = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--naps") == 0) {
      naps = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--ms") == 0) {
      ms = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--rounds") == 0) {
      rounds = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--writer-ms") == 0) {
      writer_ms = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--pingpong") == 0) {
      trips = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--wait") == 0) {
      wait = true;
    } else {
      ebt::usage_error(usage, "unknown argument", argv[i]);
    }
  }
  if (ms > 60000 || writer_ms > 60000) ebt::usage_error(usage, "--ms must be at most 60000", nullptr);
  if (naps > 10000 || rounds > 10000) ebt::usage_error(usage, "--naps, --rounds: at most 10000", nullptr);
  if (wait) ebt::wait_for_sigusr1();
  run_offcpu(naps, int(ms), rounds, int(writer_ms), trips);
  return 0;
}
