/* Allocations sampled by bytes inside the process (`--alloc-sampler preload`): ebrec's
 * preloaded shim (bpf/preload.c) decides which allocations are sampled and calls its
 * probe sites only for those, and for the frees of the blocks it sampled. These programs turn
 * the calls into the same alloc_event / free_event as alloc.bpf.c, with `sample_period` set,
 * so that the reports scale them back (tcmalloc's estimate).
 *
 * The allocation probe is reached by a tail call from the interposed function: at its first
 * instruction [sp] is the return address into the allocator's caller and every other frame is
 * the caller's. The stack is taken as at any function-entry probe, then its first frame (the
 * probe's own pc, in the shim) is dropped: the stack starts at the call of malloc (the return
 * address - 1, so that the leaf, looked up as an exact pc, names the call's line). In dwarf
 * mode the copy starts there too: the registers are the caller's right after the call
 * returned (pc = [sp], sp + 8, rbp unchanged), and the bytes are copied from that sp. */
#include "common.bpf.h"

const volatile __u64 sample_period = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct alloc_event);
} scratch SEC(".maps");

/* Force the event types into BTF for the skeleton. */
struct alloc_event _alloc_event = {};
struct free_event _free_event = {};

/* The caller's stack copy (dwarf mode): fill_copy's, from the caller's sp. */
static __always_inline __u64 caller_copy(__u64 ra, __u64 sp, __u64 bp)
{
	if (!copy_bytes)
		return 0;
	__u32 cpu = bpf_get_smp_processor_id();
	struct copy_event *c = bpf_map_lookup_elem(&copy_scratch, &cpu);
	if (!c)
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	c->ip = ra - 1;
	c->sp = sp;
	c->bp = bp;
	__u32 want = copy_bytes > MAX_COPY ? MAX_COPY : copy_bytes;
	__u64 end = 0;
	if (bpf_find_vma(task, sp, vma_end, &end, 0) == 0 && end > sp && end - sp < want)
		want = end - sp;
	__u32 len = 0;
	for (int i = 0; i < MAX_COPY / 4096 + 1; i++) {
		if (len >= want)
			break;
		__u64 a = sp + len;
		__u32 chunk = 4096 - (a & 4095);
		if (chunk > want - len)
			chunk = want - len;
		/* the bound Linux 6.1's verifier needs (see fill_copy) */
		asm volatile("" : "+r"(chunk));
		chunk = ((chunk - 1) & 4095) + 1;
		if (bpf_probe_read_user(&c->data[len & (MAX_COPY - 1)], chunk, (void *)a))
			break;
		len += chunk;
	}
	if (len > MAX_COPY)
		len = MAX_COPY;
	c->len = len;
	if (len == 0)
		count(FAM_STACK_COPY, CTR_FILTERED);
	return send_copy(c);
}

SEC("uprobe")
int BPF_UPROBE(sampled_alloc, __u64 addr, __u64 size, __u32 kind)
{
	count(FAM_ALLOC, CTR_HITS);
	if (!admit(FAM_ALLOC))
		return 0;
	__u32 z = 0;
	struct alloc_event *e = bpf_map_lookup_elem(&scratch, &z);
	if (!e) {
		count(FAM_ALLOC, CTR_LOST_MAP_FULL);
		return 0;
	}
	struct pt_regs *regs = ctx;
	__u64 sp = PT_REGS_SP(regs);
	__u64 ra = 0;
	bpf_probe_read_user(&ra, sizeof(ra), (void *)sp);
	e->kind = kind;
	e->size = size;
	e->addr = addr;
	e->arg = 0;
	e->old_traced = 0;
	e->allocator = 0;
	e->pad = 0;
	e->flags = 0;
	e->sample_period = sample_period;
	__u32 n = user_stack(ctx, e->ips, &e->flags, true);
	if (n > MAX_FRAMES)
		n = MAX_FRAMES;
	/* Drop frame 0 (the probe's pc); frame 1 is the caller read from [sp], and a frame
	 * walk that had added it too repeats it in frame 2. */
	__u32 drop = 1;
	if (n >= 3 && e->ips[1] == e->ips[2] && (e->flags & SF_CALLER_FROM_SP))
		drop = 2;
	e->flags &= ~SF_CALLER_FROM_SP;
	if (n <= drop) {
		n = 0;
	} else {
		for (__u32 i = 0; i < MAX_FRAMES - 2; i++) {
			if (i + drop >= n)
				break;
			e->ips[i] = e->ips[(i + drop) & (MAX_FRAMES - 1)];
		}
		n -= drop;
		e->ips[0] -= 1;
	}
	e->nframes = n;
	e->copy_id = caller_copy(ra, sp + 8, PT_REGS_FP(regs));
	fill_header(&e->h, FAM_ALLOC);
	if (n > MAX_FRAMES)
		n = MAX_FRAMES;
	__u64 bytes = __builtin_offsetof(struct alloc_event, ips) + n * sizeof(__u64);
	if (bpf_ringbuf_output(&events, e, bytes, BPF_RB_NO_WAKEUP))
		count(FAM_ALLOC, CTR_LOST_RINGBUF);
	return 0;
}

SEC("uprobe")
int BPF_UPROBE(sampled_free, __u64 addr)
{
	count(FAM_FREE, CTR_HITS);
	struct free_event *f = bpf_ringbuf_reserve(&events, sizeof(*f), 0);
	if (!f) {
		count(FAM_FREE, CTR_LOST_RINGBUF);
		return 0;
	}
	fill_header(&f->h, FAM_FREE);
	f->addr = addr;
	f->allocator = 0;
	f->pad = 0;
	bpf_ringbuf_submit(f, BPF_RB_NO_WAKEUP);
	return 0;
}
