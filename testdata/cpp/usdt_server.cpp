// usdt_server: a small request loop that marks its requests with USDT probes of its own
// (<sys/sdt.h>, Debian's systemtap-sdt-dev), as real servers do (PostgreSQL's
// query__start/query__done), and throws a known number of C++ exceptions, so that
// libstdc++'s own probes (libstdcxx:throw, rethrow, catch) fire too. For listing the
// probes (ebrec probes, beside bpftrace -l) and, later, attaching to them.
//
// usage: usdt_server [--requests N] [--throw-every K] [--unpaired] [--wait]
//   --requests N     requests served (default 100)
//   --unpaired       then, on the main thread: a nest (request__start 1001, then a whole
//                    request 1002 inside it, and no done of 1001), a done without a start
//                    (2001), and a start never done (3001), before the process exits
//   --throw-every K  every Kth request (ids 0, K, 2K, ...) throws a std::runtime_error
//                    in shop::handle, which shop::serve catches and rethrows once to
//                    shop::serve_one, where it is caught for good (default 10; 0: none)
//   --wait           print `READY <pid>`, then block until SIGUSR1 arrives
//
// Its probes (provider shop):
//   shop:request__start(id, kind)   -8@… -4@…   at the start of each request
//   shop:request__done(id, kind)    -8@… -4@…   at its end (also after an exception)
//   shop:idle()                     no argument  once before the loop
//   shop:slow__request(id, us, 3)   guarded by the semaphore shop_slow__request_semaphore
//                                   (in .probes): fires only while a tracer holds it
//                                   enabled; the third argument is the constant 3
// Call tree (named functions noinline):
//   main -> shop::serve_all(N, K) -> N x shop::serve_one(id)
//     -> shop::serve(id, kind) -> request__start, shop::handle(id, kind), request__done
//
// Last line on stdout (one line; shown wrapped here):
// EXPECT {"program":"usdt_server","pid":P,"requests":N,"throws":T,"rethrows":T,
//   "catches":2*T,"slow_enabled":S,
//   "probes":[{"provider":"shop","name":"request__start","args":2,"semaphore":0},...]}
// where T = the requests that threw, S = the requests that saw the semaphore set, and
// each probe name once ("semaphore":1 for the guarded one; request__done has two sites).

#include <stdexcept>

#include <sys/sdt.h>

#include "common.h"

// <sys/sdt.h> decides at include time whether a probe names a semaphore
// (_SDT_HAS_SEMAPHORES, for the whole translation unit). This program wants one guarded
// probe beside unguarded ones in a single file, so around that probe it defines the two
// macros that carry the semaphore as the header does with _SDT_HAS_SEMAPHORES, then
// restores them.
extern "C" {
__attribute__((visibility("hidden"), section(".probes"))) volatile unsigned short
    shop_slow__request_semaphore;
}

namespace shop {

long g_throws = 0, g_rethrows = 0, g_catches = 0, g_slow_enabled = 0;
long g_work = 0;

EBT_NOINLINE void slow_request(long id, int us) {
#undef _SDT_SEMAPHORE
#undef _SDT_NOTE_SEMAPHORE_USE
#define _SDT_SEMAPHORE(p, n) _SDT_ASM_1(_SDT_ASM_ADDR p##_##n##_semaphore)
#define _SDT_NOTE_SEMAPHORE_USE(p, n) __asm__ __volatile__("" ::"m"(p##_##n##_semaphore));
  if (shop_slow__request_semaphore) {
    g_slow_enabled++;
    DTRACE_PROBE3(shop, slow__request, id, us, 3);
  }
#undef _SDT_SEMAPHORE
#undef _SDT_NOTE_SEMAPHORE_USE
#define _SDT_SEMAPHORE(p, n) _SDT_ASM_1(_SDT_ASM_ADDR 0)
#define _SDT_NOTE_SEMAPHORE_USE(p, n)
  ebt::no_tail_call();
}

EBT_NOINLINE void handle(long id, int kind, long throw_every) {
  g_work += id * kind;
  if (throw_every > 0 && id % throw_every == 0) {
    g_throws++;
    throw std::runtime_error("request failed");
  }
  slow_request(id, kind * 100);
  ebt::no_tail_call();
}

// serve's boundaries (--unpaired): both, or a start with a whole request inside and no done
// of its own (a nest), a done without a start, a start without a done. The same probe sites.
enum Bounds { BOTH, NEST, DONE_ONLY, START_ONLY };

EBT_NOINLINE void serve(long id, int kind, long throw_every, Bounds b = BOTH) {
  if (b != DONE_ONLY) DTRACE_PROBE2(shop, request__start, id, kind);
  if (b == NEST) serve(id + 1, kind, throw_every);
  try {
    handle(id, kind, throw_every);
  } catch (...) {
    g_catches++;
    DTRACE_PROBE2(shop, request__done, id, kind);
    g_rethrows++;
    throw;
  }
  if (b == BOTH || b == DONE_ONLY) DTRACE_PROBE2(shop, request__done, id, kind);
}

EBT_NOINLINE void serve_one(long id, long throw_every) {
  try {
    serve(id, int(id % 3), throw_every);
  } catch (const std::runtime_error&) {
    g_catches++;
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void serve_all(long requests, long throw_every) {
  DTRACE_PROBE(shop, idle);
  for (long id = 0; id < requests; id++) serve_one(id, throw_every);
  ebt::no_tail_call();
}

}  // namespace shop

int main(int argc, char** argv) {
  const char* usage = "usdt_server [--requests N] [--throw-every K] [--unpaired] [--wait]";
  long requests = 100, throw_every = 10;
  bool wait = false, unpaired = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--requests")) {
      requests = long(ebt::arg_u64(argc, argv, &i, usage));
    } else if (!strcmp(argv[i], "--throw-every")) {
      throw_every = long(ebt::arg_u64(argc, argv, &i, usage));
    } else if (!strcmp(argv[i], "--wait")) {
      wait = true;
    } else if (!strcmp(argv[i], "--unpaired")) {
      unpaired = true;
    } else {
      ebt::usage_error(usage, "unknown argument", argv[i]);
    }
  }
  if (wait) ebt::wait_for_sigusr1();
  shop::serve_all(requests, throw_every);
  if (unpaired) {
    // after the requests (ids that never throw: 0 disables it below): a nest (starts
    // 1001, 1002, done 1002), a done without a start (2001), a start left open (3001)
    shop::serve(1001, 1, 0, shop::NEST);
    shop::serve(2001, 1, 0, shop::DONE_ONLY);
    shop::serve(3001, 1, 0, shop::START_ONLY);
  }

  struct {
    const char* name;
    int args;
    bool semaphore;
  } probes[] = {
      {"request__start", 2, false},
      {"request__done", 2, false},
      {"idle", 0, false},
      {"slow__request", 3, true},
  };
  ebt::Json j;
  j.begin_object()
      .str("program", "usdt_server")
      .num("pid", getpid())
      .num("requests", requests)
      .num("throws", shop::g_throws)
      .num("rethrows", shop::g_rethrows)
      .num("catches", shop::g_catches)
      .num("slow_enabled", shop::g_slow_enabled)
      .begin_array("probes");
  for (auto& p : probes) {
    j.begin_object()
        .str("provider", "shop")
        .str("name", p.name)
        .num("args", p.args)
        .num("semaphore", p.semaphore ? 1 : 0)
        .end_object();
  }
  j.end_array().end_object().print_expect();
  return 0;
}
