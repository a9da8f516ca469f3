/* Where the time goes and where memory grows, for the targets:
 *
 * - cpu (--cpu): a cpu-clock perf event per CPU runs `cpu_sample`, which keeps samples of
 *   target threads with their user and kernel stacks.
 * - offcpu (--offcpu): sched_switch, sched_waking and sys_exit (BTF tracepoints). A target
 *   thread that blocks gets a timestamp in its task storage (state per task, not per CPU, so
 *   a thread that wakes on another CPU is measured right), no stack; a block of at least
 *   `offcpu_min_ns` takes the kernel stack at the switch-in, the waker's stacks at the wake
 *   and the user stack at the thread's next syscall exit, and is sent then (see below).
 * - func (--func): a uprobe and a uretprobe per function, the function's id in the BPF
 *   cookie. Calls in flight are keyed by (thread, stack pointer at entry): the return probe
 *   finds its entry at sp - 8 (the return address is popped), so recursion and threads
 *   need no depth counters, and an entry whose return never comes (longjmp, an exception
 *   unwinding through) ages out of the LRU map.
 * - memgrowth (--memgrowth): brk, mmap and munmap (raw syscall tracepoints) and user page
 *   faults on pages not present (first touch), each with its user stack: growth at the
 *   cost of a tracepoint, not of a trap per malloc; the faults a byte-weighted sample
 *   (--memgrowth-sample).
 * - usdt (--usdt): libbpf's USDT support (usdt.bpf.h) attaches `usdt_hit` to each probe,
 *   system-wide per binary, the ProbedUsdt id as the cookie; a hit outside the targets is
 *   left alone (is_target), a target's hit sends its numeric arguments as the note's spec
 *   reads them (registers, or the target's stack for memory operands: the value, never the
 *   memory a pointer argument points to) and, with --usdt-stack, its user stack.
 *
 * User space loads only the programs of the chosen families (autoload).
 */
#include "targets.bpf.h"
#include "aggregate.bpf.h"
#include <bpf/usdt.bpf.h>

/* Shortest off-CPU block kept, ns: writable (.bss), so that --max-cpu can raise it while
 * recording (user space writes it through the mmapped .bss; each block is judged by the
 * value in force when it ends). */
__u64 offcpu_min_ns = 0;
/* --offcpu-sample: the sampling unit, ns (0: every block past the threshold is kept). A
 * block that has been off the CPU d < unit ns when it is decided (at its wake when it is past
 * the threshold by then, else at its switch-in) is kept with probability d/unit, and its event
 * says the time it stands for (weight_ns = duration * unit / d), so that totals per stack are
 * unbiased estimates; a block of at least the unit is always kept and stands for itself. The
 * blocks left out cost a timestamp: no stack is taken. Writable like offcpu_min_ns (--offcpu-rate
 * raises it while recording: record/src/pacer.rs); user space keeps it at most 1 s (the
 * products below stay under 2^64). */
__u64 offcpu_unit_ns = 0;
/* Every block past the threshold, kept or left out by the sample: count and ns (exact).
 * Per CPU: two atomic adds on one shared line at every block cost a cache-line transfer
 * between the CPUs a busy server switches on; user space sums the CPUs. */
struct offcpu_seen {
	__u64 blocks;
	__u64 ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct offcpu_seen);
} offcpu_seen SEC(".maps");
/* Bumped by user space when --max-cpu resumes a paused off-CPU family: per-task state from
 * before the pause (a switch-out whose switch-in was not seen) is never paired with what
 * comes after. */
__u32 offcpu_epoch = 0;
const volatile __u32 func_args = 0;
/* --usdt-stack: a USDT hit takes the user stack. */
const volatile bool usdt_stack = false;
/* --usdt-string-bytes (0: no --usdt-string): the most bytes of a string argument kept. */
const volatile __u32 usdt_string_bytes = 0;
/* The words of `ips` a string takes at most (USDT_STR_MAX bytes). */
#define USDT_STR_MAX 256
#define USDT_STR_WORDS (USDT_STR_MAX / 8)
const volatile __u64 page_size = 4096;
/* --memgrowth-sample: the byte-weighted sample's unit (0, or at most a page: every first-touch
 * fault is kept). A fault of one page is kept, with its stack, with probability
 * page_size/unit and stands for `unit` bytes in the totals (an unbiased estimate per stack,
 * as tcmalloc samples allocations); brk, mmap and munmap are rare and all kept. At most
 * 1 GiB (user space), so that the product below stays under 2^64. */
const volatile __u64 mem_fault_unit = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sample_event);
} sample_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct func_event);
} func_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mem_event);
} mem_scratch SEC(".maps");

/* Force the event types into BTF for the skeleton. */
struct sample_event _sample_event = {};
struct offcpu_event _offcpu_event = {};
struct func_event _func_event = {};
struct mem_event _mem_event = {};
struct usdt_event _usdt_event = {};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct usdt_event);
} usdt_scratch SEC(".maps");

/* --- cpu --- */

SEC("perf_event")
int cpu_sample(struct bpf_perf_event_data *ctx)
{
	__u64 pt = bpf_get_current_pid_tgid();
	__u32 pid = pt >> 32;
	if ((__u32)pt == 0 || !is_target(pid))
		return 0; /* idle, or not ours */
	count(FAM_CPU, CTR_HITS);
	if (!admit(FAM_CPU))
		return 0;
	__u32 z = 0;
	struct sample_event *e = bpf_map_lookup_elem(&sample_scratch, &z);
	if (!e)
		return 0;
	fill_header(&e->h, FAM_CPU);
	e->flags = 0;
	__u32 n = user_stack(ctx, e->ips, &e->flags, false);
	/* A kernel thread has no user stack: not an error. */
	if (n == 0)
		e->flags &= ~SF_USER_ERROR;
	n &= MAX_FRAMES - 1;
	e->nframes = n;
	e->kframes = kernel_stack(ctx, &e->ips[n], &e->flags);
	if (aggregate) {
		agg_add(FAM_CPU, e->ips, n, &e->ips[n], e->kframes, e->flags, 0, 0, 0);
		return 0;
	}
	e->copy_id = stack_copy();
	__u64 size = __builtin_offsetof(struct sample_event, ips) +
		     ((n + e->kframes) & (MAX_FRAMES + KFRAMES - 1)) * sizeof(__u64);
	if (size > sizeof(*e))
		size = sizeof(*e);
	if (bpf_ringbuf_output(&events, e, size, BPF_RB_NO_WAKEUP))
		count(FAM_CPU, CTR_LOST_RINGBUF);
	return 0;
}

