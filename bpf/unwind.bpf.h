/* Unwinding user stacks in the kernel from unwind rows (--stack-mode cfi|auto).
 *
 * ebrec turns each mapped binary's .eh_frame into rows (see events.h) and tells the kernel
 * side, per process, which executable mapping holds which file's rows. Each frame is then a
 * binary search within one 4 KiB page of rows and one or two reads of the stack: the CFA
 * from rsp or rbp plus an offset, the return address at CFA - 8, the caller's rbp where the
 * row says. Frame-pointer code is no special case (its rows say CFA = rbp + 16). No stack
 * memory leaves the kernel: only return addresses, as in fp mode.
 *
 * The walk is a bpf_loop over frames; its state is on the caller's stack, the frames go to a
 * per-CPU range of `uw_frames` and are copied into the event at the end. */
#ifndef EBTRACE_UNWIND_BPF_H
#define EBTRACE_UNWIND_BPF_H

/* Set by user space before load: 0 fp/dwarf, 1 cfi (rows only), 2 auto (rows, and the frame
 * pointer where a binary has none loaded). */
const volatile __u32 cfi_mode = CFI_MODE_OFF;
/* The rows are loaded even in fp and dwarf mode (with --lock or --offcpu), for the stacks of
 * lock holders and wakers (waker_stack in common.bpf.h). */
const volatile bool cfi_wakers = false;

/* The maps below are created by user space once and shared by every object (reuse_fd), so
 * that a table is loaded once for all the families. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} cfi_rows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} cfi_pages SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CFI_MAX_FILES);
	__type(key, __u32);
	__type(value, struct cfi_file);
} cfi_files SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct cfi_proc);
} cfi_procs SEC(".maps");

/* The frames of the walk in progress: MAX_FRAMES values per CPU (max_entries set by user
 * space), written one by one by key so that the frame count is not a pointer offset (the
 * verifier then need not tell the loop's iterations apart). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_FRAMES);
	__type(key, __u32);
	__type(value, __u64);
} uw_frames SEC(".maps");

/* Per process, the mappings bpf_find_vma found before user space wrote the process's table
 * (its first milliseconds): later walks, also those where bpf_find_vma cannot run (interrupts
 * off, after one call), find them here. Dropped by user space with the table's first write. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct cfi_early);
} cfi_early SEC(".maps");

/* (dev, ino) -> file slot, for the mappings found with bpf_find_vma. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, CFI_MAX_FILES);
	__type(key, struct cfi_inode);
	__type(value, __u32);
} cfi_inodes SEC(".maps");

struct cfi_file _cfi_file = {};
struct cfi_early _cfi_early_zero = {};
struct cfi_proc _cfi_proc = {};

struct uw_state {
	__u64 pc, sp, bp;
	/* the mapping of pc, once found */
	__u64 start, end, delta;
	__u64 first_off;
	__u32 row_base, nrows, page_base, npages;
	__u32 pid, n, limit, flags;
	__u32 frame0;	/* this CPU's first slot in uw_frames */
	__u32 memo;	/* UW_REC, UW_NOMEMO, UW_BP_LIVE, UW_USE_BP (the walk's memo, uw_memo) */
	__u32 gen;	/* the process's table (cfi_proc.gen) at the walk's start; 0: none */
	__u32 nwords;	/* words recorded for the memo (checked, in uw_check_word) */
	__u32 table;	/* the current mapping came from that table (its rows may be cached) */
	__u32 rec_seq;	/* uw_rec's seq when this walk started recording */
	__u64 ra_addr;	/* where the last return address was read from */
	__u64 stack_hi;	/* the end of the thread's stack mapping (0: unknown) */
	__u64 xol;	/* the uretprobe trampoline's address (fp_only; 0: none) */
	__u64 win_lo, win_hi;	/* the stack addresses uw_window holds now */
	__u64 win_seq;	/* uw_window's seq when this walk filled it */
	__u64 row;	/* uw_find_row's answer */
	/* One byte each (the state is on the stack of every program that walks, within 6.1's
	 * 512 bytes for the deepest chain of calls): */
	__u8 exact;	/* pc is the exact instruction (the leaf, or after a signal frame) */
	__u8 at_entry;	/* the event is a function-entry probe */
	__u8 have_map;
	__u8 fp_fallback;	/* walk on with the frame pointer where rows are missing */
	__u8 vma_busy;	/* bpf_find_vma said EBUSY (with interrupts off it works once
			 * per program run): do not call it again */
	__u8 fp_only;	/* --stack-mode fp (and dwarf): frame-pointer steps only, no rows */
	/* stack_bounds.hole_pages, for this walk (0: none; 2 bytes, not 8: 6.1's verifier
	 * counts this state in every walking program's 512 bytes of stack) */
	__u16 hole_pages;
};

/* uw_state.memo's bits */
#define UW_REC 1	/* record every stack word read into uw_rec */
#define UW_NOMEMO 2	/* the walk read what a memo cannot check again (a signal frame, a
			 * uretprobe's list, a mapping not from the table) */
