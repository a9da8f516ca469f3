/* ebtrace's in-process allocation sampler (`ebrec record --alloc --alloc-sampler preload`).
 *
 * ebrec writes this library to a private temporary file and starts the command with it in
 * LD_PRELOAD. It interposes the malloc family and forwards every call to glibc's own entry
 * points (__libc_malloc, ...: no dlsym, so nothing allocates while the shim resolves its
 * targets). A per-thread byte counter drawn from an exponential distribution of mean
 * EBTRACE_SAMPLE_BYTES decides which allocations are sampled, as tcmalloc's heap profiler
 * does: an allocation of s bytes is sampled with probability 1 - exp(-s / period), and the
 * reports scale it back by the inverse. An unsampled call costs a TLS load, a compare and a
 * store. A sampled one calls ebtrace_sampled_alloc(), where ebrec's uprobe sits; the shim
 * remembers the sampled blocks (a filter of counters every free reads, an exact set behind a
 * lock for the few frees the filter lets through), so only the free of a sampled block calls
 * ebtrace_sampled_free(): no trap for the others.
 *
 * C, not Rust: the library must not bring a runtime, TLS destructors, a panic machinery or an
 * allocator of its own into the target, and its fast path must be the few instructions above;
 * plain C compiled by the system cc (crates/bpf/build.rs) is the shortest way to that.
 *
 * The probe sites are hand-written: each starts with a 5-byte nop, the instruction the
 * kernel's optimized uprobes (x86-64, 6.18 on) turn into a call to a trampoline instead of an
 * int3 trap. The allocation probe is reached by a tail call (jmp) from the interposed
 * function, whose frame is gone by then: at the probe, [sp] is the return address into the
 * allocator's caller, so the BPF side takes the stack from there and no frame of the shim is
 * on it (bpf/sampler.bpf.c drops the probe's own pc). */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <linux/types.h>

#include "events.h"
#include "preload_unwind.c"

#define EXPORT __attribute__((visibility("default")))
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);

/* The probe sites (ebrec attaches to these symbols). Protected: calls from the shim bind
 * here directly (no PLT), and the symbols are in .dynsym for ebrec to find. */
__attribute__((visibility("protected"))) void *ebtrace_sampled_alloc(void *p, size_t size,
								     unsigned kind);
__attribute__((visibility("protected"))) int ebtrace_sampled_alloc_rc(void *p, size_t size,
								    unsigned kind);
__attribute__((visibility("protected"))) void ebtrace_sampled_free(void *p);
/* The same sites for forked children, starting with a 1-byte nop (a plain uprobe, one trap).
 * An optimized site is a call into the kernel's trampoline page, and 6.18 does not copy that
 * page into a forked child: a child calling a site its parent had optimized jumped into
 * nothing (SIGSEGV, seen here). A child after fork (without exec) calls these instead; an
 * exec'd program loads the shim afresh and uses the optimizable ones. */
__attribute__((visibility("protected"))) void *ebtrace_sampled_alloc_forked(void *p, size_t size,
									    unsigned kind);
__attribute__((visibility("protected"))) int ebtrace_sampled_alloc_rc_forked(void *p, size_t size,
									   unsigned kind);
__attribute__((visibility("protected"))) void ebtrace_sampled_free_forked(void *p);

#define SITE(name, nop, body)                                                              \
	".globl " #name "\n"                                                               \
	".protected " #name "\n"                                                           \
	".type " #name ",@function\n"                                                      \
	".p2align 4\n" #name ":\n"                                                         \
	".cfi_startproc\n"                                                                 \
	nop body ".cfi_endproc\n"                                                          \
	".size " #name ", .-" #name "\n"
