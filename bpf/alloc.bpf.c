/* Allocations and frees: uprobes on the malloc family and free. An allocation of at least
 * `min_size` bytes (one in `sample_every`) becomes an event with its user stack, and its
 * address goes into `live`; a free is sent only for an address in `live`, so the leak report
 * works without sending every free. */
#include "common.bpf.h"
#include "sample.bpf.h"
#include "aggregate.bpf.h"

const volatile __u64 min_size = 0;
const volatile __u32 sample_every = 1;
/* --no-free: nothing needs the returned address (no block is tracked), so an allocation
 * is sent from its entry and no return probe is needed at all: one trap per call. */
const volatile bool entry_only = false;
/* --sample-bytes: mean bytes between samples (0: off). Not const: --max-cpu changes it
 * while recording (each change is a record in the trace). */
__u64 sample_bytes = 0;

/* Bytes left before the next sample, per CPU (see sample.bpf.h); < 0 or 0: draw anew. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __s64);
} sample_left SEC(".maps");

/* Whether an allocation of `size` bytes is the sampled one; sets *period. */
static __always_inline bool sampled_by_bytes(__u64 size, __u64 *period)
{
	__u64 mean = sample_bytes;
	*period = mean;
	if (mean <= 1) {
		/* off, or --sample-bytes 1: every allocation, each standing for itself */
		*period = 0;
		return true;
	}
	__u32 z = 0;
	__s64 *left = bpf_map_lookup_elem(&sample_left, &z);
	if (!left)
		return true;
	if (*left == 0)
		*left = exp_draw(mean) + 1; /* first call on this CPU */
	*left -= (__s64)size;
	if (*left > 0)
		return false;
	*left = exp_draw(mean) + 1;
	return true;
}

/* The call between entry and return, per thread, in task storage: created once per thread
 * and then only overwritten, where a hash keyed by tid cost a 1 KiB insert (and a delete)
 * per allocation — the larger part of the BPF time. Freed with the thread. An allocator
 * function that tail-calls another (reallocarray → realloc) is one call: the inner entry
 * overwrites the slot, the first return sends it, the second finds it inactive. */
struct alloc_slot {
	struct alloc_event e;
	__u32 active;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct alloc_slot);
} inflight SEC(".maps");

/* The same for the functions of --alloc-fn: an arena's allocate function that calls malloc
 * to grow would otherwise lose its call to malloc's entry, which overwrites the slot. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct alloc_slot);
} inflight_custom SEC(".maps");

/* A block of `allocator` (0: the system allocator; N: the Nth --alloc-fn): each custom
 * allocator's addresses are a space of their own (an arena's first block is often at the
 * address of the chunk malloc gave the arena). */
struct block_key {
	__u32 pid;
	__u32 allocator;
	__u64 addr;
};

/* Traced blocks not yet freed (the stack and size only with --aggregate). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 20);
	__type(key, struct block_key);
	__type(value, struct live_block);
} live SEC(".maps");

/* Processes with blocks in `live`, so that an exit walks the map only when it must. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} has_blocks SEC(".maps");

/* Force the event types into BTF for the skeleton. */
struct alloc_event _alloc_event = {};
struct free_event _free_event = {};
struct fork_hold_event _fork_hold_event = {};

/* Sends an allocation event up to its last stack slot; whether it went. */
static __always_inline bool send_alloc(struct alloc_event *e, __u64 addr)
{
	fill_header(&e->h, FAM_ALLOC);
	e->addr = addr;
	__u32 n = e->nframes;
	if (n > MAX_FRAMES)
		n = MAX_FRAMES;
	__u64 size = __builtin_offsetof(struct alloc_event, ips) + n * sizeof(__u64);
	if (bpf_ringbuf_output(&events, e, size, BPF_RB_NO_WAKEUP)) {
		count(FAM_ALLOC, CTR_LOST_RINGBUF);
		return false;
	}
	return true;
}

/* Adds one call of `size` bytes under the stack of `e`, and with `bk` its block: into
 * `live` with the stack's hash, and into the stack's live gauges. Whether it was counted. */
