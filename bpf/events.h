/* Every struct that crosses from the BPF programs to user space. Rust gets these types from
 * the generated skeletons (`types::…`), so C and Rust cannot disagree on a layout. */
#ifndef EBTRACE_EVENTS_H
#define EBTRACE_EVENTS_H

/* FAM_* (event families, also the `type` of every event header), AK_*, MK_*, LS_*, SF_*:
 * generated from proto/trace.proto by proto/build.rs, so each is numbered once. */
#include "families.h"

/* Most user frames kept per stack (the kernel's own limit is 127; one more slot holds the
 * caller read from [sp] at a function-entry probe). */
#define MAX_FRAMES 128
/* Most kernel frames kept per stack. */
#define KFRAMES 64

/* The system call chain (bpf/hub.bpf.c): one program on each of raw sys_enter and sys_exit
 * checks the target once and tail-calls the families' programs in turn. The members, in
 * their fixed order (a paused family's members are left out of the arrays). */
#define CM_FUTEX_ENTER 0
#define CM_MEM_ENTER 1
#define CM_SYS_ENTER 2
#define CM_FUTEX_EXIT 3
#define CM_MEM_EXIT 4
#define CM_OFFCPU_SYS_EXIT 5
#define CM_SYS_EXIT 6
#define CM_RUNQ_SYS_EXIT 7
#define CM_TCP_SYS_EXIT 8
#define CHAIN_MEMBERS 9
/* Slots of each chain's program array (at most 3 enter and 6 exit members). */
#define CHAIN_SLOTS 8
/* System call numbers with a slot mask of their own in `chain_wants` (enter chain: key nr,
 * exit chain: CHAIN_NRS + nr); a larger number runs every member. */
#define CHAIN_NRS 512
/* Words of the `targets` bitmap (common.bpf.h): one bit per process id up to Linux's
 * PID_MAX_LIMIT (2^22), 512 KiB. */
#define TARGET_WORDS 65536

/* Counter slots of the per-CPU `counters` array: family * CTR_STRIDE + counter. */
enum counter {
	CTR_HITS = 0,		/* probe hits for the family (calls seen) */
	CTR_FILTERED = 1,	/* hits discarded on purpose (threshold, sampling) */
	CTR_LOST_RINGBUF = 2,	/* events lost: ring buffer full */
	CTR_LOST_MAP_FULL = 3,	/* events lost, or blocks untracked: a kernel map was full */
	CTR_LOST_RATE = 4,	/* events dropped by --max-events-per-sec */
	CTR_LOST_UNMATCHED = 5,	/* an end never seen (e.g. a switch-in the kernel did not report) */
	CTR_HELD = 6,		/* --request: start hits held for their done (usdt) */
	CTR_RELEASED = 7,	/* --request: held starts sent with their done, or lost with it */
	CTR_STRIDE = 8,
};

struct event_header {
	__u32 type;	/* the event's family: FAM_* */
	__u32 pid;	/* tgid */
	__u32 tid;
	__u32 cpu;
	__u64 time_ns;	/* boottime */
};

/* An allocation. Sent with only `nframes` of `ips`. Also the per-thread in-flight state
 * between the entry and the return probe, so that the event leaves from the map value
 * without a copy. */
struct alloc_event {
	struct event_header h;
	__u64 size;
	__u64 addr;
	__u64 arg;	/* in flight: realloc's old pointer, posix_memalign's memptr */
	__u32 kind;
	__u32 nframes;
	__u32 flags;
	__u32 old_traced; /* in flight: realloc of a traced block */
	__u64 copy_id;	/* the stack copy sent before this event (0: none) */
	__u64 sample_period; /* --sample-bytes N in effect (0: not sampled by bytes) */
	__u32 allocator; /* 0: the system allocator; N: the Nth --alloc-fn */
	__u32 pad;
	__u64 ips[MAX_FRAMES];
};

