//! What a bucket of a kernel latency histogram (`LatencyHistogram`, `--syscalls`, `--bio`,
//! `--runq`) holds: the layouts a record's `sub_buckets` names, for the recorder that
//! writes them (its kernel side, `bpf/system.bpf.c` `hist_bucket`, computes the same
//! [`Layout::LogLinear`] bucket) and every reader.
//!
//! ```
//! use ebtrace_format::latency::Layout;
//! let l = Layout::LogLinear;
//! let b = l.bucket_of(5_060_000); // a 5.06 ms sleep
//! let (lo, hi) = l.range(b);
//! assert!(lo <= 5_060_000 && 5_060_000 < hi && (hi - lo) * 16 <= lo);
//! assert_eq!(Layout::Log2.range(Layout::Log2.bucket_of(5_060_000)), (1 << 22, 1 << 23));
//! ```

/// Buckets of [`Layout::Log2`].
pub const LOG2_BUCKETS: u32 = 40;
/// log2 of [`SUB_BUCKETS`].
pub const SUB_BITS: u32 = 4;
/// Equal buckets per power of two in [`Layout::LogLinear`].
pub const SUB_BUCKETS: u32 = 1 << SUB_BITS;
/// [`Layout::LogLinear`] cuts the powers of two below 2^TOP_LOG2 ns (68.7 s).
pub const TOP_LOG2: u32 = 36;
/// Buckets of [`Layout::LogLinear`]: 16 of single nanoseconds, then 16 per power of two
/// from 2^4 to 2^35 ns.
pub const LOG_LINEAR_BUCKETS: u32 = (TOP_LOG2 - SUB_BITS + 1) << SUB_BITS;

/// The bucket layout of a `LatencyHistogram` record (its `sub_buckets`). Every bucket is
/// `[lo, hi)` ns; the last bucket of a layout is open-ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Layout {
    /// `sub_buckets` 0, the traces written before the log-linear layout: bucket b holds
    /// `[2^b, 2^(b+1))` ns (bucket 0: 0 and 1 ns), [`LOG2_BUCKETS`] of them, the last from
    /// 2^39 ns up.
    #[default]
    Log2,
    /// `sub_buckets` 16: below 16 ns a bucket per nanosecond; above, each power of two
    /// `[2^e, 2^(e+1))` cut into 16 equal buckets (so a bucket is at most 1/16 of its lower
    /// bound wide), [`LOG_LINEAR_BUCKETS`] of them, the last from 31·2^31 ns (66.6 s) up.
    LogLinear,
}

impl Layout {
    /// The layout a record's `sub_buckets` names; `None` for one this reader does not know.
    pub fn from_sub_buckets(sub_buckets: u32) -> Option<Layout> {
        match sub_buckets {
            0 => Some(Layout::Log2),
            SUB_BUCKETS => Some(Layout::LogLinear),
            _ => None,
        }
    }

    /// The record's `sub_buckets` for this layout.
    pub fn sub_buckets(self) -> u32 {
        match self {
            Layout::Log2 => 0,
            Layout::LogLinear => SUB_BUCKETS,
        }
    }

    /// How many buckets there are (bucket numbers are below it).
    pub fn buckets(self) -> u32 {
        match self {
            Layout::Log2 => LOG2_BUCKETS,
            Layout::LogLinear => LOG_LINEAR_BUCKETS,
        }
    }

    /// The bucket of a latency of `ns`.
    pub fn bucket_of(self, ns: u64) -> u32 {
        let b = match self {
            Layout::Log2 => ns.checked_ilog2().unwrap_or(0),
            Layout::LogLinear => {
                if ns < u64::from(SUB_BUCKETS) {
                    ns as u32
                } else {
                    let shift = ns.ilog2() - SUB_BITS;
                    ((shift + 1) << SUB_BITS) + ((ns >> shift) as u32 & (SUB_BUCKETS - 1))
                }
            }
        };
        b.min(self.buckets() - 1)
    }

    /// Bucket `b`'s latencies: `[lo, hi)` ns, `hi` = `u64::MAX` for the open-ended last
    /// bucket (and for any `b` past it).
    pub fn range(self, b: u32) -> (u64, u64) {
        let last = self.buckets() - 1;
        let b = b.min(last);
        let lo = match self {
            Layout::Log2 if b == 0 => 0,
            Layout::Log2 => 1u64 << b,
            Layout::LogLinear if b < SUB_BUCKETS => u64::from(b),
            Layout::LogLinear => {
                let shift = (b >> SUB_BITS) - 1;
                u64::from(SUB_BUCKETS + (b & (SUB_BUCKETS - 1))) << shift
            }
        };
        if b == last {
            return (lo, u64::MAX);
        }
        let hi = match self {
            Layout::Log2 => 2u64 << b,
            Layout::LogLinear if b < SUB_BUCKETS => lo + 1,
            Layout::LogLinear => lo + (1u64 << ((b >> SUB_BITS) - 1)),
        };
        (lo, hi)
    }