static __always_inline bool agg_alloc(struct alloc_event *e, __u64 size, struct block_key *bk)
{
	struct agg_key k;
	struct agg_val *v = agg_get(&k, FAM_ALLOC, e->ips, e->nframes, 0, 0, e->flags, 0);
	if (!v)
		return false;
	__sync_fetch_and_add(&v->count, 1);
	__sync_fetch_and_add(&v->sum, size);
	if (bk) {
		struct live_block b = { .hash = k.hash, .size = size };
		if (bpf_map_update_elem(&live, bk, &b, BPF_ANY)) {
			count(FAM_FREE, CTR_LOST_MAP_FULL);
			return true;
		}
		__sync_fetch_and_add(&v->live_count, 1);
		__sync_fetch_and_add(&v->live_bytes, size);
	}
	return true;
}

/* A traced block of the current process freed: out of its stack's live gauges. */
static __always_inline void agg_unlive(__u32 pid, struct live_block *b)
{
	struct agg_key k = { .pid = pid, .family = FAM_ALLOC };
	k.mm = (__u64)bpf_get_current_task_btf()->mm;
	k.hash = b->hash;
	struct agg_val *v = bpf_map_lookup_elem(&agg_counts, &k);
	if (!v)
		return;
	__sync_fetch_and_add(&v->live_count, -1);
	__sync_fetch_and_add(&v->live_bytes, -b->size);
}

/* Returns 1 when the call's return matters (a slot was filled), 0 when it does not: a
 * session program then tells the kernel to skip the return probe. */
static __always_inline int enter_in(struct pt_regs *ctx, void *slots, __u32 kind,
				    __u32 allocator, __u64 size, __u64 arg)
{
	count(FAM_ALLOC, CTR_HITS);
	__u64 pt = bpf_get_current_pid_tgid();
	bool old_traced = false;
	if (!entry_only && (kind == AK_REALLOC || kind == AK_REALLOCARRAY)) {
		struct block_key k = { .pid = pt >> 32, .allocator = 0, .addr = arg };
		old_traced = arg && bpf_map_lookup_elem(&live, &k);
	}
	bool keep = size >= min_size;
	if (keep && sample_every > 1 && bpf_get_prandom_u32() % sample_every)
		keep = false;
	__u64 period = 0;
	if (keep && !sampled_by_bytes(size, &period))
		keep = false;
	if (!keep)
		count(FAM_ALLOC, CTR_FILTERED);
	else if (!admit(FAM_ALLOC))
		keep = false;
	if (!keep && !old_traced)
		return 0;
	struct alloc_slot *slot = bpf_task_storage_get(slots, bpf_get_current_task_btf(), 0,
						       BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!slot) {
		count(FAM_ALLOC, CTR_LOST_MAP_FULL);
		return 0;
	}
	slot->active = 1;
	struct alloc_event *e = &slot->e;
	e->kind = kind;
	e->allocator = allocator;
	e->pad = 0;
	e->size = keep ? size : 0;
	e->arg = arg;
	e->old_traced = old_traced;
	e->flags = 0;
	e->sample_period = keep ? period : 0;
	e->nframes = keep ? user_stack(ctx, e->ips, &e->flags, true) : 0;
	e->copy_id = keep ? stack_copy() : 0;
	/* kind 0 marks "only the free of the old block matters". */
	if (!keep)
		e->kind = 0;
	if (entry_only) {
		/* Sent now, without the block's address (a call that fails is counted too). */
		slot->active = 0;
		if (aggregate)
			agg_alloc(e, size, 0);
		else
			send_alloc(e, 0);
		return 0;
	}
	return 1;
}

/* A call of the system allocator. */
static __always_inline int enter(struct pt_regs *ctx, __u32 kind, __u64 size, __u64 arg)
{
	return enter_in(ctx, &inflight, kind, 0, size, arg);
}

SEC("uprobe")
int BPF_UPROBE(malloc_enter, __u64 size)
{
	enter(ctx, AK_MALLOC, size, 0);
	return 0;
}

SEC("uprobe")
int BPF_UPROBE(calloc_enter, __u64 n, __u64 size)
{
	/* Operands past 32 bits may overflow: calloc fails then, and ~0 never passes a
	 * threshold-free filter unnoticed (the failed call returns NULL and is not sent). */
	__u64 total = ((n | size) >> 32) ? ~0ULL : n * size;
	enter(ctx, AK_CALLOC, total, 0);
	return 0;
}

