// dlopener: loads a shared library while running, calls into it, unloads it, and does it
// again, for checking that events are attributed to libraries mapped and unmapped during a
// recording.
//
// usage: dlopener [--times N] [--wait] LIB [-- ARGS...]
//   LIB        a shared library with a `main` (testdata's SharedLibrary variant of a
//              program, e.g. liballoc_workload.so), loaded with dlopen(RTLD_NOW|RTLD_LOCAL)
//   --times N  load / call / unload cycles (default 2)
//   --wait     print `READY <pid>`, then block until SIGUSR1 arrives
//   ARGS       the arguments its `main` gets (argv[0] is LIB)
//
// Call tree: main -> dl::cycle(i) -> dlopen, dlsym("main"), the library's main(ARGS),
// dlclose; its stdout goes to ours, so the library's own EXPECT line comes before ours.
//
// Last line on stdout:
// EXPECT {"program":"dlopener","pid":P,"times":N,"bases":["0x…",…]}
// where bases are the library's load address in each cycle (dladdr of its main).

#include <dlfcn.h>

#include "common.h"

namespace dl {

using MainFn = int (*)(int, char**);

EBT_NOINLINE void* cycle(const char* lib, std::vector<char*>* args) {
  void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "dlopener: %s\n", dlerror());
    exit(1);
  }
  auto fn = reinterpret_cast<MainFn>(dlsym(h, "main"));
  if (!fn) {
    fprintf(stderr, "dlopener: no main in %s\n", lib);
    exit(1);
  }
  Dl_info info{};
  dladdr(reinterpret_cast<void*>(fn), &info);
  std::vector<char*> argv = *args;
  argv.push_back(nullptr);
  int rc = fn(int(argv.size()) - 1, argv.data());
  fflush(stdout);
  if (rc != 0) {
    fprintf(stderr, "dlopener: the library's main returned %d\n", rc);
    exit(1);
  }
  if (dlclose(h) != 0) {
    fprintf(stderr, "dlopener: dlclose: %s\n", dlerror());
    exit(1);
  }
  ebt::no_tail_call();
  return info.dli_fbase;
}

}  // namespace dl

int main(int argc, char** argv) {
  const char* usage = "dlopener [--times N] [--wait] LIB [-- ARGS...]";
  const char* lib = nullptr;
  long times = 2;
  bool wait = false;
  std::vector<char*> args;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--times")) {
      times = long(ebt::arg_u64(argc, argv, &i, usage));
    } else if (!strcmp(argv[i], "--wait")) {
      wait = true;
    } else if (!strcmp(argv[i], "--")) {
      for (int j = i + 1; j < argc; j++) args.push_back(argv[j]);
      break;
    } else if (!lib && argv[i][0] != '-') {
      lib = argv[i];
    } else {
      ebt::usage_error(usage, "unknown argument", argv[i]);
    }
  }
  if (!lib) ebt::usage_error(usage, "missing", "LIB");
  args.insert(args.begin(), const_cast<char*>(lib));
  if (wait) ebt::wait_for_sigusr1();
  std::vector<void*> bases;
  for (long i = 0; i < times; i++) bases.push_back(dl::cycle(lib, &args));
  ebt::Json j;
  j.begin_object().str("program", "dlopener").num("pid", getpid()).num("times", times);
  j.begin_array("bases");
  for (void* b : bases) j.hex(nullptr, b);
  j.end_array().end_object().print_expect();
  return 0;
}
