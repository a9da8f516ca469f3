//! A bounded log-linear histogram of durations (HDR-style), for the percentiles of the lock
//! and function-latency reports without keeping every value: memory is at most
//! [`MAX_BUCKETS`] counters per histogram (15 KiB) whatever the number of events, and in
//! practice the few hundred buckets between the smallest and the largest value seen.
//!
//! Values below 32 have a bucket each; above, every power of two `[2^e, 2^(e+1))` is cut into
//! 32 equal buckets. A percentile is the midpoint of the bucket that holds the value of that
//! rank, kept within the exact minimum and maximum, so it is within
//! [`RELATIVE_ERROR`] (1/64, 1.6%) of the exact nearest-rank percentile of all the values
//! (and exact below 64). The count, the total, the minimum and the maximum are exact, and so
//! is the highest percentile rank (the maximum) and the lowest (the minimum).
//!
//! ```
//! use ebtrace_analyze::histogram::Histogram;
//! let mut h = Histogram::default();
//! for v in 1..=1000u64 {
//!     h.record(v * 1000);
//! }
//! let p99 = h.quantile(0.99);
//! assert!((p99 as f64 - 990_000.0).abs() <= 990_000.0 / 64.0);
//! assert_eq!(h.max(), 1_000_000);
//! ```

const SUB_BITS: u32 = 5;
/// Linear buckets per power of two.
pub const SUB_BUCKETS: u64 = 1 << SUB_BITS;
/// Buckets that cover the whole `u64` range.
pub const MAX_BUCKETS: usize = ((64 - SUB_BITS as usize) + 1) << SUB_BITS;
/// Bound of `|estimate - exact| / exact` for [`Histogram::quantile`]: half a bucket, whose
/// width is at most 1/32 of its lower bound.
pub const RELATIVE_ERROR: f64 = 1.0 / (2 * SUB_BUCKETS) as f64;

/// The bucket of `v`.
#[inline]
fn index(v: u64) -> usize {
    if v < SUB_BUCKETS {
        return v as usize;
    }
    let e = 63 - v.leading_zeros();
    let shift = e - SUB_BITS;
    (((shift + 1) as usize) << SUB_BITS) + ((v >> shift) & (SUB_BUCKETS - 1)) as usize
}

/// Lowest value and width of bucket `i`.
#[inline]
fn bucket(i: usize) -> (u64, u64) {
    let i = i as u64;
    if i < SUB_BUCKETS {
        return (i, 1);
    }
    let shift = (i >> SUB_BITS) - 1;
    ((SUB_BUCKETS + (i & (SUB_BUCKETS - 1))) << shift, 1 << shift)
}

/// The nearest rank (1-based) of quantile `q` among `n` values: `ceil(n·q)`, at least 1.
/// The same rank the exact percentile of a sorted vector uses.
pub fn rank(n: u64, q: f64) -> u64 {
    ((n as f64 * q).ceil() as u64).clamp(1, n.max(1))
}

/// Counts of values by bucket, with exact count, total, minimum and maximum.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Histogram {
    /// Counts of buckets `first..first + counts.len()`.
    counts: Vec<u64>,
    first: usize,
    count: u64,
    total: u64,
    min: u64,
    max: u64,
}

/// One bin of a log2 view: values in `[low, high)` (the top bin ends at `u64::MAX`,
/// inclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Log2Bin {
    pub low: u64,
    pub high: u64,
    pub count: u64,
}

impl Histogram {
    /// Makes room for buckets `lo..=hi`.
    fn cover(&mut self, lo: usize, hi: usize) {
        if self.counts.is_empty() {
            self.first = lo;
            self.counts.resize(hi - lo + 1, 0);
            return;
        }
        if lo < self.first {
            let add = self.first - lo;
            self.counts.splice(0..0, std::iter::repeat_n(0, add));
            self.first = lo;
        }
        let end = self.first + self.counts.len();
        if hi >= end {
            self.counts.resize(hi - self.first + 1, 0);
        }
    }

    /// Adds one value.
    #[inline]
    pub fn record(&mut self, v: u64) {
        self.record_n(v, 1);
    }

    /// Adds `n` times the value `v` (a sampled event that stands for n).
    #[inline]
    pub fn record_n(&mut self, v: u64, n: u64) {
        if n == 0 {
            return;
        }
        let i = index(v);
        if self.counts.is_empty() || i < self.first || i >= self.first + self.counts.len() {
            self.cover(i, i);
        }
        self.counts[i - self.first] += n;
        if self.count == 0 {
            (self.min, self.max) = (v, v);
        } else {
            self.min = self.min.min(v);
            self.max = self.max.max(v);
        }
        self.count += n;
        self.total = self.total.saturating_add(v.saturating_mul(n));
    }

