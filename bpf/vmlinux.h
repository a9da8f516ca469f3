/* The few kernel types the ebtrace BPF programs use, hand-written so that the build does not
 * depend on the build host's kernel. CO-RE (preserve_access_index) relocates every field
 * access against the running kernel's BTF at load time. The guard is the one bpf_tracing.h
 * expects from a generated vmlinux.h (else it picks the wrong pt_regs field names). */
#ifndef __VMLINUX_H__
#define __VMLINUX_H__

typedef signed char __s8;
typedef unsigned char __u8;
typedef short unsigned int __u16;
typedef int __s32;
typedef unsigned int __u32;
typedef long long int __s64;
typedef long long unsigned int __u64;
typedef __u8 u8;
typedef __u16 u16;
typedef __s32 s32;
typedef __u32 u32;
typedef __s64 s64;
typedef __u64 u64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef _Bool bool;
enum { false = 0, true = 1 };

enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PROG_ARRAY = 3,
	BPF_MAP_TYPE_PERCPU_HASH = 5,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_RINGBUF = 27,
	BPF_MAP_TYPE_TASK_STORAGE = 29,
};

enum {
	BPF_F_NO_PREALLOC = 1,
	BPF_F_MMAPABLE = 1024,
};

enum {
	BPF_LOCAL_STORAGE_GET_F_CREATE = 1,
};

enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
	BPF_EXIST = 2,
};

enum {
	BPF_F_USER_STACK = 256,
};

enum {
	BPF_RB_NO_WAKEUP = 1,
	BPF_RB_FORCE_WAKEUP = 2,
};

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

struct pt_regs {
	long unsigned int r15;
	long unsigned int r14;
	long unsigned int r13;
	long unsigned int r12;
	long unsigned int bp;
	long unsigned int bx;
	long unsigned int r11;
	long unsigned int r10;
	long unsigned int r9;
	long unsigned int r8;
	long unsigned int ax;
	long unsigned int cx;
	long unsigned int dx;
	long unsigned int si;
	long unsigned int di;
	long unsigned int orig_ax;
	long unsigned int ip;
	long unsigned int cs;
	long unsigned int flags;
	long unsigned int sp;
	long unsigned int ss;
};

struct xol_area {
	long unsigned int vaddr;
};

struct uprobes_state {
	struct xol_area *xol_area;
};

struct mm_struct {
	long unsigned int brk;
	struct uprobes_state uprobes_state;
};

struct return_instance {
	long unsigned int stack;
	long unsigned int orig_ret_vaddr;
	struct return_instance *next;
};

struct uprobe_task {
	struct return_instance *return_instances;
};

struct super_block {
	__u32 s_dev;
};

struct inode {
	long unsigned int i_ino;
	struct super_block *i_sb;
};

struct file {
	struct inode *f_inode;
	void *private_data;
};

struct vm_area_struct {
	long unsigned int vm_start;
	long unsigned int vm_end;
	long unsigned int vm_pgoff;
	struct file *vm_file;
};

struct fdtable {
	unsigned int max_fds;
	struct file **fd;
};

struct files_struct {
	struct fdtable *fdt;
};

struct rseq;
struct task_struct {
	unsigned int flags;
	int pid;
	int tgid;
	struct task_struct *group_leader;
	struct mm_struct *mm;
	struct uprobe_task *utask;
	struct files_struct *files;
	struct rseq *rseq;
};

/* Block I/O (system.bpf.c). */
struct gendisk {
	int major;
	int first_minor;
};

struct request_queue {
	struct gendisk *disk;
};

struct block_device {
	__u32 bd_dev;
};

struct request {
	struct request_queue *q;
	unsigned int cmd_flags;
	unsigned int __data_len;
	__u64 __sector;
	struct block_device *part;
};

/* TCP (system.bpf.c). The kernel nests these fields in anonymous unions and structs; CO-RE
 * finds them by name through those. */
struct in6_addr {
	__u8 in6_u[16]; /* a union in the kernel; read whole */
};

struct sock_common {
	__be32 skc_daddr;
	__be32 skc_rcv_saddr;
	__be16 skc_dport;
	__u16 skc_num;
	unsigned short skc_family;
	volatile unsigned char skc_state;
	struct in6_addr skc_v6_daddr;
	struct in6_addr skc_v6_rcv_saddr;
};

struct sock {
	struct sock_common __sk_common;
	__u16 sk_protocol;
};

struct tcp_sock {
	__u64 bytes_received;
	__u64 bytes_acked;
	__u32 total_retrans;
};

struct socket {
	struct sock *sk;
};

struct sk_buff {
	unsigned int len;
};

/* A task iterator's context (the end of a recording walks the threads for what they hold). */
struct seq_file;
struct bpf_iter_meta {
	struct seq_file *seq;
	__u64 session_id;
	__u64 seq_num;
};

struct bpf_iter__task {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
};

#pragma clang attribute pop

/* Request flag bits (the kernel's values are read with bpf_core_enum_value: they moved
 * between versions; these are 6.x's). */
enum req_flag_bits {
	__REQ_FAILFAST_DEV = 8,
	__REQ_SYNC = 11,
	__REQ_META = 12,
	__REQ_PRIO = 13,
	__REQ_NOMERGE = 14,
	__REQ_IDLE = 15,
	__REQ_INTEGRITY = 16,
	__REQ_FUA = 17,
	__REQ_PREFLUSH = 18,
	__REQ_RAHEAD = 19,
};

/* The context of perf_event programs (uapi). */
struct bpf_perf_event_data {
	struct pt_regs regs;
	__u64 sample_period;
	__u64 addr;
};

#endif /* __VMLINUX_H__ */
