/* Lock contention, two ways.
 *
 * futex mode (--lock): a contended pthread mutex ends in futex(FUTEX_WAIT*) and its release
 * in futex(FUTEX_WAKE*). The raw syscall tracepoints (tp_btf: no tracefs needed) see both;
 * uncontended locks never enter the kernel and cost nothing. A wait of at least
 * `min_wait_ns` becomes an event with the waiter's stack and, if a target thread woke that
 * futex word after the wait began, the waker's tid and stack.
 *
 * uprobe mode (--lock-mode uprobe): pthread_mutex_lock/trylock/unlock probes give exact wait
 * (call to return) and hold (acquisition to unlock by the same thread) times of every lock.
 */
#include "targets.bpf.h"
#include "aggregate.bpf.h"

const volatile __u64 min_wait_ns = 0;
const volatile __u64 min_hold_ns = 0;

#define NR_FUTEX 202
#define FUTEX_WAIT 0
#define FUTEX_WAKE 1
#define FUTEX_REQUEUE 3
#define FUTEX_CMP_REQUEUE 4
#define FUTEX_WAKE_OP 5
#define FUTEX_LOCK_PI 6
#define FUTEX_UNLOCK_PI 7
#define FUTEX_WAIT_BITSET 9
#define FUTEX_WAKE_BITSET 10
#define FUTEX_WAIT_REQUEUE_PI 11
#define FUTEX_LOCK_PI2 13
#define FUTEX_CMD_MASK 0x7f

struct wait_state {
	__u64 start;
	__u64 uaddr;
	__u32 op;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct wait_state);
} waits SEC(".maps");

struct waker_key {
	__u32 pid;
	__u32 pad;
	__u64 uaddr;
};

struct waker {
	__u64 time;
	__u32 tid;
	__u32 nframes;
	__u32 flags;
	__u32 pad;
	__u64 ips[MAX_FRAMES];
};

/* Last wake per futex word; LRU so that words nobody waits on age out. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct waker_key);
	__type(value, struct waker);
} wakers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lock_event);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct waker);
} waker_scratch SEC(".maps");

struct lock_event _lock_event = {};

SEC("tp_btf/sched_process_fork")
int BPF_PROG(lock_fork, struct task_struct *parent, struct task_struct *child)
{
	targets_fork(parent, child);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(lock_exit, struct task_struct *task)
{
	__u32 tid = BPF_CORE_READ(task, pid);
	bpf_map_delete_elem(&waits, &tid);
	targets_exit(task);
	return 0;
}

static __always_inline void futex_enter_do(unsigned long long *ctx, struct pt_regs *regs, long id)
{
	if (id != NR_FUTEX)
		return;
	__u64 pt = bpf_get_current_pid_tgid();
	__u32 pid = pt >> 32, tid = (__u32)pt;
	if (!is_target(pid))
		return;
	__u64 uaddr = regs->di;
	__u32 op = regs->si & FUTEX_CMD_MASK;
	switch (op) {
	case FUTEX_WAIT:
	case FUTEX_WAIT_BITSET:
	case FUTEX_LOCK_PI:
	case FUTEX_LOCK_PI2:
	case FUTEX_WAIT_REQUEUE_PI: {
		/* A wait is a hit when it ends (then it has an outcome); one that cannot be
		 * tracked is a hit lost now. */
		struct wait_state w = { .start = bpf_ktime_get_boot_ns(), .uaddr = uaddr, .op = op };
		if (bpf_map_update_elem(&waits, &tid, &w, BPF_ANY)) {
			count(FAM_LOCK, CTR_HITS);
			count(FAM_LOCK, CTR_LOST_MAP_FULL);
		}
		return;
	}
	case FUTEX_WAKE:
	case FUTEX_WAKE_BITSET:
	case FUTEX_WAKE_OP:
	case FUTEX_UNLOCK_PI:
	case FUTEX_REQUEUE:
	case FUTEX_CMP_REQUEUE: {
		__u32 z = 0;
		struct waker *w = bpf_map_lookup_elem(&waker_scratch, &z);
		if (!w)
			return;
		w->time = bpf_ktime_get_boot_ns();
		w->tid = tid;
		w->flags = 0;
		/* In a raw syscall tracepoint, the user stack is that of the syscall site. */
		w->nframes = waker_stack(ctx, w->ips, &w->flags);
		struct waker_key k = { .pid = pid, .uaddr = uaddr };
		bpf_map_update_elem(&wakers, &k, w, BPF_ANY);
		return;
	}
	}
	return;
}