struct free_event {
	struct event_header h;
	__u64 addr;
	__u32 allocator; /* whose block: alloc_event.allocator */
	__u32 pad;
};

/* --aggregate: counters per (process, address space, family, stack) in BPF maps instead of
 * an event per call (aggregate.bpf.h). `mm` tells two lives of a pid apart (and the images
 * before and after an exec); `hash` is of the stack's frames and flags (and a lock's
 * mutex). */
struct agg_key {
	__u32 pid;
	__u32 family;
	__u64 mm;
	__u64 hash;
};

/* alloc: calls, bytes, live blocks and bytes (wrapping: a free may land first); cpu:
 * samples; offcpu: blocks, ns off the CPU; lock: waits, ns waited, ns held. */
struct agg_val {
	__u64 count;
	__u64 sum;
	__u64 sum2;
	__u64 live_count;
	__u64 live_bytes;
	__u64 first_ns;		/* the first event under the key (boottime): its generation */
};

/* The stack of an agg_key, written once when the key is new: user frames, then kernel. */
struct agg_stack {
	__u32 nframes;
	__u32 kframes;
	__u32 flags;
	__u32 pad;
	__u64 mutex;		/* lock: the lock's address */
	__u64 ips[MAX_FRAMES + KFRAMES];
};

/* A traced block (alloc.bpf.c `live`): under which stack, how large (--aggregate). */
struct live_block {
	__u64 hash;
	__u64 size;
};

/* A new process of a session-probed one (h.pid: the child), stopped until ebrec has
 * attached its allocator links (alloc.bpf.c, alloc_fork). Family FAM_PROCESS. */
struct fork_hold_event {
	struct event_header h;
	__u32 ppid;
	__u32 stopped; /* the SIGSTOP was sent: ebrec must SIGCONT it */
};

/* A target's thread renamed itself (pthread_setname_np, prctl(PR_SET_NAME), a write to
 * /proc/.../comm): the task_rename tracepoint (hub.bpf.c). h.type EV_THREAD_NAME. */
#define EV_THREAD_NAME 1000
struct thread_name_event {
	struct event_header h;
	char comm[16];
};

/* A lock wait (futex) or wait-and-hold (uprobe). `ips[0..nframes)` is the waiter's (or
 * acquirer's) stack, `ips[MAX_FRAMES..MAX_FRAMES+waker_nframes)` the waker's. Sent up to
 * the last used slot. */
struct lock_event {
	struct event_header h;
	__u64 uaddr;
	__u64 wait_ns;
	__u64 hold_ns;
	__u32 waker_tid;
	__u32 op;
	__s32 ret;
	__u32 source;
	__u32 nframes;
	__u32 waker_nframes;
	__u32 flags;
	__u32 waker_flags;
	__u64 copy_id;
	__u64 ips[2 * MAX_FRAMES];
};

/* An on-CPU sample: `ips[0..nframes)` user, then `ips[nframes..nframes+kframes)` kernel. */
struct sample_event {
	struct event_header h;
	__u32 nframes;
	__u32 kframes;
	__u32 flags;
	__u32 pad;
	__u64 copy_id;
	__u64 ips[MAX_FRAMES + KFRAMES];
};

/* Slots of an off-CPU event's stack area: waker user + kernel, blocked kernel + user, with
 * room for the masked offsets the verifier needs. */
#define OFFCPU_SLOTS 640

/* A block off the CPU, sent at the blocked thread's first syscall exit after it runs again
 * (profile.bpf.c, offcpu), if it lasted at least `offcpu_min_ns`. Also the per-task state of
 * a kept block between its switch-in and that syscall exit (task storage), so the event
 * leaves without a copy. `ips` holds, back to back, in the order they are taken: the
 * waker's user and kernel frames (at the wake), the blocked thread's kernel frames (at the
 * switch-in) and its user frames (at the syscall exit). */