#define UW_BP_LIVE 4	/* rbp still holds the value of the registers at the start */
#define UW_USE_BP 8	/* the walk used that value */

/* A window of the walked thread's stack: one read of up to UW_WIN bytes serves the frames
 * that follow (callers' frames are above). A read of user memory costs about 75 ns on an
 * idle machine whatever its size up to a few KiB (copy_from_user_nofault's checks and the
 * copy's start-up), against 20 ns of the walk's own work per frame; on a loaded server the
 * stack's lines are cold, and each costs: on PostgreSQL under pgbench (16 backends, frames
 * of up to a few KiB), 1 KiB windows cost the allocation walks less than 2 KiB ones (3.2
 * reads of 1 KiB a walk against 2 of 2 KiB, 0.9-1.2 us a program run against 1.2-1.3),
 * and 512 or 256 no less. The window never leaves the kernel: only return addresses do.
 * Per CPU: a walk is not interrupted by another walk of the same object. */
#define UW_WIN 1024

struct uw_window {
	/* bumped at each fill: a walk that an interrupt's walk (a cpu sample in a system call's
	 * program) refilled under it reads again */
	__u64 seq;
	__u64 w[UW_WIN / 8];
};

/* Rows found, per CPU, by (process, table, address): a frame whose return address was seen
 * before skips the mapping and row searches. The check word makes a torn entry (written
 * while an interrupt's walk wrote the same one) a miss. */
#define UW_CACHE 512

struct uw_cent {
	__u64 addr;
	__u64 row;
	__u32 pid;
	__u32 gen;
	__u64 check;
};

struct uw_cache {
	struct uw_cent e[UW_CACHE];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct uw_cache);
} uw_cache SEC(".maps");

static __always_inline __u64 uw_check(__u64 addr, __u64 row, __u32 pid, __u32 gen)
{
	return (addr * 0x9e3779b97f4a7c15ULL) ^ row ^ ((__u64)pid << 32 | gen) ^ 0x5bd1e995;
}

static __always_inline struct uw_cent *uw_cent(__u64 addr)
{
	__u32 zero = 0;
	struct uw_cache *c = bpf_map_lookup_elem(&uw_cache, &zero);
	if (!c)
		return 0;
	return &c->e[(addr ^ (addr >> 9) ^ (addr >> 18)) & (UW_CACHE - 1)];
}

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct uw_window);
} uw_window SEC(".maps");

/* The bounds of each thread's stack (the mapping that holds its sp), found once with
 * bpf_find_vma. A frame-pointer walk ends where the frame pointer leaves them: the caller
 * of main (libc, no frame pointer) leaves in rbp whatever it held, and reading through it
 * faults, which costs more than the rest of a short walk (a fault handled in the kernel,
 * about 0.7 us here, measured with perf on bpf_get_stack's walk). */
struct stack_bounds {
	__u64 lo, hi;
	/* the page this many pages below hi was missing when a window was read from below it:
	 * windows below end there, and those above stay within their page (0: none seen; less
	 * than 65536, as uw_state.hole_pages) */
	__u64 hole_pages;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct stack_bounds);
} stack_bounds SEC(".maps");

static long uw_stack_vma(struct task_struct *task, struct vm_area_struct *vma, void *ctx)
{
	struct stack_bounds *b = ctx;
	b->lo = vma->vm_start;
	b->hi = vma->vm_end;
	return 0;
}

/* A window read from below `hole` (page-aligned) faulted: kept for the walk and the thread. */
static __always_inline void uw_note_hole(struct uw_state *s, __u64 hole)
{
	__u64 pages = (s->stack_hi - hole) >> 12;
	if (hole >= s->stack_hi || pages >= 65536)
		return;
	s->hole_pages = pages;
	struct stack_bounds *b = bpf_task_storage_get(&stack_bounds, bpf_get_current_task_btf(),
						      0, 0);
	if (b && b->hi == s->stack_hi && pages > b->hole_pages)
		b->hole_pages = pages;
}

/* The 8 bytes at addr of the walked thread's stack, through the window: refilled from addr
 * up to the stack's end (at most UW_WIN bytes) when addr is not in it. Without known bounds
 * (or when that read fails: a page out) the word is read alone. 0: read. */