SEC("uprobe")
int BPF_UPROBE(realloc_enter, __u64 ptr, __u64 size)
{
	enter(ctx, AK_REALLOC, size, ptr);
	return 0;
}

SEC("uprobe")
int BPF_UPROBE(reallocarray_enter, __u64 ptr, __u64 n, __u64 size)
{
	enter(ctx, AK_REALLOCARRAY, n * size, ptr);
	return 0;
}

SEC("uprobe")
int BPF_UPROBE(posix_memalign_enter, __u64 memptr, __u64 align, __u64 size)
{
	enter(ctx, AK_POSIX_MEMALIGN, size, memptr);
	return 0;
}

SEC("uprobe")
int BPF_UPROBE(aligned_alloc_enter, __u64 align, __u64 size)
{
	enter(ctx, AK_ALIGNED_ALLOC, size, 0);
	return 0;
}

SEC("uprobe")
int BPF_UPROBE(memalign_enter, __u64 align, __u64 size)
{
	enter(ctx, AK_MEMALIGN, size, 0);
	return 0;
}

SEC("uprobe")
int BPF_UPROBE(valloc_enter, __u64 size)
{
	enter(ctx, AK_VALLOC, size, 0);
	return 0;
}

SEC("uprobe")
int BPF_UPROBE(pvalloc_enter, __u64 size)
{
	enter(ctx, AK_PVALLOC, size, 0);
	return 0;
}

static __always_inline void send_free(__u32 pid, __u64 addr, __u32 allocator)
{
	struct free_event *f = bpf_ringbuf_reserve(&events, sizeof(*f), 0);
	if (!f) {
		count(FAM_FREE, CTR_LOST_RINGBUF);
		return;
	}
	fill_header(&f->h, FAM_FREE);
	f->addr = addr;
	f->allocator = allocator;
	f->pad = 0;
	bpf_ringbuf_submit(f, BPF_RB_NO_WAKEUP);
}

/* A free (or a realloc) of the block at `k`: if it is traced, it is no longer, and the
 * free is sent (or, --aggregate, taken off its stack's live gauges). Whether it was. */
static __always_inline bool untrack(__u32 pid, struct block_key *k)
{
	/* Most frees are of untraced blocks: a lookup (lock-free) decides, and only a traced
	 * block pays the delete (which takes the bucket lock even when the key is absent). */
	struct live_block *b = bpf_map_lookup_elem(&live, k);
	if (!b)
		return false;
	struct live_block c = *b;
	if (bpf_map_delete_elem(&live, k))
		return false;
	if (aggregate)
		agg_unlive(pid, &c);
	else
		send_free(pid, k->addr, k->allocator);
	return true;
}

static __always_inline void leave_in(void *slots, __u64 ret)
{
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	struct alloc_slot *slot = bpf_task_storage_get(slots, bpf_get_current_task_btf(), 0, 0);
	if (!slot || !slot->active)
		return;
	slot->active = 0;
	struct alloc_event *e = &slot->e;
	__u64 addr = ret;
	if (e->kind == AK_POSIX_MEMALIGN) {
		addr = 0;
		if (ret == 0)
			bpf_probe_read_user(&addr, sizeof(addr), (void *)e->arg);
	}
	if (e->old_traced && (addr || e->size == 0)) {
		/* realloc moved or freed a traced block (realloc(p, 0) frees and may return NULL):
		 * a free of the free family, a hit of it as free()'s are */
		struct block_key k = { .pid = pid, .addr = e->arg };
		if (untrack(pid, &k))
			count(FAM_FREE, CTR_HITS);
	}
	if (e->kind && !addr) {
		/* No block: a failed call, or realloc(p, 0), which only frees. A hit that is no
		 * allocation: filtered, so that kept + lost + filtered = hits. */
		count(FAM_ALLOC, CTR_FILTERED);
	}
	if (e->kind && addr) {
		struct block_key k = { .pid = pid, .allocator = e->allocator, .addr = addr };
		bool tracked;
		if (aggregate) {
			tracked = agg_alloc(e, e->size, &k);
		} else {
			tracked = send_alloc(e, addr);
			struct live_block b = {};
			if (tracked && bpf_map_update_elem(&live, &k, &b, BPF_ANY)) {
				count(FAM_FREE, CTR_LOST_MAP_FULL);
				tracked = false;
			}
		}
		__u8 one = 1;
		if (tracked && !bpf_map_lookup_elem(&has_blocks, &pid))
			bpf_map_update_elem(&has_blocks, &pid, &one, BPF_ANY);
	}
}