    /// The [`Layout::Log2`] bucket that holds bucket `b`: the power of two its values are in
    /// (`[2^k, 2^(k+1))`, 0 for 0 and 1 ns). The last log-linear bucket, open-ended, is in
    /// 35 (and above).
    pub fn log2_bucket(self, b: u32) -> u32 {
        match self {
            Layout::Log2 => b.min(LOG2_BUCKETS - 1),
            Layout::LogLinear => self.range(b).0.checked_ilog2().unwrap_or(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_linear_buckets_round_trip_and_are_narrow() {
        let l = Layout::LogLinear;
        assert_eq!(LOG_LINEAR_BUCKETS, 528);
        // Every bucket's bounds are in it, its successor starts where it ends, and its
        // width is at most 1/16 of its lower bound (one nanosecond below 16).
        let mut next = 0u64;
        for b in 0..LOG_LINEAR_BUCKETS {
            let (lo, hi) = l.range(b);
            assert_eq!(lo, next, "bucket {b}");
            assert_eq!(l.bucket_of(lo), b, "lo of {b}");
            if b + 1 < LOG_LINEAR_BUCKETS {
                assert!(hi > lo);
                assert_eq!(l.bucket_of(hi - 1), b, "hi of {b}");
                assert!(
                    hi - lo == 1 || (hi - lo) * 16 <= lo,
                    "bucket {b}: [{lo}, {hi})"
                );
                assert_eq!(l.log2_bucket(b), (hi - 1).checked_ilog2().unwrap_or(0));
            } else {
                assert_eq!(hi, u64::MAX);
                assert_eq!(lo, 31 << 31);
            }
            next = hi;
        }
        assert_eq!(l.range(527).0, 31 << 31);
        assert_eq!(l.bucket_of(1 << 36), 527);
        assert_eq!(l.bucket_of(u64::MAX), 527);
        assert_eq!(l.range(999), (31 << 31, u64::MAX));
        // Known values: the bucket of 5.06 ms, [4.98 ms, 5.24 ms).
        assert_eq!(l.bucket_of(15), 15);
        assert_eq!(l.bucket_of(16), 16);
        assert_eq!(l.bucket_of(33), 32);
        let b = l.bucket_of(5_060_000);
        assert_eq!(b, (22 - 3) * 16 + 3);
        assert_eq!(l.range(b), (4_980_736, 5_242_880));
        // Every value (a sweep over the range) lies in its bucket.
        let mut v = 0u64;
        while v < 1 << 37 {
            let (lo, hi) = l.range(l.bucket_of(v));
            assert!(lo <= v && v < hi, "{v}: [{lo}, {hi})");
            v = v * 9 / 8 + 1;
        }
    }

    #[test]
    fn log2_buckets_are_the_old_ones() {
        let l = Layout::Log2;
        assert_eq!((l.bucket_of(0), l.bucket_of(1), l.bucket_of(2)), (0, 0, 1));
        assert_eq!(l.bucket_of(5_000_000), 22);
        assert_eq!(l.range(0), (0, 2));
        assert_eq!(l.range(22), (1 << 22, 1 << 23));
        assert_eq!(l.range(39), (1 << 39, u64::MAX));
        assert_eq!(l.bucket_of(1 << 45), 39);
        assert_eq!(l.log2_bucket(22), 22);
        for b in 0..LOG2_BUCKETS {
            assert_eq!(l.bucket_of(l.range(b).0), b);
        }
    }

    #[test]
    fn sub_buckets_name_the_layouts() {
        assert_eq!(Layout::from_sub_buckets(0), Some(Layout::Log2));
        assert_eq!(Layout::from_sub_buckets(16), Some(Layout::LogLinear));
        assert_eq!(Layout::from_sub_buckets(32), None);
        for l in [Layout::Log2, Layout::LogLinear] {
            assert_eq!(Layout::from_sub_buckets(l.sub_buckets()), Some(l));
        }
        assert_eq!(Layout::default(), Layout::Log2);
    }
}