static __always_inline long uw_word_raw(struct uw_state *s, __u64 addr, __u64 *out)
{
	__u32 zero = 0;
	struct uw_window *w = bpf_map_lookup_elem(&uw_window, &zero);
	if (!w)
		return bpf_probe_read_user(out, 8, (void *)addr);
	if (addr < s->win_lo || addr + 8 > s->win_hi || ((addr - s->win_lo) & 7) ||
	    w->seq != s->win_seq) {
		s->win_lo = 0;
		s->win_hi = 0;
		if (s->stack_hi < addr + 16)
			return bpf_probe_read_user(out, 8, (void *)addr);
		__u64 len = s->stack_hi - addr;
		if (len > UW_WIN)
			len = UW_WIN;
		/* below a known hole, a window ends at it; above, within its page */
		if (s->hole_pages) {
			__u64 hole = s->stack_hi - ((__u64)s->hole_pages << 12);
			if (addr < hole) {
				if (len > hole - addr)
					len = hole - addr;
			} else if (len > 4096 - (addr & 4095)) {
				len = 4096 - (addr & 4095);
			}
		}
		if (len < 8)
			return bpf_probe_read_user(out, 8, (void *)addr);
		/* the clamp again, where 6.1's verifier sees it: it does not carry a bound
		 * through the comparisons of two registers above */
		barrier_var(len);
		if (len > UW_WIN)
			len = UW_WIN;
		__u64 seq = w->seq + 1;
		w->seq = seq;
		if (bpf_probe_read_user(w->w, len, (void *)addr)) {
			/* A page of the window is missing. The top of a stack can have one between
			 * the first frames and the arguments (a PostgreSQL backend's has), and
			 * then every window read near it faulted: 82% of the reads of a backend's
			 * walks, each fault costing more than the walk's other reads together.
			 * The walk and the thread's bounds keep where it is (past addr's own page,
			 * present as the walk reads it): later windows end below it. */
			uw_note_hole(s, (addr | 4095) + 1);
			return bpf_probe_read_user(out, 8, (void *)addr);
		}
		s->win_lo = addr;
		s->win_hi = addr + len;
		s->win_seq = seq;
	}
	*out = w->w[((addr - s->win_lo) >> 3) & (UW_WIN / 8 - 1)];
	/* refilled by an interrupt's walk while this one read: read the word alone */
	if (w->seq != s->win_seq) {
		s->win_hi = 0;
		return bpf_probe_read_user(out, 8, (void *)addr);
	}
	return 0;
}

/* A walk's memo, per thread: the registers it started from, the stack words it read (address
 * and value) and the frames it found. A walk is a function of its start registers (pc, sp,
 * and rbp where a rule used it before a frame restored it), the words it reads and the
 * process's table (its generation): a later walk of the same thread from the same registers
 * whose every recorded word reads the same finds the same frames, and takes them from the
 * memo after one read of each word instead of the mapping and row searches of each frame.
 * A server's thread blocks again and again at the same call from the same depth (a
 * backend's recv, a pool's futex wait): each kept event of it was a whole walk. Walks that
 * read anything else (a signal frame's context, a uretprobe's list of returns, a mapping
 * found without the table) or ended on an error are not kept. */
#define UW_MEMO_WORDS 256

/* Set by user space before load: false with --aggregate, whose programs' counting code
 * after the walk already fills the verifier's budget (the memo's second way out of the
 * walk doubled its states past a million instructions); the verifier then drops the memo's
 * code as dead. */
const volatile bool uw_memo_on = true;

struct uw_memo {
	__u32 busy;	/* taken with a compare-and-swap: an interrupt's walk of the same thread
			 * (a cpu sample within a system call's program) leaves it alone */
	__u32 valid;
	__u32 n, flags;
	__u32 nwords, gen;
	__u32 mode;	/* at_entry, fp_fallback and the frame limit of the walk */
	__u32 use_bp;
	__u64 pc, sp, bp;
	__u64 ips[MAX_FRAMES];
	__u64 waddr[UW_MEMO_WORDS];
	__u64 wval[UW_MEMO_WORDS];
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct uw_memo);
} uw_memo SEC(".maps");

/* Per CPU, the words the walk in progress read (or the memo's, being checked); `seq` bumped
 * by every walk that starts using it, so that one an interrupt's walk overwrote is seen. */
struct uw_rec {
	__u64 seq;
	/* this CPU's walks that could use their thread's memo, and those that did (read by
	 * user space for the exit summary: `Probes::unwind_memo`) */
	__u64 walks;
	__u64 hits;
	__u64 addr[UW_MEMO_WORDS];
	__u64 val[UW_MEMO_WORDS];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct uw_rec);
} uw_rec SEC(".maps");

/* The word at addr (uw_word_raw), recorded for the memo while the walk records. */
static __always_inline long uw_word(struct uw_state *s, __u64 addr, __u64 *out)
{
	long r = uw_word_raw(s, addr, out);
	if (r || !(s->memo & UW_REC))
		return r;
	__u32 i = s->nwords;
	__u32 zero = 0;
	struct uw_rec *rec = bpf_map_lookup_elem(&uw_rec, &zero);
	if (!rec || i >= UW_MEMO_WORDS - 1) {
		s->memo = (s->memo & ~UW_REC) | UW_NOMEMO;
		return r;
	}
	rec->addr[i & (UW_MEMO_WORDS - 1)] = addr;
	rec->val[i & (UW_MEMO_WORDS - 1)] = *out;
	s->nwords = i + 1;
	return r;
}

/* The end of the mapping that holds sp, cached per thread; 0 when unknown. *hole_pages:
 * where a window read found a page missing (stack_bounds.hole_pages), in pages below the
 * end; 0: nowhere known. */
