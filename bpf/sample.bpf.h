/* Sampling by bytes (--sample-bytes N), as tcmalloc's heap profiler samples: a per-CPU
 * count of bytes left before the next sample, drawn from an exponential distribution of
 * mean N, so that each allocated byte has a 1/N chance of being the sampled one and an
 * allocation of s bytes is kept with probability 1 - exp(-s/N) (the reports scale it back:
 * AllocBatch.sample_period). Per CPU rather than per thread: the process of bytes is
 * memoryless, so which thread's bytes cross the count does not bias the estimate, and a
 * per-CPU array costs less than task storage on every call. BPF has no floating point:
 * -ln(u) comes from log2 in 16.16 fixed point, a 257-entry table of log2(1 + i/256)
 * interpolated linearly (error < 2e-5). */
#ifndef EBTRACE_SAMPLE_BPF_H
#define EBTRACE_SAMPLE_BPF_H

static const __u32 log2_1p[257] = {
	0, 369, 736, 1102, 1466, 1829, 2190, 2551, 2909, 3267, 3623, 3978,
	4331, 4683, 5034, 5384, 5732, 6079, 6425, 6769, 7112, 7454, 7795, 8134,
	8473, 8810, 9146, 9480, 9814, 10146, 10477, 10807, 11136, 11464, 11791, 12116,
	12440, 12764, 13086, 13407, 13727, 14046, 14363, 14680, 14996, 15310, 15624, 15937,
	16248, 16559, 16868, 17177, 17484, 17791, 18096, 18401, 18704, 19007, 19308, 19609,
	19909, 20207, 20505, 20802, 21098, 21393, 21687, 21980, 22272, 22564, 22854, 23144,
	23433, 23720, 24007, 24293, 24579, 24863, 25146, 25429, 25711, 25992, 26272, 26551,
	26830, 27108, 27384, 27660, 27936, 28210, 28484, 28757, 29029, 29300, 29571, 29840,
	30109, 30378, 30645, 30912, 31178, 31443, 31707, 31971, 32234, 32496, 32758, 33019,
	33279, 33538, 33797, 34055, 34312, 34569, 34825, 35080, 35334, 35588, 35841, 36094,
	36346, 36597, 36847, 37097, 37346, 37595, 37842, 38090, 38336, 38582, 38827, 39072,
	39316, 39559, 39802, 40044, 40286, 40527, 40767, 41006, 41246, 41484, 41722, 41959,
	42196, 42432, 42667, 42902, 43137, 43370, 43603, 43836, 44068, 44300, 44530, 44761,
	44990, 45220, 45448, 45676, 45904, 46131, 46357, 46583, 46809, 47034, 47258, 47482,
	47705, 47928, 48150, 48372, 48593, 48813, 49034, 49253, 49472, 49691, 49909, 50127,
	50344, 50560, 50776, 50992, 51207, 51422, 51636, 51850, 52063, 52276, 52488, 52700,
	52911, 53122, 53332, 53542, 53751, 53960, 54169, 54377, 54584, 54791, 54998, 55204,
	55410, 55615, 55820, 56025, 56229, 56432, 56635, 56838, 57040, 57242, 57443, 57644,
	57845, 58045, 58245, 58444, 58643, 58841, 59039, 59237, 59434, 59631, 59827, 60023,
	60219, 60414, 60609, 60803, 60997, 61190, 61384, 61576, 61769, 61961, 62152, 62343,
	62534, 62725, 62915, 63104, 63294, 63483, 63671, 63859, 64047, 64234, 64421, 64608,
	64794, 64980, 65166, 65351, 65536,
};

/* log2(x) in 16.16 fixed point, x >= 1. */
static __always_inline __u64 log2_fixed(__u32 x)
{
	__u32 msb = 31 - __builtin_clz(x);
	/* the 16 bits after the leading one */
	__u32 frac = msb >= 16 ? (x >> (msb - 16)) & 0xffff : (x << (16 - msb)) & 0xffff;
	__u32 i = frac >> 8, t = frac & 0xff;
	if (i > 255)
		i = 255;
	__u32 lo = log2_1p[i], hi = log2_1p[i + 1];
	return ((__u64)msb << 16) + lo + (((hi - lo) * t) >> 8);
}

/* A draw from an exponential distribution of mean `mean`: -ln(u) * mean, u in (0, 1]. */
static __always_inline __u64 exp_draw(__u64 mean)
{
	__u32 r = bpf_get_prandom_u32() | 1; /* u = r / 2^32 */
	/* -ln(u) = (32 - log2(r)) * ln 2, in 16.16 */
	__u64 l = ((__u64)32 << 16) - log2_fixed(r);
	/* ln 2 = 45426 / 65536 */
	__u64 nl = (l * 45426) >> 16;
	return (nl * mean) >> 16;
}

#endif
