/* The system around the service: system calls (--syscalls), block I/O (--bio), run-queue
 * waits (--runq) and TCP connections (--tcp), all from tracepoints (tp_btf: no tracefs and
 * no kprobes needed).
 *
 * Every call, request and wait of a target is counted in a log-linear histogram per
 * (process, family, key) in `hists`, which user space reads every second: a million fast
 * calls cost no events. Only those past a family's threshold become events, with stacks.
 *
 * Each family's programs carry its prefix (sys_, bio_, runq_, tcp_): user space loads and
 * attaches only the chosen families', and --max-cpu charges each program to its family by
 * that prefix. */
#include "targets.bpf.h"

/* Thresholds, ns: shorter calls, requests and waits are only counted in the histograms. */
const volatile __u64 syscall_min_ns = 1000000;
const volatile __u64 bio_min_ns = 0;
const volatile __u64 runq_min_ns = 1000000;
/* --runq-sample: the sampling unit, ns (0: every long wait kept), as syscall_unit_ns. */
__u64 runq_unit_ns = 0;

/* --syscalls-sample: the sampling unit, ns (0: every slow call kept). A call past the
 * threshold but shorter than the unit is kept, with its stack, with probability
 * duration/unit and stands for `unit` ns (duration / p); the histograms still count every
 * call. At most 1 s (user space), so that the products below stay under 2^64. Writable
 * (.bss), as runq_unit_ns: --syscalls-rate raises it while recording (record/src/pacer.rs);
 * each call is judged by the value read once at its exit. */
__u64 syscall_unit_ns = 0;

/* Bumped by user space when --max-cpu resumes a paused family of this object: state taken
 * before the pause (an entry whose exit came while paused) is stale then. */
__u32 sys_epoch = 0;

/* One value for all CPUs, with atomic adds. 528 buckets (16 per power of two: percentiles
 * within 3%) of 2,136 bytes per key would be that times the CPU count in a per-CPU map
 * (64 MiB for only 490 keys on 64 CPUs); shared, the map is at most 33.4 MiB whatever the
 * CPU count, and a few hundred keys (what a recording holds) take well under a MiB. The
 * price: threads of one process making the same call at once on several CPUs bounce the
 * key's first cache line (count, sum) between them, as --aggregate's counters do. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, HIST_KEYS);
	__type(key, struct hist_key);
	__type(value, struct hist_val);
} hists SEC(".maps");

const volatile struct hist_val hist_zero = {};

/* The bucket of `v` ns, at most HIST_BUCKETS - 1 (events.h; `Layout::LogLinear` in
 * format/src/latency.rs computes the same). */
static __always_inline __u32 hist_bucket(__u64 v)
{
	if (v < HIST_SUB)
		return v;
	__u64 x = v;
	__u32 r = 0;
	if (v >> 32) {
		v >>= 32;
		r += 32;
	}
	if (v >> 16) {
		v >>= 16;
		r += 16;
	}
	if (v >> 8) {
		v >>= 8;
		r += 8;
	}
	if (v >> 4) {
		v >>= 4;
		r += 4;
	}
	if (v >> 2) {
		v >>= 2;
		r += 2;
	}
	if (v >> 1)
		r += 1;
	/* r = floor(log2(x)) >= HIST_SUB_BITS: the top HIST_SUB_BITS bits below the leading one
	 * pick the sub-bucket. */
	__u32 shift = r - HIST_SUB_BITS;
	__u32 b = ((shift + 1) << HIST_SUB_BITS) + ((__u32)(x >> shift) & (HIST_SUB - 1));
	return b < HIST_BUCKETS ? b : HIST_BUCKETS - 1;
}

/* The time-weighted sample of --syscalls-sample and --runq-sample: a duration `d` shorter
 * than `unit` (0: no sample) is kept with p = d/unit (r/2^32 < d/unit, unit at most 1 s so
 * that the products stay under 2^64) and stands for `unit` (*weight); false: not kept. */
static __always_inline bool time_sample(__u64 d, __u64 unit, __u64 *weight)
{
	*weight = 0;
	if (!unit || d >= unit)
		return true;
	__u64 r = bpf_get_prandom_u32();
	if (r * unit >= (d << 32))
		return false;
	*weight = unit;
	return true;
}

/* Counts one latency `d` under (pid, family, key). A full map is a counted loss of the
 * whole hit (no event either): false. */