/* A member of the sys_enter chain (hub.bpf.c). */
SEC("tp_btf/sys_enter")
int BPF_PROG(futex_enter, struct pt_regs *regs, long id)
{
	futex_enter_do(ctx, regs, id);
	chain_next(ctx, &sys_enter_chain, CM_FUTEX_ENTER);
	return 0;
}

/* The same at syscalls:sys_enter_futex, when the chain is not attached (common.bpf.h). */
SEC("tracepoint")
int futex_enter_tp(void *ctx)
{
	futex_enter_do(ctx, sc_user_regs(), NR_FUTEX);
	return 0;
}

static __always_inline void futex_exit_do(unsigned long long *ctx, struct pt_regs *regs, long ret)
{
	if (regs->orig_ax != NR_FUTEX)
		return;
	__u64 pt = bpf_get_current_pid_tgid();
	__u32 pid = pt >> 32, tid = (__u32)pt;
	struct wait_state *w = bpf_map_lookup_elem(&waits, &tid);
	if (!w)
		return;
	__u64 now = bpf_ktime_get_boot_ns();
	__u64 start = w->start, uaddr = w->uaddr;
	__u32 op = w->op;
	bpf_map_delete_elem(&waits, &tid);
	count(FAM_LOCK, CTR_HITS);
	if (now - start < min_wait_ns) {
		count(FAM_LOCK, CTR_FILTERED);
		return;
	}
	if (!admit(FAM_LOCK))
		return;
	__u32 z = 0;
	struct lock_event *e = bpf_map_lookup_elem(&scratch, &z);
	if (!e)
		return;
	fill_header(&e->h, FAM_LOCK);
	e->h.time_ns = start;
	e->uaddr = uaddr;
	e->wait_ns = now - start;
	e->hold_ns = 0;
	e->op = op;
	e->ret = ret;
	e->source = LS_FUTEX;
	e->flags = 0;
	e->waker_flags = 0;
	e->waker_tid = 0;
	e->waker_nframes = 0;
	e->nframes = user_stack(ctx, e->ips, &e->flags, false);
	if (aggregate) {
		/* Counted under the waiter's stack and the futex (no waker stack). */
		agg_add(FAM_LOCK, e->ips, e->nframes, 0, 0, e->flags, uaddr, e->wait_ns, 0);
		return;
	}
	e->copy_id = stack_copy();
	struct waker_key k = { .pid = pid, .uaddr = uaddr };
	struct waker *wk = bpf_map_lookup_elem(&wakers, &k);
	__u64 size = __builtin_offsetof(struct lock_event, ips) + MAX_FRAMES * sizeof(__u64);
	if (wk && wk->time >= start && wk->tid != tid) {
		e->waker_tid = wk->tid;
		e->waker_flags = wk->flags;
		__u32 n = wk->nframes;
		if (n > MAX_FRAMES)
			n = MAX_FRAMES;
		e->waker_nframes = n;
		copy_big(&e->ips[MAX_FRAMES], wk->ips, sizeof(wk->ips));
		size += n * sizeof(__u64);
	} else {
		__u32 n = e->nframes;
		if (n > MAX_FRAMES)
			n = MAX_FRAMES;
		size = __builtin_offsetof(struct lock_event, ips) + n * sizeof(__u64);
	}
	if (size > sizeof(*e))
		size = sizeof(*e);
	if (bpf_ringbuf_output(&events, e, size, BPF_RB_NO_WAKEUP))
		count(FAM_LOCK, CTR_LOST_RINGBUF);
	return;
}

/* A member of the sys_exit chain (hub.bpf.c). */
SEC("tp_btf/sys_exit")
int BPF_PROG(futex_exit, struct pt_regs *regs, long ret)
{
	futex_exit_do(ctx, regs, ret);
	chain_next(ctx, &sys_exit_chain, CM_FUTEX_EXIT);
	return 0;
}

/* The same at syscalls:sys_exit_futex. */
SEC("tracepoint")
int futex_exit_tp(struct sc_exit_ctx *ctx)
{
	futex_exit_do((void *)ctx, sc_user_regs(), ctx->ret);
	return 0;
}

/* --- uprobe mode --- */

struct lock_call {
	__u64 start;
	__u64 mutex;
	__u64 copy_id;
	__u32 nframes;
	__u32 flags;
	__u64 ips[MAX_FRAMES];
};

/* The pthread_mutex_lock call in progress, per thread, in task storage (created once per
 * thread, then overwritten in place: no 1 KiB hash insert and delete per lock call). */
struct call_slot {
	struct lock_call c;
	__u32 active;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct call_slot);
} calls SEC(".maps");

