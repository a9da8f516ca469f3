/* Helpers shared by the BPF programs: counters, the ring buffer, user stacks. */
#ifndef EBTRACE_COMMON_BPF_H
#define EBTRACE_COMMON_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "events.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* One load of a .bss setting user space may write while recording (the samples' units):
 * a decision and the weight it gives read the same value. */
#define READ_ONCE_U64(x) (*(volatile __u64 *)&(x))

/* Set by user space before load. */
const volatile __u32 max_frames = MAX_FRAMES - 1;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FAM_COUNT * CTR_STRIDE);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline void count(__u32 family, __u32 counter)
{
	__u32 key = family * CTR_STRIDE + counter;
	__u64 *v = bpf_map_lookup_elem(&counters, &key);
	if (v)
		*v += 1;
}

/* The system call chain (hub.bpf.c). The maps are created by user space and shared by
 * every object (reused fds), so a member of one object tail-calls a member of another. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, CHAIN_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} sys_enter_chain SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, CHAIN_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} sys_exit_chain SEC(".maps");

/* A family that needs a few system calls only (lock's futex, memgrowth's brk/mmap/munmap,
 * TCP's accept and accept4) also has a program for their own tracepoints
 * (syscalls:sys_enter_futex, ...), which ebrec attaches instead of the chain when no member
 * needs every call: the raw tracepoints cost every system call of the machine a BPF
 * dispatch and the hub's check, these a bit test in the kernel for the other calls. Its
 * context (the kernel's perf_call_bpf_exit): kernel registers in place of the common fields,
 * the call's number, its return value. The user registers are the task's. */
struct sc_exit_ctx {
	__u64 regs;
	long nr;
	long ret;
};

static __always_inline struct pt_regs *sc_user_regs(void)
{
	return (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
}

/* The traced processes, a bit per process id (targets.bpf.h). Here so that every object has
 * it to share (user space creates it once, BPF_F_MMAPABLE for its atomic updates). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, TARGET_WORDS);
	__type(key, __u32);
	__type(value, __u64);
} targets SEC(".maps");

/* Per CPU, the chain in progress: the slots still to run for this call, whether they are
 * timed, and (timed) when the last member began. The raw syscall tracepoints do not nest
 * on a CPU. */
struct chain_pos {
	__u32 mask;
	__u32 timed;	/* this call's members are timed (chain_timing_now at its start) */
	__u64 t;
};

/* Per system call number, the slots whose member wants it (bit i: slot i), written by user
 * space with the slots: a member that serves a few calls (futex, brk/mmap/munmap, accept)
 * is not even tail-called for the others. Members still check the number themselves (the
 * masks are an optimization, and briefly stale while user space rewrites the slots). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * CHAIN_NRS);
	__type(key, __u32);
	__type(value, __u32);
} chain_wants SEC(".maps");

/* The index of the lowest bit set of a non-zero mask of CHAIN_SLOTS (8) bits. */
static __always_inline __u32 chain_lowest(__u32 mask)
{
	__u32 low = mask & -mask;
	return ((low & 0xf0) ? 4 : 0) + ((low & 0xcc) ? 2 : 0) + ((low & 0xaa) ? 1 : 0);
}

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct chain_pos);
} chain_state SEC(".maps");

/* Per CPU and member, with --bpf-stats or --max-cpu: its runs and run time (the kernel's
 * stats see only the hub program, which the members run inside). */
struct chain_cost {
	__u64 ns;
	__u64 runs;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CHAIN_MEMBERS);
	__type(key, __u32);
	__type(value, struct chain_cost);
} chain_costs SEC(".maps");

/* Set by user space before load: time each member while kernel BPF stats are on. */
const volatile bool chain_timed = false;

/* Whether the members are timed now (entry 0, non-zero: yes): user space turns it on and
 * off with the kernel's BPF stats, which --max-cpu samples (record/src/budget.rs). Shared
 * by every object, like the chain's maps. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} chain_timing SEC(".maps");

/* At a chain's start: whether its members are timed (chain_timed and timing on now). */
static __always_inline __u32 chain_timing_now(void)
{
	if (!chain_timed)
		return 0;
	__u32 z = 0;
	__u32 *on = bpf_map_lookup_elem(&chain_timing, &z);
	return on && *on;
}

