/* The system call chain. Every family that needs raw sys_enter or sys_exit (lock's futex
 * waits, memgrowth's brk/mmap/munmap, syscalls, off-CPU's and the run queue's user stacks
 * at the syscall exit, TCP's accepts) used to attach a program of its own there, and every
 * system call of every process on the machine paid each program's dispatch (~40 ns here):
 * nine programs with `ebrec diagnose`'s families, +420 ns on a getppid loop of a process
 * that was not even traced. Now one program on each tracepoint checks the target once and
 * tail-calls the families' programs in turn (the program arrays `sys_enter_chain` and
 * `sys_exit_chain`, filled by user space with the members of the families recorded, in a
 * fixed order); a process that is not a target pays one dispatch and one lookup. */
#include "common.bpf.h"
#include "targets.bpf.h"

static __always_inline void chain_start(void *ctx, void *chain)
{
	__u32 z = 0;
	struct chain_pos *c = bpf_map_lookup_elem(&chain_state, &z);
	if (!c)
		return;
	c->pos = 0;
	if (chain_timed)
		c->t = bpf_ktime_get_ns();
	bpf_tail_call(ctx, chain, 0);
}

SEC("tp_btf/sys_enter")
int BPF_PROG(hub_sys_enter, struct pt_regs *regs, long id)
{
	if (!is_target(bpf_get_current_pid_tgid() >> 32))
		return 0;
	chain_start(ctx, &sys_enter_chain);
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(hub_sys_exit, struct pt_regs *regs, long ret)
{
	if (!is_target(bpf_get_current_pid_tgid() >> 32))
		return 0;
	chain_start(ctx, &sys_exit_chain);
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