/* nop5: what the kernel optimizes; nop: a plain uprobe (the kernel emulates the nop) */
#define PROBE(name, body)                                                                  \
	SITE(name, ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n", body)                           \
	SITE(name##_forked, "nop\n", body)

__asm__(".text\n"
	/* returns the block (malloc and the like end in `return ebtrace_sampled_alloc(...)`) */
	PROBE(ebtrace_sampled_alloc, "movq %rdi, %rax\nret\n")
	/* returns 0 (posix_memalign) */
	PROBE(ebtrace_sampled_alloc_rc, "xorl %eax, %eax\nret\n")
	PROBE(ebtrace_sampled_free, "ret\n"));

/* --- configuration, read once from the environment ebrec set --- */

static uint64_t period;	    /* EBTRACE_SAMPLE_BYTES: mean bytes between samples (0: off) */
static uint64_t min_bytes;  /* EBTRACE_MIN_BYTES: --alloc=MIN, smaller samples are dropped */
static int track_frees = 1; /* EBTRACE_NO_FREE=1: --no-free */
static int configured;	    /* 1 once the above are read */
/* Back-pressure: the sampler's ring buffer, mapped read-only (ebrec hands its descriptor to
 * the command: EBTRACE_RING_FD, EBTRACE_RING_BYTES). Before a sampled event the shim reads
 * the kernel's producer position and ebrec's consumer position, and while more than half of
 * the ring is unread it waits for ebrec to read (ebrec reads every 10-100 ms): at any
 * allocation rate the program slows down to what the recorder keeps up with, instead of
 * events being lost. If the consumer makes no progress for 2 s (ebrec stopped, or is
 * stuck), the shim stops waiting for good; what the ring cannot take is then lost and
 * counted, as without it. */
static const volatile uint64_t *ring_cons, *ring_prod;
static uint64_t ring_high;
static int forked;	    /* a child after fork: the *_forked probe sites */
/* --sample-bytes 1 without --alloc=MIN: every block is reported, so every free is sent and
 * the set of sampled blocks is not kept (it was a hash set of every live block, behind a
 * lock: a cache miss or two per call). Frees of the blocks allocated before the shim could
 * read its environment (the loader's first few) are sent too: the reports count them as
 * frees of blocks not seen allocated. A forked child goes back to the set (empty): the
 * frees of its parent's blocks are not its own. */
static int every;

/* The channel (EBTRACE_CHAN_FD, EBTRACE_CHAN_BYTES): a shared memory ring ebrec created and
 * reads. When the shim has it and its in-process unwinder can run here, a sampled
 * allocation walks its own stack (preload_unwind.c: the CFI of .eh_frame, rules cached per
 * pc) and writes the same alloc_event / free_event the probes' BPF programs would, without
 * entering the kernel; the probe sites are then not called at all. Layout (ebrec's
 * record/src/preload.rs `Chan` reads the same): the first 4 KiB are the header, the data
 * follows. Records are an 8-byte header (the length, then 0) and the event, 8-aligned; a
 * record never wraps: where the room before the end is too small, the writer puts a length
 * of CHAN_SKIP there and starts again at 0. Writers take `lock` (a spin lock; a waiter
 * yields the CPU after a while): events leave in one order for all threads, as from the
 * kernel's ring. `prod` is stored (release) after the record; ebrec stores `cons` after
 * reading. */
#define CHAN_DATA 4096
#define CHAN_SKIP 0xffffffffu
struct chan_header {
	uint64_t prod;	 /* 0: bytes written, by the shim */
	uint64_t pad0[7];
	uint64_t cons;	 /* 64: bytes read, by ebrec */
	uint64_t pad1[7];
	uint32_t lock;	 /* 128: the writers' lock */
	uint32_t active; /* 132: 1 once a process uses the channel (in-process walks) */
	uint64_t hits[2]; /* 136: allocations, frees reported */
	uint64_t lost[2]; /* 152: allocations, frees lost (ebrec stopped reading for 2 s) */
};
static struct chan_header *chan;
static uint8_t *chan_data;
static uint64_t chan_size;  /* a power of two */
static uint32_t chan_gave_up; /* ebrec made no progress for 2 s (or EBTRACE_NO_BACKPRESSURE=1):
				 no waiting */
static int stack_depth = MAX_FRAMES;
static uint32_t my_pid;	    /* getpid(), reset in a forked child */

static uint64_t env_u64(const char *name, uint64_t dflt)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return dflt;
	uint64_t n = 0;
	for (; *v >= '0' && *v <= '9'; v++)
		n = n * 10 + (uint64_t)(*v - '0');
	return n;
}

/* getenv does not allocate. Before libc's own initialization `environ` is not set yet (ld.so
 * allocates after relocating, before any constructor): those calls are not sampled. */