static __always_inline void leave(__u64 ret)
{
	leave_in(&inflight, ret);
}

SEC("uretprobe")
int BPF_URETPROBE(alloc_return, __u64 ret)
{
	leave(ret);
	return 0;
}

static __always_inline void do_free_of(__u64 ptr, __u32 allocator)
{
	if (!ptr)
		return;
	count(FAM_FREE, CTR_HITS);
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	struct block_key k = { .pid = pid, .allocator = allocator, .addr = ptr };
	if (!untrack(pid, &k))
		count(FAM_FREE, CTR_FILTERED);
}

static __always_inline void do_free(__u64 ptr)
{
	do_free_of(ptr, 0);
}

SEC("uprobe")
int BPF_UPROBE(free_enter, __u64 ptr)
{
	do_free(ptr);
	return 0;
}

/* --- --alloc-fn: a custom allocator's functions (classic uprobes) ---
 *
 * The cookie is (allocator << 8) | the index of the argument the program reads (0-based,
 * in the integer argument registers: a member function's `this` is argument 0): the size
 * for the allocation function, the pointer for the free function. The allocation's return
 * runs `leave` on the custom slot; the events are the system allocator's, kind AK_CUSTOM,
 * with the allocator's number. */
static __always_inline __u64 arg_at(struct pt_regs *ctx, __u32 i)
{
	/* One read at a computed offset: the verifier refuses a load through a ctx pointer
	 * moved by a variable, which is what a switch over PT_REGS_PARMn compiles to. */
	__u32 off;
	switch (i) {
	case 0:
		off = __builtin_offsetof(struct pt_regs, di);
		break;
	case 1:
		off = __builtin_offsetof(struct pt_regs, si);
		break;
	case 2:
		off = __builtin_offsetof(struct pt_regs, dx);
		break;
	case 3:
		off = __builtin_offsetof(struct pt_regs, cx);
		break;
	case 4:
		off = __builtin_offsetof(struct pt_regs, r8);
		break;
	default:
		off = __builtin_offsetof(struct pt_regs, r9);
		break;
	}
	__u64 v = 0;
	bpf_probe_read_kernel(&v, sizeof(v), (void *)ctx + off);
	return v;
}

SEC("uprobe")
int custom_alloc_enter(struct pt_regs *ctx)
{
	__u64 c = bpf_get_attach_cookie(ctx);
	enter_in(ctx, &inflight_custom, AK_CUSTOM, c >> 8, arg_at(ctx, c & 0xff), 0);
	return 0;
}

SEC("uretprobe")
int custom_alloc_return(struct pt_regs *ctx)
{
	leave_in(&inflight_custom, PT_REGS_RC(ctx));
	return 0;
}

SEC("uprobe")
int custom_free_enter(struct pt_regs *ctx)
{
	__u64 c = bpf_get_attach_cookie(ctx);
	do_free_of(arg_at(ctx, c & 0xff), c >> 8);
	return 0;
}

/* --- uprobe sessions (kernel >= 6.13) ---
 *
 * One program for every allocation function of a library, attached with one uprobe_multi
 * link whose cookie per offset is the AllocKind. At entry it returns 1 for a call it does
 * not keep, and the kernel then skips the return probe: an allocation below the threshold
 * (or not sampled) costs one trap instead of two (with one traced process: see free_multi).
 * The return runs the same code as alloc_return. free has a link of its own (free_multi). */
extern bool bpf_session_is_return(void) __ksym __weak;


/* A uprobe_multi link with a pid covers that one process: its children are not probed
 * until ebrec attaches links for them. So that none of their allocations go unseen, a new
 * process forked by a session-probed one is stopped (SIGSTOP, before it first runs) and
 * announced; ebrec attaches its links and continues it (SIGCONT), a millisecond or so later.
 * `session_pids`: the processes with links (user space adds each; a child goes in here). */