struct offcpu_event {
	struct event_header h;	/* the blocked thread; time_ns: when it left the CPU */
	__u64 duration_ns;
	__u32 state;		/* prev_state at the switch-out */
	__u32 waker_pid;
	__u32 waker_tid;
	__u32 nframes;
	__u32 kframes;
	__u32 waker_nframes;
	__u32 waker_kframes;
	__u32 flags;
	__u32 waker_flags;
	__u32 pending;		/* state only: kept, waiting for the syscall exit */
	__u64 user_ip;		/* state only: the user registers at the switch-out */
	__u64 user_sp;
	__u64 weight_ns;	/* the off-CPU time it stands for (--offcpu-sample; 0: itself) */
	__u64 runnable_ns;	/* from its wake to its switch-in (0: not known) */
	__u64 copy_id;
	__u64 ips[OFFCPU_SLOTS];
};

#define MAX_ARGS 6

/* A call of a --func function, sent at its return. */
/* A request as the kernel accounted it on its thread (--request, with --offcpu), from its
 * start (probe or function entry) to its done (probe or return); ns 0: none. */
struct req_out {
	__u64 ns;		/* start to done */
	__u64 split[4];		/* on CPU, run queue, off CPU interruptible, uninterruptible */
	__u32 blocks;		/* times it left the CPU blocked */
	__u32 pad;
};

struct func_event {
	struct event_header h;	/* time_ns: entry */
	__u64 function;		/* ProbedFunction id (the probe's BPF cookie) */
	__u64 duration_ns;
	__u64 ret;
	__u64 args[MAX_ARGS];
	__u32 nargs;
	__u32 nframes;
	__u32 flags;
	__u32 pad;
	struct req_out req;	/* --request func:: the call as a request */
	__u64 copy_id;
	__u64 ips[MAX_FRAMES];
};

/* --request's USDT probes: their role in the top bits of the BPF cookie (the rest is the
 * probe's id). */
#define REQ_ROLE_SHIFT 62
#define REQ_START 1
#define REQ_DONE 2

/* Most arguments of a USDT probe kept per hit (the most a note can have). */
#define USDT_MAX_ARGS 12

/* A hit of a --usdt probe. Sent with only `nframes` of `ips` (0 without --usdt-stack). */
struct usdt_event {
	struct event_header h;
	__u64 probe;		/* ProbedUsdt id (the probe's BPF cookie) */
	__u64 args[USDT_MAX_ARGS]; /* sign-extended per the spec; a pointer is its address */
	__u32 nargs;
	__u32 arg_errors;	/* bit i: argument i could not be read (its value is 0) */
	__u32 nframes;
	__u32 flags;
	struct req_out req;	/* --request's done probe: the request it closes */
	/* --request: the start hit the kernel held for this done (held_probe 0: none), its
	 * time, probe and arguments; the recorder writes it as the start's own hit, before
	 * this one */
	__u64 held_time;
	__u64 held_probe;
	__u64 held_args[USDT_MAX_ARGS];
	__u32 held_nargs;
	__u32 held_arg_errors;
	/* --usdt-string: the bytes (with their NUL) of the string argument str_arg - 1 are
	 * after the nframes frames in `ips`; str_len 0: none */
	__u32 str_len;
	__u32 str_arg;
	__u64 copy_id;
	__u64 ips[MAX_FRAMES];
};

struct mem_event {
	struct event_header h;
	__u64 size;
	__u64 addr;
	/* The bytes a page fault kept by --memgrowth-sample stands for (0: its size). */
	__u64 weight;
	__u32 kind;
	__u32 nframes;
	__u32 flags;
	__u32 pad;
	__u64 copy_id;
	__u64 ips[MAX_FRAMES];
};

/* Most bytes of user stack copied per event (--stack-mode dwarf:BYTES). */
#define MAX_COPY 32768

/* The top of a user stack and the registers to unwind it from (--stack-mode dwarf), sent
 * just before the event that refers to it by `id`. Sent up to `len` bytes of `data`. */
