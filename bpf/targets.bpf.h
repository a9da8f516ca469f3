/* The traced processes (tgids) for programs that see every process (tracepoints, perf
 * events): user space adds the targets, and the fork/exit programs of each object keep the
 * set up to date in the kernel, so a child is traced from its first event. */
#ifndef EBTRACE_TARGETS_BPF_H
#define EBTRACE_TARGETS_BPF_H

#include "common.bpf.h"

const volatile bool all_processes = false;
/* With all_processes, a process left out (ebrec itself, for the system families: its own
 * polling would fill the syscall and run-queue reports). 0: none. */
const volatile __u32 self_pid = 0;

/* The traced processes: bit (pid & 63) of word pid >> 6 of `targets` (common.bpf.h, one
 * map created by user space and shared by every object). A test is one inlined array
 * access: the programs that run for every process (the system call hubs at every call of
 * the machine, the scheduler's tracepoints at every switch and wake) pay a few
 * nanoseconds to learn that a process is not traced, where a hash lookup took 30-300
 * (its bucket and element cold after a sleep). Bits are set and cleared with atomic
 * operations, here and by user space through the map's mmap. */
static __always_inline bool is_target(__u32 pid)
{
	if (all_processes)
		return pid != self_pid;
	__u32 w = pid >> 6;
	__u64 *v = bpf_map_lookup_elem(&targets, &w);
	return v && ((*v >> (pid & 63)) & 1);
}

static __always_inline void targets_set(__u32 pid, bool on)
{
	__u32 w = pid >> 6;
	__u64 *v = bpf_map_lookup_elem(&targets, &w);
	if (!v)
		return;
	__u64 bit = 1ULL << (pid & 63);
	if (on)
		__sync_fetch_and_or(v, bit);
	else
		__sync_fetch_and_and(v, ~bit);
}

/* For tp_btf/sched_process_fork: a new process of a target is a target. */
static __always_inline void targets_fork(struct task_struct *parent, struct task_struct *child)
{
	__u32 ppid = BPF_CORE_READ(parent, tgid);
	__u32 cpid = BPF_CORE_READ(child, tgid);
	if (ppid != cpid && !all_processes && is_target(ppid))
		targets_set(cpid, true);
}

/* For tp_btf/sched_process_exit: a process leaves the set when its main thread exits. */
static __always_inline void targets_exit(struct task_struct *task)
{
	__u32 tid = BPF_CORE_READ(task, pid);
	__u32 pid = BPF_CORE_READ(task, tgid);
	if (tid == pid && !all_processes)
		targets_set(pid, false);
}

#endif