static int configure(void)
{
	extern char **environ;
	if (__atomic_load_n(&configured, __ATOMIC_ACQUIRE))
		return 1;
	if (!environ)
		return 0;
	period = env_u64("EBTRACE_SAMPLE_BYTES", 0);
	min_bytes = env_u64("EBTRACE_MIN_BYTES", 0);
	track_frees = env_u64("EBTRACE_NO_FREE", 0) == 0;
	every = period == 1 && min_bytes == 0 && track_frees;
	/* for measuring: the plain-nop sites (one trap each) instead of the optimizable ones */
	if (env_u64("EBTRACE_TRAP_SITES", 0))
		forked = 1;
	uint64_t ring_fd = env_u64("EBTRACE_RING_FD", 0), ring_bytes = env_u64("EBTRACE_RING_BYTES", 0);
	/* EBTRACE_NO_BACKPRESSURE=1: never wait (for measuring what the ring alone loses) */
	int no_wait = env_u64("EBTRACE_NO_BACKPRESSURE", 0) != 0;
	if (no_wait)
		chan_gave_up = 1;
	if (ring_fd && ring_bytes >= 4096 && ring_fd < 65536 && !no_wait) {
		long page = sysconf(_SC_PAGESIZE);
		/* the consumer page, then the producer page (read-only, as any reader may) */
		void *m = mmap(NULL, 2 * (size_t)page, PROT_READ, MAP_SHARED, (int)ring_fd, 0);
		if (m != MAP_FAILED) {
			ring_cons = (const volatile uint64_t *)m;
			ring_prod = (const volatile uint64_t *)((char *)m + page);
			ring_high = ring_bytes / 2;
		}
	}
	uint64_t chan_fd = env_u64("EBTRACE_CHAN_FD", 0), chan_bytes = env_u64("EBTRACE_CHAN_BYTES", 0);
	uint64_t depth = env_u64("EBTRACE_STACK_DEPTH", MAX_FRAMES);
	if (depth >= 1 && depth <= MAX_FRAMES)
		stack_depth = (int)depth;
	if (chan_fd && chan_fd < 65536 && chan_bytes >= 4096 && (chan_bytes & (chan_bytes - 1)) == 0) {
		void *m = mmap(NULL, CHAN_DATA + chan_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
			       (int)chan_fd, 0);
		if (m != MAP_FAILED) {
			chan_size = chan_bytes;
			chan_data = (uint8_t *)m + CHAN_DATA;
			__atomic_store_n(&((struct chan_header *)m)->active, 1, __ATOMIC_RELAXED);
			__atomic_store_n(&chan, m, __ATOMIC_RELEASE);
		}
	}
	__atomic_store_n(&configured, 1, __ATOMIC_RELEASE);
	if (chan) {
		/* the unwinder's _dl_find_object; dlsym may allocate: what it and other threads
		 * allocate meanwhile is sent without a stack (flagged) */
		static int resolving;
		if (!__atomic_exchange_n(&resolving, 1, __ATOMIC_ACQ_REL))
			uw_init();
	}
	return 1;
}

/* --- the per-thread sampler --- */

struct sampler {
	uint64_t left; /* bytes until the next sample; 0: not started (the first call starts it) */
	uint64_t rng;  /* xorshift state; 0: not seeded */
	int busy;      /* inside the shim's slow path (nothing there allocates; a guard anyway) */
	uint32_t tid;  /* gettid(), 0 until the thread's first event (and in a forked child) */
};

/* initial-exec: a %fs-relative access, no __tls_get_addr (the shim is always loaded at
 * start-up, where static TLS is set up for every thread before it runs). Zero at thread
 * start, so a new thread's first call takes the slow path and seeds its own state. */
static __thread struct sampler ts __attribute__((tls_model("initial-exec")));

static uint64_t seeds;

static uint64_t splitmix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

/* The bytes until the next sample: exponential of mean `period`, at least 1. */
static uint64_t draw(void)
{
	uint64_t x = ts.rng;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	ts.rng = x;
	double u = (double)((x >> 11) + 1) * (1.0 / 9007199254740992.0); /* (0, 1] */
	double b = -log(u) * (double)period;
	if (b >= 1.8e19)
		return UINT64_MAX;
	return (uint64_t)b + 1;
}

