//! Putting a heap trace's allocations, frees and generation ends back in time order
//! (the module docs of [`super`] say why and how): the queues of events waiting, sorted by
//! (time, arrival number), and the bounds on how long they wait.
use ebtrace_format::events::{AllocEvent, FreeEvent};
use std::collections::VecDeque;

/// How far out of time order events of one kind may come and still be put back in order:
/// the recorder's ring buffer takes the time before it reserves, so events of two CPUs can
/// swap by a few microseconds.
pub const SLACK_NS: u64 = 10_000_000;

/// The most events waiting to be ordered; past it the oldest are taken without waiting (a
/// trace whose frees stopped coming: every allocation would wait for the watermark). The
/// writer flushes at most 8192 events of a family at once, so in-order traces never need
/// this many.
pub const MAX_PENDING: usize = 1 << 17;

pub(super) const ALLOC: u8 = 0;
pub(super) const FREE: u8 = 1;
pub(super) const END: u8 = 2;

/// An allocation, a free or the end of a generation, waiting to be taken in time order.
#[derive(Debug, Clone, Copy)]
pub(super) struct Op {
    pub(super) time: u64,
    pub(super) seq: u64,
    pub(super) generation: u32,
    pub(super) what: u8,
    pub(super) address: u64,
    pub(super) stack: u64,
    pub(super) size: u64,
    pub(super) period: u64,
    pub(super) tid: u32,
}

impl Op {
    pub(super) fn key(&self) -> (u64, u64) {
        (self.time, self.seq)
    }
}

/// An event that waits in a [`Runs`] queue.
pub(super) trait Queued: Copy {
    fn time(&self) -> u64;
    /// The event as `HeapSink::take` takes it, with its arrival number.
    fn op(&self, seq: u64) -> Op;
}

impl Queued for AllocEvent {
    #[inline]
    fn time(&self) -> u64 {
        self.time_ns
    }
    #[inline]
    fn op(&self, seq: u64) -> Op {
        Op {
            time: self.time_ns,
            seq,
            generation: self.generation,
            what: ALLOC,
            address: self.block(),
            stack: self.stack,
            size: self.size,
            period: self.sample_period,
            tid: self.tid,
        }
    }
}

impl Queued for FreeEvent {
    #[inline]
    fn time(&self) -> u64 {
        self.time_ns
    }
    #[inline]
    fn op(&self, seq: u64) -> Op {
        Op {
            time: self.time_ns,
            seq,
            generation: self.generation,
            what: FREE,
            address: self.block(),
            stack: 0,
            size: 0,
            period: 0,
            tid: 0,
        }
    }
}

/// Events sorted by (time, arrival number), each arrival number once: the next to take
/// at `pos`.
#[derive(Debug)]
struct Run<T> {
    events: Vec<T>,
    /// Each event's arrival number, or empty when they are `seq0`, `seq0 + 1`, …
    seqs: Vec<u64>,
    seq0: u64,
    pos: usize,
}

impl<T: Queued> Run<T> {
    #[inline]
    fn seq(&self, i: usize) -> u64 {
        if self.seqs.is_empty() {
            self.seq0 + i as u64
        } else {
            self.seqs[i]
        }
    }

    #[inline]
    fn key(&self, i: usize) -> (u64, u64) {
        (self.events[i].time(), self.seq(i))
    }

    fn last_key(&self) -> (u64, u64) {
        self.key(self.events.len() - 1)
    }
}

/// A queue of events kept sorted by (time, arrival number), as runs: a batch read in time
/// order (what the recorder writes) waits as it was decoded, not copied event by event
/// (the copies, megabytes out of the cache for 10 ms of events, were a tenth of `ebsym
/// heap`'s time). An event older than the newest waiting is merged in.
#[derive(Debug)]
pub(super) struct Runs<T> {
    runs: VecDeque<Run<T>>,
    len: usize,
}

impl<T> Default for Runs<T> {
    fn default() -> Self {
        Runs {
            runs: VecDeque::new(),
            len: 0,
        }
    }
}

impl<T: Queued> Runs<T> {
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The key of the oldest event waiting.
    #[inline]
    pub(super) fn front_key(&self) -> Option<(u64, u64)> {
        self.runs.front().map(|r| r.key(r.pos))
    }

    /// Takes the oldest event waiting.
    #[inline]
    pub(super) fn pop_front(&mut self) -> Option<Op> {
        let r = self.runs.front_mut()?;
        let op = r.events[r.pos].op(r.seq(r.pos));
        r.pos += 1;
        if r.pos == r.events.len() {
            self.runs.pop_front();
        }
        self.len -= 1;
        Some(op)
    }

