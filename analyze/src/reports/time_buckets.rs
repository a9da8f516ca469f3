//! Time buckets that widen as a trace is read, for the page's sums over time (`ebsym
//! report`'s flame graphs by time range, CPU density, heap chart): the width is a power of
//! two ns, doubled whenever an event would fall past the last bucket, so a sink needs no
//! span before the first event (the page used to read the whole trace once for its span
//! first) and ends with the narrowest such width that holds every event it saw.
//!
//! At a doubling, the sink merges its buckets two by two (bucket `b` becomes `b >> k`
//! after `k` doublings): a bucket of the final width is exactly the sum of the narrower
//! ones it covers, so the sums are those the final width would have given from the start.

/// Buckets of `1 << shift` ns from `t0`, at most `max` of them (`max` at least 2).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TimeBuckets {
    pub(crate) t0: u64,
    shift: u32,
    max: u64,
}

impl TimeBuckets {
    /// Buckets from `t0`, of 1 ns until an event needs them wider.
    pub(crate) fn new(t0: u64, max: u64) -> Self {
        TimeBuckets {
            t0,
            shift: 0,
            max: max.max(2),
        }
    }

    /// The width.
    pub(crate) fn ns(&self) -> u64 {
        1 << self.shift
    }

    /// The bucket of time `t` (a time before `t0` is in the first), and how many times the
    /// width doubled to hold it: the caller's buckets `b` are `b >> doublings` now.
    #[inline]
    pub(crate) fn place(&mut self, t: u64) -> (u32, u32) {
        let d = t.saturating_sub(self.t0);
        let mut k = 0;
        while (d >> self.shift) >= self.max {
            self.shift += 1;
            k += 1;
        }
        ((d >> self.shift) as u32, k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Widened as the events come, the buckets are those of the final width from the start.
    #[test]
    fn widened_buckets_are_the_final_widths() {
        let times: Vec<u64> = (0..5000u64)
            .map(|i| 1_000 + i * i * 37 % 9_000_000)
            .collect();
        let mut b = TimeBuckets::new(1_000, 500);
        let mut got: Vec<u32> = Vec::new();
        for &t in &times {
            let (x, k) = b.place(t);
            for g in &mut got {
                *g >>= k;
            }
            got.push(x);
        }
        let w = b.ns();
        assert!(w.is_power_of_two());
        let last = times.iter().max().unwrap() - 1_000;
        assert!(last / w < 500, "every event in 500 buckets");
        assert!(last / (w / 2) >= 500, "the narrowest such width");
        let want: Vec<u32> = times.iter().map(|t| ((t - 1_000) / w) as u32).collect();
        assert_eq!(got, want);
        // Before the start: the first bucket.
        assert_eq!(b.place(10), (0, 0));
    }
}
