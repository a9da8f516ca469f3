// forker: allocations in forked children and in threads, then optionally an
// exec, for testing that a tracer follows fork, clone and exec.
//
// usage: forker [--children K] [--reuse-pid] [--wait] [--exec PATH [ARGS...]]
//   --children K  children to fork (default 2)
//   --reuse-pid   after the children, fork one more child that gets the pid of the first
//                 one again (by writing /proc/sys/kernel/ns_last_pid: needs root), which
//                 runs reused_work(): 15 x malloc(9000), freed; EXPECT gets "reused_pid"
//                 (the pid, or 0 if the kernel gave another one 20 times in a row)
//   --wait        print `READY <pid>`, then block until SIGUSR1 arrives
//   --exec PATH   after everything else, exec PATH with ARGS (all remaining
//                 arguments); the pid stays the same
//
// Call tree (every named function is noinline):
//   main -> spawn_children(K): K x fork(); each child runs
//             child_work()   25 x malloc(6000), each freed right away
//           and then _exit(0); the parent waits for all children
//        -> run_threads(): 3 std::threads, each running
//             thread_work()  10 x malloc(7000), each freed right away
//        -> print EXPECT, then (with --exec) execv(PATH, [PATH, ARGS...])
// The children fork before any thread exists.
//
// Last line forker writes to stdout (one line; shown wrapped here):
// EXPECT {"program":"forker","pid":P,"children":K,"child_pids":[c1,...],
//   "threads":3,"thread_tids":[t1,t2,t3],
//   "functions":{
//     "child_work":{"malloc":{"calls":25*K,"bytes":150000*K,"size":6000,"per_task":25},
//                   "free":{"calls":25*K,"bytes":150000*K,"size":6000,"per_task":25}},
//     "thread_work":{"malloc":{"calls":30,"bytes":210000,"size":7000,"per_task":10},
//                    "free":{"calls":30,"bytes":210000,"size":7000,"per_task":10}}},
//   "exec":null | {"path":"...","argv":["...",...]}}
// where calls / bytes are totals over all children (all threads), per_task is
// the number of calls in each single child (thread), and exec.argv is the
// full argv passed to execv (argv[0] == path). With --exec, the exec'd
// program's own output (e.g. alloc_workload's EXPECT line) follows on stdout.

#include <sys/wait.h>

#include <thread>

#include "common.h"

namespace {
constexpr int kChildAllocs = 25, kChildSize = 6000;
constexpr int kThreads = 3, kThreadAllocs = 10, kThreadSize = 7000;
long g_thread_tids[kThreads];
}  // namespace

