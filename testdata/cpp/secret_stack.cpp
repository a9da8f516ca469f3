// secret_stack: holds a secret in a stack buffer while it allocates, so a test can tell
// where the target's stack memory ends up (ebrec --stack-mode dwarf copies the top of the
// user stack at every event; ebsym's symbolized output and `ebsym strip` must drop it).
//
// usage: secret_stack [--seed S] [--allocs N] [--size B] [--wait]
//   --seed S    what the token is made from (default: from the clock and the pid)
//   --allocs N  malloc calls made while the token is on the stack (default 200)
//   --size B    bytes of each (default 48); each block is freed right away
//   --wait      print `READY <pid>`, then block until SIGUSR1 arrives
//
// The token is 64 bytes: "EBTRACE-SECRET-TOKEN-" and 43 lowercase hex digits computed at
// run time from the seed (splitmix64), so the whole token is in no section of the binary
// and differs with every seed. It lives only in the 64-byte stack buffer of
// secret::hold_token (and in .bss after the allocations, for the EXPECT line).
//
// Call tree (every named function is noinline):
//   main -> secret::hold_token(S, N, B)          token[64] on its stack
//             -> secret::make_token(S, token)
//             -> secret::allocate_with_token(token, N, B)
//                  -> N x malloc(B), each freed at once
//
// Last line on stdout:
// EXPECT {"program":"secret_stack","pid":P,"seed":"S","token":"EBTRACE-SECRET-TOKEN-…",
//   "token_bytes":64,"allocs":N,"size":B,"mallocs_in":"secret::allocate_with_token"}
// (the seed as a decimal string: a u64 does not fit a JSON number exactly).

#include "common.h"

namespace secret {

constexpr int kTokenBytes = 64;
constexpr int kPrefixBytes = 21;  // "EBTRACE-SECRET-TOKEN-"

// The token after hold_token has returned (not on any stack), for the EXPECT line.
char g_token[kTokenBytes + 1];

uint64_t splitmix64(uint64_t* s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

EBT_NOINLINE void make_token(uint64_t seed, char* out) {
  memcpy(out, "EBTRACE-SECRET-TOKEN-", kPrefixBytes);
  static const char hex[] = "0123456789abcdef";
  uint64_t state = seed, bits = 0;
  for (int i = kPrefixBytes; i < kTokenBytes; i++) {
    if ((i - kPrefixBytes) % 16 == 0) bits = splitmix64(&state);
    out[i] = hex[bits & 15];
    bits >>= 4;
  }
  ebt::escape(out);
}

// Allocates while the caller's frame holds `token`: every malloc's stack copy (sp at
// malloc up to the stack's end) spans it.
EBT_NOINLINE int64_t allocate_with_token(const char* token, int64_t n, int64_t size) {
  int64_t done = 0;
  for (int64_t i = 0; i < n; i++) {
    char* p = static_cast<char*>(malloc(size_t(size)));
    if (!p) {
      fprintf(stderr, "secret_stack: malloc failed\n");
      exit(1);
    }
    p[0] = token[i % kTokenBytes];
    ebt::escape(p);
    free(p);
    done++;
  }
  ebt::escape(token);
  ebt::no_tail_call();
  return done;
}

EBT_NOINLINE int64_t hold_token(uint64_t seed, int64_t n, int64_t size) {
  char token[kTokenBytes];
  make_token(seed, token);
  int64_t done = allocate_with_token(token, n, size);
  memcpy(g_token, token, kTokenBytes);
  g_token[kTokenBytes] = '\0';
  // Gone from the stack once the work is done (the copies already have it).
  memset(token, 0, kTokenBytes);
  ebt::escape(token);
  return done;
}

}  // namespace secret

int main(int argc, char** argv) {
  const char* usage = "secret_stack [--seed S] [--allocs N] [--size B] [--wait]";
  uint64_t seed = uint64_t(ebt::now_ns()) ^ (uint64_t(getpid()) << 32);
  int64_t allocs = 200, size = 48;
  bool wait = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--seed") == 0) {
      seed = ebt::arg_u64(argc, argv, &i, usage);
    } else if (strcmp(argv[i], "--allocs") == 0) {
      allocs = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--size") == 0) {
      size = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--wait") == 0) {
      wait = true;
    } else {
      ebt::usage_error(usage, "unknown argument", argv[i]);
    }
  }
  if (allocs > 10000000) ebt::usage_error(usage, "--allocs must be at most 10000000", nullptr);
  if (size < 1 || size > (1 << 20)) ebt::usage_error(usage, "--size must be 1..1048576", nullptr);
  if (wait) ebt::wait_for_sigusr1();
  int64_t done = secret::hold_token(seed, allocs, size);
  ebt::Json j;
  j.begin_object()
      .str("program", "secret_stack")
      .num("pid", getpid())
      .str("seed", std::to_string(seed).c_str())
      .str("token", secret::g_token)
      .num("token_bytes", secret::kTokenBytes)
      .num("allocs", done)
      .num("size", size)
      .str("mallocs_in", "secret::allocate_with_token")
      .end_object();
  j.print_expect();
  return 0;
}
