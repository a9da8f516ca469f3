// tcp_conns: a loopback TCP server and client making a known number of
// connections with known byte counts and distinct, known lifetimes, then one
// refused connect, for checking TCP connection tracking (connects, accepts,
// lifetimes, bytes, state changes, resets) and the functions that made them.
//
// usage: tcp_conns [--conns K] [--hold-ms H] [--bytes B] [--wait]
//   --conns K    connections the client makes, one after another (default 5)
//   --hold-ms H  the client holds connection i (from 0) open H*(i+1) ms after its
//                exchange, before closing it (default 20)
//   --bytes B    bytes the client sends on each connection; the server answers
//                with B/2 (default 10000)
//   --wait       print `READY <pid>`, then block until SIGUSR1 arrives
//
// The accept4 and connect syscalls are made by inline `syscall` instructions in
// tcpt::accept_one and tcpt::connect_one / tcpt::connect_refused, so each is the
// leaf user frame of its syscall in every stack mode; each sets up rbp on entry
// (frame_on_entry), so a frame-pointer walk from the syscall finds its caller too.
//
// Call tree (every named function is noinline and not a tail call):
//   main -> run_tcp: main makes the listening socket (127.0.0.1, port 0: an
//     ephemeral port, LISTEN_PORT below), then starts two threads and waits:
//     server: tcpt::server_loop -> K x { tcpt::accept_one: accept4(SOCK_CLOEXEC);
//               read exactly B bytes; write B/2 bytes; read until the client's
//               close (EOF); close }
//     client: tcpt::client_loop -> K x tcpt::connect_one(i): socket, connect to
//               LISTEN_PORT, send B bytes, read B/2 bytes, sleep H*(i+1) ms, close
//             then tcpt::connect_refused: binds a socket to 127.0.0.1 port 0, reads
//               its port RP, closes it, then connects a new socket to RP, which
//               nothing listens on: connect fails with ECONNREFUSED (111)
//   Connections are strictly sequential: the client starts connection i+1 only
//   after closing i. The client closes first (active close: the client's side
//   ends in TIME_WAIT), then the server sees EOF and closes its side.
//
// Last line on stdout (one line; shown wrapped here):
// EXPECT {"program":"tcp_conns","pid":P,"port":LISTEN_PORT,"conns":K,
//   "bytes_sent":B,"bytes_received":B/2,"hold_ms":[H,2H,..,KH],
//   "lifetimes_ns":[...],"client_ports":[...],"client_tid":TC,"server_tid":TS,
//   "refused_port":RP,"refused_errno":111}
// where bytes_sent/bytes_received are per connection, from the client's side;
// lifetimes_ns[i] is measured by connect_one with CLOCK_MONOTONIC from just before
// the connect syscall to just after close returns; client_ports[i] is the local
// (ephemeral) port of the client's connection i, so a record can be matched to
// its connection by 4-tuple. All addresses are 127.0.0.1.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <thread>

#include "common.h"