/* --- offcpu ---
 *
 * A context switch costs only a timestamp: at the switch-out of a target thread that blocks,
 * its task storage gets the time, the state and the user registers (ip, sp) it blocked with;
 * no stack. At its switch-in (the same sched_switch, `next`), a block shorter than
 * `offcpu_min_ns` (nearly all of them) is counted and dropped. A kept one takes its kernel
 * stack there with bpf_get_task_stack(next): `next` has not run yet, so its kernel stack is
 * where it blocked (the task-stack walk leaves out the scheduler's own functions, schedule and
 * the `__sched` sleep helpers). Its user stack has not changed while it slept, but a BPF
 * program cannot read another task's user memory, so the block waits in `offcpu_pend` for
 * the thread's return to user space, in its own context, where the user stack (any
 * --stack-mode: fp, cfi, auto, dwarf's copy) is taken if the user registers are still the
 * ones it blocked with, and the event is sent. The return is caught by `offcpu_rseq` on the
 * rseq_update tracepoint where the kernel has it (`offcpu_rseq_mode`): a thread with restartable
 * sequences registered (glibc 2.35 and later registers every thread) is switched out with
 * the kernel's notify-resume work set, and its return to user space after the switch fires
 * rseq_update, so nothing runs at anyone's system calls. A kept block of a thread without
 * rseq, or one whose rseq_update never came before its next kept block though the thread had
 * been back in user space (other user registers), is counted (`offcpu_norseq`,
 * `offcpu_rseq_missed`), and user space then adds `offcpu_sys_exit`: the thread's next
 * syscall exit, the only way before (it puts every system call of the machine on the
 * tracepoint's slow path). Two kept blocks in one system call (an fsync's writeback waits)
 * are no such miss: no hook could take the first one's user stack before the second. A block that did not end there with those
 * registers (a page fault, a second long block in the same syscall) is sent with its
 * kernel stack only and SF_USER_NOT_AT_EXIT, never with a user stack from elsewhere.
 *
 * The waker (sched_waking, in the waker's context): its tid always; its stacks only when
 * the wakee has been blocked for at least the threshold by then. A block that crosses the
 * threshold in the run queue, after its wake, is kept with the waker's tid and no waker
 * stack.
 */

/* Set by user space when the kernel has the rseq_update tracepoint: kept blocks wait for
 * `offcpu_rseq` (see above). */
const volatile bool offcpu_rseq_mode = false;
/* Kept blocks of threads without rseq, and kept blocks still waiting when their thread's
 * next one was kept (rseq_update did not come): user space reads them to add the syscall
 * exit. */
__u64 offcpu_norseq = 0;
__u64 offcpu_rseq_missed = 0;
/* Set by user space when the recording ends: no block is kept any more and the kept ones
 * still waiting for their thread's return to user space are sent by offcpu_end (a task
 * iterator) or at the thread's exit, whichever claims the event first. */
__u32 offcpu_ending = 0;

/* Per target thread, the hot state: written at every block, read at every switch-in. */
struct offcpu_block {
	__u64 start;	 /* switch-out time (boottime); 0: not blocked */
	__u64 ip;	 /* user registers at the switch-out */
	__u64 sp;
	__u32 state;	 /* prev_state */
	__u32 waker_pid;
	__u32 waker_tid;
	__u32 woken;	 /* sched_waking seen for this block */
	__u64 woken_ns;	 /* when (boottime) */
	__u8 decided;	 /* OFFCPU_ADMITTED: offcpu_pend holds this block's waker stacks;
			  * OFFCPU_REFUSED: the rate limit refused it at the wake */
	__u8 pending;	 /* offcpu_pend holds a kept block waiting for the syscall exit */
	__u8 norseq;	 /* a kept block of it, in a system call, found it without rseq */
	__u32 epoch;	 /* offcpu_epoch at the switch-out */
	__u32 pad2;
	__u64 chosen_d;	 /* kept by the sample with probability chosen_d/chosen_unit (0: p = 1) */
	__u64 chosen_unit;
};

#define OFFCPU_ADMITTED 1
#define OFFCPU_REFUSED 2
#define OFFCPU_SAMPLED_OUT 3

/* The time-weighted draw of a block of `d` ns under `unit` (d < unit <= 2^31): kept with
 * probability d/unit (r/2^32 < d/unit), the probability noted in `b` for its weight. */
static __always_inline bool weighted_draw(struct offcpu_block *b, __u64 d, __u64 unit)
{
	__u64 r = bpf_get_prandom_u32();
	if (r * unit >= (d << 32))
		return false;
	b->chosen_d = d ? d : 1;
	b->chosen_unit = unit;
	return true;
}

/* --offcpu-sample's choice for a block off the CPU for `d` ns so far: whether it is kept,
 * the probability noted in `b` for its weight. */
static __always_inline bool offcpu_sample(struct offcpu_block *b, __u64 d)
{
	__u64 unit = READ_ONCE_U64(offcpu_unit_ns);
	b->chosen_d = 0;
	if (!unit || d >= unit)
		return true;
	if (unit > 1000000000ULL)
		unit = 1000000000ULL;
	return weighted_draw(b, d, unit);
}

/* The off-CPU time a kept block of `d` ns stands for. */
static __always_inline __u64 offcpu_weight(struct offcpu_block *b, __u64 d)
{
	__u64 cd = b->chosen_d;
	if (!cd)
		return d;
	if (d < (1ULL << 34))
		return d * b->chosen_unit / cd;
	return d / cd * b->chosen_unit;
}

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct offcpu_block);
} offcpu_state SEC(".maps");

/* Per thread, the kept block being filled (created at the first kept block of a thread):
 * the event as it will be sent, so that it leaves without a copy. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct offcpu_event);
} offcpu_pend SEC(".maps");

#define TASK_RUNNING 0

/* Sends a kept block (`used` slots of `ips`); the block is a hit now. */
static __always_inline void offcpu_send(struct offcpu_event *e)
{
	e->pending = 0;
	count(FAM_OFFCPU, CTR_HITS);
	if (aggregate) {
		/* The blocked thread's kernel frames, then its user frames (no waker stacks). */
		__u32 at = (e->waker_nframes + e->waker_kframes) & 255;
		__u32 k = e->kframes & (KFRAMES - 1);
		agg_add(FAM_OFFCPU, &e->ips[(at + k) & 511], e->nframes, &e->ips[at], k, e->flags,
			0, e->weight_ns ? e->weight_ns : e->duration_ns, 0);
		return;
	}
	__u32 used = e->waker_nframes + e->waker_kframes + e->kframes + e->nframes;
	if (used > OFFCPU_SLOTS)
		used = OFFCPU_SLOTS;
	__u64 size = __builtin_offsetof(struct offcpu_event, ips) + used * sizeof(__u64);
	if (bpf_ringbuf_output(&events, e, size, BPF_RB_NO_WAKEUP))
		count(FAM_OFFCPU, CTR_LOST_RINGBUF);
}

/* A kept block still waiting for its syscall exit when the thread's next block needs the
 * buffer: it goes with its kernel stack only. */
static __always_inline void offcpu_flush(struct offcpu_event *e)
{
	e->nframes = 0;
	e->flags |= SF_USER_NOT_AT_EXIT;
	offcpu_send(e);
}

/* The start of a kept block's event (`b`: the block); its waker stacks go first in `ips`.
 * A kept block still pending there never got to its thread's return to user space: with the
 * user registers it blocked with still those of this block, the thread has not been back in
 * user space since (a second block in the same system call: an fsync's several writeback
 * waits, a lock and then a page), which no return-to-user hook could have caught; with
 * others, rseq_update did not come (counted: user space then adds the syscall exit). */
