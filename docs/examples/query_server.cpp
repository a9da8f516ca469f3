// query_server: a USDT probe with a string argument, for docs/task-usdt.md. Each query runs
// between qsrv:query__start(id, text) and qsrv:query__done(id), as PostgreSQL's query__start
// passes its query's text; query 7, 57, 107, ... (an UPDATE) waits 5 ms for a timer.
//
// usage: query_server [--queries N]   (default 500)
#include <sys/sdt.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace qsrv {

__attribute__((noinline)) void run_query(long id, const char* text) {
  DTRACE_PROBE2(qsrv, query__start, id, text);
  if (id % 50 == 7) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  DTRACE_PROBE1(qsrv, query__done, id);
}

}  // namespace qsrv

int main(int argc, char** argv) {
  long n = argc == 3 && !strcmp(argv[1], "--queries") ? atol(argv[2]) : 500;
  char text[128];
  for (long id = 0; id < n; id++) {
    if (id % 50 == 7)
      snprintf(text, sizeof text, "UPDATE stock SET n = n - 1 WHERE item = %ld;", id);
    else
      snprintf(text, sizeof text, "SELECT price FROM items WHERE id = %ld;", id);
    qsrv::run_query(id, text);
  }
  printf("query_server: %ld queries\n", n);
}
