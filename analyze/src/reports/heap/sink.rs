//! The sink of `ebsym heap`: what it keeps, the events it reads, and the queues that give
//! them back in time order to `HeapSink::take`.
use super::order::{push_sorted, Op, Queued, Runs, END, MAX_PENDING, SLACK_NS};
use super::stats::{Gen, StackStat};
use super::timeline::HeapTimeline;
use crate::hash::{FastMap, IdMap};
use crate::model::{Estimator, Event, Sink};
use crate::reports::live::Outstanding;
use ebtrace_format::events::{AllocEvent, FreeEvent};
use ebtrace_format::proto::EventFamily;
use std::collections::VecDeque;

/// The sink of `ebsym heap`.
#[derive(Default)]
pub(crate) struct HeapSink {
    pub(super) live: Outstanding,
    pub(super) allocs: Runs<AllocEvent>,
    pub(super) frees: Runs<FreeEvent>,
    pub(super) ends: VecDeque<Op>,
    pub(super) seq: u64,
    pub(super) max_alloc: u64,
    pub(super) max_free: u64,
    /// The watermark of the last drain: until it moves, nothing new is in order (unless
    /// too many wait, or a generation's end came).
    pub(super) drained_to: u64,
    /// Time of the last event taken, and events taken after a later one.
    pub(super) taken_ns: u64,
    pub(super) late: u64,
    pub(super) est: Estimator,
    pub(super) stacks: IdMap<StackStat>,
    pub(super) gens: IdMap<Gen>,
    pub(super) live_total: u64,
    pub(super) peak: u64,
    pub(super) peak_time: u64,
    pub(super) epoch: u64,
    pub(super) calls: u64,
    pub(super) bytes: u64,
    pub(super) frees_seen: u64,
    pub(super) temporary: u64,
    pub(super) unmatched_frees: u64,
    /// Allocation events and the last event time (for the leak report).
    pub(super) alloc_events: u64,
    pub(super) last_ns: u64,
    /// Sampling: the largest period, and allocations kept with a probability below
    /// 1 - 1e-6 (smaller than 14 periods).
    pub(super) max_period: u64,
    pub(super) sampled_small: u64,
    /// --aggregate rows of allocations.
    pub(super) aggregated: u64,
    /// The custom allocator of each stack id that had one (`--alloc-fn`).
    pub(super) allocators: FastMap<u64, u32>,
    /// The heap over time, when asked for ([`HeapSink::with_timeline`]).
    pub(super) timeline: Option<HeapTimeline>,
    /// Every event taken, (time, seq, what), in order: what the tests compare.
    #[cfg(test)]
    pub(super) taken: Vec<(u64, u64, u8)>,
}

impl Sink for HeapSink {
    #[inline]
    fn event(&mut self, ev: &Event<'_>) {
        match ev {
            Event::Alloc(e) => {
                self.note_alloc(e);
                self.allocs.push_one(**e, self.seq);
            }
            Event::Free(e) => {
                self.note_free(e);
                self.frees.push_one(**e, self.seq);
            }
            Event::Aggregated(EventFamily::Alloc, r) => {
                self.alloc_events += r.count;
                self.last_ns = self.last_ns.max(r.time_ns);
                self.aggregated += 1;
                self.calls += r.count;
                self.bytes += r.sum;
                let s = self.stacks.entry_or_default(r.stack);
                s.allocations += r.count;
                s.bytes += r.sum;
                self.live.event(ev);
                return;
            }
            _ => return,
        }
        self.maybe_drain();
    }

    /// The batch waits as it is, up to its first event that one by one would have been
    /// taken differently: one older than the watermark when it came (late: taken before
    /// events already waiting), or one past [`MAX_PENDING`]. Until then each event only
    /// joins the queue and moves the watermark, and the events taken after the batch are,
    /// in the same order, those taken after each of its events one by one: every event
    /// taken in an earlier drain is older than any event that came after it. The rest of
    /// the batch goes one by one.
    fn allocs(&mut self, batch: Vec<AllocEvent>) {
        self.batch(
            batch,
            Self::note_alloc,
            |s| &mut s.allocs,
            |s, e| s.event(&Event::Alloc(e)),
        );
    }

    /// As [`HeapSink::allocs`].
    fn frees(&mut self, batch: Vec<FreeEvent>) {
        self.batch(
            batch,
            Self::note_free,
            |s| &mut s.frees,
            |s, e| s.event(&Event::Free(e)),
        );
    }

    fn generation_end(&mut self, generation: u32, time_ns: u64) {
        self.seq += 1;
        push_sorted(
            &mut self.ends,
            Op {
                time: time_ns,
                seq: self.seq,
                generation,
                what: END,
                address: 0,
                stack: 0,
                size: 0,
                period: 0,
                tid: 0,
            },
        );
    }
}