    /// Adds one event, numbered `seq` (larger than any before).
    #[inline]
    pub(super) fn push_one(&mut self, e: T, seq: u64) {
        if let Some(r) = self.runs.back_mut() {
            if r.events[r.events.len() - 1].time() <= e.time() {
                if r.seqs.is_empty() && r.seq0 + r.events.len() as u64 == seq {
                    r.events.push(e);
                    self.len += 1;
                    return;
                }
                if !r.seqs.is_empty() {
                    r.events.push(e);
                    r.seqs.push(seq);
                    self.len += 1;
                    return;
                }
            }
        }
        self.push(vec![e], seq);
    }

    /// Adds `events`, numbered `seq0`, `seq0 + 1`, … in their order (larger than any
    /// before), sorted by time or not.
    pub(super) fn push(&mut self, events: Vec<T>, seq0: u64) {
        if events.is_empty() {
            return;
        }
        self.len += events.len();
        let mut run = Run {
            events,
            seqs: Vec::new(),
            seq0,
            pos: 0,
        };
        if !run.events.windows(2).all(|w| w[0].time() <= w[1].time()) {
            // A stable sort by time: equal times stay in arrival order.
            let mut v: Vec<(T, u64)> = run.events.iter().copied().zip(seq0..).collect();
            v.sort_by_key(|&(e, _)| e.time());
            (run.events, run.seqs) = v.into_iter().unzip();
        }
        self.insert(run);
    }

    /// Puts a sorted run in its place among the waiting events.
    fn insert(&mut self, run: Run<T>) {
        let first = run.key(0);
        if self.runs.back().is_none_or(|b| b.last_key() <= first) {
            self.runs.push_back(run);
            return;
        }
        // The first waiting event after `first`: in run `j`, at `p`.
        let mut j = self.runs.len() - 1;
        while j > 0 && self.runs[j - 1].last_key() > first {
            j -= 1;
        }
        let r = &self.runs[j];
        let (mut p, mut hi) = (r.pos, r.events.len());
        while p < hi {
            let mid = p + (hi - p) / 2;
            if r.key(mid) <= first {
                p = mid + 1;
            } else {
                hi = mid;
            }
        }
        if run.last_key() < r.key(p) {
            // Between two waiting events (one event always is): run `j` split there.
            if p > r.pos {
                let tail = self.split(j, p);
                self.runs.insert(j + 1, tail);
                j += 1;
            }
            self.runs.insert(j, run);
            return;
        }
        // Among waiting events: merged with every one from there on.
        let later: Vec<Run<T>> = self.runs.drain(j + 1..).collect();
        let r = self.runs.pop_back().expect("run j");
        let mut rest: Vec<(T, u64)> = (p..r.events.len())
            .map(|i| (r.events[i], r.seq(i)))
            .collect();
        for b in &later {
            rest.extend((b.pos..b.events.len()).map(|i| (b.events[i], b.seq(i))));
        }
        if p > r.pos {
            let mut r = r;
            r.events.truncate(p);
            r.seqs.truncate(p);
            self.runs.push_back(r);
        }
        let mut events = Vec::with_capacity(rest.len() + run.events.len());
        let mut seqs = Vec::with_capacity(rest.len() + run.events.len());
        let (mut a, mut b) = (0, 0);
        while a < rest.len() || b < run.events.len() {
            let take_rest = b == run.events.len()
                || (a < rest.len() && (rest[a].0.time(), rest[a].1) < run.key(b));
            if take_rest {
                events.push(rest[a].0);
                seqs.push(rest[a].1);
                a += 1;
            } else {
                events.push(run.events[b]);
                seqs.push(run.seq(b));
                b += 1;
            }
        }
        self.runs.push_back(Run {
            events,
            seqs,
            seq0: 0,
            pos: 0,
        });
    }

    /// Splits run `j` before its event `p` (after its next to take): it keeps the events
    /// before, the run returned has those from `p` on. The shorter part is copied.
    fn split(&mut self, j: usize, p: usize) -> Run<T> {
        let r = &mut self.runs[j];
        if p - r.pos <= r.events.len() - p {
            // The head copied into a run of its own, which takes run j's place.
            let head = Run {
                events: r.events[r.pos..p].to_vec(),
                seqs: if r.seqs.is_empty() {
                    Vec::new()
                } else {
                    r.seqs[r.pos..p].to_vec()
                },
                seq0: r.seq0 + r.pos as u64,
                pos: 0,
            };
            r.pos = p;
            std::mem::replace(r, head)
        } else {
            let events = r.events.split_off(p);
            let seqs = if r.seqs.is_empty() {
                Vec::new()
            } else {
                r.seqs.split_off(p)
            };
            Run {
                events,
                seqs,
                seq0: r.seq0 + p as u64,
                pos: 0,
            }
        }
    }
}

/// Pushes `op` into `q`, keeping it sorted by (time, seq) (usually at the back).
pub(super) fn push_sorted(q: &mut VecDeque<Op>, op: Op) {
    if q.back().is_none_or(|b| b.key() <= op.key()) {
        q.push_back(op);
    } else {
        let i = q.partition_point(|x| x.key() <= op.key());
        q.insert(i, op);
    }
}