static __always_inline void offcpu_begin(struct offcpu_event *e, struct offcpu_block *b)
{
	if (e->pending) {
		if (offcpu_rseq_mode && (e->user_ip != b->ip || e->user_sp != b->sp))
			__sync_fetch_and_add(&offcpu_rseq_missed, 1);
		offcpu_flush(e);
	}
	e->waker_nframes = 0;
	e->waker_kframes = 0;
	e->waker_flags = 0;
	e->kframes = 0;
	e->nframes = 0;
	e->flags = 0;
	e->copy_id = 0;
}

/* --- requests (--request with --offcpu) ---
 * Each request's time, split in the kernel on its thread, from its start probe to its done:
 * on CPU, waiting in the run queue, off CPU interruptible (locks, condvars, network, sleeps)
 * and uninterruptible (disk, page faults). The scheduler hooks below move the thread's open
 * request from one phase to the next; the done probe's usdt event carries the sums, so every
 * request is counted exactly, whatever the sampled families keep. */
const volatile bool request_mode = false;
/* Bumped by user space at each pause and resume of the off-CPU programs (odd: paused): a
 * request that began in another epoch, or while paused, was not followed: no split. */
__u32 req_epoch = 0;

#define RQ_ONCPU 0
#define RQ_RUNQ 1
#define RQ_SLEEP 2
#define RQ_DISK 3
#define TASK_UNINTERRUPTIBLE_BIT 2

struct req_acct {
	__u64 start;	/* its start probe's time; 0: no request open */
	__u64 last;	/* the last change of phase */
	__u64 ns[4];	/* by phase */
	__u32 phase;
	__u32 blocks;
	__u32 epoch;	/* req_epoch at the start */
	__u32 held;	/* a start hit is held (req_hold): the fields below */
	__u32 held_nargs;
	__u64 held_time;
	__u64 held_probe;
	__u64 held_args[USDT_MAX_ARGS];
	__u32 held_arg_errors;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct req_acct);
} req_acct SEC(".maps");

/* --request-slow: a request that has run this long (ns; 0: off) is slow, and every block of
 * it that ends from then on is kept whole, whatever its length, the threshold and the sample
 * (it stands for itself): the slow requests' detail, at the cost of the tail's blocks only.
 * Writable: user space keeps it at the adaptive tail (a quantile of the requests done so far,
 * record/src/reqslow.rs) or at the fixed duration asked for. */
__u64 req_slow_ns = 0;

/* Whether the open request `r` is slow by `end` (boottime ns): its blocks are then kept
 * whole (the probability noted in `b` is 1). */
static __always_inline bool req_slow_at(struct req_acct *r, __u64 end, struct offcpu_block *b)
{
	__u64 slow = READ_ONCE_U64(req_slow_ns);
	if (!slow || !r->start || end < r->start || end - r->start < slow)
		return false;
	b->chosen_d = 0;
	return true;
}

/* Whether `task` is inside a request that is slow by `end`: req_slow_at. */
static __always_inline bool req_past_slow(struct offcpu_block *b, struct task_struct *task,
					  __u64 end)
{
	if (!request_mode || !READ_ONCE_U64(req_slow_ns))
		return false;
	struct req_acct *r = bpf_task_storage_get(&req_acct, task, 0, 0);
	return r && req_slow_at(r, end, b);
}

/* Inside a request (--request with --offcpu), a block shorter than the threshold is kept with
 * probability d/U and stands for U ns, U the larger of the threshold and --offcpu-sample's
 * unit (the time-weighted sample the longer blocks get): the request's own split counts
 * every block, and these name what the short ones waited on, at about one kept block per U
 * of in-request off-CPU time. A block that ends once its request is slow (--request-slow) is
 * kept whole. */
static __always_inline bool req_short_sample(struct offcpu_block *b, struct task_struct *task,
					     __u64 d, __u64 end)
{
	__u64 unit = offcpu_min_ns;
	__u64 u = READ_ONCE_U64(offcpu_unit_ns);
	if (u > unit)
		unit = u;
	if (!request_mode || unit > (1ULL << 31))
		return false;
	struct req_acct *r = bpf_task_storage_get(&req_acct, task, 0, 0);
	if (!r || !r->start)
		return false;
	return req_slow_at(r, end, b) || weighted_draw(b, d, unit);
}

/* The end of a block of `task` that started at `start` and lasted `d` ns: a hit, and past
 * the threshold, the sample and the rate limit, filled into the thread's offcpu_pend (after
 * the waker's stacks, if taken at the wake) without stacks of its own. NULL: not kept
 * (counted). */
static __always_inline struct offcpu_event *offcpu_ended(struct offcpu_block *b,
							 struct task_struct *task, __u64 start,
							 __u64 d, bool late)
{
	bool short_kept = false;
	if (d < offcpu_min_ns) {
		if (!req_short_sample(b, task, d, start + d)) {
			count(FAM_OFFCPU, CTR_HITS);
			count(FAM_OFFCPU, CTR_FILTERED);
			return NULL;
		}
		short_kept = true;
	}
	__u32 z = 0;
	struct offcpu_seen *seen = short_kept ? NULL : bpf_map_lookup_elem(&offcpu_seen, &z);
	if (seen) {
		seen->blocks += 1;
		seen->ns += d;
	}
	__u8 decided = b->decided;
	if (!short_kept &&
	    (decided == OFFCPU_SAMPLED_OUT || (decided == 0 && !offcpu_sample(b, d))) &&
	    !req_past_slow(b, task, start + d)) {
		count(FAM_OFFCPU, CTR_HITS);
		count(FAM_OFFCPU, CTR_FILTERED);
		return NULL;
	}
	if (decided == OFFCPU_REFUSED || (decided == 0 && !admit(FAM_OFFCPU))) {
		count(FAM_OFFCPU, CTR_HITS); /* admit counted the loss */
		return NULL;
	}
	struct offcpu_event *e = bpf_task_storage_get(&offcpu_pend, task, 0,
						      BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!e) {
		count(FAM_OFFCPU, CTR_HITS);
		count(FAM_OFFCPU, CTR_LOST_MAP_FULL);
		return NULL;
	}
	if (late && e->pending) {
		/* a kept block still waits for this return (a second block in the same
		 * system call): it goes first, below; this one's length is known but it has
		 * no stack at all. Rare twice over: lost, counted. (No second send here: the
		 * return-to-user programs would not pass the verifier with --aggregate.) */
		count(FAM_OFFCPU, CTR_HITS);
		count(FAM_OFFCPU, CTR_LOST_UNMATCHED);
		return NULL;
	}
	if (decided != OFFCPU_ADMITTED) {
		/* no waker stacks: none taken at the wake */
		if (late) {
			e->waker_nframes = 0;
			e->waker_kframes = 0;
			e->waker_flags = 0;
			e->kframes = 0;
			e->nframes = 0;
			e->flags = 0;
			e->copy_id = 0;
		} else {
			offcpu_begin(e, b);
		}
	}
	e->h.type = FAM_OFFCPU;
	e->h.pid = task->tgid;
	e->h.tid = task->pid;
	e->h.cpu = bpf_get_smp_processor_id();
	e->h.time_ns = start;
	e->duration_ns = d;
	e->weight_ns = offcpu_weight(b, d);
	/* The run-queue wait at the block's end: from its wake to its switch-in (unknown for a
	 * block ended late, at the return to user space, or with no wake seen). */
	e->runnable_ns = !late && b->woken && b->woken_ns >= start && b->woken_ns <= start + d
				 ? start + d - b->woken_ns
				 : 0;
	e->state = b->state;
	e->waker_pid = b->waker_pid;
	e->waker_tid = b->waker_tid;
	e->user_ip = b->ip;
	e->user_sp = b->sp;
	e->kframes = 0;
	return e;
}