static __always_inline __u64 uw_stack_hi(struct task_struct *task, __u64 sp, __u16 *hole_pages)
{
	struct stack_bounds *b = bpf_task_storage_get(&stack_bounds, task, 0,
						      BPF_LOCAL_STORAGE_GET_F_CREATE);
	*hole_pages = 0;
	if (b && sp >= b->lo && sp < b->hi) {
		*hole_pages = b->hole_pages;
		return b->hi;
	}
	struct stack_bounds nb = {};
	if (bpf_find_vma(task, sp, uw_stack_vma, &nb, 0) || sp < nb.lo || sp >= nb.hi)
		return 0;
	if (b) {
		b->lo = nb.lo;
		b->hi = nb.hi;
		b->hole_pages = 0;
	}
	return nb.hi;
}

struct vma_info {
	__u64 start, end, pgoff, dev, ino;
	__u32 found;
	__u32 pad;
};

static long uw_vma(struct task_struct *task, struct vm_area_struct *vma, void *ctx)
{
	struct vma_info *v = ctx;
	struct file *f = vma->vm_file;
	if (!f)
		return 0;
	v->start = vma->vm_start;
	v->end = vma->vm_end;
	v->pgoff = vma->vm_pgoff;
	v->ino = BPF_CORE_READ(f, f_inode, i_ino);
	v->dev = BPF_CORE_READ(f, f_inode, i_sb, s_dev);
	v->found = 1;
	return 0;
}

static __always_inline void uw_set_file(struct uw_state *s, __u32 slot)
{
	s->nrows = 0;
	if (!slot)
		return;
	struct cfi_file *f = bpf_map_lookup_elem(&cfi_files, &slot);
	if (f) {
		s->row_base = f->row_base;
		s->nrows = f->nrows;
		s->page_base = f->page_base;
		s->npages = f->npages;
		s->first_off = f->first_off;
	}
}

static __always_inline void uw_early_add(struct uw_state *s, __u32 slot);

/* pc's mapping from the kernel's own list (a mapping made after user space last read the
 * side band: the first milliseconds of a process, a fresh dlopen). */
static __always_inline bool uw_find_vma(struct uw_state *s, __u64 pc)
{
	if (s->vma_busy)
		return false;
	struct vma_info v = {};
	long err = bpf_find_vma(bpf_get_current_task_btf(), pc, uw_vma, &v, 0);
	if (err == -16 /* EBUSY */)
		s->vma_busy = 1;
	if (err || !v.found)
		return false;
	if (pc < v.start || pc >= v.end)
		return false;
	struct cfi_inode key = { .dev = v.dev, .ino = v.ino };
	__u32 *slot = bpf_map_lookup_elem(&cfi_inodes, &key);
	s->start = v.start;
	s->end = v.end;
	s->delta = (v.pgoff << 12) - v.start;
	uw_set_file(s, slot ? *slot : 0);
	if (slot && *slot)
		uw_early_add(s, *slot);
	return true;
}

/* Keeps a mapping found with bpf_find_vma for the process's next walks. An entry is
 * reserved with an atomic add and written end last: a reader sees end = 0 (no match) until
 * the entry is whole. */
static __always_inline void uw_early_add(struct uw_state *s, __u32 slot)
{
	/* map keys from the stack: s is a global function's argument (see uw_find_map) */
	__u32 pid = s->pid;
	struct cfi_early *e = bpf_map_lookup_elem(&cfi_early, &pid);
	if (!e) {
		/* a global zero: 264 bytes would not fit on the BPF stack */
		bpf_map_update_elem(&cfi_early, &pid, &_cfi_early_zero, BPF_NOEXIST);
		e = bpf_map_lookup_elem(&cfi_early, &pid);
		if (!e)
			return;
	}
	__u32 i = __sync_fetch_and_add(&e->n, 1);
	if (i >= CFI_EARLY_MAPS)
		return;
	struct cfi_map *m = &e->m[i & (CFI_EARLY_MAPS - 1)];
	m->start = s->start;
	m->delta = s->delta;
	m->file = slot;
	m->end = s->end;
}

/* pc's mapping among those bpf_find_vma found earlier in this process; false: none. */
static __always_inline bool uw_find_early(struct uw_state *s, __u64 pc)
{
	__u32 pid = s->pid;
	struct cfi_early *e = bpf_map_lookup_elem(&cfi_early, &pid);
	if (!e)
		return false;
#pragma unroll
	for (int i = 0; i < CFI_EARLY_MAPS; i++) {
		struct cfi_map *m = &e->m[i];
		__u64 end = m->end;
		if (pc >= m->start && pc < end) {
			s->start = m->start;
			s->end = end;
			s->delta = m->delta;
			uw_set_file(s, m->file);
			return true;
		}
	}
	return false;
}

/* A mapping user space has not written yet: found earlier in the walk's process, or now. */
static __always_inline bool uw_find_unknown(struct uw_state *s, __u64 pc)
{
	s->table = 0;
	return uw_find_early(s, pc) || uw_find_vma(s, pc);
}

/* 1 when a <= b, without a branch (both below 2^63): the searches below are straight-line
 * code, so the verifier walks one path through them. */
static __always_inline __u64 le(__u64 a, __u64 b)
{
	return 1 - ((b - a) >> 63);
}

