/* --aggregate: counters per (process, family, stack) in BPF maps instead of an event per
 * call. Each object that includes this has its own maps; user space reads them every
 * interval (record/src/session/aggregate.rs) and deletes the keys of processes that ended
 * after their last read. A key that finds no room is a counted loss (CTR_LOST_MAP_FULL). */
#ifndef EBTRACE_AGGREGATE_BPF_H
#define EBTRACE_AGGREGATE_BPF_H

/* Set by user space before load. */
const volatile bool aggregate = false;

/* Counters per key (max_entries set by user space, --aggregate-stacks), and each key's
 * stack, written once. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 16);
	__type(key, struct agg_key);
	__type(value, struct agg_val);
} agg_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1 << 16);
	__type(key, struct agg_key);
	__type(value, struct agg_stack);
} agg_stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct agg_stack);
} agg_scratch SEC(".maps");

struct agg_key _agg_key = {};
struct agg_val _agg_val = {};
struct agg_stack _agg_stack = {};

static __always_inline __u64 agg_mix(__u64 h, __u64 v)
{
	h = (h ^ v) * 0xff51afd7ed558ccdULL;
	return h ^ (h >> 29);
}

/* The key of the current process's stack: `n` user frames at `user`, `k` kernel frames at
 * `kern` (both in map memory), `flags`, and `extra` (a lock's mutex, 0 otherwise). */
static __always_inline void agg_key_of(struct agg_key *key, __u32 family, __u64 *user,
				       __u32 n, __u64 *kern, __u32 k, __u32 flags, __u64 extra)
{
	key->pid = bpf_get_current_pid_tgid() >> 32;
	key->family = family;
	key->mm = (__u64)bpf_get_current_task_btf()->mm;
	__u64 h = 0x9e3779b97f4a7c15ULL ^ flags ^ ((__u64)n << 32) ^ ((__u64)k << 48);
	h = agg_mix(h, extra);
	for (int i = 0; i < MAX_FRAMES; i++) {
		if (i >= n)
			break;
		h = agg_mix(h, user[i]);
	}
	for (int i = 0; i < KFRAMES; i++) {
		if (i >= k)
			break;
		h = agg_mix(h, kern[i]);
	}
	key->hash = h | 1; /* never 0 */
}

/* The counters of the current process's stack (see agg_key_of), created with the stack
 * when new; NULL (counted as lost) when a map is full. `key` is filled. */
static __always_inline struct agg_val *agg_get(struct agg_key *key, __u32 family, __u64 *user,
					       __u32 n, __u64 *kern, __u32 k, __u32 flags,
					       __u64 extra)
{
	if (n > MAX_FRAMES)
		n = MAX_FRAMES;
	if (k > KFRAMES)
		k = KFRAMES;
	agg_key_of(key, family, user, n, kern, k, flags, extra);
	struct agg_val *v = bpf_map_lookup_elem(&agg_counts, key);
	if (v)
		return v;
	/* A new stack: its frames go in first, so that user space never reads counts
	 * without them. */
	__u32 z = 0;
	struct agg_stack *s = bpf_map_lookup_elem(&agg_scratch, &z);
	if (!s)
		return NULL;
	s->nframes = n;
	s->kframes = k;
	s->flags = flags;
	s->mutex = extra;
	if (n)
		copy_big(s->ips, user, n * sizeof(__u64));
	if (k)
		copy_big(&s->ips[n], kern, k * sizeof(__u64));
	long err = bpf_map_update_elem(&agg_stacks, key, s, BPF_NOEXIST);
	if (err && err != -17 /* EEXIST */) {
		count(family, CTR_LOST_MAP_FULL);
		return NULL;
	}
	struct agg_val zero = { .first_ns = bpf_ktime_get_boot_ns() };
	bpf_map_update_elem(&agg_counts, key, &zero, BPF_NOEXIST);
	v = bpf_map_lookup_elem(&agg_counts, key);
	if (!v)
		count(family, CTR_LOST_MAP_FULL);
	return v;
}

/* One event of `family` with `sum` and `sum2` under the current stack; whether counted. */
static __always_inline bool agg_add(__u32 family, __u64 *user, __u32 n, __u64 *kern, __u32 k,
				    __u32 flags, __u64 extra, __u64 sum, __u64 sum2)
{
	struct agg_key key;
	struct agg_val *v = agg_get(&key, family, user, n, kern, k, flags, extra);
	if (!v)
		return false;
	__sync_fetch_and_add(&v->count, 1);
	if (sum)
		__sync_fetch_and_add(&v->sum, sum);
	if (sum2)
		__sync_fetch_and_add(&v->sum2, sum2);
	return true;
}

#endif