const volatile bool hold_children = false;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} session_pids SEC(".maps");

enum pid_type___eb { PIDTYPE_PID___eb = 0 };
extern int bpf_send_signal_task(struct task_struct *task, int sig, enum pid_type___eb type,
				__u64 value) __ksym __weak;

SEC("tp_btf/sched_process_fork")
int BPF_PROG(alloc_fork, struct task_struct *parent, struct task_struct *child)
{
	if (!hold_children)
		return 0;
	__u32 ppid = parent->tgid, cpid = child->tgid;
	if (ppid == cpid || !bpf_map_lookup_elem(&session_pids, &ppid))
		return 0;
	__u8 one = 1;
	bpf_map_update_elem(&session_pids, &cpid, &one, BPF_ANY);
	struct fork_hold_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(FAM_PROCESS, CTR_LOST_RINGBUF);
		return 0;
	}
	fill_header(&e->h, FAM_PROCESS);
	e->h.pid = cpid;
	e->h.tid = cpid;
	e->ppid = ppid;
	e->stopped = bpf_send_signal_task(child, 19 /* SIGSTOP */, PIDTYPE_PID___eb, 0) == 0;
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
	return 0;
}

SEC("uprobe.session")
int alloc_session(struct pt_regs *ctx)
{
	if (bpf_session_is_return()) {
		leave(PT_REGS_RC(ctx));
		return 0;
	}
	__u32 kind = bpf_get_attach_cookie(ctx);
	__u64 a0 = PT_REGS_PARM1(ctx), a1 = PT_REGS_PARM2(ctx), a2 = PT_REGS_PARM3(ctx);
	int want;
	switch (kind) {
	case AK_CALLOC:
		want = enter(ctx, kind, ((a0 | a1) >> 32) ? ~0ULL : a0 * a1, 0);
		break;
	case AK_REALLOC:
		want = enter(ctx, kind, a1, a0);
		break;
	case AK_REALLOCARRAY:
		want = enter(ctx, kind, a1 * a2, a0);
		break;
	case AK_POSIX_MEMALIGN:
		want = enter(ctx, kind, a2, a0);
		break;
	case AK_ALIGNED_ALLOC:
	case AK_MEMALIGN:
		want = enter(ctx, kind, a1, 0);
		break;
	default: /* malloc, valloc, pvalloc */
		want = enter(ctx, kind, a0, 0);
		break;
	}
	return want ? 0 : 1;
}

/* free beside the sessions, in a uprobe_multi link of its own that is not a session. A
 * uprobe has one consumer per link, that is per traced process, and a trap runs the handler
 * of each: a session consumer whose process is not the caller's asks for the return, so a
 * free in the sessions' link took the return probe too (and the kernel's bookkeeping for
 * every other process's consumer) as soon as two processes were traced. free needs no
 * return: here it has none, whatever the number of processes. */
SEC("uprobe.multi")
int BPF_UPROBE(free_multi, __u64 ptr)
{
	do_free(ptr);
	return 0;
}

/* Blocks of a process that exits or execs can never be freed: forget them, so that the map
 * does not fill up over a long recording. (The trace keeps them: they are the leaks of a
 * process that ended, which is exactly what the leak report shows.) */
static long forget_block(void *map, struct block_key *k, __u8 *v, __u32 *pid)
{
	if (k->pid == *pid)
		bpf_map_delete_elem(map, k);
	return 0;
}

static __always_inline void forget_process(__u32 pid)
{
	if (!bpf_map_lookup_elem(&has_blocks, &pid))
		return;
	bpf_for_each_map_elem(&live, forget_block, &pid, 0);
	bpf_map_delete_elem(&has_blocks, &pid);
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(alloc_exit, struct task_struct *task)
{
	__u32 tid = BPF_CORE_READ(task, pid);
	__u32 pid = BPF_CORE_READ(task, tgid);
	if (tid == pid) {
		forget_process(pid);
		bpf_map_delete_elem(&session_pids, &pid);
	}
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(alloc_exec, struct task_struct *task)
{
	forget_process(BPF_CORE_READ(task, tgid));
	return 0;
}
