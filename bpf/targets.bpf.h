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

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} targets SEC(".maps");

static __always_inline bool is_target(__u32 pid)
{
	if (all_processes)
		return pid != self_pid;
	return bpf_map_lookup_elem(&targets, &pid);
}

/* For tp_btf/sched_process_fork: a new process of a target is a target. */
static __always_inline void targets_fork(struct task_struct *parent, struct task_struct *child)
{
	__u32 ppid = BPF_CORE_READ(parent, tgid);
	__u32 cpid = BPF_CORE_READ(child, tgid);
	if (ppid != cpid && bpf_map_lookup_elem(&targets, &ppid)) {
		__u8 one = 1;
		bpf_map_update_elem(&targets, &cpid, &one, BPF_ANY);
	}
}

/* For tp_btf/sched_process_exit: a process leaves the set when its main thread exits. */
static __always_inline void targets_exit(struct task_struct *task)
{
	__u32 tid = BPF_CORE_READ(task, pid);
	__u32 pid = BPF_CORE_READ(task, tgid);
	if (tid == pid)
		bpf_map_delete_elem(&targets, &pid);
}

#endif