static void seed(void)
{
	uint64_t s = __builtin_ia32_rdtsc() ^ (uintptr_t)&ts ^
		     ((uint64_t)__atomic_fetch_add(&seeds, 1, __ATOMIC_RELAXED) << 32);
	s = splitmix(s);
	ts.rng = s ? s : 1;
}

/* The counter crossed 0 within this allocation of `size` bytes: is it sampled? */
static __attribute__((noinline)) int sample_slow(size_t size)
{
	if (ts.busy || !configure())
		return 0; /* left stays 0: the next call comes back here */
	if (period == 0) {
		ts.left = UINT64_MAX; /* sampling off: never here again in practice */
		return 0;
	}
	if (period == 1) {
		/* --sample-bytes 1: every allocation, malloc(0) and 1-byte ones too (an
		 * exponential draw of mean 1 would skip a third of the 1-byte ones); the
		 * counter stays 0, so every call comes here */
		ts.left = 0;
		return size >= min_bytes;
	}
	if (ts.rng == 0) {
		/* first call of the thread: start the counter; this call is sampled if it
		 * crosses the first draw (memoryless: as if the counter had always run) */
		seed();
		uint64_t first = draw();
		if (size < first) {
			ts.left = first - size;
			return 0;
		}
	}
	ts.left = draw();
	return size >= min_bytes;
}

static inline int sampled(size_t size)
{
	uint64_t left = ts.left;
	if (LIKELY(size < left)) {
		ts.left = left - size;
		return 0;
	}
	return sample_slow(size);
}

/* --- the sampled blocks --- */

/* Every free reads one counter of `filter`, indexed by a hash of the address: 0 means "not
 * sampled" for certain. The counters count the sampled live blocks that hash there (255
 * sticks: only a cost, never a miss). Pages of the filter no sampled block touched read as
 * the kernel's zero page. The exact set (open addressing, linear probing, deletion by
 * backward shift) is read only when the counter is not 0, under `lock`. Both are mmap'd:
 * nothing here calls malloc. */
#define FILTER_BITS 20
static uint8_t *filter;
static uint64_t *set;	   /* addresses; 0: empty */
static size_t set_cap;	   /* a power of two; 0 until the first sample */
static size_t set_len;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static inline size_t fhash(const void *p)
{
	return (size_t)(((uintptr_t)p >> 4) * 0x9e3779b97f4a7c15ULL >> (64 - FILTER_BITS));
}

static inline size_t shash(uint64_t a, size_t cap)
{
	return (size_t)(splitmix(a) & (cap - 1));
}

static void *map_zeroed(size_t bytes)
{
	void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return m == MAP_FAILED ? NULL : m;
}

/* Under `lock`. */
static int set_grow(void)
{
	size_t cap = set_cap ? set_cap * 2 : 4096;
	uint64_t *n = map_zeroed(cap * sizeof(uint64_t));
	if (!n)
		return 0;
	for (size_t i = 0; i < set_cap; i++) {
		uint64_t a = set[i];
		if (!a)
			continue;
		size_t j = shash(a, cap);
		while (n[j])
			j = (j + 1) & (cap - 1);
		n[j] = a;
	}
	if (set)
		munmap(set, set_cap * sizeof(uint64_t));
	set = n;
	set_cap = cap;
	return 1;
}

/* Remembers a sampled block; 0 when it cannot (no memory for the set): then it is not
 * reported either, so that no free goes missing. */
static int remember(void *p)
{
	if (!track_frees || every)
		return 1;
	int ok = 1;
	pthread_mutex_lock(&lock);
	if (!filter) {
		uint8_t *f = map_zeroed((size_t)1 << FILTER_BITS);
		if (f)
			__atomic_store_n(&filter, f, __ATOMIC_RELEASE);
	}
	if (!filter || ((set_len + 1) * 2 > set_cap && !set_grow())) {
		ok = 0;
	} else {
		uint64_t a = (uintptr_t)p;
		size_t j = shash(a, set_cap);
		while (set[j] && set[j] != a)
			j = (j + 1) & (set_cap - 1);
		if (!set[j]) {
			set[j] = a;
			set_len++;
			uint8_t *c = &filter[fhash(p)];
			if (*c != 255)
				__atomic_store_n(c, (uint8_t)(*c + 1), __ATOMIC_RELAXED);
		}
	}
	pthread_mutex_unlock(&lock);
	return ok;
}

