//! The heap over time, for `ebsym report`'s chart: per time bucket the live bytes and the
//! stacks whose live bytes changed.
use super::stats::StackStat;
use crate::hash::{FastSet, IdMap};
use crate::reports::time_buckets::TimeBuckets;

/// The heap over time (`ebsym report`'s chart): per time bucket, the bytes live at its end
/// and the most live at once in it, and the stacks whose live bytes changed in it with their
/// live bytes at its end (so a stack's bytes at any bucket are its last change's). The
/// buckets widen as the events come ([`TimeBuckets`]).
#[derive(Debug, Clone)]
pub(crate) struct HeapTimeline {
    pub(crate) buckets: TimeBuckets,
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
    /// An empty timeline of at most `max` buckets from `t0`.
    pub(super) fn new(t0: u64, max: u64) -> Self {
        HeapTimeline {
            buckets: TimeBuckets::new(t0, max),
            totals: Vec::new(),
            changes: Vec::new(),
            cur: 0,
            max_in: 0,
            any: false,
            dirty: Vec::new(),
        }
    }

    /// The buckets' width.
    pub(crate) fn bucket_ns(&self) -> u64 {
        self.buckets.ns()
    }

    /// An event at `t` comes: the bucket it falls in is the current one (the one before
    /// closed first).
    #[inline]
    pub(super) fn enter(&mut self, t: u64, stacks: &mut IdMap<StackStat>, live_total: u64) {
        let (b, doublings) = self.buckets.place(t);
        if doublings > 0 {
            self.widen(doublings);
        }
        if b > self.cur || !self.any {
            if b > self.cur {
                self.flush(stacks, live_total);
                self.cur = b;
            }
            self.any = true;
        }
    }

    /// The buckets merged two by two, `doublings` times: a bucket's live bytes at its end
    /// are its last part's, its most the most of its parts; a stack's bytes at its end its
    /// last change's (the earlier changes in it dropped).
    fn widen(&mut self, doublings: u32) {
        self.cur >>= doublings;
        let mut totals: Vec<(u32, u64, u64)> = Vec::with_capacity(self.totals.len());
        for (b, end, most) in self.totals.drain(..) {
            let b = b >> doublings;
            match totals.last_mut() {
                Some(t) if t.0 == b => *t = (b, end, t.2.max(most)),
                _ => totals.push((b, end, most)),
            }
        }
        self.totals = totals;
        for c in &mut self.changes {
            c.0 >>= doublings;
        }
        self.last_changes_from(0);
    }

    /// Of the changes from index `start` on, the last of each (bucket, stack) only, in
    /// their order.
    fn last_changes_from(&mut self, start: usize) {
        let mut seen: FastSet<(u32, u64)> = FastSet::default();
        let mut kept: Vec<(u32, u64, u64)> = Vec::with_capacity(self.changes.len() - start);
        for &c in self.changes[start..].iter().rev() {
            if seen.insert((c.0, c.1)) {
                kept.push(c);
            }
        }
        kept.reverse();
        self.changes.truncate(start);
        self.changes.extend(kept);
    }

    /// Closes the current bucket: its totals and its changed stacks.
    pub(super) fn flush(&mut self, stacks: &mut IdMap<StackStat>, live_total: u64) {
        if !self.any {
            return;
        }
        let most = self.max_in.max(live_total);
        // After a widening, the current bucket may be the last one closed, merged: its
        // changes are then the last of each stack.
        let merged = match self.totals.last_mut() {
            Some(t) if t.0 == self.cur => {
                *t = (self.cur, live_total, t.2.max(most));
                true
            }
            _ => {
                self.totals.push((self.cur, live_total, most));
                false
            }
        };
        let start = self.changes.len();
        for id in self.dirty.drain(..) {
            if let Some(s) = stacks.get_mut(id) {
                s.dirty = false;
                self.changes.push((self.cur, id, s.live));
            }
        }
        if merged && self.changes.len() > start {
            let cur = self.cur;
            self.last_changes_from(self.changes.partition_point(|c| c.0 < cur));
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Widened as the events come, the timeline is the one its final width gives: each
    /// bucket's live bytes at its end and most in it, each changed stack's bytes at its end.
    #[test]
    fn a_widened_timeline_is_the_final_widths() {
        // (time, stack, bytes allocated (+) or freed (-)), in time order.
        let mut events = Vec::new();
        let mut live = [0i64; 5];
        for i in 0..4000u64 {
            let stack = (i * 7 % 5) as usize;
            let d: i64 = if live[stack] > 300 && i % 3 == 0 {
                -(live[stack] / 2)
            } else {
                (i % 97 + 1) as i64
            };
            live[stack] += d;
            events.push((1_000 + i * i * 13 % 4_000_000 + i * 1000, stack as u64, d));
        }
        events.sort_by_key(|e| e.0);
        let mut timeline = Some(HeapTimeline::new(1_000, 500));
        let mut stacks: IdMap<StackStat> = IdMap::default();
        let mut total = 0u64;
        for &(t, id, d) in &events {
            let tl = timeline.as_mut().unwrap();
            tl.enter(t, &mut stacks, total);
            let s = stacks.entry_or_default(id);
            s.live = (s.live as i64 + d) as u64;
            total = (total as i64 + d) as u64;
            tl.max_in = tl.max_in.max(total);
            touched(&mut timeline, s, id);
        }
        let mut tl = timeline.unwrap();
        tl.flush(&mut stacks, total);
        // The same at the final width, from the start.
        let w = tl.bucket_ns();
        let mut want_totals: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        let mut want_changes: BTreeMap<(u32, u64), u64> = BTreeMap::new();
        let (mut total, mut live) = (0u64, [0u64; 5]);
        for &(t, id, d) in &events {
            let b = ((t - 1_000) / w) as u32;
            let before = total;
            total = (total as i64 + d) as u64;
            live[id as usize] = (live[id as usize] as i64 + d) as u64;
            let e = want_totals.entry(b).or_insert((0, before));
            *e = (total, e.1.max(total));
            want_changes.insert((b, id), live[id as usize]);
        }
        let got_totals: BTreeMap<u32, (u64, u64)> = tl
            .totals
            .iter()
            .map(|&(b, end, most)| (b, (end, most)))
            .collect();
        assert_eq!(got_totals.len(), tl.totals.len(), "one entry a bucket");
        assert_eq!(got_totals, want_totals);
        let got_changes: BTreeMap<(u32, u64), u64> =
            tl.changes.iter().map(|&(b, id, l)| ((b, id), l)).collect();
        assert_eq!(
            got_changes.len(),
            tl.changes.len(),
            "one change a stack a bucket"
        );
        assert_eq!(got_changes, want_changes);
        assert!(tl.totals.len() > 250, "{} buckets", tl.totals.len());
    }
}