/* The end of a chain member: its time, then the next member (nothing after the last). */
static __always_inline void chain_next(void *ctx, void *chain, __u32 member)
{
	__u32 z = 0;
	struct chain_pos *c = bpf_map_lookup_elem(&chain_state, &z);
	if (!c)
		return;
	if (chain_timed && c->timed) {
		__u64 now = bpf_ktime_get_ns();
		struct chain_cost *k = bpf_map_lookup_elem(&chain_costs, &member);
		if (k) {
			k->ns += now - c->t;
			k->runs += 1;
		}
		c->t = now;
	}
	__u32 mask = c->mask;
	if (!mask)
		return;
	c->mask = mask & (mask - 1);
	bpf_tail_call(ctx, chain, chain_lowest(mask));
}

static __always_inline void fill_header(struct event_header *h, __u32 type)
{
	__u64 pt = bpf_get_current_pid_tgid();
	h->type = type;
	h->pid = pt >> 32;
	h->tid = (__u32)pt;
	h->cpu = bpf_get_smp_processor_id();
	h->time_ns = bpf_ktime_get_boot_ns();
}

/* --max-events-per-sec: a token bucket per CPU (rate_per_cpu events/s, a burst of 100 ms
 * worth), checked before an event's stack is taken, so the cap bounds the BPF work (not the
 * uprobe trap itself, which is paid before any program runs). 0: no cap. */
const volatile __u64 rate_per_cpu = 0;

struct bucket {
	__u64 millitokens;
	__u64 last_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bucket);
} buckets SEC(".maps");

static __always_inline bool admit(__u32 family)
{
	if (!rate_per_cpu)
		return true;
	__u32 z = 0;
	struct bucket *b = bpf_map_lookup_elem(&buckets, &z);
	if (!b)
		return true;
	__u64 now = bpf_ktime_get_ns();
	__u64 burst = rate_per_cpu * 100; /* 100 ms worth, in thousandths of a token */
	if (burst < 1000)
		burst = 1000;
	if (b->last_ns == 0) {
		b->millitokens = burst;
	} else {
		__u64 dt = now - b->last_ns;
		if (dt > 1000000000ULL)
			dt = 1000000000ULL;
		b->millitokens += dt * rate_per_cpu / 1000000;
		if (b->millitokens > burst)
			b->millitokens = burst;
	}
	b->last_ns = now;
	if (b->millitokens >= 1000) {
		b->millitokens -= 1000;
		return true;
	}
	count(family, CTR_LOST_RATE);
	return false;
}

#include "unwind.bpf.h"

/* The user stack into ips[0..), leaf first (--stack-mode cfi|auto: unwound with the rows,
 * unwind.bpf.h); returns the frame count. At a function-entry
 * probe (`at_entry`) the frame-pointer walk misses the direct caller, whose return address
 * is at [sp]: it goes in as frame 1 (user space drops frame 2 if the kernel had already
 * added it, which it does for functions that start with push %rbp). */
static __always_inline __u32 user_stack(void *ctx, __u64 *ips, __u32 *flags, bool at_entry)
{
	__u32 limit = max_frames;
	if (limit > MAX_FRAMES - 1)
		limit = MAX_FRAMES - 1;
	if (cfi_mode != CFI_MODE_OFF)
		return cfi_stack(ips, flags, at_entry, limit, cfi_mode == CFI_MODE_AUTO, false);
	/* Frame pointers (fp and dwarf): walked here rather than with bpf_get_stack, whose walk
	 * reads through the garbage frame pointer main's caller leaves and takes a fault at the
	 * end of nearly every stack; this walk ends at the thread's stack bounds. */
	return cfi_stack(ips, flags, at_entry, limit, false, true);
}

/* The stack of a lock holder releasing a futex, or of a thread waking another: unwound with
 * the rows in every mode where they are loaded (the frame-pointer walk loses the holder's
 * function: the wake is made from libc, which keeps no frame pointer). */
static __always_inline __u32 waker_stack(void *ctx, __u64 *ips, __u32 *flags)
{
	if (cfi_mode == CFI_MODE_OFF && cfi_wakers) {
		__u32 limit = max_frames;
		if (limit > MAX_FRAMES - 1)
			limit = MAX_FRAMES - 1;
		return cfi_stack(ips, flags, false, limit, true, false);
	}
	return user_stack(ctx, ips, flags, false);
}

/* The kernel stack into ips[0..KFRAMES), leaf first; returns the frame count (0 when the
 * context was in user mode). */