struct held_key {
	__u32 tid;
	__u32 pad;
	__u64 mutex;
};

struct held {
	__u64 acquired;
	__u64 wait_ns;
	struct lock_call call;
};

/* Mutexes held, per (thread, mutex): nested locks of several mutexes each have theirs. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct held_key);
	__type(value, struct held);
} held SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct held);
} held_scratch SEC(".maps");

static __always_inline int lock_enter(struct pt_regs *ctx, __u64 mutex)
{
	count(FAM_LOCK, CTR_HITS);
	if (!admit(FAM_LOCK))
		return 0;
	struct call_slot *slot = bpf_task_storage_get(&calls, bpf_get_current_task_btf(), 0,
						      BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!slot) {
		count(FAM_LOCK, CTR_LOST_MAP_FULL);
		return 0;
	}
	struct lock_call *c = &slot->c;
	c->start = bpf_ktime_get_boot_ns();
	c->mutex = mutex;
	c->flags = 0;
	c->nframes = user_stack(ctx, c->ips, &c->flags, true);
	c->copy_id = stack_copy();
	slot->active = 1;
	return 0;
}

SEC("uprobe")
int BPF_UPROBE(mutex_lock_enter, __u64 mutex)
{
	return lock_enter(ctx, mutex);
}

SEC("uprobe")
int BPF_UPROBE(mutex_trylock_enter, __u64 mutex)
{
	return lock_enter(ctx, mutex);
}

SEC("uretprobe")
int BPF_URETPROBE(mutex_lock_return, long ret)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct call_slot *slot = bpf_task_storage_get(&calls, bpf_get_current_task_btf(), 0, 0);
	if (!slot || !slot->active)
		return 0;
	slot->active = 0;
	struct lock_call *c = &slot->c;
	if (ret == 0) {
		__u32 z = 0;
		struct held *h = bpf_map_lookup_elem(&held_scratch, &z);
		if (h) {
			__u64 now = bpf_ktime_get_boot_ns();
			h->acquired = now;
			h->wait_ns = now - c->start;
			copy_big(&h->call, c, sizeof(*c));
			struct held_key k = { .tid = tid, .mutex = c->mutex };
			if (bpf_map_update_elem(&held, &k, h, BPF_ANY))
				count(FAM_LOCK, CTR_LOST_MAP_FULL);
		}
	} else {
		count(FAM_LOCK, CTR_FILTERED); /* a trylock that did not get the mutex */
	}
	return 0;
}

SEC("uprobe")
int BPF_UPROBE(mutex_unlock_enter, __u64 mutex)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct held_key k = { .tid = tid, .mutex = mutex };
	struct held *h = bpf_map_lookup_elem(&held, &k);
	if (!h)
		return 0;
	__u64 now = bpf_ktime_get_boot_ns();
	__u64 hold = now - h->acquired;
	if (h->wait_ns < min_wait_ns && hold < min_hold_ns) {
		count(FAM_LOCK, CTR_FILTERED);
		bpf_map_delete_elem(&held, &k);
		return 0;
	}
	if (aggregate) {
		agg_add(FAM_LOCK, h->call.ips, h->call.nframes, 0, 0, h->call.flags, mutex,
			h->wait_ns, hold);
		bpf_map_delete_elem(&held, &k);
		return 0;
	}
	__u32 z = 0;
	struct lock_event *e = bpf_map_lookup_elem(&scratch, &z);
	if (!e) {
		bpf_map_delete_elem(&held, &k);
		return 0;
	}
	fill_header(&e->h, FAM_LOCK);
	e->h.time_ns = h->call.start;
	e->uaddr = mutex;
	e->wait_ns = h->wait_ns;
	e->hold_ns = hold;
	e->waker_tid = 0;
	e->op = 0;
	e->ret = 0;
	e->source = LS_UPROBE;
	e->flags = h->call.flags;
	e->copy_id = h->call.copy_id;
	e->waker_flags = 0;
	e->waker_nframes = 0;
	__u32 n = h->call.nframes;
	if (n > MAX_FRAMES)
		n = MAX_FRAMES;
	e->nframes = n;
	copy_big(e->ips, h->call.ips, sizeof(h->call.ips));
	bpf_map_delete_elem(&held, &k);
	__u64 size = __builtin_offsetof(struct lock_event, ips) + n * sizeof(__u64);
	if (size > sizeof(*e))
		size = sizeof(*e);
	if (bpf_ringbuf_output(&events, e, size, BPF_RB_NO_WAKEUP))
		count(FAM_LOCK, CTR_LOST_RINGBUF);
	return 0;
}