impl HeapSink {
    /// [`HeapSink::allocs`] and [`HeapSink::frees`]: `note` counts an event in, `runs` is
    /// its queue, `one` takes an event one by one.
    fn batch<T: Queued>(
        &mut self,
        mut batch: Vec<T>,
        note: fn(&mut Self, &T),
        runs: fn(&mut Self) -> &mut Runs<T>,
        one: fn(&mut Self, &T),
    ) {
        let seq0 = self.seq + 1;
        let room = MAX_PENDING.saturating_sub(self.pending());
        let mut n = 0;
        for e in &batch {
            if n == room || e.time() <= self.watermark() {
                break;
            }
            note(self, e);
            n += 1;
        }
        let rest = if n < batch.len() {
            batch.split_off(n)
        } else {
            Vec::new()
        };
        runs(self).push(batch, seq0);
        self.maybe_drain();
        for e in &rest {
            one(self, e);
        }
    }

    /// Events waiting to be taken.
    #[inline]
    fn pending(&self) -> usize {
        self.allocs.len() + self.frees.len() + self.ends.len()
    }

    /// The time up to which events are in order: the older of the latest allocation and
    /// the latest free read, less [`SLACK_NS`].
    #[inline]
    fn watermark(&self) -> u64 {
        self.max_alloc.min(self.max_free).saturating_sub(SLACK_NS)
    }

    /// An allocation comes (numbered `self.seq`).
    #[inline]
    fn note_alloc(&mut self, e: &AllocEvent) {
        if e.allocator != 0 {
            self.allocators.insert(e.stack, e.allocator);
            self.live.note_allocator(e.stack, e.allocator);
        }
        self.alloc_events += 1;
        self.last_ns = self.last_ns.max(e.time_ns);
        self.max_alloc = self.max_alloc.max(e.time_ns);
        self.seq += 1;
    }

    /// A free comes (numbered `self.seq`).
    #[inline]
    fn note_free(&mut self, e: &FreeEvent) {
        self.last_ns = self.last_ns.max(e.time_ns);
        self.max_free = self.max_free.max(e.time_ns);
        self.seq += 1;
    }

    /// Takes what is in order after an event came, if anything can be.
    #[inline]
    fn maybe_drain(&mut self) {
        let watermark = self.watermark();
        if watermark > self.drained_to
            || !self.ends.is_empty()
            || self.allocs.len() + self.frees.len() > MAX_PENDING
        {
            self.drained_to = watermark;
            self.drain(false);
        }
    }

    /// Takes the events that are in order: up to the watermark, or all of them at the end
    /// (`all`), or the oldest while too many wait.
    fn drain(&mut self, all: bool) {
        let watermark = self.max_alloc.min(self.max_free).saturating_sub(SLACK_NS);
        loop {
            // The queue holding the oldest head (generation ends are rare: allocations and
            // frees first, compared directly).
            let (q, time) = match (self.allocs.front_key(), self.frees.front_key()) {
                (Some(a), Some(f)) if a <= f => (0, a.0),
                (_, Some(f)) => (1, f.0),
                (Some(a), None) => (0, a.0),
                (None, None) => (3, u64::MAX),
            };
            let (q, time) = match self.ends.front() {
                Some(e) if q == 3 => (2, e.time),
                Some(e) => {
                    let head = if q == 0 {
                        self.allocs.front_key()
                    } else {
                        self.frees.front_key()
                    };
                    if head.is_some_and(|h| e.key() < h) {
                        (2, e.time)
                    } else {
                        (q, time)
                    }
                }
                None if q == 3 => return,
                None => (q, time),
            };
            if !(all
                || time <= watermark
                || self.allocs.len() + self.frees.len() + self.ends.len() > MAX_PENDING)
            {
                return;
            }
            let op = match q {
                0 => self.allocs.pop_front(),
                1 => self.frees.pop_front(),
                _ => self.ends.pop_front(),
            }
            .expect("the head exists");
            self.take(op);
        }
    }

    /// A sink that also keeps the heap over time in at most `max` buckets from `t0`.
    pub(crate) fn with_timeline(t0: u64, max: u64) -> Self {
        HeapSink {
            timeline: Some(HeapTimeline::new(t0, max)),
            ..Default::default()
        }
    }

    /// The heap over time (empty unless made [`HeapSink::with_timeline`]).
    pub(crate) fn take_timeline(&mut self) -> Option<HeapTimeline> {
        self.timeline.take()
    }

    /// Takes every event still waiting, and brings each stack's and generation's bytes
    /// at the peak up to the last peak.
    pub(crate) fn finish(&mut self) {
        self.drain(true);
        if let Some(tl) = &mut self.timeline {
            tl.flush(&mut self.stacks, self.live_total);
        }
        let epoch = self.epoch;
        for s in self.stacks.values_mut() {
            if s.epoch < epoch {
                s.at_peak = s.live;
                s.epoch = epoch;
            }
        }
        for g in self.gens.values_mut() {
            g.touch(epoch);
        }
    }
}