EBT_NOINLINE void child_work() {
  for (int i = 0; i < kChildAllocs; i++) {
    void* p = malloc(kChildSize);
    if (!p) _exit(1);
    static_cast<volatile char*>(p)[0] = char(i);
    ebt::escape(p);
    free(p);
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void reused_work() {
  for (int i = 0; i < 15; i++) {
    void* p = malloc(9000);
    if (!p) _exit(1);
    static_cast<volatile char*>(p)[0] = char(i);
    ebt::escape(p);
    free(p);
  }
  ebt::no_tail_call();
}

// Forks a child running reused_work() that has pid `want` (a pid that was used and is free
// again); returns `want`, or 0 if another pid came 20 times.
EBT_NOINLINE pid_t spawn_with_pid(pid_t want) {
  for (int attempt = 0; attempt < 20; attempt++) {
    FILE* f = fopen("/proc/sys/kernel/ns_last_pid", "w");
    if (!f) return 0;
    fprintf(f, "%d", int(want) - 1);
    fclose(f);
    const pid_t pid = fork();
    if (pid < 0) return 0;
    if (pid == 0) {
      if (getpid() == want) reused_work();
      _exit(0);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (pid == want) return want;
  }
  return 0;
}

EBT_NOINLINE std::vector<pid_t> spawn_children(int64_t k) {
  std::vector<pid_t> pids;
  pids.reserve(k);
  for (int64_t i = 0; i < k; i++) {
    const pid_t pid = fork();
    if (pid < 0) {
      perror("forker: fork");
      exit(1);
    }
    if (pid == 0) {
      child_work();
      _exit(0);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
      if (errno != EINTR) {
        perror("forker: waitpid");
        exit(1);
      }
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "forker: child %d failed (status %#x)\n", int(pid), status);
      exit(1);
    }
  }
  return pids;
}

EBT_NOINLINE void thread_work(int index) {
  g_thread_tids[index] = ebt::gettid_();
  for (int i = 0; i < kThreadAllocs; i++) {
    void* p = malloc(kThreadSize);
    if (!p) abort();
    static_cast<volatile char*>(p)[0] = char(i);
    ebt::escape(p);
    free(p);
  }
  ebt::no_tail_call();
}

EBT_NOINLINE void run_threads() {
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int i = 0; i < kThreads; i++) threads.emplace_back(thread_work, i);
  for (auto& t : threads) t.join();
}

namespace {
void site(ebt::Json& j, const char* symbol, int64_t tasks, int64_t per_task, int64_t size) {
  j.begin_object(symbol)
      .num("calls", tasks * per_task)
      .num("bytes", tasks * per_task * size)
      .num("size", size)
      .num("per_task", per_task)
      .end_object();
}
}  // namespace

int main(int argc, char** argv) {
  const char* usage = "forker [--children K] [--reuse-pid] [--wait] [--exec PATH [ARGS...]]";
  int64_t children = 2;
  bool wait = false, reuse = false;
  char** exec_argv = nullptr;  // points into argv: PATH, ARGS..., nullptr
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--children") == 0) {
      children = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--wait") == 0) {
      wait = true;
    } else if (strcmp(argv[i], "--reuse-pid") == 0) {
      reuse = true;
    } else if (strcmp(argv[i], "--exec") == 0) {
      if (i + 1 >= argc) ebt::usage_error(usage, "missing PATH after", argv[i]);
      exec_argv = &argv[i + 1];
      break;
    } else {
      ebt::usage_error(usage, "unknown argument", argv[i]);
    }
  }
  if (children > 1000) ebt::usage_error(usage, "--children must be at most 1000", nullptr);
  if (wait) ebt::wait_for_sigusr1();

  const std::vector<pid_t> pids = spawn_children(children);
  const pid_t reused = reuse && !pids.empty() ? spawn_with_pid(pids[0]) : 0;
  run_threads();

  ebt::Json j;
  j.begin_object()
      .str("program", "forker")
      .num("pid", getpid())
      .num("children", children)
      .begin_array("child_pids");
  for (pid_t pid : pids) j.num(pid);
  j.end_array();
  if (reuse) j.num("reused_pid", reused);
  j.num("threads", kThreads).begin_array("thread_tids");
  for (long tid : g_thread_tids) j.num(tid);
  j.end_array().begin_object("functions");
  j.begin_object("child_work");
  site(j, "malloc", children, kChildAllocs, kChildSize);
  site(j, "free", children, kChildAllocs, kChildSize);
  j.end_object().begin_object("thread_work");
  site(j, "malloc", kThreads, kThreadAllocs, kThreadSize);
  site(j, "free", kThreads, kThreadAllocs, kThreadSize);
  j.end_object().end_object();
  if (exec_argv) {
    j.begin_object("exec").str("path", exec_argv[0]).begin_array("argv");
    for (char** a = exec_argv; *a; ++a) j.str(*a);
    j.end_array().end_object();
  } else {
    j.null("exec");
  }
  j.end_object();
  j.print_expect();

  if (exec_argv) {
    execv(exec_argv[0], exec_argv);
    fprintf(stderr, "forker: execv %s: %s\n", exec_argv[0], strerror(errno));
    return 127;
  }
  return 0;
}