/* --request func:: function id | REQ_FUNC_KEY -> REQ_START (set by user space as the
 * probes are attached). (A USDT probe's role is in its cookie: REQ_ROLE_SHIFT.) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u64);
	__type(value, __u32);
} req_probes SEC(".maps");

/* Task `t`'s open request moves to phase `to` at `now` (boottime). */
static __always_inline void req_move(struct req_acct *r, __u32 to, __u64 now)
{
	__u32 ph = r->phase & 3;
	if (now > r->last)
		r->ns[ph] += now - r->last;
	r->last = now;
	r->phase = to;
	if (to >= RQ_SLEEP)
		r->blocks += 1;
}

static __always_inline void req_switch(struct task_struct *prev, struct task_struct *next,
				       unsigned int prev_state)
{
	struct req_acct *r = bpf_task_storage_get(&req_acct, prev, 0, 0);
	__u64 now = 0;
	if (r && r->start) {
		now = bpf_ktime_get_boot_ns();
		__u32 to = prev_state == TASK_RUNNING		  ? RQ_RUNQ
			   : prev_state & TASK_UNINTERRUPTIBLE_BIT ? RQ_DISK
								   : RQ_SLEEP;
		req_move(r, to, now);
	}
	r = bpf_task_storage_get(&req_acct, next, 0, 0);
	if (r && r->start) {
		if (!now)
			now = bpf_ktime_get_boot_ns();
		req_move(r, RQ_ONCPU, now);
	}
}

/* sched_waking of `p`: a blocked request is runnable from here. */
static __always_inline void req_wake(struct task_struct *p)
{
	struct req_acct *r = bpf_task_storage_get(&req_acct, p, 0, 0);
	if (r && r->start && r->phase >= RQ_SLEEP)
		req_move(r, RQ_RUNQ, bpf_ktime_get_boot_ns());
}

/* The current thread's request starts at `now` (a start while one is open starts anew:
 * user space counts the nest from the probes' events). */
static __always_inline void req_begin(__u64 now)
{
	struct task_struct *t = bpf_get_current_task_btf();
	struct req_acct *r =
		bpf_task_storage_get(&req_acct, t, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!r)
		return;
	__u32 epoch = req_epoch;
	/* the off-CPU hooks paused: this request's phases would not be followed */
	r->start = epoch & 1 ? 0 : now;
	r->epoch = epoch;
	r->last = now;
	r->ns[0] = 0;
	r->ns[1] = 0;
	r->ns[2] = 0;
	r->ns[3] = 0;
	r->phase = RQ_ONCPU;
	r->blocks = 0;
}

/* The current thread's request `r` ends at `now`: its sums into `o` (none open: o->ns 0). */
static __always_inline void req_end_of(struct req_out *o, struct req_acct *r, __u64 now)
{
	o->ns = 0;
	o->blocks = 0;
	if (!r || !r->start || now < r->start)
		return;
	if (r->epoch != req_epoch) {
		r->start = 0; /* a pause in between: not followed throughout */
		return;
	}
	req_move(r, RQ_ONCPU, now);
	o->ns = now - r->start;
	o->split[0] = r->ns[0];
	o->split[1] = r->ns[1];
	o->split[2] = r->ns[2];
	o->split[3] = r->ns[3];
	o->blocks = r->blocks;
	r->start = 0;
}

static __always_inline void req_end(struct req_out *o, __u64 now)
{
	req_end_of(o, bpf_task_storage_get(&req_acct, bpf_get_current_task_btf(), 0, 0), now);
}