/* Finds pc's mapping in the process's table; false: none known. */
static __always_inline bool uw_find_map(struct uw_state *s, __u64 pc)
{
	/* The key on the stack: in the global functions (uw_frame) s is PTR_TO_MEM, which
	 * Linux 6.1's verifier refuses as a map key ("R2 type=mem expected=fp, ..."; 6.18's
	 * takes it). */
	__u32 pid = s->pid;
	struct cfi_proc *p = bpf_map_lookup_elem(&cfi_procs, &pid);
	if (!p)
		return uw_find_unknown(s, pc);
	__u64 len = p->n;
	if (len == 0)
		return uw_find_unknown(s, pc);
	if (len > CFI_MAX_MAPS)
		len = CFI_MAX_MAPS;
	__u64 base = 0;
	/* the last mapping starting at or before pc (CFI_MAX_MAPS = 2^9) */
#pragma unroll
	for (int k = 0; k < 9; k++) {
		if (len <= 1)
			break; /* a forward jump out: one more path per step, not a doubling */
		__u64 half = len >> 1;
		__u64 start = p->m[(base + half) & (CFI_MAX_MAPS - 1)].start;
		base += le(start, pc) * half;
		len -= half;
	}
	struct cfi_map *m = &p->m[base & (CFI_MAX_MAPS - 1)];
	if (pc < m->start || pc >= m->end)
		return uw_find_unknown(s, pc);
	s->start = m->start;
	s->end = m->end;
	s->delta = m->delta;
	s->table = s->gen && p->gen == s->gen;
	uw_set_file(s, m->file);
	return true;
}

/* The row for file offset `off` of the current mapping's file; false: none. */
static __always_inline bool uw_row(struct uw_state *s, __u64 off, __u64 *row)
{
	if (off < s->first_off)
		return false;
	__u64 page = (off - s->first_off) >> CFI_PAGE_SHIFT;
	if (page >= s->npages)
		return false;
	__u32 pi = s->page_base + (__u32)page;
	__u64 *pg = bpf_map_lookup_elem(&cfi_pages, &pi);
	if (!pg)
		return false;
	/* The row covering off is the last one starting at or before it: among those from the
	 * one before the page's first row to the next page's first row (exclusive). */
	__u32 a = (__u32)*pg, b = *pg >> 32;
	__u64 lo = a ? a - 1 : 0, hi = b;
	if (hi > s->nrows)
		hi = s->nrows;
	if (lo >= hi)
		return false;
	__u64 base = lo, len = hi - lo;
	/* a page holds at most 4097 rows (2^13) */
#pragma unroll
	for (int k = 0; k < 13; k++) {
		if (len <= 1)
			break;
		__u64 half = len >> 1;
		__u32 ri = s->row_base + base + half;
		__u64 *r = bpf_map_lookup_elem(&cfi_rows, &ri);
		if (!r)
			return false;
		base += le((__u32)*r, off) * half;
		len -= half;
	}
	__u32 ri = s->row_base + base;
	__u64 *r = bpf_map_lookup_elem(&cfi_rows, &ri);
	if (!r || (__u32)*r > off)
		return false;
	*row = *r;
	return true;
}

/* One step with the frame pointer (auto mode, code without rows). 1: the walk ends. */
static __always_inline long uw_fp_step(struct uw_state *s)
{
	if (!s->fp_only)
		s->flags |= SF_USER_FP_STEPS;
	if (s->n == 1 && s->at_entry) {
		/* at a function's first instruction the caller's address is at [sp] */
		__u64 ra = 0;
		if (uw_word(s, s->sp, &ra)) {
			s->flags |= SF_USER_BAD_FRAME;
			return 1;
		}
		s->ra_addr = s->sp;
		s->sp += 8;
		s->pc = ra;
		s->exact = 0;
		return ra == 0;
	}
	__u64 bp = s->bp;
	if (s->memo & UW_BP_LIVE)
		s->memo = (s->memo & ~UW_BP_LIVE) | UW_USE_BP;
	if (bp == 0)
		return 1;
	if (bp < s->sp) {
		s->flags |= SF_USER_BAD_FRAME;
		return 1;
	}
	/* past the thread's stack: not a frame (read, it would fault or give garbage) */
	if (s->stack_hi && bp > s->stack_hi - 16)
		return 1;
	__u64 fr[2];
	if (uw_word(s, bp, &fr[0]) || uw_word(s, bp + 8, &fr[1])) {
		s->flags |= SF_USER_BAD_FRAME;
		return 1;
	}
	s->bp = fr[0];
	s->pc = fr[1];
	s->ra_addr = bp + 8;
	s->sp = bp + 16;
	s->exact = 0;
	return s->pc == 0;
}