struct copy_event {
	struct event_header h;
	__u64 id;
	__u64 ip;
	__u64 sp;
	__u64 bp;
	__u32 len;
	__u32 pad;
	__u8 data[MAX_COPY + 4096]; /* room for the verifier's view of the last chunk */
};

/* --- unwinding in the kernel (--stack-mode cfi|auto) ---
 *
 * ebrec turns each mapped binary's .eh_frame into rows, one u64 per address range:
 *   bits  0..31  file offset where the row starts
 *   bits 32..39  kind (CFI_*)
 *   bits 40..47  rbp rule: the caller's rbp is at CFA + 8 * (signed byte); 0: unchanged;
 *                CFI_RBP_LOST: unknown. For CFI_PLT: the threshold on (pc & 15).
 *   bits 48..63  CFA offset, bytes
 * sorted by offset, in `cfi_rows`; a file's rows are one range of it. `cfi_pages` holds, per
 * 4 KiB page of a file's code, the index of the first row at or after the page's start
 * (low half) and the next page's (high half), so that a lookup is a binary search within
 * one page. */
#define CFI_PAGE_SHIFT 12
/* The walks (rodata cfi_mode): off (fp, dwarf), rows only, rows and the frame pointer. */
#define CFI_MODE_OFF 0
#define CFI_MODE_CFI 1
#define CFI_MODE_AUTO 2
/* Executable mappings per process the unwinder knows. */
#define CFI_MAX_MAPS 512
/* Files with rows loaded at once (slot 0: none). */
#define CFI_MAX_FILES 8192
#define CFI_RBP_LOST 128

enum cfi_kind {
	CFI_INVALID = 0,	/* no rule: a gap between FDEs, or a rule the walk cannot do */
	CFI_RSP = 1,		/* CFA = rsp + offset */
	CFI_RBP = 2,		/* CFA = rbp + offset */
	CFI_PLT = 3,		/* CFA = rsp + offset + ((pc & 15) >= threshold ? 8 : 0) */
	CFI_SIGNAL = 4,		/* a signal trampoline: the registers are in the ucontext at rsp */
	CFI_STOP = 5,		/* the outermost frame (return address undefined: _start, clone) */
};

/* A file's rows: cfi_rows[row_base .. row_base + nrows), cfi_pages[page_base ..
 * page_base + npages). */
struct cfi_file {
	__u32 row_base;
	__u32 nrows;
	__u32 page_base;
	__u32 npages;
	__u64 first_off;	/* file offset of the first page */
};

/* A file as the kernel names it (the inode's device, s_dev, and number), for a pc in a
 * mapping user space has not told the unwinder of yet. */
struct cfi_inode {
	__u64 dev;
	__u64 ino;
};

/* An executable mapping of a process: file offset = address + delta. file: a slot of
 * cfi_files (0: no rows loaded for it). */
struct cfi_map {
	__u64 start;
	__u64 end;
	__u64 delta;
	__u32 file;
	__u32 pad;
};

/* Mappings the BPF side found itself (bpf_find_vma) before user space knew them. */
#define CFI_EARLY_MAPS 8

struct cfi_early {
	__u32 n;
	__u32 pad;
	struct cfi_map m[CFI_EARLY_MAPS];
};

/* A process's executable mappings, sorted by start (written by user space). */
struct cfi_proc {
	__u32 n;
	__u32 gen;	/* a new number at each write of any process's table (never 0): the
			 * kernel side's row cache holds rows of one table only */
	struct cfi_map m[CFI_MAX_MAPS];
};

/* --- the system families (system.bpf.c) --- */

/* Log-linear latency buckets per histogram (LatencyHistogram.sub_buckets = 16, the layout
 * of format/src/latency.rs): below 16 ns one per ns; above, each power of two
 * [2^e, 2^(e+1)) ns, e = 4..35, cut into HIST_SUB equal buckets; the last one open-ended
 * (from 31 * 2^31 ns, 66.6 s, up). */