/* --request func:: the function's id as a key of req_probes (REQ_START: it is the request). */
#define REQ_FUNC_KEY (1ULL << 63)
static __always_inline bool req_is_func(__u64 fid)
{
	__u64 key = fid | REQ_FUNC_KEY;
	__u32 *k = bpf_map_lookup_elem(&req_probes, &key);
	return k && *k == REQ_START;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(offcpu_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	if (request_mode)
		req_switch(prev, next, prev_state);
	/* The clock is read once, and only when a target thread leaves or comes back. */
	__u64 now = 0;
	/* A preempted thread (still runnable) is waiting for a CPU, not blocked: not counted.
	 * A block is a hit when it ends (below), so that a block still going on when the
	 * recording stops is in no count. */
	if (prev_state != TASK_RUNNING && prev->pid != 0) {
		/* A thread with state is a target's (it got it here, below): no need to look the
		 * process up again. */
		struct offcpu_block *b = bpf_task_storage_get(&offcpu_state, prev, 0, 0);
		if (!b && is_target(prev->tgid)) {
			b = bpf_task_storage_get(&offcpu_state, prev, 0,
						 BPF_LOCAL_STORAGE_GET_F_CREATE);
			if (!b) {
				count(FAM_OFFCPU, CTR_HITS);
				count(FAM_OFFCPU, CTR_LOST_MAP_FULL);
			}
		}
		if (b) {
			struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(prev);
			now = bpf_ktime_get_boot_ns();
			/* Its last block never ended here: the kernel did not report its
			 * switch-in (see offcpu_at_user) and no return to user space caught it
			 * either. It was shorter than the time since it began: under the
			 * threshold, filtered; else its length is unknown: lost, not guessed. */
			if (b->start && b->epoch == offcpu_epoch) {
				count(FAM_OFFCPU, CTR_HITS);
				count(FAM_OFFCPU, now - b->start < offcpu_min_ns ? CTR_FILTERED
										 : CTR_LOST_UNMATCHED);
			}
			b->start = now;
			b->state = prev_state;
			b->ip = regs ? regs->ip : 0;
			b->sp = regs ? regs->sp : 0;
			b->waker_pid = 0;
			b->waker_tid = 0;
			b->woken = 0;
			b->decided = 0;
			b->chosen_d = 0;
			b->epoch = offcpu_epoch;
		}
	}
	struct offcpu_block *b = bpf_task_storage_get(&offcpu_state, next, 0, 0);
	if (!b || !b->start || offcpu_ending)
		return 0;
	if (b->epoch != offcpu_epoch) {
		/* blocked before a pause of the off-CPU programs: its length is unknown */
		b->start = 0;
		b->pending = 0;
		return 0;
	}
	__u64 start = b->start;
	b->start = 0;
	if (!now)
		now = bpf_ktime_get_boot_ns();
	struct offcpu_event *e = offcpu_ended(b, next, start, now - start, false);
	if (!e)
		return 0;
	__u32 at = (e->waker_nframes + e->waker_kframes) & 255;
	long n = bpf_get_task_stack(next, &e->ips[at], KFRAMES * sizeof(__u64), 0);
	__u32 k = n > 0 ? n / sizeof(__u64) : 0;
	if (k >= KFRAMES)
		e->flags |= SF_KERNEL_TRUNCATED;
	e->kframes = k;
	e->pending = 1;
	b->pending = 1;
	/* Only a block in a system call counts (one in a page fault, orig_ax -1, ends at no
	 * syscall exit either), and of a process's main thread only its second: the loader may
	 * block in a read before it registers rseq (glibc registers every other thread before
	 * it runs any of the program's code). */
	if (offcpu_rseq_mode && !BPF_CORE_READ(next, rseq)) {
		struct pt_regs *u = (struct pt_regs *)bpf_task_pt_regs(next);
		if (u && (long)u->orig_ax >= 0) {
			if (b->norseq || next->pid != next->tgid)
				__sync_fetch_and_add(&offcpu_norseq, 1);
			b->norseq = 1;
		}
	}
	return 0;
}

/* sched_waking runs in the waker's context (sched_wakeup may run later on the wakee's CPU,
 * from an IPI, where the current task is not the waker). From an interrupt (a timer), the
 * current task is whoever was running: user space keeps a waker only when it is a thread
 * of a traced process and drops the others' stacks. */
SEC("tp_btf/sched_waking")
int BPF_PROG(offcpu_waking, struct task_struct *p)
{
	if (request_mode)
		req_wake(p);
	struct offcpu_block *b = bpf_task_storage_get(&offcpu_state, p, 0, 0);
	/* Once per block: try_to_wake_up fires this under the wakee's pi_lock, after it saw the
	 * task asleep, and the task is awake after it; a second waker finds it awake. */
	if (!b || !b->start || b->woken || b->epoch != offcpu_epoch || offcpu_ending)
		return 0;
	b->woken = 1;
	__u64 now = bpf_ktime_get_boot_ns();
	b->woken_ns = now;
	__u64 pt = bpf_get_current_pid_tgid();
	if ((__u32)pt == 0)
		return 0; /* woken from the idle task: an interrupt */
	b->waker_pid = pt >> 32;
	b->waker_tid = (__u32)pt;
	/* Shorter than the threshold so far: the block may still cross it in the run queue
	 * (then it is kept with the waker's tid and no waker stack), but mostly it will be
	 * dropped, so no stack now. */
	__u64 dw = now - b->start; /* the wake's one clock read */
	if (dw < offcpu_min_ns)
		return 0;
	if (aggregate)
		return 0; /* counted under the blocked thread's stacks only */
	/* Decided here, with the time off the CPU so far: the waker's stacks are taken only for
	 * a block the sample keeps. */
	if (!offcpu_sample(b, dw) && !req_past_slow(b, p, b->woken_ns)) {
		b->decided = OFFCPU_SAMPLED_OUT;
		return 0;
	}
	if (!admit(FAM_OFFCPU)) {
		b->decided = OFFCPU_REFUSED;
		return 0;
	}
	struct offcpu_event *e = bpf_task_storage_get(&offcpu_pend, p, 0,
						      BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!e)
		return 0; /* counted at the switch-in */
	offcpu_begin(e, b);
	b->decided = OFFCPU_ADMITTED;
	/* The user stack only of a target's thread: a wake from an interrupt names whoever was
	 * running, and another process's user addresses mean nothing in the trace (user space
	 * would drop them), so its walk is not paid for. */
	__u32 n = is_target(pt >> 32) ? waker_stack(ctx, &e->ips[0], &e->waker_flags) : 0;
	n &= MAX_FRAMES - 1;
	e->waker_nframes = n;
	e->waker_kframes = kernel_stack(ctx, &e->ips[n], &e->waker_flags);
	return 0;
}

/* The thread's return to user space after a kept block (rseq_update, or its next syscall
 * exit), in its own context: the user stack, if the user registers are the ones it blocked
 * with, then the event. For every other thread and return: one task-storage lookup. */
static __always_inline void offcpu_at_user(void *ctx)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct offcpu_block *b = bpf_task_storage_get(&offcpu_state, task, 0, 0);
	if (!b || offcpu_ending)
		return;
	if (b->start) {
		/* Running, yet blocked as far as offcpu_switch knows: the kernel did not report
		 * this thread's switch-in. Seen on 6.18 for about one in a thousand blocks (a
		 * thread woken by a timer interrupt over another task ran without a sched_switch
		 * event: ftrace and perf miss it as well). The block ended by now: it is ended
		 * here, its length up to this return to user space, its kernel stack unknown
		 * (SF_KERNEL_SWITCH_UNSEEN); the user stack is taken below as for any block. */
		__u64 start = b->start;
		b->start = 0;
		if (b->epoch != offcpu_epoch)
			return; /* blocked before a pause: its length is unknown */
		struct offcpu_event *late =
			offcpu_ended(b, task, start, bpf_ktime_get_boot_ns() - start, true);
		if (!late)
			return;
		late->flags |= SF_KERNEL_SWITCH_UNSEEN;
		late->pending = 1;
		b->pending = 1;
	}
	if (!b->pending)
		return;
	b->pending = 0;
	struct offcpu_event *e = bpf_task_storage_get(&offcpu_pend, task, 0, 0);
	/* Taken (1 -> 2) by compare-and-swap, as the thread's exit and the recording's end
	 * (offcpu_exit) take it (1 -> 0): one of them sends it, whatever the timing. */
	if (!e || __sync_val_compare_and_swap(&e->pending, 1, 2) != 1)
		return;
	if (b->epoch != offcpu_epoch) {
		/* kept before a pause: the syscall exit it waited for may have come while the
		 * programs were off, so the user stack now may be another's; dropped on purpose */
		e->pending = 0;
		count(FAM_OFFCPU, CTR_HITS);
		count(FAM_OFFCPU, CTR_FILTERED);
		return;
	}
	/* One send below, whichever way: the verifier walks it once per way in, and a
	 * second copy of it (--aggregate's hashing) made this program too large to verify. */
	struct pt_regs *u = (struct pt_regs *)bpf_task_pt_regs(task);
	if (!u || u->ip != e->user_ip || u->sp != e->user_sp) {
		e->nframes = 0;
		e->flags |= SF_USER_NOT_AT_EXIT;
	} else {
		__u32 at = (e->waker_nframes + e->waker_kframes + e->kframes) & 511;
		__u32 n = user_stack(ctx, &e->ips[at], &e->flags, false);
		n &= MAX_FRAMES - 1;
		e->nframes = n;
		e->copy_id = stack_copy();
	}
	offcpu_send(e);
}

