//! The heap over time, for `ebsym report`'s chart: per time bucket the live bytes and the
//! stacks whose live bytes changed.
use super::stats::StackStat;
use crate::hash::IdMap;

/// The heap over time (`ebsym report`'s chart): per time bucket, the bytes live at its end
/// and the most live at once in it, and the stacks whose live bytes changed in it with their
/// live bytes at its end (so a stack's bytes at any bucket are its last change's).
#[derive(Debug, Default, Clone)]
pub(crate) struct HeapTimeline {
    pub(crate) t0: u64,
    pub(crate) bucket_ns: u64,
    /// (bucket, live bytes at its end, most live bytes in it), buckets increasing.
    pub(crate) totals: Vec<(u32, u64, u64)>,
    /// (bucket, stack id, its live bytes at the bucket's end), buckets increasing.
    pub(crate) changes: Vec<(u32, u64, u64)>,
    cur: u32,
    pub(super) max_in: u64,
    any: bool,
    dirty: Vec<u64>,
}

impl HeapTimeline {
    /// An empty timeline of buckets of `bucket_ns` from `t0`.
    pub(super) fn new(t0: u64, bucket_ns: u64) -> Self {
        HeapTimeline {
            t0,
            bucket_ns,
            ..Default::default()
        }
    }

    fn bucket(&self, t: u64) -> u32 {
        u32::try_from(t.saturating_sub(self.t0) / self.bucket_ns.max(1)).unwrap_or(u32::MAX)
    }

    /// An event at `t` comes: the bucket it falls in is the current one (the one before
    /// closed first).
    #[inline]
    pub(super) fn enter(&mut self, t: u64, stacks: &mut IdMap<StackStat>, live_total: u64) {
        let b = self.bucket(t);
        if b > self.cur || !self.any {
            if b > self.cur {
                self.flush(stacks, live_total);
                self.cur = b;
            }
            self.any = true;
        }
    }

    /// Closes the current bucket: its totals and its changed stacks.
    pub(super) fn flush(&mut self, stacks: &mut IdMap<StackStat>, live_total: u64) {
        if !self.any {
            return;
        }
        self.totals
            .push((self.cur, live_total, self.max_in.max(live_total)));
        for id in self.dirty.drain(..) {
            if let Some(s) = stacks.get_mut(id) {
                s.dirty = false;
                self.changes.push((self.cur, id, s.live));
            }
        }
        self.any = false;
        self.max_in = live_total;
    }
}

/// Marks stack `id` changed in the timeline's current bucket.
#[inline]
pub(super) fn touched(timeline: &mut Option<HeapTimeline>, s: &mut StackStat, id: u64) {
    if let Some(tl) = timeline {
        if !s.dirty {
            s.dirty = true;
            tl.dirty.push(id);
        }
    }
}