#define HIST_SUB_BITS 4
#define HIST_SUB 16
#define HIST_BUCKETS 528
/* Keys of the `hists` map: at most HIST_KEYS * sizeof(struct hist_val) = 33.4 MiB of values
 * (allocated as keys appear: BPF_F_NO_PREALLOC). */
#define HIST_KEYS 16384
/* Slots of a runq or bio event's stack area: kernel frames first, then user frames, with
 * room for the masked offsets the verifier needs. */
#define SYS_SLOTS (2 * KFRAMES + MAX_FRAMES)

/* A kernel histogram's key: the process, the family, and the family's key (syscall: the
 * number; bio: dev << 8 | op; runq: 0). */
struct hist_key {
	__u32 pid;
	__u32 family;
	__u64 key;
};

/* One histogram, shared by all CPUs (atomic adds). Bucket counts are 32-bit: user space
 * reads them every second and takes wrapping differences. */
struct hist_val {
	__u64 count;
	__u64 sum;
	__u64 max;
	__u32 b[HIST_BUCKETS];
};

/* A system call that took at least `syscall_min_ns`, sent at its exit. */
struct syscall_event {
	struct event_header h;	/* time_ns: the entry */
	__u64 duration_ns;
	__s64 ret;
	__u32 nr;
	__u32 nframes;
	__u32 flags;
	__u32 pad;
	__u64 weight_ns;	/* the time it stands for (--syscalls-sample; 0: itself) */
	__u64 copy_id;
	__u64 ips[MAX_FRAMES];
};

/* A block I/O request of a target, filled at its start (in the issuing task) and sent at
 * its completion. `ips`: kframes kernel frames, then nframes user frames. */
struct bio_event {
	struct event_header h;	/* the issuing task; time_ns: the start */
	__u64 duration_ns;
	__u64 sector;
	__u64 bytes;
	__u32 dev;		/* major << 20 | minor */
	__u32 op;		/* REQ_OP_* */
	__u32 bio_flags;	/* BIO_* */
	__s32 error;
	__u32 nframes;
	__u32 kframes;
	__u32 flags;		/* SF_* */
	__u32 pad;
	__u64 copy_id;
	__u64 ips[SYS_SLOTS];
};

/* A run-queue wait of at least `runq_min_ns`. Also the per-thread state of a kept wait
 * between its end and the thread's syscall exit (task storage). `ips`: kframes kernel
 * frames, then nframes user frames. */
struct runq_event {
	struct event_header h;	/* the waiting thread; time_ns: when it became runnable */
	__u64 duration_ns;
	__u32 preempted;
	__u32 nframes;
	__u32 kframes;
	__u32 flags;
	__u32 pending;		/* state only: waiting for the syscall exit */
	__u32 pad;
	__u64 user_ip;		/* state only: the user registers it blocked with */
	__u64 user_sp;
	__u64 copy_id;
	__u64 weight_ns;	/* --runq-sample kept it with p = duration/weight_ns (0: p = 1) */
	__u64 ips[SYS_SLOTS];
};

/* An event of a target's TCP connection. */
struct tcp_event {
	struct event_header h;	/* tid 0: not in a target's task (softirq, timer) */
	__u64 conn;		/* the connection's number in this recording */
	__u64 start_ns;		/* when the connection started */
	__u64 bytes_sent;	/* tcp_sock.bytes_acked */
	__u64 bytes_received;
	__u32 kind;		/* TCPE_* */
	__u32 state;
	__u32 old_state;
	__u32 retransmits;	/* tcp_sock.total_retrans */
	__u32 family;		/* 4 or 6 */
	__u16 lport;
	__u16 rport;
	__u8 laddr[16];
	__u8 raddr[16];
	__u32 nframes;
	__u32 flags;
	__u64 copy_id;
	__u64 ips[MAX_FRAMES];
};

#endif