/* A member of the sys_exit chain (hub.bpf.c). */
SEC("tp_btf/sys_exit")
int BPF_PROG(offcpu_sys_exit, struct pt_regs *regs, long ret)
{
	offcpu_at_user(ctx);
	chain_next(ctx, &sys_exit_chain, CM_OFFCPU_SYS_EXIT);
	return 0;
}

/* A thread with rseq on its way back to user space after it was switched out (the kernel's
 * notify-resume work, in its own context): where a kept block gets its user stack. */
SEC("tp_btf/rseq_update")
int BPF_PROG(offcpu_rseq, struct task_struct *t)
{
	offcpu_at_user(ctx);
	return 0;
}

/* A thread that exits with a kept block still waiting for a syscall exit, or one the
 * recording's end finds so (offcpu_end): its event, with its kernel stack. The two may run
 * at once at the end: the one that takes `pending` sends. */
static __always_inline void offcpu_exit(struct task_struct *task)
{
	struct offcpu_block *b = bpf_task_storage_get(&offcpu_state, task, 0, 0);
	if (!b || !b->pending)
		return;
	b->pending = 0;
	struct offcpu_event *e = bpf_task_storage_get(&offcpu_pend, task, 0, 0);
	if (e && __sync_val_compare_and_swap(&e->pending, 1, 0) == 1)
		offcpu_flush(e);
}

/* The recording's end (offcpu_ending set, then every thread of the machine): a kept block
 * whose thread has not returned to user space since (woken, then blocked again in the same
 * system call; or still on its way) is sent, not left in its thread's storage. */
SEC("iter/task")
int offcpu_end(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	if (task)
		offcpu_exit(task);
	return 0;
}

/* --- processes --- */

SEC("tp_btf/sched_process_fork")
int BPF_PROG(prof_fork, struct task_struct *parent, struct task_struct *child)
{
	targets_fork(parent, child);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(prof_exit, struct task_struct *task)
{
	targets_exit(task);
	offcpu_exit(task);
	return 0;
}

/* --- func --- */

struct call_key {
	__u32 tid;
	__u32 pad;
	__u64 sp;
};

/* Calls in flight hold the event they will become (entry time in h.time_ns), so that the
 * return probe sends it straight from where it waits, without a copy.
 *
 * Each thread has FUNC_SLOTS of them in task storage, matched by the stack pointer at entry:
 * written in place, no hash insert and delete of 1.1 KiB per call (what made --func cost
 * more than bpftrace with ustack). A slot is free when its sp is 0, and stale when its sp is
 * at or below the new entry's: a call still in progress in this thread is an ancestor, so
 * its entry sp is above (a return skipped by longjmp or an exception leaves such a slot).
 * Recursion deeper than the slots goes to the `calls` LRU hash keyed by (tid, sp), as all
 * calls did before. */
#define FUNC_SLOTS 4

struct func_slot {
	__u64 sp;
	struct func_event ev;
};

struct func_slots {
	struct func_slot s[FUNC_SLOTS];
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct func_slots);
} func_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct call_key);
	__type(value, struct func_event);
} calls SEC(".maps");

/* Per function id: the shortest call kept, ns. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} func_min SEC(".maps");

static __always_inline void fill_call(struct pt_regs *ctx, struct func_event *c)
{
	fill_header(&c->h, FAM_FUNC);
	c->function = bpf_get_attach_cookie(ctx);
	c->req.ns = 0;
	if (request_mode && req_is_func(c->function))
		req_begin(c->h.time_ns);
	c->flags = 0;
	c->nframes = user_stack(ctx, c->ips, &c->flags, true);
	c->copy_id = stack_copy();
	c->nargs = func_args > MAX_ARGS ? MAX_ARGS : func_args;
	if (func_args > 0) {
		c->args[0] = PT_REGS_PARM1(ctx);
		c->args[1] = PT_REGS_PARM2(ctx);
		c->args[2] = PT_REGS_PARM3(ctx);
		c->args[3] = PT_REGS_PARM4(ctx);
		c->args[4] = PT_REGS_PARM5(ctx);
		c->args[5] = PT_REGS_PARM6(ctx);
	}
}

SEC("uprobe")
int func_enter(struct pt_regs *ctx)
{
	/* A call is a hit when it returns (it has an outcome then); one refused here is a
	 * hit lost now. */
	if (!admit(FAM_FUNC)) {
		count(FAM_FUNC, CTR_HITS);
		return 0;
	}
	__u64 sp = PT_REGS_SP(ctx);
	struct func_slots *st = bpf_task_storage_get(&func_slots, bpf_get_current_task_btf(), 0,
						     BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (st) {
		for (int i = 0; i < FUNC_SLOTS; i++) {
			struct func_slot *slot = &st->s[i];
			if (slot->sp == 0 || slot->sp <= sp) {
				fill_call(ctx, &slot->ev);
				slot->sp = sp;
				return 0;
			}
		}
	}
	__u32 z = 0;
	struct func_event *c = bpf_map_lookup_elem(&func_scratch, &z);
	if (!c)
		return 0;
	fill_call(ctx, c);
	struct call_key k = { .tid = c->h.tid, .sp = sp };
	if (bpf_map_update_elem(&calls, &k, c, BPF_ANY)) {
		count(FAM_FUNC, CTR_HITS);
		count(FAM_FUNC, CTR_LOST_MAP_FULL);
	}
	return 0;
}

/* The end of the call whose entry sp was `sp`: sends it if it is long enough. `tail`: it ends
 * in a tail jump, the return value is not known. */
static __always_inline int func_done(struct pt_regs *ctx, __u64 sp, bool tail)
{
	__u64 now = bpf_ktime_get_boot_ns();
	struct func_event *c = NULL;
	struct func_slot *slot = NULL;
	struct func_slots *st = bpf_task_storage_get(&func_slots, bpf_get_current_task_btf(), 0, 0);
	if (st) {
		for (int i = 0; i < FUNC_SLOTS; i++) {
			if (st->s[i].sp == sp) {
				slot = &st->s[i];
				c = &slot->ev;
				break;
			}
		}
	}
	struct call_key k = { .tid = (__u32)bpf_get_current_pid_tgid(), .sp = sp };
	if (!c)
		c = bpf_map_lookup_elem(&calls, &k);
	if (!c)
		return 0; /* entered before the probes were attached */
	count(FAM_FUNC, CTR_HITS);
	__u64 d = now - c->h.time_ns;
	__u32 fid = c->function;
	if (request_mode && req_is_func(c->function))
		req_end(&c->req, now);
	__u64 *min = bpf_map_lookup_elem(&func_min, &fid);
	if (min && d < *min) {
		count(FAM_FUNC, CTR_FILTERED);
	} else {
		c->duration_ns = d;
		c->ret = tail ? 0 : PT_REGS_RC(ctx);
		__u32 n = c->nframes;
		if (n > MAX_FRAMES)
			n = MAX_FRAMES;
		__u64 size = __builtin_offsetof(struct func_event, ips) + n * sizeof(__u64);
		if (bpf_ringbuf_output(&events, c, size, BPF_RB_NO_WAKEUP))
			count(FAM_FUNC, CTR_LOST_RINGBUF);
	}
	if (slot)
		slot->sp = 0;
	else
		bpf_map_delete_elem(&calls, &k);
	return 0;
}