namespace tcpt {

__attribute__((always_inline)) inline long raw_syscall3(long nr, long a, long b, long c) {
  long ret;
  asm volatile("syscall"
               : "=a"(ret)
               : "a"(nr), "D"(a), "S"(b), "d"(c)
               : "rcx", "r11", "memory");
  return ret;
}

__attribute__((always_inline)) inline long raw_syscall4(long nr, long a, long b, long c,
                                                        long d) {
  long ret;
  register long r10 asm("r10") = d;
  asm volatile("syscall"
               : "=a"(ret)
               : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10)
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

[[noreturn]] EBT_NOINLINE void die(const char* what, int err) {
  fprintf(stderr, "tcp_conns: %s: %s\n", what, strerror(err));
  exit(1);
}

EBT_NOINLINE sockaddr_in loopback(uint16_t port) {
  sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

EBT_NOINLINE uint16_t local_port(int fd) {
  sockaddr_in a;
  socklen_t len = sizeof a;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) die("getsockname", errno);
  return ntohs(a.sin_port);
}

EBT_NOINLINE void read_exactly(int fd, char* buf, int64_t n) {
  for (int64_t got = 0; got < n;) {
    ssize_t r = read(fd, buf + got, size_t(n - got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) die("read", errno);
    if (r == 0) die("read", ECONNRESET);
    got += r;
  }
}

EBT_NOINLINE void write_all(int fd, const char* buf, int64_t n) {
  for (int64_t put = 0; put < n;) {
    ssize_t r = write(fd, buf + put, size_t(n - put));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) die("write", errno);
    put += r;
  }
}

EBT_NOINLINE void sleep_ms(int64_t ms) {
  struct timespec ts = {time_t(ms / 1000), long(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

struct ClientResult {
  long tid = 0;
  std::vector<int64_t> lifetimes_ns;
  std::vector<int64_t> ports;
  int64_t refused_port = 0;
  int64_t refused_errno = 0;
};

EBT_NOINLINE int accept_one(int listen_fd) {
  frame_on_entry();
  long fd;
  do {
    fd = raw_syscall4(SYS_accept4, listen_fd, 0, 0, SOCK_CLOEXEC);
  } while (fd == -EINTR);
  if (fd < 0) die("accept4", int(-fd));
  ebt::no_tail_call();
  return int(fd);
}

EBT_NOINLINE void server_loop(int listen_fd, int64_t conns, int64_t bytes, long* tid) {
  *tid = ebt::gettid_();
  std::vector<char> buf(size_t(bytes > 0 ? bytes : 1));
  for (int64_t i = 0; i < conns; i++) {
    int fd = accept_one(listen_fd);
    read_exactly(fd, buf.data(), bytes);
    write_all(fd, buf.data(), bytes / 2);
    char c;
    for (;;) {
      ssize_t r = read(fd, &c, 1);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) die("read until EOF", errno);
      if (r == 0) break;
      die("read until EOF", EPROTO);  // the client sends nothing more
    }
    close(fd);
  }
  ebt::no_tail_call();
}

// Makes connection i and returns its lifetime: connect start to close end.
EBT_NOINLINE int64_t connect_one(uint16_t port, int64_t bytes, int64_t hold_ms,
                                 std::vector<char>* buf, int64_t* local) {
  frame_on_entry();
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) die("socket", errno);
  sockaddr_in to = loopback(port);
  const int64_t t0 = ebt::now_ns();
  long r;
  do {
    r = raw_syscall3(SYS_connect, fd, long(&to), long(sizeof to));
  } while (r == -EINTR);
  if (r != 0) die("connect", int(-r));
  *local = local_port(fd);
  write_all(fd, buf->data(), bytes);
  read_exactly(fd, buf->data(), bytes / 2);
  sleep_ms(hold_ms);
  close(fd);
  const int64_t t1 = ebt::now_ns();
  ebt::no_tail_call();
  return t1 - t0;
}

// Returns the errno of the refused connect (ECONNREFUSED) and sets *port.
EBT_NOINLINE int connect_refused(int64_t* port) {
  frame_on_entry();
  int probe = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (probe < 0) die("socket", errno);
  sockaddr_in any = loopback(0);
  if (bind(probe, reinterpret_cast<sockaddr*>(&any), sizeof any) != 0) die("bind", errno);
  const uint16_t closed = local_port(probe);
  close(probe);
  *port = closed;

  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) die("socket", errno);
  sockaddr_in to = loopback(closed);
  long r;
  do {
    r = raw_syscall3(SYS_connect, fd, long(&to), long(sizeof to));
  } while (r == -EINTR);
  close(fd);
  if (r == 0) die("connect to a closed port succeeded", 0);
  ebt::no_tail_call();
  return int(-r);
}

EBT_NOINLINE void client_loop(uint16_t port, int64_t conns, int64_t bytes, int64_t hold_ms,
                              ClientResult* out) {
  out->tid = ebt::gettid_();
  std::vector<char> buf(size_t(bytes > 0 ? bytes : 1), 'c');
  for (int64_t i = 0; i < conns; i++) {
    int64_t local = 0;
    out->lifetimes_ns.push_back(connect_one(port, bytes, hold_ms * (i + 1), &buf, &local));
    out->ports.push_back(local);
  }
  out->refused_errno = connect_refused(&out->refused_port);
  ebt::no_tail_call();
}

}  // namespace tcpt

EBT_NOINLINE void run_tcp(int64_t conns, int64_t hold_ms, int64_t bytes) {
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (lfd < 0) tcpt::die("socket", errno);
  sockaddr_in any = tcpt::loopback(0);
  if (bind(lfd, reinterpret_cast<sockaddr*>(&any), sizeof any) != 0) tcpt::die("bind", errno);
  if (listen(lfd, 16) != 0) tcpt::die("listen", errno);
  const uint16_t port = tcpt::local_port(lfd);

  long server_tid = 0;
  tcpt::ClientResult client;
  std::thread server(tcpt::server_loop, lfd, conns, bytes, &server_tid);
  std::thread cl(tcpt::client_loop, port, conns, bytes, hold_ms, &client);
  cl.join();
  server.join();
  close(lfd);

  ebt::Json j;
  j.begin_object()
      .str("program", "tcp_conns")
      .num("pid", getpid())
      .num("port", port)
      .num("conns", conns)
      .num("bytes_sent", bytes)
      .num("bytes_received", bytes / 2)
      .begin_array("hold_ms");
  for (int64_t i = 0; i < conns; i++) j.num(hold_ms * (i + 1));
  j.end_array().begin_array("lifetimes_ns");
  for (int64_t v : client.lifetimes_ns) j.num(v);
  j.end_array().begin_array("client_ports");
  for (int64_t v : client.ports) j.num(v);
  j.end_array()
      .num("client_tid", client.tid)
      .num("server_tid", server_tid)
      .num("refused_port", client.refused_port)
      .num("refused_errno", client.refused_errno)
      .end_object();
  j.print_expect();
}

int main(int argc, char** argv) {
  const char* usage = "tcp_conns [--conns K] [--hold-ms H] [--bytes B] [--wait]";
  int64_t conns = 5, hold_ms = 20, bytes = 10000;
  bool wait = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--conns") == 0) {
      conns = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--hold-ms") == 0) {
      hold_ms = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--bytes") == 0) {
      bytes = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--wait") == 0) {
      wait = true;
    } else {
      ebt::usage_error(usage, "unknown argument", argv[i]);
    }
  }
  if (conns > 10000) ebt::usage_error(usage, "--conns must be at most 10000", nullptr);
  if (hold_ms > 60000) ebt::usage_error(usage, "--hold-ms must be at most 60000", nullptr);
  if (bytes > (int64_t(1) << 30)) ebt::usage_error(usage, "--bytes must be at most 2^30", nullptr);
  if (wait) ebt::wait_for_sigusr1();
  run_tcp(conns, hold_ms, bytes);
  return 0;
}