/* Whether `p` was a sampled block, forgetting it. */
static __attribute__((noinline)) int forget_slow(void *p)
{
	int found = 0;
	pthread_mutex_lock(&lock);
	if (set_cap) {
		uint64_t a = (uintptr_t)p;
		size_t mask = set_cap - 1;
		size_t j = shash(a, set_cap);
		while (set[j] && set[j] != a)
			j = (j + 1) & mask;
		if (set[j] == a) {
			found = 1;
			set_len--;
			/* backward-shift deletion: no tombstones */
			size_t hole = j;
			for (size_t k = (j + 1) & mask; set[k]; k = (k + 1) & mask) {
				size_t home = shash(set[k], set_cap);
				/* move set[k] into the hole if its home is not in (hole, k] */
				if (((k - home) & mask) >= ((k - hole) & mask)) {
					set[hole] = set[k];
					hole = k;
				}
			}
			set[hole] = 0;
			uint8_t *c = &filter[fhash(p)];
			if (*c != 255 && *c != 0)
				__atomic_store_n(c, (uint8_t)(*c - 1), __ATOMIC_RELAXED);
		}
	}
	pthread_mutex_unlock(&lock);
	return found;
}

/* The free path's check: one byte load for a block that was not sampled. */
static inline int forget(void *p)
{
	if (!p || !track_frees)
		return 0;
	if (every)
		return 1;
	uint8_t *f = __atomic_load_n(&filter, __ATOMIC_ACQUIRE);
	if (LIKELY(!f) || LIKELY(!__atomic_load_n(&f[fhash(p)], __ATOMIC_RELAXED)))
		return 0;
	return forget_slow(p);
}

/* fork: no thread holds `lock` across fork (prepare takes it). The child forgets the
 * parent's sampled blocks (fresh zero pages, no copy): their frees in the child would name
 * blocks the child never allocated (the uprobe path does not send them either), and gets a
 * new random state so that it does not sample in step with its parent. */
/* The channel's lock is not taken here: it lives in memory shared with the child, and the
 * parent's holder lets it go either way. */
static void before_fork(void)
{
	pthread_mutex_lock(&lock);
}

static void after_fork_parent(void)
{
	pthread_mutex_unlock(&lock);
}