/* --func-exit uretprobe: after the return, sp is one word above the entry's. */
SEC("uretprobe")
int func_return(struct pt_regs *ctx)
{
	return func_done(ctx, PT_REGS_SP(ctx) - 8, false);
}

/* A uprobe on one of the function's exits (a ret, or a tail jump: cookie bit 32): the
 * stack pointer is back at its entry value there. A call left by an exception never gets
 * here; its slot goes stale and is reused (see func_slots). */
SEC("uprobe")
int func_exit(struct pt_regs *ctx)
{
	return func_done(ctx, PT_REGS_SP(ctx), bpf_get_attach_cookie(ctx) >> 32);
}

/* --- usdt --- */

/* --usdt-string: probe id -> the index of its string argument (set by user space as the
 * probes are attached). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u64);
	__type(value, __u32);
} usdt_string_args SEC(".maps");

/* The hit's arguments into `args` (at most USDT_MAX_ARGS; one that cannot be read is 0, its
 * bit set in `errors`); returns how many. */
static __always_inline int usdt_args(struct pt_regs *ctx, __u64 *args, __u32 *errors)
{
	int n = bpf_usdt_arg_cnt(ctx);
	if (n < 0)
		n = 0;
	if (n > USDT_MAX_ARGS)
		n = USDT_MAX_ARGS;
	*errors = 0;
	for (int i = 0; i < USDT_MAX_ARGS; i++) {
		if (i >= n)
			break;
		long v = 0;
		if (bpf_usdt_arg(ctx, i, &v)) {
			*errors |= 1u << i;
			v = 0;
		}
		args[i] = v;
	}
	return n;
}

/* --request usdt without --usdt-stack or --usdt-string: a start hit sends no event; the
 * kernel holds its time, probe and arguments in the thread's req_acct and the done's
 * event carries them (one event a request; the recorder writes both hits). A start while
 * one is held (a nest, rare) is sent as usual, as is a done with none held. Held starts
 * are counted (CTR_HELD, CTR_RELEASED): those without their done are the requests open. */
const volatile bool req_hold = false;

/* Holds the current thread's start hit `probe` at `now`; false: not held (send it). */
static __always_inline bool req_hold_start(struct pt_regs *ctx, __u64 probe, __u64 now)
{
	struct req_acct *r = bpf_task_storage_get(&req_acct, bpf_get_current_task_btf(), 0,
						  BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!r || r->held)
		return false;
	int n = usdt_args(ctx, r->held_args, &r->held_arg_errors);
	r->held = 1;
	r->held_time = now;
	r->held_probe = probe;
	r->held_nargs = n;
	count(FAM_USDT, CTR_HELD);
	return true;
}

/* The current thread's done at `now`, its request `r`: the split into `e` (request_mode)
 * and the held start it closes (none: held_probe 0); or, `e` NULL, both dropped with the
 * lost done (so the next start finds none). */
static __always_inline void req_done(struct usdt_event *e, __u64 now)
{
	struct req_acct *r = bpf_task_storage_get(&req_acct, bpf_get_current_task_btf(), 0, 0);
	if (e) {
		e->held_probe = 0;
		if (request_mode)
			req_end_of(&e->req, r, now);
	} else if (r) {
		r->start = 0;
	}
	if (!req_hold || !r || !r->held)
		return;
	r->held = 0;
	count(FAM_USDT, CTR_RELEASED);
	if (!e)
		return;
	e->held_time = r->held_time;
	e->held_probe = r->held_probe;
	__u32 n = r->held_nargs;
	for (int i = 0; i < USDT_MAX_ARGS; i++) {
		if (i >= n)
			break;
		e->held_args[i] = r->held_args[i];
	}
	e->held_nargs = n;
	e->held_arg_errors = r->held_arg_errors;
}

SEC("usdt")
int usdt_hit(struct pt_regs *ctx)
{
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	if (!is_target(pid))
		return 0;
	__u64 cookie = bpf_usdt_cookie(ctx);
	/* --request's role, set only with it */
	__u32 req = cookie >> REQ_ROLE_SHIFT;
	cookie &= (1ULL << REQ_ROLE_SHIFT) - 1;
	__u64 now = 0;
	if (req) {
		now = bpf_ktime_get_boot_ns();
		if (req == REQ_START && request_mode)
			req_begin(now);
		if (req == REQ_START && req_hold && req_hold_start(ctx, cookie, now)) {
			count(FAM_USDT, CTR_HITS);
			return 0;
		}
	}
	count(FAM_USDT, CTR_HITS);
	if (!admit(FAM_USDT)) {
		if (req == REQ_DONE)
			req_done(NULL, now);
		return 0;
	}
	__u32 z = 0;
	struct usdt_event *e = bpf_map_lookup_elem(&usdt_scratch, &z);
	if (!e)
		return 0;
	if (req) {
		/* one clock for the start, the done and the split */
		__u64 pt = bpf_get_current_pid_tgid();
		e->h.type = FAM_USDT;
		e->h.pid = pt >> 32;
		e->h.tid = (__u32)pt;
		e->h.cpu = bpf_get_smp_processor_id();
		e->h.time_ns = now;
	} else {
		fill_header(&e->h, FAM_USDT);
	}
	e->probe = cookie;
	e->req.ns = 0;
	e->held_probe = 0;
	if (req == REQ_DONE)
		req_done(e, now);
	int n = usdt_args(ctx, e->args, &e->arg_errors);
	e->nargs = n;
	e->flags = 0;
	e->nframes = 0;
	e->copy_id = 0;
	if (usdt_stack) {
		e->nframes = user_stack(ctx, e->ips, &e->flags, false);
		e->copy_id = stack_copy();
	}
	__u32 nf = e->nframes;
	if (nf > MAX_FRAMES)
		nf = MAX_FRAMES;
	e->str_len = 0;
	e->str_arg = 0;
	if (usdt_string_bytes) {
		__u32 *a = bpf_map_lookup_elem(&usdt_string_args, &cookie);
		if (a && *a < USDT_MAX_ARGS && *a < (__u32)n) {
			/* the string goes after the frames: room for it first */
			if (nf > MAX_FRAMES - USDT_STR_WORDS) {
				nf = MAX_FRAMES - USDT_STR_WORDS;
				e->nframes = nf;
				e->flags |= SF_USER_TRUNCATED;
			}
			__u32 max = usdt_string_bytes > USDT_STR_MAX ? USDT_STR_MAX : usdt_string_bytes;
			__u32 i = *a;
			if (i >= USDT_MAX_ARGS)
				i = 0;
			if (nf > MAX_FRAMES - USDT_STR_WORDS)
				nf = MAX_FRAMES - USDT_STR_WORDS; /* (for the verifier) */
			long r = bpf_probe_read_user_str(&e->ips[nf], max, (void *)e->args[i]);
			if (r > 0 && r <= USDT_STR_MAX) {
				e->str_len = r;
				e->str_arg = i + 1;
			}
		}
	}
	__u64 size = __builtin_offsetof(struct usdt_event, ips) + nf * sizeof(__u64) +
		     (e->str_len & (USDT_STR_MAX * 2 - 1));
	/* (a string comes with at most MAX_FRAMES - USDT_STR_WORDS frames: within the event;
	 * said again for older verifiers, which do not follow that) */
	if (size > sizeof(struct usdt_event))
		size = sizeof(struct usdt_event);
	if (bpf_ringbuf_output(&events, e, size, BPF_RB_NO_WAKEUP))
		count(FAM_USDT, CTR_LOST_RINGBUF);
	return 0;
}

