/* The preload shim's in-process unwinder (bpf/preload_unwind.c) against frames it can check:
 * compiled and run by shim_unwind.rs. Prints one line per check, "ok NAME" or "FAIL NAME ...".
 *
 * - whole: a walk from a call chain main -> outer -> middle -> leaf (each noinline, no frame
 *   pointers) gives the return addresses that glibc's backtrace() gives, and ends at _start
 *   with no flag;
 * - truncated: at most 2 frames, flagged UW_TRUNCATED;
 * - past the stack: a frame of a function with a 100 KB frame, its sp put 64 bytes below
 *   the end of a mapping after which 1 MiB is unmapped: its CFA and return address slot lie
 *   in the hole. The walk must stop with UW_BAD_FRAME instead of reading there (a crash). */
#define _GNU_SOURCE
#include <execinfo.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "preload_unwind.c"

static int failed;

static void check(int ok, const char *name, const char *detail)
{
	printf("%s %s%s%s\n", ok ? "ok" : "FAIL", name, ok ? "" : ": ", ok ? "" : detail);
	failed |= !ok;
}

/* The caller's state right after its call returned, as the shim's stub passes it. */
struct state {
	uint64_t ip, sp, bp;
};
__attribute__((noinline)) void capture(struct state *s);
__asm__(".text\n"
	".globl capture\n"
	".type capture,@function\n"
	"capture:\n"
	".cfi_startproc\n"
	"movq (%rsp), %rax\n"
	"movq %rax, 0(%rdi)\n"
	"leaq 8(%rsp), %rax\n"
	"movq %rax, 8(%rdi)\n"
	"movq %rbp, 16(%rdi)\n"
	"ret\n"
	".cfi_endproc\n"
	".size capture, .-capture\n");

static uint64_t walked[64];
static int nwalked;
static uint32_t wflags;
static void *bt[64];
static int nbt;

__attribute__((noinline)) static void leaf(void)
{
	struct state s;
	capture(&s);
	wflags = 0;
	nwalked = uw_walk(s.ip, s.sp, s.bp, walked, 64, &wflags);
	nbt = backtrace(bt, 64);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static void middle(void)
{
	leaf();
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static void outer(void)
{
	middle();
	__asm__ volatile("" ::: "memory");
}

static uint64_t ra_in_big;
__attribute__((noinline)) static void note_return(void)
{
	ra_in_big = (uint64_t)__builtin_return_address(0);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static void big(void)
{
	volatile char buf[100000];
	buf[0] = 1;
	note_return();
	buf[1] = 2;
}

int main(void)
{
	uw_init();
	check(uw_available(), "available", "no _dl_find_object");

	outer();
	/* backtrace()'s frame 0 is in leaf (after its call of backtrace); the walk's frame 0 is
	 * leaf's return address into... leaf itself after capture: both start in leaf */
	char d[256];
	int same = nwalked == nbt;
	for (int i = 1; same && i < nwalked; i++)
		same = walked[i] == (uint64_t)bt[i];
	snprintf(d, sizeof d, "%d frames walked, backtrace %d, flags 0x%x", nwalked, nbt, wflags);
	check(same && wflags == 0 && nwalked >= 5, "whole", d);

	uint64_t few[2];
	uint32_t f = 0;
	struct state s;
	capture(&s);
	int n = uw_walk(s.ip, s.sp, s.bp, few, 2, &f);
	snprintf(d, sizeof d, "n=%d flags 0x%x", n, f);
	check(n == 2 && f == UW_TRUNCATED, "truncated", d);

	big();
	char *m = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return 2;
	munmap(m + 4096, (1 << 20) - 4096);
	uint64_t ips[8];
	f = 0;
	n = uw_walk(ra_in_big, (uint64_t)(uintptr_t)(m + 4096 - 64), 0, ips, 8, &f);
	snprintf(d, sizeof d, "n=%d flags 0x%x", n, f);
	check(n == 1 && f == UW_BAD_FRAME, "past the stack", d);
	return failed;
}