static void after_fork_child(void)
{
	if (set_cap) {
		mmap(set, set_cap * sizeof(uint64_t), PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
		set_len = 0;
	}
	if (filter)
		mmap(filter, (size_t)1 << FILTER_BITS, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	ts.rng = 0;
	ts.left = 0;
	ts.tid = 0;
	my_pid = 0;
	forked = 1;
	every = 0;
	pthread_mutex_unlock(&lock);
}

/* pthread_atfork allocates its list entry: from a constructor, never from inside malloc. */
__attribute__((constructor)) static void shim_init(void)
{
	configure();
	pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

/* --- back-pressure --- */

static __attribute__((noinline)) void ring_wait(void)
{
	uint64_t last = __atomic_load_n(ring_cons, __ATOMIC_ACQUIRE);
	unsigned idle = 0;
	for (;;) {
		struct timespec ts100us = { 0, 100000 };
		nanosleep(&ts100us, NULL);
		uint64_t c = __atomic_load_n(ring_cons, __ATOMIC_ACQUIRE);
		uint64_t p = __atomic_load_n(ring_prod, __ATOMIC_ACQUIRE);
		if (p - c < ring_high / 2)
			return;
		if (c != last) {
			last = c;
			idle = 0;
		} else if (++idle >= 20000) { /* 2 s without a read: stop waiting */
			__atomic_store_n(&ring_prod, NULL, __ATOMIC_RELEASE);
			return;
		}
	}
}

/* Before a sampled event: wait while the ring is more than half full. */
static inline void ring_check(void)
{
	const volatile uint64_t *prod = __atomic_load_n(&ring_prod, __ATOMIC_ACQUIRE);
	if (LIKELY(!prod))
		return;
	uint64_t p = __atomic_load_n(prod, __ATOMIC_ACQUIRE);
	uint64_t c = __atomic_load_n(ring_cons, __ATOMIC_ACQUIRE);
	if (UNLIKELY(p - c >= ring_high))
		ring_wait();
}

/* --- the channel: events written in the process --- */

static inline uint32_t my_tid(void)
{
	if (UNLIKELY(!ts.tid))
		ts.tid = (uint32_t)syscall(SYS_gettid);
	return ts.tid;
}

/* The lock word is the holder's thread id. The processes of the command share it (a child
 * after fork writes into the same channel): a holder that died holding it (killed in the
 * middle of a write, before it moved `prod`) is noticed after a while and its lock taken
 * over. */
static int chan_lock(void)
{
	uint32_t me = my_tid();
	unsigned spins = 0, yields = 0;
	for (;;) {
		uint32_t holder = 0;
		if (__atomic_compare_exchange_n(&chan->lock, &holder, me, 0, __ATOMIC_ACQUIRE,
						__ATOMIC_RELAXED))
			return 1;
		/* this thread holds it: a signal handler that allocates interrupted its write */
		if (holder == me)
			return 0;
		if (++spins < 200) {
			__builtin_ia32_pause();
			continue;
		}
		spins = 0;
		sched_yield();
		if (++yields % 4096 == 0 && syscall(SYS_kill, holder, 0) != 0 && errno == ESRCH)
			__atomic_compare_exchange_n(&chan->lock, &holder, 0, 0, __ATOMIC_RELAXED,
						    __ATOMIC_RELAXED);
	}
}

static void chan_unlock(void)
{
	__atomic_store_n(&chan->lock, 0, __ATOMIC_RELEASE);
}

static inline uint64_t boot_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_BOOTTIME, &t);
	return (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec;
}

static void fill(struct event_header *h, uint32_t type)
{
	uint32_t tid = my_tid();
	uint32_t pid = __atomic_load_n(&my_pid, __ATOMIC_RELAXED);
	if (UNLIKELY(!pid)) {
		pid = (uint32_t)getpid();
		__atomic_store_n(&my_pid, pid, __ATOMIC_RELAXED);
	}
	int cpu = sched_getcpu();
	h->type = type;
	h->pid = pid;
	h->tid = tid;
	h->cpu = cpu < 0 ? 0 : (uint32_t)cpu;
	h->time_ns = 0; /* chan_write: under the lock */
}

/* Writes one event (`len` bytes, a multiple of 8) of family `fam` (0: alloc, 1: free). While
 * the ring has no room it waits for ebrec to read (back-pressure, 50 us sleeps, the lock let
 * go meanwhile); after 2 s without a read it gives up waiting for good and counts the
 * events it cannot write as lost. */
static void chan_write(void *ev, uint32_t len, int fam)
{
	uint64_t need = 8 + (uint64_t)len;
	unsigned idle = 0;
	uint64_t last = 0;
	if (UNLIKELY(!chan_lock())) {
		/* not written (the interrupted write holds the lock), counted */
		__atomic_fetch_add(&chan->hits[fam], 1, __ATOMIC_RELAXED);
		__atomic_fetch_add(&chan->lost[fam], 1, __ATOMIC_RELAXED);
		return;
	}
	__atomic_fetch_add(&chan->hits[fam], 1, __ATOMIC_RELAXED);
	for (;;) {
		uint64_t prod = chan->prod;
		uint64_t cons = __atomic_load_n(&chan->cons, __ATOMIC_ACQUIRE);
		uint64_t pos = prod & (chan_size - 1);
		uint64_t skip = chan_size - pos < need ? chan_size - pos : 0;
		if (prod + skip + need - cons <= chan_size) {
			if (skip) {
				*(uint32_t *)(chan_data + pos) = CHAN_SKIP;
				prod += skip;
				pos = 0;
			}
			/* the time under the lock, as the record goes in: the channel's order is
			 * the events' time order (a thread preempted between a clock read and the
			 * lock would otherwise write an older time after newer ones) */
			((struct event_header *)ev)->time_ns = boot_ns();
			uint32_t hdr[2] = { len, 0 };
			memcpy(chan_data + pos, hdr, 8);
			memcpy(chan_data + pos + 8, ev, len);
			__atomic_store_n(&chan->prod, prod + need, __ATOMIC_RELEASE);
			break;
		}
		if (__atomic_load_n(&chan_gave_up, __ATOMIC_RELAXED)) {
			__atomic_fetch_add(&chan->lost[fam], 1, __ATOMIC_RELAXED);
			break;
		}
		if (cons != last) {
			last = cons;
			idle = 0;
		} else if (++idle >= 40000) { /* 2 s without a read */
			__atomic_store_n(&chan_gave_up, 1, __ATOMIC_RELAXED);
		}
		chan_unlock();
		struct timespec t50us = { 0, 50000 };
		nanosleep(&t50us, NULL);
		chan_lock();
	}
	chan_unlock();
}

/* The caller's state at a sampled allocation: entered by a tail call from the interposed
 * function, so [sp] is the return address into the allocator's caller and rbp is still
 * the caller's. The stubs pass sp and rbp on to the C side, which returns the block (or 0). */
void *ebtrace_chan_alloc(void *p, size_t size, unsigned kind);
int ebtrace_chan_alloc_rc(void *p, size_t size, unsigned kind);
__attribute__((used)) static void *chan_alloc(void *p, size_t size, unsigned kind, uint64_t sp,
					      uint64_t bp);
__attribute__((used)) static int chan_alloc_rc(void *p, size_t size, unsigned kind, uint64_t sp,
					       uint64_t bp);
__asm__(".text\n"
	".p2align 4\n"
	".type ebtrace_chan_alloc,@function\n"
	"ebtrace_chan_alloc:\n"
	".cfi_startproc\n"
	"movq %rsp, %rcx\n"
	"movq %rbp, %r8\n"
	"jmp chan_alloc\n"
	".cfi_endproc\n"
	".size ebtrace_chan_alloc, .-ebtrace_chan_alloc\n"
	".p2align 4\n"
	".type ebtrace_chan_alloc_rc,@function\n"
	"ebtrace_chan_alloc_rc:\n"
	".cfi_startproc\n"
	"movq %rsp, %rcx\n"
	"movq %rbp, %r8\n"
	"jmp chan_alloc_rc\n"
	".cfi_endproc\n"
	".size ebtrace_chan_alloc_rc, .-ebtrace_chan_alloc_rc\n");

static void chan_send_alloc(void *p, size_t size, unsigned kind, uint64_t sp, uint64_t bp)
{
	struct alloc_event e;
	fill(&e.h, FAM_ALLOC);
	e.size = size;
	e.addr = (uintptr_t)p;
	e.arg = 0;
	e.kind = kind;
	e.flags = SF_USER_CFI;
	e.old_traced = 0;
	e.copy_id = 0;
	e.sample_period = period == 1 ? 0 : period; /* 1: every allocation, not sampled */
	e.allocator = 0;
	e.pad = 0;
	uint64_t ra = *(const uint64_t *)sp;
	int n = 0;
	if (LIKELY(uw_available()))
		n = uw_walk(ra, sp + 8, bp, (uint64_t *)e.ips, stack_depth, &e.flags);
	else
		e.flags |= SF_USER_NO_TABLE; /* no _dl_find_object (glibc < 2.35): no stack */
	if (n > 0)
		e.ips[0] -= 1; /* the call of malloc, looked up as an exact pc */
	e.nframes = (uint32_t)n;
	chan_write(&e, (uint32_t)(offsetof(struct alloc_event, ips) + (size_t)n * 8), 0);
}

__attribute__((used)) static void *chan_alloc(void *p, size_t size, unsigned kind, uint64_t sp,
					      uint64_t bp)
{
	chan_send_alloc(p, size, kind, sp, bp);
	return p;
}

__attribute__((used)) static int chan_alloc_rc(void *p, size_t size, unsigned kind, uint64_t sp,
					       uint64_t bp)
{
	chan_send_alloc(p, size, kind, sp, bp);
	return 0;
}

static void chan_free(void *p)
{
	struct free_event f;
	fill(&f.h, FAM_FREE);
	f.addr = (uintptr_t)p;
	f.allocator = 0;
	f.pad = 0;
	chan_write(&f, sizeof(f), 1);
}

/* --- the interposed functions --- */

static __attribute__((noinline)) void *report(void *p, size_t size, unsigned kind)
{
	if (!p || !remember(p))
		return p;
	if (chan)
		return ebtrace_chan_alloc(p, size, kind);
	ring_check();
	if (UNLIKELY(forked))
		return ebtrace_sampled_alloc_forked(p, size, kind);
	return ebtrace_sampled_alloc(p, size, kind);
}

static __attribute__((noinline)) void sampled_free(void *p)
{
	if (chan) {
		chan_free(p);
		return;
	}
	ring_check();
	if (forked)
		ebtrace_sampled_free_forked(p);
	else
		ebtrace_sampled_free(p);
}

/* The shape of every allocating function: decide (a few instructions), allocate, and for
 * a sampled block jump to the probe. `report` is a tail call and so is its call of the
 * probe: at the probe the stack is the caller's. */
EXPORT void *malloc(size_t size)
{
	if (LIKELY(!sampled(size)))
		return __libc_malloc(size);
	return report(__libc_malloc(size), size, AK_MALLOC);
}

EXPORT void free(void *p)
{
	/* the free event goes before the block can be handed out again */
	if (UNLIKELY(forget(p)))
		sampled_free(p);
	__libc_free(p);
}

EXPORT void *calloc(size_t n, size_t size)
{
	size_t total;
	if (__builtin_mul_overflow(n, size, &total))
		return __libc_calloc(n, size); /* fails, as glibc's does */
	if (LIKELY(!sampled(total)))
		return __libc_calloc(n, size);
	return report(__libc_calloc(n, size), total, AK_CALLOC);
}

static inline void *do_realloc(void *old, size_t size, unsigned kind)
{
	int was = forget(old);
	if (UNLIKELY(was))
		sampled_free(old); /* before the old address can be reused */
	int s = sampled(size);
	void *p = __libc_realloc(old, size);
	if (UNLIKELY(was) && !p && size)
		remember(old); /* failed: the old block lives on (its free event was sent) */
	if (LIKELY(!s))
		return p;
	return report(p, size, kind);
}

EXPORT void *realloc(void *old, size_t size)
{
	return do_realloc(old, size, AK_REALLOC);
}

EXPORT void *reallocarray(void *old, size_t n, size_t size)
{
	size_t total;
	if (__builtin_mul_overflow(n, size, &total)) {
		errno = ENOMEM;
		return NULL;
	}
	return do_realloc(old, total, AK_REALLOCARRAY);
}

EXPORT void *memalign(size_t align, size_t size)
{
	if (LIKELY(!sampled(size)))
		return __libc_memalign(align, size);
	return report(__libc_memalign(align, size), size, AK_MEMALIGN);
}

EXPORT void *aligned_alloc(size_t align, size_t size)
{
	if (LIKELY(!sampled(size)))
		return __libc_memalign(align, size);
	return report(__libc_memalign(align, size), size, AK_ALIGNED_ALLOC);
}

EXPORT void *valloc(size_t size)
{
	if (LIKELY(!sampled(size)))
		return __libc_valloc(size);
	return report(__libc_valloc(size), size, AK_VALLOC);
}

EXPORT void *pvalloc(size_t size)
{
	if (LIKELY(!sampled(size)))
		return __libc_pvalloc(size);
	return report(__libc_pvalloc(size), size, AK_PVALLOC);
}

EXPORT int posix_memalign(void **out, size_t align, size_t size)
{
	if (align % sizeof(void *) != 0 || (align & (align - 1)) != 0 || align == 0)
		return EINVAL;
	int s = sampled(size);
	void *p = __libc_memalign(align, size);
	if (!p)
		return ENOMEM;
	*out = p;
	if (LIKELY(!s) || !remember(p))
		return 0;
	if (chan)
		return ebtrace_chan_alloc_rc(p, size, AK_POSIX_MEMALIGN);
	ring_check();
	if (UNLIKELY(forked))
		return ebtrace_sampled_alloc_rc_forked(p, size, AK_POSIX_MEMALIGN);
	return ebtrace_sampled_alloc_rc(p, size, AK_POSIX_MEMALIGN);
}