static __always_inline bool hist_add(__u32 family, __u32 pid, __u64 key, __u64 d)
{
	struct hist_key k = { .pid = pid, .family = family, .key = key };
	struct hist_val *v = bpf_map_lookup_elem(&hists, &k);
	if (!v) {
		bpf_map_update_elem(&hists, &k, (void *)&hist_zero, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&hists, &k);
		if (!v) {
			count(family, CTR_LOST_MAP_FULL);
			return false;
		}
	}
	/* Shared by the CPUs: atomic adds, and the maximum raised by compare-and-swap, tried
	 * again while another CPU raised it less far (a bounded loop: after 8 lost races the
	 * value another CPU wrote stands). */
	__sync_fetch_and_add(&v->count, 1);
	__sync_fetch_and_add(&v->sum, d);
	__sync_fetch_and_add(&v->b[hist_bucket(d)], 1);
	__u64 m = v->max;
	for (int i = 0; i < 8 && d > m; i++) {
		__u64 was = __sync_val_compare_and_swap(&v->max, m, d);
		if (was == m)
			break;
		m = was;
	}
	return true;
}


/* --- processes --- */

SEC("tp_btf/sched_process_fork")
int BPF_PROG(proc_fork, struct task_struct *parent, struct task_struct *child)
{
	targets_fork(parent, child);
	return 0;
}

static __always_inline void runq_exit(struct task_struct *task);

SEC("tp_btf/sched_process_exit")
int BPF_PROG(proc_exit, struct task_struct *task)
{
	targets_exit(task);
	runq_exit(task);
	return 0;
}

/* --- syscalls --- */

struct sys_start {
	__u64 ts;
	__u32 nr;
	__u32 epoch;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct sys_start);
} sys_starts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct syscall_event);
} sys_scratch SEC(".maps");

static __always_inline void sys_enter_do(unsigned long long *ctx, struct pt_regs *regs, long id)
{
	struct task_struct *task = bpf_get_current_task_btf();
	/* A thread with state is a target's (it got it here): no need to look it up again. */
	struct sys_start *s = bpf_task_storage_get(&sys_starts, task, 0, 0);
	if (!s) {
		if (!is_target(task->tgid))
			return;
		s = bpf_task_storage_get(&sys_starts, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (!s) {
			count(FAM_SYSCALL, CTR_HITS);
			count(FAM_SYSCALL, CTR_LOST_MAP_FULL);
			return;
		}
	}
	s->nr = id;
	s->epoch = sys_epoch;
	s->ts = bpf_ktime_get_boot_ns();
	return;
}

/* A member of the sys_enter chain (hub.bpf.c). */
SEC("tp_btf/sys_enter")
int BPF_PROG(sys_enter, struct pt_regs *regs, long id)
{
	sys_enter_do(ctx, regs, id);
	chain_next(ctx, &sys_enter_chain, CM_SYS_ENTER);
	return 0;
}

static __always_inline void sys_exit_do(unsigned long long *ctx, struct pt_regs *regs, long ret)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct sys_start *s = bpf_task_storage_get(&sys_starts, task, 0, 0);
	if (!s || !s->ts)
		return;
	__u64 start = s->ts;
	__u32 nr = s->nr;
	s->ts = 0;
	if (s->epoch != sys_epoch)
		return; /* entered before a pause: its exit may not be this call's */
	__u64 d = bpf_ktime_get_boot_ns() - start;
	count(FAM_SYSCALL, CTR_HITS);
	if (!hist_add(FAM_SYSCALL, task->tgid, nr, d))
		return;
	if (d < syscall_min_ns) {
		count(FAM_SYSCALL, CTR_FILTERED);
		return;
	}
	__u64 weight = 0;
	if (!time_sample(d, READ_ONCE_U64(syscall_unit_ns), &weight)) {
		count(FAM_SYSCALL, CTR_FILTERED);
		return;
	}
	if (!admit(FAM_SYSCALL))
		return;
	__u32 z = 0;
	struct syscall_event *e = bpf_map_lookup_elem(&sys_scratch, &z);
	if (!e)
		return;
	fill_header(&e->h, FAM_SYSCALL);
	e->h.time_ns = start;
	e->duration_ns = d;
	e->ret = ret;
	e->nr = nr;
	e->flags = 0;
	e->weight_ns = weight;
	/* The user registers are still those of the entry: the caller's stack. */
	__u32 n = user_stack(ctx, e->ips, &e->flags, false);
	n &= MAX_FRAMES - 1;
	e->nframes = n;
	e->copy_id = stack_copy();
	__u64 size = __builtin_offsetof(struct syscall_event, ips) + n * sizeof(__u64);
	if (bpf_ringbuf_output(&events, e, size, BPF_RB_NO_WAKEUP))
		count(FAM_SYSCALL, CTR_LOST_RINGBUF);
	return;
}

/* A member of the sys_exit chain (hub.bpf.c). */
SEC("tp_btf/sys_exit")
int BPF_PROG(sys_exit, struct pt_regs *regs, long ret)
{
	sys_exit_do(ctx, regs, ret);
	chain_next(ctx, &sys_exit_chain, CM_SYS_EXIT);
	return 0;
}