/* Applies a row: 0 go on, 1 the walk ends, -1 the row has no rule (kind CFI_INVALID). */
static __always_inline long uw_apply(struct uw_state *s, __u64 row)
{
	__u32 kind = (row >> 32) & 0xff;
	__u32 rb = (row >> 40) & 0xff;
	__u64 off = row >> 48;
	__u64 cfa;
	switch (kind) {
	case CFI_RSP:
		cfa = s->sp + off;
		break;
	case CFI_RBP:
		if (s->memo & UW_BP_LIVE)
			s->memo |= UW_USE_BP;
		if (!s->bp) {
			s->flags |= SF_USER_BAD_FRAME;
			return 1;
		}
		cfa = s->bp + off;
		break;
	case CFI_PLT:
		cfa = s->sp + off + ((s->pc & 15) >= rb ? 8 : 0);
		rb = 0;
		break;
	case CFI_SIGNAL: {
		/* At the sigreturn trampoline rsp points at the ucontext: uc_mcontext starts at
		 * 40; rbp is at 120, rsp at 160, rip at 168. */
		__u64 r[7];
		s->memo |= UW_NOMEMO;
		if (bpf_probe_read_user(r, sizeof(r), (void *)(s->sp + 120))) {
			s->flags |= SF_USER_BAD_FRAME;
			return 1;
		}
		s->bp = r[0];
		s->sp = r[5];
		s->pc = r[6];
		/* the interrupted code may have run on another stack (sigaltstack) */
		s->stack_hi = 0;
		s->win_hi = 0;
		s->ra_addr = 0;
		s->exact = 1;
		return s->pc == 0;
	}
	case CFI_STOP:
		return 1;
	default:
		return -1;
	}
	if (cfa <= s->sp) {
		s->flags |= SF_USER_BAD_FRAME;
		return 1;
	}
	__u64 ra = 0, bp = s->bp;
	if (rb == 0xfe) {
		/* the common prologue: rbp saved just below the return address */
		__u64 two[2];
		if (uw_word(s, cfa - 16, &two[0]) || uw_word(s, cfa - 8, &two[1])) {
			s->flags |= SF_USER_BAD_FRAME;
			return 1;
		}
		bp = two[0];
		ra = two[1];
		s->memo &= ~UW_BP_LIVE;
	} else {
		/* rbp's slot first: it is below the return address (a callee-saved register
		 * pushed after others), and a window is filled upwards from the word that
		 * missed it: read second, it would refill the window for every such frame */
		if (rb == CFI_RBP_LOST) {
			bp = 0;
			s->memo &= ~UW_BP_LIVE;
		} else if (rb) {
			__s64 k = (__s8)rb;
			if (uw_word(s, cfa + k * 8, &bp)) {
				s->flags |= SF_USER_BAD_FRAME;
				return 1;
			}
			s->memo &= ~UW_BP_LIVE;
		}
		if (uw_word(s, cfa - 8, &ra)) {
			s->flags |= SF_USER_BAD_FRAME;
			return 1;
		}
	}
	s->sp = cfa;
	s->bp = bp;
	s->pc = ra;
	s->ra_addr = cfa - 8;
	s->exact = 0;
	return ra == 0;
}

/* A return address that is the uretprobe trampoline (a return probe pending in that frame):
 * the original one, from the kernel's list of pending returns, matched by the stack slot it
 * was read from; 0: not the trampoline, or no match. */
static __always_inline __u64 uw_uretprobe(struct uw_state *s, __u64 pc)
{
	struct task_struct *t = bpf_get_current_task_btf();
	__u64 xol = BPF_CORE_READ(t, mm, uprobes_state.xol_area, vaddr);
	if (!xol || pc != xol || !s->ra_addr)
		return 0;
	struct return_instance *ri = BPF_CORE_READ(t, utask, return_instances);
	for (int k = 0; k < 16 && ri; k++) {
		if (BPF_CORE_READ(ri, stack) == s->ra_addr)
			return BPF_CORE_READ(ri, orig_ret_vaddr);
		ri = BPF_CORE_READ(ri, next);
	}
	return 0;
}

/* The walk is over its frame limit (flagged) or has no state: no frame more. */
static __always_inline bool uw_full(struct uw_state *s)
{
	if (!s)
		return true;
	if (s->n >= s->limit) {
		s->flags |= SF_USER_TRUNCATED;
		return true;
	}
	return false;
}

/* The row for the current pc (s->pc may become a uretprobe's original return address): 0
 * with the row in s->row, else the flag saying why there is none. From the per-CPU cache
 * when this address of this table was seen before. */
static __always_inline __u32 uw_find_row(struct uw_state *s)
{
	__u64 pc = s->pc;
	/* a return address is past its call: look up the call */
	__u64 addr = pc - (s->exact ? 0 : 1);
	struct uw_cent *ce = s->gen ? uw_cent(addr) : 0;
	if (ce && ce->addr == addr && ce->pid == s->pid && ce->gen == s->gen) {
		__u64 row = ce->row;
		if (ce->check == uw_check(addr, row, s->pid, s->gen)) {
			s->row = row;
			return 0;
		}
	}
	if (!s->have_map || pc < s->start || pc >= s->end) {
		s->have_map = uw_find_map(s, pc);
		__u64 orig = s->have_map || s->n == 0 ? 0 : uw_uretprobe(s, pc);
		if (orig) {
			pc = orig;
			s->pc = pc;
			s->have_map = uw_find_map(s, pc);
			/* not cached: the key would be the trampoline's address, which stands for
			 * a different return address in each frame it is found in */
			s->table = 0;
		}
		if (!s->table)
			s->memo |= UW_NOMEMO;
	}
	if (!s->have_map)
		return SF_USER_UNKNOWN_MAPPING;
	if (!s->nrows)
		return SF_USER_NO_TABLE;
	__u64 row;
	if (!uw_row(s, pc - (s->exact ? 0 : 1) + s->delta, &row))
		return SF_USER_NO_ROWS;
	ce = s->table ? uw_cent(addr) : 0;
	if (ce) {
		ce->addr = addr;
		ce->row = row;
		ce->pid = s->pid;
		ce->gen = s->gen;
		ce->check = uw_check(addr, row, s->pid, s->gen);
	}
	s->row = row;
	return 0;
}

