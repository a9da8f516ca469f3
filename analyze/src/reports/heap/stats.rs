//! What each stack and each process generation has had: calls, bytes, temporary
//! allocations, lifetimes, live bytes and their bytes at the peak (each brought up to date
//! by epoch, so that the peak's holders cost O(1) per event); and the weight a block has
//! in the live sums.
use crate::hash::IdMap;

/// What one stack id has had.
#[derive(Debug, Clone, Default)]
pub(super) struct StackStat {
    pub(super) allocations: u64,
    pub(super) bytes: u64,
    pub(super) temporary: u64,
    /// Weighted bytes live now ([`weight`]).
    pub(super) live: u64,
    /// Live bytes at the peak `epoch`.
    pub(super) at_peak: u64,
    pub(super) epoch: u64,
    /// Blocks freed, by log2 of their lifetime in ns (bucket i: [2^(i-1), 2^i), 0: 0 ns).
    pub(super) lifetimes: Vec<u64>,
    /// Its live bytes changed in the heap timeline's current bucket.
    pub(super) dirty: bool,
}

/// What one process generation has had.
#[derive(Debug, Clone, Default)]
pub(super) struct Gen {
    pub(super) live: u64,
    pub(super) peak: u64,
    pub(super) peak_time: u64,
    pub(super) at_trace_peak: u64,
    /// The address of its last event if that was an allocation.
    pub(super) last_alloc: Option<u64>,
    pub(super) ended: bool,
    pub(super) any: bool,
    /// The trace's peak `at_trace_peak` was taken at (as [`StackStat::epoch`]).
    pub(super) epoch: u64,
}

impl Gen {
    /// Brings its bytes at the trace's latest peak up to date before they change.
    #[inline]
    pub(super) fn touch(&mut self, epoch: u64) {
        if self.epoch < epoch {
            self.at_trace_peak = self.live;
            self.epoch = epoch;
        }
    }
}

/// The bytes a block stands for in the live sums: its size, or when sampled by bytes its
/// size over its probability of being kept (no carried fractions, so that its free takes off
/// exactly what its allocation added).
pub(super) fn weight(size: u64, period: u64) -> u64 {
    if period == 0 || size == 0 {
        return size;
    }
    let p = -(-(size as f64) / period as f64).exp_m1();
    if p.is_nan() || p <= 0.0 {
        return size;
    }
    (size as f64 / p).round() as u64
}

/// The log2 bucket of a lifetime in ns.
pub(super) fn bucket(ns: u64) -> usize {
    (u64::BITS - ns.leading_zeros()) as usize
}

/// The stack `id`'s stats, with its live bytes at the latest peak brought up to date
/// before they change.
#[inline]
pub(super) fn stack(stacks: &mut IdMap<StackStat>, id: u64, epoch: u64) -> &mut StackStat {
    let s = stacks.get_or_insert_with(id, || StackStat {
        epoch,
        ..Default::default()
    });
    if s.epoch < epoch {
        s.at_peak = s.live;
        s.epoch = epoch;
    }
    s
}