/* --- run queue --- */

#define TASK_RUNNING 0
#define PF_EXITING 0x00000004

struct runq_state {
	__u64 ts;	/* when it became runnable (0: not waiting) */
	__u32 preempted;
	__u32 pending;	/* runq_pend holds a kept wait waiting for the syscall exit */
	__u32 epoch;	/* sys_epoch at `ts` */
	__u32 walked;	/* preempted: runq_pend holds the stack walked at the preemption */
	__u64 on_ts;	/* when it last got on a CPU */
	__u32 norseq;	/* a kept wait of it, in a system call, found it without rseq */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct runq_state);
} runq_states SEC(".maps");

/* Threads with a kept wait waiting for their syscall exit: while there are none, the
 * sys_exit program returns at once, without a task storage lookup. */
__u64 runq_pending = 0;
/* Set by user space when the recording ends: no wait is kept any more and the kept ones
 * still waiting for their thread's return to user space are sent by runq_end (a task
 * iterator) or at the thread's exit, whichever claims the event first. */
__u32 runq_ending = 0;
/* Set by user space when the kernel has the rseq_update tracepoint: a kept wait of a woken
 * or preempted thread with rseq takes its user stack where the thread returns to user
 * space (`runq_rseq`), as off-CPU does (profile.bpf.c); kept waits of threads without rseq,
 * and those still waiting when the thread's next one was kept, are counted, and user space
 * then adds `runq_sys_exit` to the system call chain. */
const volatile bool runq_rseq_mode = false;
__u64 runq_norseq = 0;
__u64 runq_rseq_missed = 0;

static __always_inline void runq_set_pending(struct runq_state *st)
{
	if (!st->pending) {
		st->pending = 1;
		__sync_fetch_and_add(&runq_pending, 1);
	}
}

static __always_inline void runq_clear_pending(struct runq_state *st)
{
	/* The recording's end may clear it from its task iterator while the thread exits. */
	if (st->pending && __sync_val_compare_and_swap(&st->pending, 1, 0) == 1) {
		__sync_fetch_and_add(&runq_pending, -1);
	}
}

/* Per thread, the kept wait being filled, so that it leaves without a copy; for a
 * preempted thread, its stack at the preemption. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct runq_event);
} runq_pend SEC(".maps");

static __always_inline void runq_send(struct runq_event *e)
{
	e->pending = 0;
	__u32 used = (e->kframes & (KFRAMES - 1)) + (e->nframes & (MAX_FRAMES - 1));
	__u64 size = __builtin_offsetof(struct runq_event, ips) + used * sizeof(__u64);
	if (bpf_ringbuf_output(&events, e, size, BPF_RB_NO_WAKEUP))
		count(FAM_RUNQ, CTR_LOST_RINGBUF);
}

/* A kept wait still waiting for its syscall exit when the buffer is needed again: it goes
 * with its kernel stack only. */
static __always_inline void runq_flush(struct runq_event *e)
{
	if (!e->pending)
		return;
	e->nframes = 0;
	e->flags |= SF_USER_NOT_AT_EXIT;
	runq_send(e);
}

/* runq_flush of the thread's buffer taken for a new wait: a kept wait still in it never
 * got to its thread's return to user space. rseq_update did not come for it (counted: user
 * space then adds the syscall exit) unless the thread has not been back in user space since
 * (`same`: its user registers still the ones the kept wait had, a second wait in the same
 * system call; or a thread without rseq, which no rseq_update would have caught). */
static __always_inline void runq_reuse(struct runq_event *e, bool same)
{
	if (runq_rseq_mode && e->pending && !same)
		__sync_fetch_and_add(&runq_rseq_missed, 1);
	runq_flush(e);
}