/* One frame. A global function: the verifier checks it once, for any state, instead of once
 * per loop iteration for each state the loop reaches (which did not fit its budget). */
__noinline int uw_frame(struct uw_state *s)
{
	if (uw_full(s))
		return 1;
	__u32 why = uw_find_row(s);
	__u64 pc = s->pc;
	__u32 k = s->frame0 + s->n;
	__u64 *slot = bpf_map_lookup_elem(&uw_frames, &k);
	if (!slot)
		return 1;
	/* The frame a signal interrupted is an exact address, not a return address: stored as
	 * pc + 1, so that the trace's convention (look up a later frame at address - 1) finds
	 * the interrupted instruction itself. */
	*slot = s->exact && s->n > 0 ? pc + 1 : pc;
	s->n++;
	if (!why) {
		long r = uw_apply(s, s->row);
		if (r >= 0)
			return r;
		why = SF_USER_NO_ROWS;
	}
	if (!s->fp_fallback) {
		s->flags |= why;
		return 1;
	}
	return uw_fp_step(s);
}

static long uw_step(__u32 i, void *ctx)
{
	return uw_frame(ctx) ? 1 : 0;
}

/* One frame of a frame-pointer walk (fp_only): the lean loop body of fp mode. Global, as
 * uw_frame, so that the verifier checks it once. */
__noinline int fp_frame(struct uw_state *s)
{
	if (uw_full(s))
		return 1;
	__u64 pc = s->pc;
	if (s->n > 0 && s->xol && pc == s->xol) {
		__u64 orig = uw_uretprobe(s, pc);
		if (orig) {
			pc = orig;
			s->pc = pc;
		}
	}
	__u32 k = s->frame0 + s->n;
	__u64 *slot = bpf_map_lookup_elem(&uw_frames, &k);
	if (!slot)
		return 1;
	*slot = pc;
	s->n++;
	return uw_fp_step(s);
}

static long fp_step(__u32 i, void *ctx)
{
	/* opaque to clang, which would otherwise drop the 0/1 test the verifier needs (it
	 * knows that fp_frame returns 0 or 1; the verifier checks fp_frame apart) */
	int r = fp_frame(ctx);
	asm volatile("" : "+r"(r));
	return r ? 1 : 0;
}

/* One recorded word of the memo read again (cfi_stack): the word at uw_rec's
 * addr[s->nwords] must still be its val; 1 stops the check. Global, as uw_frame. */
__noinline int uw_check_word(struct uw_state *s)
{
	if (!s)
		return 1;
	__u32 zero = 0;
	struct uw_rec *rec = bpf_map_lookup_elem(&uw_rec, &zero);
	__u32 i = s->nwords;
	if (!rec || i >= UW_MEMO_WORDS) {
		s->memo |= UW_NOMEMO;
		return 1;
	}
	__u64 v = 0;
	if (uw_word_raw(s, rec->addr[i & (UW_MEMO_WORDS - 1)], &v) ||
	    v != rec->val[i & (UW_MEMO_WORDS - 1)]) {
		s->memo |= UW_NOMEMO;
		return 1;
	}
	s->nwords = i + 1;
	return 0;
}

static long uw_check_step(__u32 i, void *ctx)
{
	int r = uw_check_word(ctx);
	asm volatile("" : "+r"(r));
	return r ? 1 : 0;
}

/* The current thread's user stack unwound with the rows into ips[0..), leaf first;
 * returns the frame count. */
