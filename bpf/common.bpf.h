/* Helpers shared by the BPF programs: counters, the ring buffer, user stacks. */
#ifndef EBTRACE_COMMON_BPF_H
#define EBTRACE_COMMON_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "events.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

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

static __always_inline void fill_header(struct event_header *h, __u32 type)
{
	__u64 pt = bpf_get_current_pid_tgid();
	h->type = type;
	h->pid = pt >> 32;
	h->tid = (__u32)pt;
	h->cpu = bpf_get_smp_processor_id();
	h->time_ns = bpf_ktime_get_boot_ns();
}

/* The user stack into ips[0..), leaf first; returns the frame count. At a function-entry
 * probe (`at_entry`) the frame-pointer walk misses the direct caller, whose return address
 * is at [sp]: it goes in as frame 1 (user space drops frame 2 if the kernel had already
 * added it, which it does for functions that start with push %rbp). */
static __always_inline __u32 user_stack(void *ctx, __u64 *ips, __u32 *flags, bool at_entry)
{
	__u32 limit = max_frames;
	if (limit > MAX_FRAMES - 1)
		limit = MAX_FRAMES - 1;
	/* At entry, frames go from slot 1 so that slot 0 can take the ip and slot 1 the caller. */
	long n = at_entry ? bpf_get_stack(ctx, &ips[1], limit * sizeof(__u64), BPF_F_USER_STACK)
			  : bpf_get_stack(ctx, &ips[0], limit * sizeof(__u64), BPF_F_USER_STACK);
	if (n <= 0) {
		*flags |= SF_USER_ERROR;
		return 0;
	}
	__u32 frames = n / sizeof(__u64);
	if (frames >= limit)
		*flags |= SF_USER_TRUNCATED;
	if (!at_entry)
		return frames;
	struct pt_regs *regs = ctx;
	__u64 ret = 0;
	bpf_probe_read_user(&ret, sizeof(ret), (void *)PT_REGS_SP(regs));
	ips[0] = ips[1];
	ips[1] = ret;
	*flags |= SF_CALLER_FROM_SP;
	return frames + 1;
}

/* Copies map memory to map memory: clang cannot inline a memcpy this large for BPF. */
#define copy_big(dst, src, size) bpf_probe_read_kernel((dst), (size), (src))

#endif