/* The state of a target's thread, created on first sight. */
static __always_inline struct runq_state *runq_state_of(struct task_struct *t)
{
	struct runq_state *st = bpf_task_storage_get(&runq_states, t, 0, 0);
	if (st || !is_target(t->tgid))
		return st;
	return bpf_task_storage_get(&runq_states, t, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
}

static __always_inline void runq_woken(struct task_struct *p)
{
	struct runq_state *st = runq_state_of(p);
	if (!st)
		return;
	st->ts = bpf_ktime_get_boot_ns();
	st->epoch = sys_epoch;
	st->preempted = 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(runq_wakeup, struct task_struct *p)
{
	runq_woken(p);
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(runq_wakeup_new, struct task_struct *p)
{
	runq_woken(p);
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(runq_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	__u64 now = 0;
	/* A thread that blocks leaves nothing: its wait starts at its wakeup, which sets the
	 * time again whatever was there. */
	if (prev_state == TASK_RUNNING && prev->pid != 0 && !runq_ending) {
		struct runq_state *st = runq_state_of(prev);
		if (st) {
			/* Preempted: it waits from now. A thread with rseq passes rseq_update on its
			 * way back to user space after the wait (the kernel flags a preempted task's
			 * rseq), where a kept wait takes its user stack as a woken one does: only the
			 * few waits the threshold and the sample keep are walked. Without rseq, this
			 * is its own context and the one chance to walk its stack, before whether
			 * the wait will be long is known: a thread that ran at least the threshold (a
			 * time slice used up: CPU contention) is walked now; one preempted sooner
			 * (mostly by a thread it woke, for a short wait) is not: a walk at every
			 * wakeup preemption would cost more than all the rest. */
			now = bpf_ktime_get_boot_ns();
			st->ts = now;
			st->epoch = sys_epoch;
			st->preempted = 1;
			st->walked = 0;
			if (now - st->on_ts >= runq_min_ns &&
			    !(runq_rseq_mode && BPF_CORE_READ(prev, rseq))) {
				struct runq_event *e = bpf_task_storage_get(
					&runq_pend, prev, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
				if (e) {
					runq_reuse(e, true);
					e->flags = 0;
					__u32 k = kernel_stack(ctx, e->ips, &e->flags);
					k &= KFRAMES - 1;
					e->kframes = k;
					__u32 n = user_stack(ctx, &e->ips[k], &e->flags, false);
					e->nframes = n & (MAX_FRAMES - 1);
					e->copy_id = 0;
					st->walked = 1;
				}
			}
		}
	}
	struct runq_state *st = bpf_task_storage_get(&runq_states, next, 0, 0);
	if (!st || runq_ending)
		return 0;
	if (!now)
		now = bpf_ktime_get_boot_ns();
	st->on_ts = now;
	if (!st->ts)
		return 0;
	__u64 start = st->ts;
	__u64 d = now - start;
	st->ts = 0;
	if (st->epoch != sys_epoch)
		return 0; /* runnable since before a pause: its wait is unknown */
	count(FAM_RUNQ, CTR_HITS);
	if (!hist_add(FAM_RUNQ, next->tgid, 0, d))
		return 0;
	if (d < runq_min_ns) {
		count(FAM_RUNQ, CTR_FILTERED);
		return 0;
	}
	/* The time-weighted sample (as --syscalls-sample): a wait shorter than the unit is kept
	 * with p = d/unit and stands for `unit` ns. On a saturated CPU most waits pass the
	 * threshold, and a stack each was most of the family's cost. */
	__u64 weight = 0;
	if (!time_sample(d, READ_ONCE_U64(runq_unit_ns), &weight)) {
		count(FAM_RUNQ, CTR_FILTERED);
		return 0;
	}
	if (!admit(FAM_RUNQ))
		return 0;
	struct runq_event *e = bpf_task_storage_get(&runq_pend, next, 0,
						    BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!e) {
		count(FAM_RUNQ, CTR_LOST_MAP_FULL);
		return 0;
	}
	/* Its user registers, saved on its kernel stack while it was off the CPU: where it
	 * was preempted, or the syscall it blocked in. */
	struct pt_regs *u = (struct pt_regs *)bpf_task_pt_regs(next);
	__u64 uip = u ? u->ip : 0;
	__u64 usp = u ? u->sp : 0;
	/* An older kept wait still in the buffer goes first, as it was (a preempted thread's
	 * walked stack is this wait's: its buffer was flushed at the preemption). */
	if (!st->preempted || !st->walked)
		runq_reuse(e, e->user_ip == uip && e->user_sp == usp);
	e->weight_ns = weight;
	e->h.type = FAM_RUNQ;
	e->h.pid = next->tgid;
	e->h.tid = next->pid;
	e->h.cpu = bpf_get_smp_processor_id();
	e->h.time_ns = start;
	e->duration_ns = d;
	e->preempted = st->preempted;
	if (st->preempted && (st->walked || !(runq_rseq_mode && BPF_CORE_READ(next, rseq)))) {
		if (!st->walked) {
			/* Preempted after a short run, without rseq: the preempted instruction
			 * only. */
			e->flags = SF_USER_LEAF_ONLY;
			e->kframes = 0;
			e->ips[0] = uip;
			e->nframes = uip ? 1 : 0;
			e->copy_id = 0;
		}
		/* Else its stack was taken at the preemption. */
		runq_send(e);
		return 0;
	}
	/* Woken, or preempted with rseq: where it waits, in the kernel now and in user space
	 * where it returns there (rseq_update, or its syscall exit), in its own context. */
	e->flags = 0;
	e->nframes = 0;
	e->copy_id = 0;
	long n = bpf_get_task_stack(next, e->ips, KFRAMES * sizeof(__u64), 0);
	__u32 k = n > 0 ? n / sizeof(__u64) : 0;
	if (k >= KFRAMES)
		e->flags |= SF_KERNEL_TRUNCATED;
	e->kframes = k & (KFRAMES - 1);
	e->user_ip = uip;
	e->user_sp = usp;
	/* A thread on its way out (past sched_process_exit, which flushes what it holds) never
	 * returns to user space: sent now, with its kernel stack. */
	if (BPF_CORE_READ(next, flags) & PF_EXITING) {
		e->pending = 1;
		runq_flush(e);
		return 0;
	}
	e->pending = 1;
	runq_set_pending(st);
	/* Only a wait after a system call counts (a page fault ends at no syscall exit), and
	 * only a thread's second: a new thread's first wait follows its wakeup_new, before it
	 * ran the code that registers its rseq (its registers are its creator's, at clone), and
	 * a program's loader may wait in a read before it registers the main thread's. A
	 * thread is woken again and again: its second comes soon. */
	if (runq_rseq_mode && !BPF_CORE_READ(next, rseq) && u && (long)u->orig_ax >= 0) {
		if (st->norseq)
			__sync_fetch_and_add(&runq_norseq, 1);
		st->norseq = 1;
	}
	return 0;
}

/* A thread that exits with a kept wait still waiting for its syscall exit, or one the
 * recording's end finds so (runq_end): its event, with its kernel stack. The two may run
 * at once at the end: the one that takes `pending` sends. */
static __always_inline void runq_exit(struct task_struct *task)
{
	struct runq_state *st = bpf_task_storage_get(&runq_states, task, 0, 0);
	if (!st || !st->pending)
		return;
	runq_clear_pending(st);
	struct runq_event *e = bpf_task_storage_get(&runq_pend, task, 0, 0);
	if (e && __sync_val_compare_and_swap(&e->pending, 1, 0) == 1) {
		e->nframes = 0;
		e->flags |= SF_USER_NOT_AT_EXIT;
		runq_send(e);
	}
}

/* The recording's end (runq_ending set, then every thread of the machine): a kept wait
 * whose thread has not returned to user space since is sent, not left in its storage. */
SEC("iter/task")
int runq_end(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	if (task)
		runq_exit(task);
	return 0;
}

static __always_inline void runq_sys_exit_do(unsigned long long *ctx, struct pt_regs *regs, long ret)
{
	if (!runq_pending)
		return;
	struct task_struct *task = bpf_get_current_task_btf();
	struct runq_state *st = bpf_task_storage_get(&runq_states, task, 0, 0);
	if (!st || !st->pending || runq_ending)
		return;
	runq_clear_pending(st);
	struct runq_event *e = bpf_task_storage_get(&runq_pend, task, 0, 0);
	/* Taken (1 -> 2) by compare-and-swap, as runq_exit takes it (1 -> 0): one sends it. */
	if (!e || __sync_val_compare_and_swap(&e->pending, 1, 2) != 1)
		return;
	if (st->epoch != sys_epoch) {
		/* kept before a pause: the syscall exit it waited for may have come while the
		 * programs were off; sent without its user stack */
		runq_flush(e);
		return;
	}
	struct pt_regs *u = (struct pt_regs *)bpf_task_pt_regs(task);
	if (!u || u->ip != e->user_ip || u->sp != e->user_sp) {
		runq_flush(e);
		return;
	}
	__u32 k = e->kframes & (KFRAMES - 1);
	__u32 n = user_stack(ctx, &e->ips[k], &e->flags, false);
	e->nframes = n & (MAX_FRAMES - 1);
	e->copy_id = stack_copy();
	runq_send(e);
	return;
}

/* A member of the sys_exit chain (hub.bpf.c). */
SEC("tp_btf/sys_exit")
int BPF_PROG(runq_sys_exit, struct pt_regs *regs, long ret)
{
	runq_sys_exit_do(ctx, regs, ret);
	chain_next(ctx, &sys_exit_chain, CM_RUNQ_SYS_EXIT);
	return 0;
}

/* A thread with rseq on its way back to user space after a switch (runq_rseq_mode). */
SEC("tp_btf/rseq_update")
int BPF_PROG(runq_rseq, struct task_struct *t)
{
	runq_sys_exit_do(ctx, 0, 0);
	return 0;
}

/* --- block I/O --- */

/* Requests in flight, by their address: the event as it will be sent. A full map is a
 * counted loss (an LRU map would drop the oldest request silently). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct bio_event);
} bio_inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bio_event);
} bio_scratch SEC(".maps");

#define REQ_OP_BITS 8
#define REQ_OP_MASK ((1 << REQ_OP_BITS) - 1)

static __always_inline __u32 bio_flag(__u32 cmd, int bit, __u32 ours)
{
	return (cmd >> bit) & 1 ? ours : 0;
}

static __always_inline void bio_start(void *ctx, struct request *rq)
{
	__u64 pt = bpf_get_current_pid_tgid();
	if (!is_target(pt >> 32))
		return;
	__u32 z = 0;
	struct bio_event *e = bpf_map_lookup_elem(&bio_scratch, &z);
	if (!e)
		return;
	fill_header(&e->h, FAM_BIO);
	struct block_device *part = BPF_CORE_READ(rq, part);
	__u32 dev = part ? BPF_CORE_READ(part, bd_dev) : 0;
	if (!dev) {
		struct gendisk *disk = BPF_CORE_READ(rq, q, disk);
		if (disk)
			dev = (BPF_CORE_READ(disk, major) << 20) | BPF_CORE_READ(disk, first_minor);
	}
	e->dev = dev;
	e->sector = BPF_CORE_READ(rq, __sector);
	e->bytes = BPF_CORE_READ(rq, __data_len);
	__u32 cmd = BPF_CORE_READ(rq, cmd_flags);
	e->op = cmd & REQ_OP_MASK;
	e->bio_flags = bio_flag(cmd, bpf_core_enum_value(enum req_flag_bits, __REQ_SYNC), BIO_SYNC) |
		       bio_flag(cmd, bpf_core_enum_value(enum req_flag_bits, __REQ_META), BIO_META) |
		       bio_flag(cmd, bpf_core_enum_value(enum req_flag_bits, __REQ_FUA), BIO_FUA) |
		       bio_flag(cmd, bpf_core_enum_value(enum req_flag_bits, __REQ_PREFLUSH),
				BIO_PREFLUSH) |
		       bio_flag(cmd, bpf_core_enum_value(enum req_flag_bits, __REQ_RAHEAD),
				BIO_READAHEAD);
	/* An empty write that only flushes the cache (fsync's) is a flush. */
	if (e->op == 1 && e->bytes == 0 && (e->bio_flags & BIO_PREFLUSH))
		e->op = 2;
	e->error = 0;
	e->duration_ns = 0;
	e->flags = 0;
	__u32 k = kernel_stack(ctx, e->ips, &e->flags);
	k &= KFRAMES - 1;
	e->kframes = k;
	__u32 n = user_stack(ctx, &e->ips[k], &e->flags, false);
	e->nframes = n & (MAX_FRAMES - 1);
	e->copy_id = stack_copy();
	__u64 key = (__u64)rq;
	if (bpf_map_update_elem(&bio_inflight, &key, e, BPF_ANY)) {
		count(FAM_BIO, CTR_HITS);
		count(FAM_BIO, CTR_LOST_MAP_FULL);
	}
}

static __always_inline void bio_done(struct request *rq, int error)
{
	__u64 key = (__u64)rq;
	struct bio_event *e = bpf_map_lookup_elem(&bio_inflight, &key);
	if (!e)
		return;
	__u64 d = bpf_ktime_get_boot_ns() - e->h.time_ns;
	count(FAM_BIO, CTR_HITS);
	e->duration_ns = d;
	e->error = error;
	if (!hist_add(FAM_BIO, e->h.pid, ((__u64)e->dev << 8) | e->op, d)) {
		/* counted as lost */
	} else if (d < bio_min_ns) {
		count(FAM_BIO, CTR_FILTERED);
	} else if (admit(FAM_BIO)) {
		__u32 used = (e->kframes & (KFRAMES - 1)) + (e->nframes & (MAX_FRAMES - 1));
		__u64 size = __builtin_offsetof(struct bio_event, ips) + used * sizeof(__u64);
		if (bpf_ringbuf_output(&events, e, size, BPF_RB_NO_WAKEUP))
			count(FAM_BIO, CTR_LOST_RINGBUF);
	}
	bpf_map_delete_elem(&bio_inflight, &key);
}

/* 6.5 and later: accounting start (in the issuing task, when the request is made) and end. */
SEC("tp_btf/block_io_start")
int BPF_PROG(bio_io_start, struct request *rq)
{
	bio_start(ctx, rq);
	return 0;
}

SEC("tp_btf/block_io_done")
int BPF_PROG(bio_io_done, struct request *rq)
{
	bio_done(rq, 0);
	return 0;
}

/* Older kernels: handed to the driver (often, but not always, in the issuing task) and
 * completed. */
SEC("tp_btf/block_rq_issue")
int BPF_PROG(bio_rq_issue, struct request *rq)
{
	bio_start(ctx, rq);
	return 0;
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(bio_rq_complete, struct request *rq, int error, unsigned int nr_bytes)
{
	bio_done(rq, error);
	return 0;
}

/* --- TCP --- */

#define IPPROTO_TCP 6
#define AF_INET 2
#define AF_INET6 10
#define TCP_SYN_SENT 2
#define TCP_SYN_RECV 3
#define TCP_CLOSE 7
#define NR_ACCEPT 43
#define NR_ACCEPT4 288

struct tcp_conn {
	__u64 id;
	__u64 start_ns;
	__u32 pid;
	__u32 pad;
};

/* The targets' connections, by socket address. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct tcp_conn);
} tcp_conns SEC(".maps");

/* Connections a listener received, not yet accepted (the listener's owner is unknown until
 * a target accepts them): when each started. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u64);
} tcp_unaccepted SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tcp_event);
} tcp_scratch SEC(".maps");

/* A new connection's entry, built here rather than on the stack: tcp_set_state's frame
 * with the stack walk's (uw_state) stayed within Linux 6.1's 512 bytes for the deepest
 * chain of calls only without it (544 with). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tcp_conn);
} tcp_conn_scratch SEC(".maps");

__u64 tcp_seq = 0;

static __always_inline struct tcp_event *tcp_begin(const struct sock *sk, struct tcp_conn *c,
						   __u32 kind)
{
	__u32 z = 0;
	struct tcp_event *e = bpf_map_lookup_elem(&tcp_scratch, &z);
	if (!e)
		return 0;
	fill_header(&e->h, FAM_TCP);
	e->h.pid = c->pid;
	if ((bpf_get_current_pid_tgid() >> 32) != c->pid)
		e->h.tid = 0;
	e->conn = c->id;
	e->start_ns = c->start_ns;
	e->kind = kind;
	e->state = BPF_CORE_READ(sk, __sk_common.skc_state);
	e->old_state = 0;
	e->nframes = 0;
	e->flags = 0;
	e->copy_id = 0;
	e->bytes_sent = 0;
	e->bytes_received = 0;
	const struct tcp_sock *tp = (const struct tcp_sock *)sk;
	e->retransmits = BPF_CORE_READ(tp, total_retrans);
	__u16 fam = BPF_CORE_READ(sk, __sk_common.skc_family);
	e->lport = BPF_CORE_READ(sk, __sk_common.skc_num);
	e->rport = __builtin_bswap16(BPF_CORE_READ(sk, __sk_common.skc_dport));
	if (fam == AF_INET6) {
		e->family = 6;
		BPF_CORE_READ_INTO(&e->laddr, sk, __sk_common.skc_v6_rcv_saddr);
		BPF_CORE_READ_INTO(&e->raddr, sk, __sk_common.skc_v6_daddr);
	} else {
		e->family = 4;
		__u32 l = BPF_CORE_READ(sk, __sk_common.skc_rcv_saddr);
		__u32 r = BPF_CORE_READ(sk, __sk_common.skc_daddr);
		__builtin_memset(e->laddr, 0, 16);
		__builtin_memset(e->raddr, 0, 16);
		__builtin_memcpy(e->laddr, &l, 4);
		__builtin_memcpy(e->raddr, &r, 4);
	}
	return e;
}

static __always_inline void tcp_send(struct tcp_event *e)
{
	__u32 n = e->nframes & (MAX_FRAMES - 1);
	__u64 size = __builtin_offsetof(struct tcp_event, ips) + n * sizeof(__u64);
	count(FAM_TCP, CTR_HITS);
	if (bpf_ringbuf_output(&events, e, size, BPF_RB_NO_WAKEUP))
		count(FAM_TCP, CTR_LOST_RINGBUF);
}

/* A new connection of the current (target) task, with the caller's stack. */
static __always_inline void tcp_new(void *ctx, const struct sock *sk, __u64 start, __u32 kind)
{
	__u64 key = (__u64)sk;
	__u32 z = 0;
	struct tcp_conn *c = bpf_map_lookup_elem(&tcp_conn_scratch, &z);
	if (!c)
		return;
	c->id = __sync_fetch_and_add(&tcp_seq, 1) + 1;
	c->start_ns = start;
	c->pid = bpf_get_current_pid_tgid() >> 32;
	c->pad = 0;
	if (bpf_map_update_elem(&tcp_conns, &key, c, BPF_ANY)) {
		count(FAM_TCP, CTR_HITS);
		count(FAM_TCP, CTR_LOST_MAP_FULL);
		return;
	}
	struct tcp_event *e = tcp_begin(sk, c, kind);
	if (!e)
		return;
	__u32 n = user_stack(ctx, e->ips, &e->flags, false);
	e->nframes = n & (MAX_FRAMES - 1);
	e->copy_id = stack_copy();
	tcp_send(e);
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(tcp_set_state, const struct sock *sk, int oldstate, int newstate)
{
	if (BPF_CORE_READ(sk, sk_protocol) != IPPROTO_TCP)
		return 0;
	__u64 key = (__u64)sk;
	struct tcp_conn *c = bpf_map_lookup_elem(&tcp_conns, &key);
	if (!c) {
		if (newstate == TCP_SYN_SENT && is_target(bpf_get_current_pid_tgid() >> 32)) {
			tcp_new(ctx, sk, bpf_ktime_get_boot_ns(), TCPE_CONNECT);
			c = bpf_map_lookup_elem(&tcp_conns, &key);
		} else if (newstate == TCP_SYN_RECV) {
			__u64 now = bpf_ktime_get_boot_ns();
			bpf_map_update_elem(&tcp_unaccepted, &key, &now, BPF_NOEXIST);
		}
		if (!c)
			return 0;
	}
	struct tcp_event *e = tcp_begin(sk, c, TCPE_STATE);
	if (!e)
		return 0;
	e->state = newstate;
	e->old_state = oldstate;
	if (newstate == TCP_CLOSE) {
		const struct tcp_sock *tp = (const struct tcp_sock *)sk;
		e->bytes_sent = BPF_CORE_READ(tp, bytes_acked);
		e->bytes_received = BPF_CORE_READ(tp, bytes_received);
		bpf_map_delete_elem(&tcp_conns, &key);
	}
	tcp_send(e);
	return 0;
}

/* The socket of file descriptor `fd` of the current task (0: none). */
static __always_inline struct sock *fd_sock(__u32 fd)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	if (!fdt || fd >= BPF_CORE_READ(fdt, max_fds))
		return 0;
	struct file **fds = BPF_CORE_READ(fdt, fd);
	struct file *f = 0;
	if (bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]) || !f)
		return 0;
	struct socket *so = BPF_CORE_READ(f, private_data);
	return so ? BPF_CORE_READ(so, sk) : 0;
}

/* accept() and accept4() of a target: the connection is the target's from here, with the
 * accept's caller as its stack. */
static __always_inline void tcp_sys_exit_do(unsigned long long *ctx, struct pt_regs *regs, long ret)
{
	if (ret < 0)
		return;
	long nr = regs->orig_ax;
	if (nr != NR_ACCEPT && nr != NR_ACCEPT4)
		return;
	if (!is_target(bpf_get_current_pid_tgid() >> 32))
		return;
	struct sock *sk = fd_sock(ret);
	if (!sk || BPF_CORE_READ(sk, sk_protocol) != IPPROTO_TCP)
		return;
	__u64 key = (__u64)sk;
	if (bpf_map_lookup_elem(&tcp_conns, &key))
		return;
	__u64 *t = bpf_map_lookup_elem(&tcp_unaccepted, &key);
	__u64 start = t ? *t : bpf_ktime_get_boot_ns();
	if (t)
		bpf_map_delete_elem(&tcp_unaccepted, &key);
	tcp_new(ctx, sk, start, TCPE_ACCEPT);
	return;
}

/* A member of the sys_exit chain (hub.bpf.c). */
SEC("tp_btf/sys_exit")
int BPF_PROG(tcp_sys_exit, struct pt_regs *regs, long ret)
{
	tcp_sys_exit_do(ctx, regs, ret);
	chain_next(ctx, &sys_exit_chain, CM_TCP_SYS_EXIT);
	return 0;
}

/* The same at syscalls:sys_exit_accept and _accept4, when the chain is not attached
 * (common.bpf.h). */
SEC("tracepoint")
int tcp_accept_tp(struct sc_exit_ctx *ctx)
{
	tcp_sys_exit_do((void *)ctx, sc_user_regs(), ctx->ret);
	return 0;
}

static __always_inline void tcp_mark(const struct sock *sk, __u32 kind)
{
	if (!sk)
		return;
	__u64 key = (__u64)sk;
	struct tcp_conn *c = bpf_map_lookup_elem(&tcp_conns, &key);
	if (!c)
		return;
	struct tcp_event *e = tcp_begin(sk, c, kind);
	if (e)
		tcp_send(e);
}

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(tcp_retransmit, const struct sock *sk, const struct sk_buff *skb)
{
	tcp_mark(sk, TCPE_RETRANSMIT);
	return 0;
}

SEC("tp_btf/tcp_send_reset")
int BPF_PROG(tcp_send_reset, const struct sock *sk, const struct sk_buff *skb)
{
	tcp_mark(sk, TCPE_SEND_RESET);
	return 0;
}

SEC("tp_btf/tcp_receive_reset")
int BPF_PROG(tcp_receive_reset, struct sock *sk)
{
	tcp_mark(sk, TCPE_RECEIVE_RESET);
	return 0;
}
