/* The system call chain. Every family that needs raw sys_enter or sys_exit (lock's futex
 * waits, memgrowth's brk/mmap/munmap, syscalls, off-CPU's and the run queue's user stacks
 * at the syscall exit, TCP's accepts) used to attach a program of its own there, and every
 * system call of every process on the machine paid each program's dispatch (~40 ns here):
 * nine programs with `ebrec diagnose`'s families, +420 ns on a getppid loop of a process
 * that was not even traced. Now one program on each tracepoint checks the target once and
 * tail-calls the families' programs in turn (the program arrays `sys_enter_chain` and
 * `sys_exit_chain`, filled by user space with the members of the families recorded, in a
 * fixed order); a process that is not a target pays one dispatch and one bit test. Of a
 * target's call, only the members that want its number run (chain_wants): futex's for
 * futex, memgrowth's for brk, mmap and munmap, TCP's for accept. */
#include "common.bpf.h"
#include "targets.bpf.h"

/* Whether the calling thread's process is a target: one bit of `targets` (targets.bpf.h),
 * the whole price of a call of a process that is not traced. */
static __always_inline bool hub_target(void)
{
	return is_target(bpf_get_current_pid_tgid() >> 32);
}

/* Runs the members of `chain` that want system call `nr` (chain_wants at `base` + nr). */
static __always_inline void chain_start(void *ctx, void *chain, __u32 base, __u64 nr)
{
	__u32 z = 0;
	struct chain_pos *c = bpf_map_lookup_elem(&chain_state, &z);
	if (!c)
		return;
	__u32 mask = (1U << CHAIN_SLOTS) - 1;
	if (nr < CHAIN_NRS) {
		__u32 key = base + (__u32)nr;
		__u32 *w = bpf_map_lookup_elem(&chain_wants, &key);
		if (w)
			mask = *w;
	}
	if (!mask)
		return;
	c->mask = mask & (mask - 1);
	c->timed = chain_timing_now();
	if (c->timed)
		c->t = bpf_ktime_get_ns();
	bpf_tail_call(ctx, chain, chain_lowest(mask));
}

SEC("tp_btf/sys_enter")
int BPF_PROG(hub_sys_enter, struct pt_regs *regs, long id)
{
	if (!hub_target())
		return 0;
	chain_start(ctx, &sys_enter_chain, 0, (__u64)id);
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(hub_sys_exit, struct pt_regs *regs, long ret)
{
	if (!hub_target())
		return 0;
	chain_start(ctx, &sys_exit_chain, CHAIN_NRS, (__u64)regs->orig_ax);
	return 0;
}

struct thread_name_event _thread_name_event = {};

/* A thread of a target renamed: its new name for the trace's Thread records (a thread
 * that names itself as it starts, as a pool's workers do, is named before its first
 * event; ebrec reads the names given before the recording from /proc). */
SEC("tp_btf/task_rename")
int BPF_PROG(hub_rename, struct task_struct *task, const char *comm)
{
	__u32 pid = BPF_CORE_READ(task, tgid);
	if (!is_target(pid))
		return 0;
	struct thread_name_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e)
		return 0;
	e->h.type = EV_THREAD_NAME;
	e->h.pid = pid;
	e->h.tid = BPF_CORE_READ(task, pid);
	e->h.cpu = bpf_get_smp_processor_id();
	e->h.time_ns = bpf_ktime_get_boot_ns();
	__builtin_memset(e->comm, 0, sizeof(e->comm));
	bpf_probe_read_kernel_str(e->comm, sizeof(e->comm), comm);
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(hub_fork, struct task_struct *parent, struct task_struct *child)
{
	targets_fork(parent, child);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(hub_exit, struct task_struct *task)
{
	targets_exit(task);
	return 0;
}
