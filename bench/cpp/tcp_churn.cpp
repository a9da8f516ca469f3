// tcp_churn: K short TCP connections over loopback, one after another, timed, so the cost of a
// connection tracer (sock:inet_sock_set_state programs, bcc tcplife, ebrec --tcp) per connection
// shows.
//
//   tcp_churn [--conns K] [--bytes B] [--wait-fifo PATH]
//
// One process, two threads: a server thread listening on 127.0.0.1 (a port the kernel picks)
// that accepts, writes B bytes (default 64), reads until the peer closes, and closes; and the
// main thread, which for each of K connections (default 10000) connects, reads the B bytes and
// closes first (so the TIME_WAIT is on its side; net.ipv4.tcp_tw_reuse, 2 by default, lets
// loopback connects reuse those ports, so K can pass the ephemeral range). Every connection goes
// through the whole life a tracer sees: SYN_SENT, ESTABLISHED, FIN_WAIT, CLOSE on the client's
// socket, SYN_RECV, ESTABLISHED, CLOSE_WAIT, LAST_ACK, CLOSE on the server's. Only 127.0.0.1 is
// ever used. --wait-fifo blocks on PATH until a byte is written to it, so a tracer attached by
// pid can be ready before the first connection. An alarm (60 s + 10 ms per connection) ends a
// run that stalls. The clock runs from the first connect to the last close (tracer start-up and
// shutdown are not counted). Prints one line:
//   "tcp_churn: conns=K bytes=B wall_ms=X conns_per_s=Y us_per_conn=Z cpu_ms=U"
// (cpu_ms: user + system time of the whole process, both threads, from getrusage).
//
// Build: c++ -O2 -g -fno-omit-frame-pointer -pthread -o tcp_churn tcp_churn.cpp

#include <arpa/inet.h>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

double now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) * 1e9 + double(ts.tv_nsec);
}

long parse_long(const char *flag, const char *v) {
  char *end = nullptr;
  errno = 0;
  long n = strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || n <= 0) {
    fprintf(stderr, "tcp_churn: bad value for %s: %s\n", flag, v);
    exit(2);
  }
  return n;
}

[[noreturn]] void fail(const char *what) {
  fprintf(stderr, "tcp_churn: %s: %s\n", what, strerror(errno));
  exit(1);
}

// Writes or reads exactly n bytes; false at EOF.
bool write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= size_t(w);
  }
  return true;
}

bool read_all(int fd, char *p, size_t n) {
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= size_t(r);
  }
  return true;
}

void server(int lfd, long conns, size_t bytes) {
  std::vector<char> buf(bytes > 0 ? bytes : 1, 'x');
  for (long i = 0; i < conns; i++) {
    int fd = accept(lfd, nullptr, nullptr);
    if (fd < 0) {
      if (errno == EINTR) {
        i--;
        continue;
      }
      fail("accept");
    }
    if (!write_all(fd, buf.data(), bytes)) fail("server write");
    char c;
    while (read(fd, &c, 1) > 0) {
    }  // until the client's FIN
    close(fd);
  }
}

}  // namespace

int main(int argc, char **argv) {
  long conns = 10000;
  size_t bytes = 64;
  const char *fifo = nullptr;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (i + 1 < argc && strcmp(a, "--conns") == 0) {
      conns = parse_long(a, argv[++i]);
    } else if (i + 1 < argc && strcmp(a, "--bytes") == 0) {
      bytes = size_t(parse_long(a, argv[++i]));
    } else if (i + 1 < argc && strcmp(a, "--wait-fifo") == 0) {
      fifo = argv[++i];
    } else {
      fprintf(stderr, "usage: tcp_churn [--conns K] [--bytes B] [--wait-fifo PATH]\n");
      return 2;
    }
  }
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  if (lfd < 0) fail("socket");
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (bind(lfd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) < 0) fail("bind");
  if (listen(lfd, 128) < 0) fail("listen");
  socklen_t alen = sizeof addr;
  if (getsockname(lfd, reinterpret_cast<sockaddr *>(&addr), &alen) < 0) fail("getsockname");

  if (fifo != nullptr) {
    int fd = open(fifo, O_RDONLY);
    if (fd < 0) fail("open fifo");
    char c;
    if (read(fd, &c, 1) != 1) {
      fprintf(stderr, "tcp_churn: fifo closed before the start signal\n");
      return 1;
    }
    close(fd);
  }
  signal(SIGALRM, SIG_DFL);
  alarm(unsigned(60 + conns / 100));

  std::vector<char> buf(bytes > 0 ? bytes : 1);
  double t0 = now_ns();
  std::thread srv(server, lfd, conns, bytes);
  for (long i = 0; i < conns; i++) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) fail("socket");
    if (connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) < 0) fail("connect");
    if (!read_all(fd, buf.data(), bytes)) fail("client read");
    close(fd);
  }
  srv.join();
  double t1 = now_ns();
  close(lfd);
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  double cpu_ms = double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
                  double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
  double wall = t1 - t0;
  printf("tcp_churn: conns=%ld bytes=%zu wall_ms=%.1f conns_per_s=%.0f us_per_conn=%.2f cpu_ms=%.0f\n",
         conns, bytes, wall / 1e6, double(conns) / (wall / 1e9), wall / 1e3 / double(conns), cpu_ms);
  return 0;
}