    /// Adds every value of `other`.
    pub fn merge(&mut self, other: &Histogram) {
        if other.count == 0 {
            return;
        }
        self.cover(other.first, other.first + other.counts.len() - 1);
        let at = other.first - self.first;
        for (c, o) in self.counts[at..].iter_mut().zip(&other.counts) {
            *c += o;
        }
        if self.count == 0 {
            (self.min, self.max) = (other.min, other.max);
        } else {
            self.min = self.min.min(other.min);
            self.max = self.max.max(other.max);
        }
        self.count += other.count;
        self.total = self.total.saturating_add(other.total);
    }

    pub fn count(&self) -> u64 {
        self.count
    }
    /// Sum of the values (saturating at `u64::MAX`).
    pub fn total(&self) -> u64 {
        self.total
    }
    /// 0 when empty.
    pub fn min(&self) -> u64 {
        self.min
    }
    /// 0 when empty.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The nearest-rank quantile `q` (0.5 for the median, 0.99 for p99), within
    /// [`RELATIVE_ERROR`] of the exact one; 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let r = rank(self.count, q);
        if r == self.count {
            return self.max;
        }
        if r == 1 {
            return self.min;
        }
        let mut seen = 0;
        for (j, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= r {
                let (lo, w) = bucket(self.first + j);
                return (lo + (w - 1) / 2).clamp(self.min, self.max);
            }
        }
        self.max
    }

    /// The counts by power of two (`[0, 1)`, `[1, 2)`, `[2, 4)`, …), exact (every bucket
    /// lies within one power of two), from the first non-empty bin to the last.
    pub fn log2_bins(&self) -> Vec<Log2Bin> {
        let mut bins: Vec<Log2Bin> = Vec::new();
        for (j, &c) in self.counts.iter().enumerate() {
            let (lo, _) = bucket(self.first + j);
            let (low, high) = match lo {
                0 => (0, 1),
                _ => {
                    let low = 1u64 << (63 - lo.leading_zeros());
                    (low, low.saturating_mul(2))
                }
            };
            match bins.last_mut() {
                Some(b) if b.low == low => b.count += c,
                _ => {
                    // Empty bins between two non-empty ones are shown, as bpftrace does.
                    if let Some(b) = bins.last() {
                        let mut next = b.high;
                        while next < low {
                            bins.push(Log2Bin {
                                low: next,
                                high: next * 2,
                                count: 0,
                            });
                            next *= 2;
                        }
                    }
                    if c > 0 || !bins.is_empty() {
                        bins.push(Log2Bin {
                            low,
                            high,
                            count: c,
                        });
                    }
                }
            }
        }
        while bins.last().is_some_and(|b| b.count == 0) {
            bins.pop();
        }
        bins
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exact nearest-rank quantile, as the reports computed it before the histogram.
    fn exact(sorted: &[u64], q: f64) -> u64 {
        if sorted.is_empty() {
            return 0;
        }
        sorted[rank(sorted.len() as u64, q) as usize - 1]
    }

    const QS: [f64; 8] = [0.0, 0.01, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0];

    /// Checks every quantile of `values` against the exact ones, and the exact fields.
    fn check(values: &[u64]) {
        let mut h = Histogram::default();
        for &v in values {
            h.record(v);
        }
        let mut sorted = values.to_vec();
        sorted.sort_unstable();
        assert_eq!(h.count(), values.len() as u64);
        assert_eq!(
            h.total(),
            values.iter().fold(0u64, |a, &v| a.saturating_add(v))
        );
        assert_eq!(h.max(), sorted.last().copied().unwrap_or(0));
        assert_eq!(h.min(), sorted.first().copied().unwrap_or(0));
        for q in QS {
            let want = exact(&sorted, q);
            let got = h.quantile(q);
            let err = got.abs_diff(want) as f64;
            assert!(
                err <= want as f64 * RELATIVE_ERROR,
                "q {q}: histogram {got}, exact {want} ({} values, error {:.4}%)",
                values.len(),
                100.0 * err / want as f64
            );
            if want < 2 * SUB_BUCKETS {
                assert_eq!(got, want, "q {q}: small values are exact");
            }
        }
        // The log2 view adds up and keeps every value in its bin.
        let bins = h.log2_bins();
        assert_eq!(bins.iter().map(|b| b.count).sum::<u64>(), h.count());
        for &v in values {
            let b = bins.iter().find(|b| b.low <= v && v < b.high.max(1));
            let b = b.or_else(|| bins.last().filter(|b| b.high == u64::MAX));
            assert!(b.is_some_and(|b| b.count > 0), "{v} has no bin in {bins:?}");
        }
    }

    /// A small deterministic generator (xorshift64*), so failures reproduce.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
    }

    #[test]
    fn bucket_bounds_hold_their_values() {
        for v in (0..5000u64).chain([u64::MAX, u64::MAX - 1, 1 << 63, (1 << 63) - 1]) {
            let (lo, w) = bucket(index(v));
            assert!(lo <= v && v - lo < w, "{v} in [{lo}, {lo}+{w})");
            assert!(w == 1 || w as f64 <= lo as f64 / SUB_BUCKETS as f64);
        }
        assert_eq!(index(u64::MAX), MAX_BUCKETS - 1);
        // Indices are contiguous: each bucket starts where the previous one ended.
        for i in 1..MAX_BUCKETS {
            let (lo, _) = bucket(i);
            let (plo, pw) = bucket(i - 1);
            assert_eq!(lo, plo + pw, "bucket {i}");
        }
    }

    #[test]
    fn quantiles_of_random_data_are_within_the_bound() {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        for round in 0..40 {
            let n = [1, 2, 3, 10, 99, 100, 101, 1000, 10_000, 100_000][round % 10];
            let values: Vec<u64> = (0..n)
                .map(|_| match round % 4 {
                    // Uniform over a range, log-uniform over many decades, and both.
                    0 => 1000 + rng.next() % 9000,
                    1 => rng.next() >> (rng.next() % 64),
                    2 => (rng.next() % 1_000_000_000) >> (rng.next() % 20),
                    _ => rng.next() % 200,
                })
                .collect();
            check(&values);
        }
    }

    /// Data made to hurt: values at the edges of buckets, a huge outlier, two far clusters,
    /// all equal, the u64 extremes, and ranks that fall exactly between two buckets.
    #[test]
    fn quantiles_of_adversarial_data_are_within_the_bound() {
        let mut edges = Vec::new();
        for e in 5..63 {
            for s in 0..SUB_BUCKETS {
                let lo = (SUB_BUCKETS + s) << (e - 5);
                edges.push(lo);
                edges.push(lo + (1 << (e - 5)) - 1);
            }
        }
        check(&edges);
        let lows: Vec<u64> = edges.iter().map(|&v| v & !((1 << 20) - 1)).collect();
        check(&lows);
        let mut outlier = vec![1000u64; 999];
        outlier.push(u64::MAX);
        check(&outlier);
        let mut clusters = vec![100u64; 500];
        clusters.extend(std::iter::repeat_n(1 << 40, 500));
        check(&clusters);
        check(&vec![123_456_789u64; 1000]);
        check(&[0, u64::MAX]);
        check(&[0; 17]);
        check(&[u64::MAX; 5]);
        check(&[]);
        // Descending input makes the bucket range grow at the front.
        let desc: Vec<u64> = (0..5000u64).rev().map(|i| i * i * 37).collect();
        check(&desc);
        // 64 ascending values just above a power of two: p50 lands on a bucket edge.
        let tight: Vec<u64> = (0..64).map(|i| (1 << 30) + i * (1 << 25) - 1).collect();
        check(&tight);
    }

    #[test]
    fn merged_histograms_equal_one_of_all_the_values() {
        let mut rng = Rng(99);
        let values: Vec<u64> = (0..10_000)
            .map(|_| rng.next() >> (rng.next() % 50))
            .collect();
        let mut all = Histogram::default();
        let mut parts = [
            Histogram::default(),
            Histogram::default(),
            Histogram::default(),
        ];
        for (i, &v) in values.iter().enumerate() {
            all.record(v);
            parts[i * 7 % 3].record(v);
        }
        let mut merged = Histogram::default();
        for p in &parts {
            merged.merge(p);
        }
        merged.merge(&Histogram::default());
        // The same counts (the bucket range may differ in its empty ends).
        for q in QS {
            assert_eq!(merged.quantile(q), all.quantile(q));
        }
        assert_eq!(merged.log2_bins(), all.log2_bins());
        assert_eq!(
            (merged.count(), merged.total(), merged.min(), merged.max()),
            (all.count(), all.total(), all.min(), all.max())
        );
    }

    #[test]
    fn log2_bins_are_exact_and_contiguous() {
        let mut h = Histogram::default();
        for v in [0, 1, 3, 3, 1000, 1023, 1024, 1 << 20] {
            h.record(v);
        }
        let bins = h.log2_bins();
        let first: Vec<(u64, u64, u64)> = bins.iter().map(|b| (b.low, b.high, b.count)).collect();
        assert_eq!(first[..4], [(0, 1, 1), (1, 2, 1), (2, 4, 2), (4, 8, 0)]);
        assert_eq!(bins.iter().find(|b| b.low == 512).map(|b| b.count), Some(2));
        assert_eq!(bins.last().map(|b| (b.low, b.count)), Some((1 << 20, 1)));
        for w in bins.windows(2) {
            assert_eq!(w[0].high, w[1].low);
        }
    }

    /// Memory is bounded by the value range, not the number of values.
    #[test]
    fn memory_does_not_grow_with_values() {
        let mut h = Histogram::default();
        let mut rng = Rng(7);
        for _ in 0..1_000_000 {
            h.record(1000 + rng.next() % 1_000_000);
        }
        assert!(
            h.counts.len() <= 11 * SUB_BUCKETS as usize,
            "{}",
            h.counts.len()
        );
        let mut h = Histogram::default();
        for v in [0, u64::MAX] {
            h.record(v);
        }
        assert_eq!(h.counts.len(), MAX_BUCKETS);
    }
}