static __always_inline __u32 kernel_stack(void *ctx, __u64 *ips, __u32 *flags)
{
	long n = bpf_get_stack(ctx, ips, KFRAMES * sizeof(__u64), 0);
	if (n <= 0)
		return 0;
	__u32 frames = n / sizeof(__u64);
	if (frames >= KFRAMES)
		*flags |= SF_KERNEL_TRUNCATED;
	return frames;
}

/* Copies map memory to map memory: clang cannot inline a memcpy this large for BPF. */
#define copy_big(dst, src, size) bpf_probe_read_kernel((dst), (size), (src))

/* --- stack copies (--stack-mode dwarf) ---
 *
 * Frame pointers cannot walk through code built without them (libc, libstdc++, most
 * production C++). In dwarf mode each event also carries the top of the user stack and the
 * registers, and ebsym unwinds it offline with the binaries' CFI. The copy is only the live
 * part: from sp to the end of the stack's mapping (bpf_find_vma), at most `copy_bytes`. */

/* 0: frame pointers only. Set by user space before load. */
const volatile __u32 copy_bytes = 0;

/* One copy buffer per CPU (max_entries set to the CPU count by user space): too large for
 * a per-CPU array value. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct copy_event);
} copy_scratch SEC(".maps");

__u64 copy_seq = 0;

struct copy_event _copy_event = {};

static long vma_end(struct task_struct *task, struct vm_area_struct *vma, void *data)
{
	*(__u64 *)data = vma->vm_end;
	return 0;
}

/* Fills `c` (all but the header and id) with the current thread's user registers and the
 * top of its user stack; returns the bytes copied (0: no copy). */
static __always_inline __u32 fill_copy(struct copy_event *c)
{
	if (!copy_bytes)
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
	if (!regs)
		return 0;
	__u64 sp = regs->sp;
	c->ip = regs->ip;
	c->sp = sp;
	c->bp = regs->bp;
	__u32 want = copy_bytes > MAX_COPY ? MAX_COPY : copy_bytes;
	__u64 end = 0;
	if (bpf_find_vma(task, sp, vma_end, &end, 0) == 0 && end > sp && end - sp < want)
		want = end - sp;
	__u32 len = 0;
	/* Page by page, so that a fault ends the copy there instead of failing all of it. */
	for (int i = 0; i < MAX_COPY / 4096 + 1; i++) {
		if (len >= want)
			break;
		__u64 a = sp + len;
		__u32 chunk = 4096 - (a & 4095);
		if (chunk > want - len)
			chunk = want - len;
		/* chunk is in [1, 4096], but where chunk = want - len Linux 6.1's verifier has
		 * no bound for it (it learns none from comparing two registers): "R2 unbounded
		 * memory access". clang drops a plain `chunk > 4096` test (it knows better), so
		 * the bound goes past a barrier, and without a branch (a branch per page
		 * multiplies the states the verifier walks): exact for 1..4096. */
		asm volatile("" : "+r"(chunk));
		chunk = ((chunk - 1) & 4095) + 1;
		if (bpf_probe_read_user(&c->data[len & (MAX_COPY - 1)], chunk, (void *)a))
			break;
		len += chunk;
	}
	if (len > MAX_COPY)
		len = MAX_COPY;
	c->len = len;
	if (len == 0) /* nothing readable at sp (seen during execve): the fp stack stays */
		count(FAM_STACK_COPY, CTR_FILTERED);
	return len;
}

/* Sends `c` (filled) as a copy event; returns its id, 0 when it could not be sent. */
static __always_inline __u64 send_copy(struct copy_event *c)
{
	__u32 len = c->len;
	if (len == 0)
		return 0;
	if (len > MAX_COPY)
		len = MAX_COPY;
	fill_header(&c->h, FAM_STACK_COPY);
	c->id = __sync_fetch_and_add(&copy_seq, 1) + 1;
	__u64 size = __builtin_offsetof(struct copy_event, data) + len;
	if (bpf_ringbuf_output(&events, c, size, 0)) {
		count(FAM_STACK_COPY, CTR_LOST_RINGBUF);
		return 0;
	}
	count(FAM_STACK_COPY, CTR_HITS);
	return c->id;
}

/* Copies the current user stack and sends it; returns the copy's id (0: none). */
static __always_inline __u64 stack_copy(void)
{
	if (!copy_bytes)
		return 0;
	__u32 cpu = bpf_get_smp_processor_id();
	struct copy_event *c = bpf_map_lookup_elem(&copy_scratch, &cpu);
	if (!c)
		return 0;
	if (!fill_copy(c))
		return 0;
	return send_copy(c);
}

#endif