static __always_inline __u32 cfi_stack(__u64 *ips, __u32 *flags, bool at_entry, __u32 limit,
					bool fp_fallback, bool fp_only)
{
	struct task_struct *task = bpf_get_current_task_btf();
	if (!task->mm)
		return 0; /* a kernel thread */
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
	if (!regs) {
		*flags |= SF_USER_ERROR;
		return 0;
	}
	struct uw_state s = {};
	s.pc = regs->ip;
	s.sp = regs->sp;
	s.bp = regs->bp;
	s.pid = bpf_get_current_pid_tgid() >> 32;
	s.limit = limit;
	s.exact = 1;
	s.at_entry = at_entry;
	s.fp_fallback = fp_fallback;
	s.fp_only = fp_only;
	if (!fp_only) {
		struct cfi_proc *p = bpf_map_lookup_elem(&cfi_procs, &s.pid);
		s.gen = p ? p->gen : 0;
	}
	s.stack_hi = uw_stack_hi(task, s.sp, &s.hole_pages);
	if (fp_only)
		s.xol = BPF_CORE_READ(task, mm, uprobes_state.xol_area, vaddr);
	s.frame0 = bpf_get_smp_processor_id() * MAX_FRAMES;
	s.memo = UW_BP_LIVE;
	/* The thread's memo (uw_memo): the same start, and every word it read the same, is the
	 * same stack. The start registers are read again from regs (no room on the stack). */
	__u32 mode = (at_entry ? 1 : 0) | (fp_fallback ? 2 : 0) | limit << 2;
	struct uw_memo *m = 0;
	struct uw_rec *rec = 0;
	__u32 zero = 0;
	if (uw_memo_on && !fp_only && s.gen) {
		m = bpf_task_storage_get(&uw_memo, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (m && __sync_val_compare_and_swap(&m->busy, 0, 1) != 0)
			m = 0;
		if (m) {
			rec = bpf_map_lookup_elem(&uw_rec, &zero);
			if (!rec) {
				__sync_lock_test_and_set(&m->busy, 0);
				m = 0;
			}
		}
	}
	if (m && rec) {
		__u32 seq = rec->seq + 1;
		rec->seq = seq;
		s.rec_seq = seq;
		rec->walks++;
		if (m->valid && m->gen == s.gen && m->pc == regs->ip && m->sp == regs->sp &&
		    (!m->use_bp || m->bp == regs->bp) && m->mode == mode) {
			/* at most UW_MEMO_WORDS - 1 (uw_word): masked where 6.1's verifier sees it */
			__u32 nw = m->nwords;
			barrier_var(nw);
			nw &= UW_MEMO_WORDS - 1;
			bpf_probe_read_kernel(rec->addr, nw * sizeof(__u64), m->waddr);
			bpf_probe_read_kernel(rec->val, nw * sizeof(__u64), m->wval);
			s.nwords = 0;
			bpf_loop(nw, uw_check_step, &s, 0);
			if (!(s.memo & UW_NOMEMO) && s.nwords == nw && rec->seq == seq) {
				__u32 n = m->n;
				barrier_var(n);
				n &= MAX_FRAMES - 1;
				bpf_probe_read_kernel(ips, n * sizeof(__u64), m->ips);
				*flags |= m->flags;
				rec->hits++;
				__sync_lock_test_and_set(&m->busy, 0);
				return n;
			}
			/* a word changed: walked again, and the memo replaced */
			s.memo = UW_BP_LIVE;
			s.nwords = 0;
			seq = rec->seq + 1;
			rec->seq = seq;
			s.rec_seq = seq;
		}
		s.memo |= UW_REC;
	}
	if (fp_only)
		bpf_loop(MAX_FRAMES, fp_step, &s, 0);
	else
		bpf_loop(MAX_FRAMES, uw_step, &s, 0);
	__u32 k = s.frame0;
	__u64 *first = bpf_map_lookup_elem(&uw_frames, &k);
	if (!first) {
		if (m)
			__sync_lock_test_and_set(&m->busy, 0);
		return 0;
	}
	__u32 n = s.n;
	if (n > MAX_FRAMES - 1)
		n = MAX_FRAMES - 1;
	/* masked too: with the memo's code around it, clang's registers lose the clamp's bound
	 * for 6.1's verifier */
	barrier_var(n);
	n &= MAX_FRAMES - 1;
	/* the CPU's MAX_FRAMES values follow each other in the array */
	bpf_probe_read_kernel(ips, n * sizeof(__u64), first);
	*flags |= s.flags | (fp_only ? 0 : SF_USER_CFI);
	if (m && rec) {
		__u32 bad = SF_USER_BAD_FRAME | SF_USER_ERROR | SF_USER_UNKNOWN_MAPPING |
			    SF_USER_NO_TABLE | SF_USER_NO_ROWS;
		__u32 nw = s.nwords;
		if ((s.memo & (UW_REC | UW_NOMEMO)) == UW_REC && !(s.flags & bad) &&
		    rec->seq == s.rec_seq && n > 0 && nw < UW_MEMO_WORDS) {
			barrier_var(nw);
			nw &= UW_MEMO_WORDS - 1;
			bpf_probe_read_kernel(m->waddr, nw * sizeof(__u64), rec->addr);
			bpf_probe_read_kernel(m->wval, nw * sizeof(__u64), rec->val);
			__u32 nf = n;
			barrier_var(nf);
			nf &= MAX_FRAMES - 1;
			bpf_probe_read_kernel(m->ips, nf * sizeof(__u64), first);
			m->nwords = nw;
			m->n = n;
			m->flags = s.flags | SF_USER_CFI;
			m->gen = s.gen;
			m->pc = regs->ip;
			m->sp = regs->sp;
			m->bp = regs->bp;
			m->use_bp = !!(s.memo & UW_USE_BP);
			m->mode = mode;
			m->valid = 1;
		} else {
			m->valid = 0;
		}
		__sync_lock_test_and_set(&m->busy, 0);
	}
	return n;
}

#endif