/* --- memgrowth --- */

#define NR_MMAP 9
#define NR_MUNMAP 11
#define NR_BRK 12

struct mem_call {
	__u64 nr;
	__u64 addr;
	__u64 len;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct mem_call);
} mem_calls SEC(".maps");

static __always_inline void mem_emit(void *ctx, __u32 kind, __u64 addr, __u64 size,
				     __u64 weight)
{
	if (!admit(FAM_MEM_GROWTH))
		return;
	__u32 z = 0;
	struct mem_event *e = bpf_map_lookup_elem(&mem_scratch, &z);
	if (!e)
		return;
	fill_header(&e->h, FAM_MEM_GROWTH);
	e->kind = kind;
	e->addr = addr;
	e->size = size;
	e->weight = weight;
	e->flags = 0;
	__u32 n = user_stack(ctx, e->ips, &e->flags, false);
	if (n > MAX_FRAMES)
		n = MAX_FRAMES;
	e->nframes = n;
	e->copy_id = stack_copy();
	__u64 bytes = __builtin_offsetof(struct mem_event, ips) + n * sizeof(__u64);
	if (bytes > sizeof(*e))
		bytes = sizeof(*e);
	if (bpf_ringbuf_output(&events, e, bytes, BPF_RB_NO_WAKEUP))
		count(FAM_MEM_GROWTH, CTR_LOST_RINGBUF);
}

static __always_inline void mem_enter_do(unsigned long long *ctx, struct pt_regs *regs, long id)
{
	if (id != NR_BRK && id != NR_MMAP && id != NR_MUNMAP)
		return;
	__u64 pt = bpf_get_current_pid_tgid();
	if (!is_target(pt >> 32))
		return;
	struct mem_call c = { .nr = id };
	if (id == NR_BRK) {
		struct task_struct *t = (struct task_struct *)bpf_get_current_task();
		c.addr = BPF_CORE_READ(t, mm, brk); /* the break before the call */
	} else {
		c.addr = regs->di;
		c.len = regs->si;
	}
	__u32 tid = (__u32)pt;
	if (bpf_map_update_elem(&mem_calls, &tid, &c, BPF_ANY)) {
		count(FAM_MEM_GROWTH, CTR_HITS);
		count(FAM_MEM_GROWTH, CTR_LOST_MAP_FULL);
	}
	return;
}

/* A member of the sys_enter chain (hub.bpf.c). */
SEC("tp_btf/sys_enter")
int BPF_PROG(mem_enter, struct pt_regs *regs, long id)
{
	mem_enter_do(ctx, regs, id);
	chain_next(ctx, &sys_enter_chain, CM_MEM_ENTER);
	return 0;
}

/* The same at syscalls:sys_enter_brk, _mmap and _munmap, when the chain is not attached
 * (common.bpf.h). */
SEC("tracepoint")
int mem_enter_tp(void *ctx)
{
	struct pt_regs *regs = sc_user_regs();
	mem_enter_do(ctx, regs, regs->orig_ax);
	return 0;
}

static __always_inline void mem_exit_do(unsigned long long *ctx, struct pt_regs *regs, long ret)
{
	long nr = regs->orig_ax;
	if (nr != NR_BRK && nr != NR_MMAP && nr != NR_MUNMAP)
		return;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct mem_call *cp = bpf_map_lookup_elem(&mem_calls, &tid);
	if (!cp)
		return;
	struct mem_call c = *cp;
	bpf_map_delete_elem(&mem_calls, &tid);
	count(FAM_MEM_GROWTH, CTR_HITS); /* counted when the call ends: then it has an outcome */
	if (c.nr == NR_BRK) {
		__u64 now = ret;
		if (now > c.addr)
			mem_emit(ctx, MK_BRK, c.addr, now - c.addr, 0);
		else if (now < c.addr) /* a shrinking break releases memory */
			mem_emit(ctx, MK_MUNMAP, now, c.addr - now, 0);
		else
			count(FAM_MEM_GROWTH, CTR_FILTERED); /* brk(0): a query */
	} else if (c.nr == NR_MMAP && (unsigned long)ret < (unsigned long)-4095L) {
		mem_emit(ctx, MK_MMAP, ret, c.len, 0);
	} else if (c.nr == NR_MUNMAP && ret == 0) {
		mem_emit(ctx, MK_MUNMAP, c.addr, c.len, 0);
	} else {
		count(FAM_MEM_GROWTH, CTR_FILTERED); /* failed: nothing changed */
	}
	return;
}

/* A member of the sys_exit chain (hub.bpf.c). */
SEC("tp_btf/sys_exit")
int BPF_PROG(mem_exit, struct pt_regs *regs, long ret)
{
	mem_exit_do(ctx, regs, ret);
	chain_next(ctx, &sys_exit_chain, CM_MEM_EXIT);
	return 0;
}

/* The same at syscalls:sys_exit_brk, _mmap and _munmap. */
SEC("tracepoint")
int mem_exit_tp(struct sc_exit_ctx *ctx)
{
	mem_exit_do((void *)ctx, sc_user_regs(), ctx->ret);
	return 0;
}

#define PF_PROT 1
#define PF_INSTR 16

/* A user page fault on a page not present that is not an instruction fetch: the first
 * touch of new memory (or of file data not yet mapped in). */
SEC("tp_btf/page_fault_user")
int BPF_PROG(mem_fault, unsigned long address, struct pt_regs *regs, unsigned long error_code)
{
	if (error_code & (PF_PROT | PF_INSTR))
		return 0;
	__u64 pt = bpf_get_current_pid_tgid();
	if (!is_target(pt >> 32))
		return 0;
	count(FAM_MEM_GROWTH, CTR_HITS);
	__u64 weight = 0;
	__u64 unit = mem_fault_unit;
	if (unit > page_size) {
		/* p = page_size/unit: r/2^32 < page_size/unit */
		__u64 r = bpf_get_prandom_u32();
		if (r * unit >= (page_size << 32)) {
			count(FAM_MEM_GROWTH, CTR_FILTERED);
			return 0;
		}
		weight = unit;
	}
	mem_emit(ctx, MK_PAGE_FAULT, address & ~(page_size - 1), page_size, weight);
	return 0;
}
