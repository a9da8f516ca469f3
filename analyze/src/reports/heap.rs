//! `ebsym heap`: heaptrack's numbers from one pass over a trace's allocations and frees:
//! allocator calls, temporary allocations, the peak of live bytes and who held it, leaked
//! bytes (as `leaks` classifies them) and a lifetime histogram per stack.
//!
//! Allocations and frees are in the file batch by batch, each batch's allocations before its
//! frees, so a free can be read after a later allocation. Temporary allocations and the peak
//! depend on the order of events, so the sink puts them back in time order: allocations and
//! frees wait in two queues (each sorted as it is filled; the recorder writes them nearly
//! sorted) and are taken in (time, arrival) order up to a watermark, the older of the latest
//! allocation and the latest free read, less [`SLACK_NS`]; a bounded queue ([`MAX_PENDING`])
//! keeps the memory bounded by the live blocks and a window of events, not by the events.
//!
//! Temporary (heaptrack's `lastAllocationPtr == ptr`): a free is temporary when the event
//! just before it in its process, in time order, is the allocation of the same block: no
//! other allocation or free in between, of any thread.
//!
//! The peak is the most bytes live at once: per process generation, and over the whole
//! trace (the sum of every live generation's bytes; a generation's blocks are gone when it
//! exits or execs). A row's `peak_bytes` is its stack's bytes live at the moment of the
//! trace's peak, kept in O(1) per event: each stack remembers its live bytes at the peak it
//! last saw, and a stack changed after a later peak takes its current bytes first (a stack
//! not changed since the peak held then what it holds now).
use super::leaks::LeakSink;
use super::live::{Block, Outstanding};
use super::stacks::{frame_key, FrameKey};
use super::suppress::Suppressions;
use super::text::{empty_note, human_bytes, human_ns, log2_text, losses_text};
use super::top::Row;
use crate::hash::{FastMap, IdMap};
use crate::histogram::Log2Bin;
use crate::model::{Estimator, Event, Filter, Frame, Loaded, Losses, Sink, Trace};
use ebtrace_format::events::{AllocEvent, FreeEvent};
use ebtrace_format::proto::EventFamily;
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};

/// How far out of time order events of one kind may come and still be put back in order:
/// the recorder's ring buffer takes the time before it reserves, so events of two CPUs can
/// swap by a few microseconds.
pub const SLACK_NS: u64 = 10_000_000;

/// The most events waiting to be ordered; past it the oldest are taken without waiting (a
/// trace whose frees stopped coming: every allocation would wait for the watermark). The
/// writer flushes at most 8192 events of a family at once, so in-order traces never need
/// this many.
pub const MAX_PENDING: usize = 1 << 17;

/// The allocation measures `ebsym heap --by` sorts rows by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HeapMeasure {
    /// Allocator calls (heaptrack_print's first table: the default).
    Allocations,
    /// Bytes allocated.
    Bytes,
    /// Temporary allocations.
    Temporary,
    /// Bytes live at the trace's peak.
    Peak,
    /// Bytes leaked (to act on).
    Leaked,
}

impl HeapMeasure {
    /// Every measure, by name, default first.
    pub const ALL: [(&'static str, HeapMeasure); 5] = [
        ("allocations", HeapMeasure::Allocations),
        ("bytes", HeapMeasure::Bytes),
        ("temporary", HeapMeasure::Temporary),
        ("peak", HeapMeasure::Peak),
        ("leaked", HeapMeasure::Leaked),
    ];

    pub fn parse(s: &str) -> Option<HeapMeasure> {
        Self::ALL.iter().find(|(n, _)| *n == s).map(|&(_, m)| m)
    }

    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, m)| *m == self)
            .map_or("", |(n, _)| n)
    }

    fn pick(self, r: &HeapRow) -> u64 {
        match self {
            HeapMeasure::Allocations => r.allocations,
            HeapMeasure::Bytes => r.bytes,
            HeapMeasure::Temporary => r.temporary.unwrap_or(0),
            HeapMeasure::Peak => r.peak_bytes.unwrap_or(0),
            HeapMeasure::Leaked => r.leaked_bytes,
        }
    }
}

/// The whole trace's numbers. `None` (null) where the trace cannot say (see
/// [`HeapReport::exact`] and the notes).
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct HeapTotals {
    /// Allocator calls that returned a block (realloc included, as heaptrack counts them).
    pub calls: u64,
    /// Bytes those calls asked for.
    pub bytes: u64,
    /// Traced blocks seen freed.
    pub frees: u64,
    /// Allocations freed with no other allocation or free of their process in between.
    pub temporary: Option<u64>,
    /// The most bytes live at once over the trace (all processes together).
    pub peak_bytes: Option<u64>,
    /// When: ns since the recording started.
    pub peak_time_ns: Option<u64>,
    /// Bytes never freed, to act on (`leaks`' `bytes`).
    pub leaked_bytes: Option<u64>,
    pub leaked_count: Option<u64>,
    /// Bytes never freed that the runtime (or a --suppress rule) holds by design (`leaks`'
    /// `held_bytes`).
    pub held_bytes: Option<u64>,
    pub held_count: Option<u64>,
}

/// One process generation's peak.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct HeapProcess {
    pub generation: u32,
    pub pid: u32,
    /// The most bytes this generation had live at once, and when (ns since the recording
    /// started).
    pub peak_bytes: u64,
    pub peak_time_ns: u64,
    /// Its bytes live at the trace's peak.
    pub at_trace_peak_bytes: u64,
}

/// Block lifetimes under one stack: log2 buckets of ns from allocation to free, and the
/// blocks never freed.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Lifetime {
    pub buckets: Vec<Log2Bin>,
    pub never_freed: u64,
}

/// One allocator's share of the totals: malloc's family, or a custom allocator of
/// `ebrec record --alloc-fn` (its blocks are often inside blocks malloc gave it, so its
/// bytes are counted in malloc's too).
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct HeapAllocator {
    /// "malloc", or the NAME of `--alloc-fn NAME:SIZE_ARG[:FREE_NAME]`.
    pub name: String,
    pub calls: u64,
    pub bytes: u64,
    pub temporary: Option<u64>,
    pub leaked_bytes: u64,
}

/// One stack of `ebsym heap`.
#[derive(Debug, Clone, Serialize)]
pub struct HeapRow {
    /// Whose allocations: "malloc" (the system allocator) or a `--alloc-fn` NAME.
    pub allocator: String,
    pub allocations: u64,
    pub bytes: u64,
    #[serde(serialize_with = "super::top::sorted_frames")]
    pub frames: Vec<Frame>,
    /// Bytes never freed that the runtime (or a --suppress rule) holds by design.
    pub held_bytes: u64,
    /// What holds them, as `leaks` says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_by: Option<String>,
    /// Bytes never freed, to act on.
    pub leaked_bytes: u64,
    pub lifetime: Lifetime,
    /// Bytes of this stack live at the trace's peak.
    pub peak_bytes: Option<u64>,
    pub temporary: Option<u64>,
}

/// `ebsym heap`'s report.
#[derive(Debug, Serialize)]
pub struct HeapReport {
    /// "heap".
    pub kind: &'static str,
    pub by: HeapMeasure,
    /// Whether every allocator call is counted as it was (no sampling estimate, no
    /// threshold, no loss, no pause): heaptrack's exact counts. When false, `inexact` says
    /// why, and the numbers are estimates or lower bounds.
    pub exact: bool,
    pub inexact: Vec<String>,
    pub totals: HeapTotals,
    /// The totals per allocator: "malloc" first, then each `--alloc-fn` in its order. The
    /// totals above are their sums.
    pub allocators: Vec<HeapAllocator>,
    /// Each process generation with allocations, largest peak first.
    pub processes: Vec<HeapProcess>,
    pub rows: Vec<HeapRow>,
    pub losses: Losses,
    /// What the report could not do, and why (events put in order late, frees of blocks
    /// not seen allocated, no frees recorded, …).
    pub notes: Vec<String>,
}

const ALLOC: u8 = 0;
const FREE: u8 = 1;
const END: u8 = 2;

/// An allocation, a free or the end of a generation, waiting to be taken in time order.
#[derive(Debug, Clone, Copy)]
struct Op {
    time: u64,
    seq: u64,
    generation: u32,
    what: u8,
    address: u64,
    stack: u64,
    size: u64,
    period: u64,
    tid: u32,
}

impl Op {
    fn key(&self) -> (u64, u64) {
        (self.time, self.seq)
    }
}

/// An event that waits in a [`Runs`] queue.
trait Queued: Copy {
    fn time(&self) -> u64;
    /// The event as [`HeapSink::take`] takes it, with its arrival number.
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
struct Runs<T> {
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
    fn len(&self) -> usize {
        self.len
    }

    /// The key of the oldest event waiting.
    #[inline]
    fn front_key(&self) -> Option<(u64, u64)> {
        self.runs.front().map(|r| r.key(r.pos))
    }

    /// Takes the oldest event waiting.
    #[inline]
    fn pop_front(&mut self) -> Option<Op> {
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
    fn push_one(&mut self, e: T, seq: u64) {
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
    fn push(&mut self, events: Vec<T>, seq0: u64) {
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
fn push_sorted(q: &mut VecDeque<Op>, op: Op) {
    if q.back().is_none_or(|b| b.key() <= op.key()) {
        q.push_back(op);
    } else {
        let i = q.partition_point(|x| x.key() <= op.key());
        q.insert(i, op);
    }
}

/// What one stack id has had.
#[derive(Debug, Clone, Default)]
struct StackStat {
    allocations: u64,
    bytes: u64,
    temporary: u64,
    /// Weighted bytes live now ([`weight`]).
    live: u64,
    /// Live bytes at the peak `epoch`.
    at_peak: u64,
    epoch: u64,
    /// Blocks freed, by log2 of their lifetime in ns (bucket i: [2^(i-1), 2^i), 0: 0 ns).
    lifetimes: Vec<u64>,
    /// Its live bytes changed in the heap timeline's current bucket.
    dirty: bool,
}

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
    max_in: u64,
    any: bool,
    dirty: Vec<u64>,
}

impl HeapTimeline {
    fn bucket(&self, t: u64) -> u32 {
        u32::try_from(t.saturating_sub(self.t0) / self.bucket_ns.max(1)).unwrap_or(u32::MAX)
    }

    /// Closes the current bucket: its totals and its changed stacks.
    fn flush(&mut self, stacks: &mut IdMap<StackStat>, live_total: u64) {
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

/// What one process generation has had.
#[derive(Debug, Clone, Default)]
struct Gen {
    live: u64,
    peak: u64,
    peak_time: u64,
    at_trace_peak: u64,
    /// The address of its last event if that was an allocation.
    last_alloc: Option<u64>,
    ended: bool,
    any: bool,
    /// The trace's peak `at_trace_peak` was taken at (as [`StackStat::epoch`]).
    epoch: u64,
}

impl Gen {
    /// Brings its bytes at the trace's latest peak up to date before they change.
    #[inline]
    fn touch(&mut self, epoch: u64) {
        if self.epoch < epoch {
            self.at_trace_peak = self.live;
            self.epoch = epoch;
        }
    }
}

/// The bytes a block stands for in the live sums: its size, or when sampled by bytes its
/// size over its probability of being kept (no carried fractions, so that its free takes off
/// exactly what its allocation added).
fn weight(size: u64, period: u64) -> u64 {
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
fn bucket(ns: u64) -> usize {
    (u64::BITS - ns.leading_zeros()) as usize
}

/// The sink of `ebsym heap`.
#[derive(Default)]
pub(crate) struct HeapSink {
    live: Outstanding,
    allocs: Runs<AllocEvent>,
    frees: Runs<FreeEvent>,
    ends: VecDeque<Op>,
    seq: u64,
    max_alloc: u64,
    max_free: u64,
    /// The watermark of the last drain: until it moves, nothing new is in order (unless
    /// too many wait, or a generation's end came).
    drained_to: u64,
    /// Time of the last event taken, and events taken after a later one.
    taken_ns: u64,
    late: u64,
    est: Estimator,
    stacks: IdMap<StackStat>,
    gens: IdMap<Gen>,
    live_total: u64,
    peak: u64,
    peak_time: u64,
    epoch: u64,
    calls: u64,
    bytes: u64,
    frees_seen: u64,
    temporary: u64,
    unmatched_frees: u64,
    /// Allocation events and the last event time (for the leak report).
    alloc_events: u64,
    last_ns: u64,
    /// Sampling: the largest period, and allocations kept with a probability below
    /// 1 - 1e-6 (smaller than 14 periods).
    max_period: u64,
    sampled_small: u64,
    /// --aggregate rows of allocations.
    aggregated: u64,
    /// The custom allocator of each stack id that had one (`--alloc-fn`).
    allocators: FastMap<u64, u32>,
    /// The heap over time, when asked for ([`HeapSink::with_timeline`]).
    timeline: Option<HeapTimeline>,
    /// Every event taken, (time, seq, what), in order: what the tests compare.
    #[cfg(test)]
    taken: Vec<(u64, u64, u8)>,
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

    /// The stack `id`'s stats, with its live bytes at the latest peak brought up to date
    /// before they change.
    #[inline]
    fn stack(stacks: &mut IdMap<StackStat>, id: u64, epoch: u64) -> &mut StackStat {
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

    /// A sink that also keeps the heap over time in buckets of `bucket_ns` from `t0`.
    pub(crate) fn with_timeline(t0: u64, bucket_ns: u64) -> Self {
        HeapSink {
            timeline: Some(HeapTimeline {
                t0,
                bucket_ns,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// The heap over time (empty unless made [`HeapSink::with_timeline`]).
    pub(crate) fn take_timeline(&mut self) -> Option<HeapTimeline> {
        self.timeline.take()
    }

    /// Marks stack `id` changed in the timeline's current bucket.
    #[inline]
    fn touched(timeline: &mut Option<HeapTimeline>, s: &mut StackStat, id: u64) {
        if let Some(tl) = timeline {
            if !s.dirty {
                s.dirty = true;
                tl.dirty.push(id);
            }
        }
    }

    /// One event, in time order.
    fn take(&mut self, op: Op) {
        #[cfg(test)]
        self.taken.push((op.time, op.seq, op.what));
        if op.time < self.taken_ns {
            self.late += 1;
        }
        self.taken_ns = self.taken_ns.max(op.time);
        if let Some(tl) = &mut self.timeline {
            let b = tl.bucket(op.time);
            if b > tl.cur || !tl.any {
                if b > tl.cur {
                    tl.flush(&mut self.stacks, self.live_total);
                    tl.cur = b;
                }
                tl.any = true;
            }
        }
        let epoch = self.epoch;
        let g = self
            .gens
            .get_or_insert_with(u64::from(op.generation), || Gen {
                epoch,
                ..Default::default()
            });
        g.touch(epoch);
        match op.what {
            ALLOC => {
                let (count, bytes) = self.est.add(op.size, op.period);
                let w = weight(op.size, op.period);
                self.calls += count;
                self.bytes += bytes;
                if op.period > 0 {
                    self.max_period = self.max_period.max(op.period);
                    if op.size < op.period.saturating_mul(14) {
                        self.sampled_small += 1;
                    }
                }
                g.any = true;
                g.last_alloc = Some(op.address);
                let s = Self::stack(&mut self.stacks, op.stack, self.epoch);
                s.allocations += count;
                s.bytes += bytes;
                if !g.ended {
                    Self::touched(&mut self.timeline, s, op.stack);
                    s.live += w;
                    g.live += w;
                    if g.live > g.peak {
                        g.peak = g.live;
                        g.peak_time = op.time;
                    }
                    self.live_total += w;
                    if let Some(tl) = &mut self.timeline {
                        tl.max_in = tl.max_in.max(self.live_total);
                    }
                    if self.live_total > self.peak {
                        self.peak = self.live_total;
                        self.peak_time = op.time;
                        self.epoch += 1;
                        s.at_peak = s.live;
                        s.epoch = self.epoch;
                        g.at_trace_peak = g.live;
                        g.epoch = self.epoch;
                    }
                }
                self.live.alloc(
                    op.generation,
                    op.address,
                    Block {
                        time: op.time,
                        stack: op.stack,
                        size: op.size,
                        period: super::live::period32(op.period),
                        tid: op.tid,
                    },
                );
            }
            FREE => {
                let ended = g.ended;
                // A free of a block never seen allocated is not in heaptrack_print's stream
                // (heaptrack_interpret drops it): it neither counts nor breaks a pair.
                let Some(b) = self.live.free(op.generation, op.address, op.time) else {
                    self.unmatched_frees += 1;
                    return;
                };
                let temporary = g.last_alloc == Some(op.address);
                g.last_alloc = None;
                self.frees_seen += 1;
                let s = Self::stack(&mut self.stacks, b.stack, self.epoch);
                if temporary {
                    s.temporary += 1;
                    self.temporary += 1;
                }
                let i = bucket(op.time.saturating_sub(b.time));
                if s.lifetimes.len() <= i {
                    s.lifetimes.resize(i + 1, 0);
                }
                s.lifetimes[i] += 1;
                if !ended {
                    let w = weight(b.size, u64::from(b.period));
                    Self::touched(&mut self.timeline, s, b.stack);
                    s.live = s.live.saturating_sub(w);
                    let g = self
                        .gens
                        .get_mut(u64::from(op.generation))
                        .expect("entered above");
                    g.live = g.live.saturating_sub(w);
                    self.live_total = self.live_total.saturating_sub(w);
                }
            }
            _ => {
                if g.ended {
                    return;
                }
                g.ended = true;
                g.last_alloc = None;
                self.live_total = self.live_total.saturating_sub(g.live);
                g.live = 0;
                for b in self.live.generation_blocks(op.generation) {
                    let s = Self::stack(&mut self.stacks, b.stack, self.epoch);
                    Self::touched(&mut self.timeline, s, b.stack);
                    s.live = s.live.saturating_sub(weight(b.size, u64::from(b.period)));
                }
            }
        }
    }
}

/// [`heap_with`] with the runtime's rules for what is held by design.
pub fn heap_from(trace: impl Trace, filter: &Filter, by: HeapMeasure, n: usize) -> HeapReport {
    heap_with(trace, filter, by, n, &Suppressions::runtime())
}

/// `ebsym heap` of an open trace: the totals, each generation's peak, and the `n` stacks
/// with the most `by`; `rules` say which blocks never freed are held by design.
pub fn heap_with(
    trace: impl Trace,
    filter: &Filter,
    by: HeapMeasure,
    n: usize,
    rules: &Suppressions,
) -> HeapReport {
    let mut sink = HeapSink::default();
    let mut l = Loaded::from_trace(trace, filter, &mut sink);
    sink.finish();
    sink.report(&mut l, filter, by, n, rules)
}

impl HeapSink {
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

    fn report(
        self,
        l: &mut Loaded,
        filter: &Filter,
        by: HeapMeasure,
        n: usize,
        rules: &Suppressions,
    ) -> HeapReport {
        self.report_and_leaks(l, filter, by, n, rules).0
    }

    /// The report, and the leak report (every row) it classified the blocks never freed
    /// with: `ebsym report` shows both from one sink.
    pub(crate) fn report_and_leaks(
        mut self,
        l: &mut Loaded,
        filter: &Filter,
        by: HeapMeasure,
        n: usize,
        rules: &Suppressions,
    ) -> (HeapReport, super::top::Report) {
        let start = l.header.start_time_ns;
        let opt = |k: &str| {
            l.header
                .options
                .iter()
                .find(|o| o.key == k)
                .map(|o| o.value.clone())
        };
        let no_free = opt("no-free").as_deref() == Some("true");
        let min_bytes = opt("alloc")
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        let sample_one_in = opt("sample")
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(1);
        let mut notes = Vec::new();
        let mut inexact = Vec::new();
        // Whether every allocation was seen, in order: what temporary needs.
        let mut all_seen = true;
        if self.aggregated > 0 {
            all_seen = false;
            inexact.push(
                "allocations were counted in the kernel (--aggregate): no allocation or free is an event, so there are no temporary allocations, no peak and no lifetimes".to_string(),
            );
        }
        if self.max_period > 1 {
            all_seen = false;
            inexact.push(format!(
                "allocations were sampled by bytes (--sample-bytes, period up to {}): counts, bytes, the peak and leaks are estimates (each sampled block scaled by its inverse probability); temporary allocations cannot be told (the allocations between are not seen)",
                self.max_period
            ));
        } else if self.sampled_small > 0 {
            inexact.push(format!(
                "{} allocations smaller than 14 bytes were recorded at --sample-bytes 1 by an ebrec that kept an allocation of s bytes with probability 1 - e^-s there (today's keeps them all): some tiny allocations may be missing, and those seen are scaled",
                self.sampled_small
            ));
        }
        if sample_one_in > 1 {
            all_seen = false;
            inexact.push(format!(
                "one allocation in {sample_one_in} was kept (--sample {sample_one_in}): the numbers are of that sample, not scaled"
            ));
        }
        if min_bytes > 0 {
            all_seen = false;
            inexact.push(format!(
                "only allocations of at least {min_bytes} bytes were traced (--alloc={min_bytes})"
            ));
        }
        if !l.alloc_pauses.is_empty() {
            all_seen = false;
            inexact.push(format!(
                "the allocator probes were paused {} time(s) by --max-cpu",
                l.alloc_pauses.len()
            ));
        }
        let lost: u64 = l
            .losses
            .recorded
            .iter()
            .filter(|(k, _)| k.starts_with("alloc/") || k.starts_with("free/"))
            .map(|(_, v)| *v)
            .sum();
        if lost > 0 {
            inexact.push(format!(
                "{lost} allocation or free events were lost while recording (see losses)"
            ));
        }
        if no_free {
            all_seen = false;
            notes.push(
                "the recording did not track frees (--no-free): no temporary allocations, peak, lifetimes or leaks".into(),
            );
        }
        if self.late > 0 {
            notes.push(format!(
                "{} events came more than {} ms out of time order and were taken late: the temporary count and the peak may be off by them",
                self.late,
                SLACK_NS / 1_000_000
            ));
        }
        if self.unmatched_frees > 0 {
            notes.push(format!(
                "{} frees of blocks not seen allocated (allocated before the recording, or their allocation lost)",
                self.unmatched_frees
            ));
        }
        let has_peak = self.aggregated == 0 && !no_free && self.alloc_events > 0;
        let has_temporary = all_seen && has_peak;

        // The leak report's classification of what is left, on the same live blocks.
        let mut never_freed: IdMap<u64> = IdMap::default();
        for (_, b) in self.live.blocks() {
            *never_freed.entry_or_default(b.stack) += 1;
        }
        let saved = l.losses.clone();
        let leak = LeakSink::from_parts(
            std::mem::take(&mut self.live),
            self.last_ns,
            self.alloc_events,
        )
        .report(l, filter, usize::MAX, rules);
        // The leak report's own remarks (pauses, lost frees) without its frame counts,
        // which this report makes again for every stack.
        let leak_damage: Vec<String> = leak
            .losses
            .damage
            .iter()
            .filter(|d| !saved.damage.contains(d))
            .cloned()
            .collect();
        l.losses = saved;
        l.losses.damage.extend(leak_damage);
        let mut leaked: BTreeMap<FrameKey, (u64, u64, Option<String>)> = BTreeMap::new();
        for row in &leak.rows {
            if let Row::Leak(r) = row {
                let e = leaked
                    .entry(frame_key(&r.frames))
                    .or_insert((0, 0, r.held_by.clone()));
                if r.held_by.is_some() {
                    e.1 += r.bytes;
                } else {
                    e.0 += r.bytes;
                }
            }
        }
        let lt = |k: &str| leak.totals.get(k).copied().unwrap_or(0);

        // Rows: stack ids merged by their frames, as `leaks` and `top` merge them.
        struct Acc {
            allocator: u32,
            frames: Vec<Frame>,
            allocations: u64,
            bytes: u64,
            temporary: u64,
            peak: u64,
            lifetimes: Vec<u64>,
            never_freed: u64,
        }
        let mut merged: BTreeMap<FrameKey, Acc> = BTreeMap::new();
        let mut ids: Vec<(u64, &StackStat)> = self.stacks.iter().collect();
        ids.sort_unstable_by_key(|&(id, _)| id);
        for (id, s) in ids {
            let frames = l.frames(id);
            let a = merged.entry(frame_key(&frames)).or_insert_with(|| Acc {
                allocator: 0,
                frames,
                allocations: 0,
                bytes: 0,
                temporary: 0,
                peak: 0,
                lifetimes: Vec::new(),
                never_freed: 0,
            });
            a.allocator = a
                .allocator
                .max(self.allocators.get(&id).copied().unwrap_or(0));
            a.allocations += s.allocations;
            a.bytes += s.bytes;
            a.temporary += s.temporary;
            a.peak += s.at_peak;
            if a.lifetimes.len() < s.lifetimes.len() {
                a.lifetimes.resize(s.lifetimes.len(), 0);
            }
            for (i, c) in s.lifetimes.iter().enumerate() {
                a.lifetimes[i] += c;
            }
            a.never_freed += never_freed.get(id).copied().unwrap_or(0);
        }
        let names = super::live::allocator_names(&l.header);
        let mut allocators: Vec<HeapAllocator> = names
            .iter()
            .map(|n| HeapAllocator {
                name: n.clone(),
                temporary: has_temporary.then_some(0),
                ..Default::default()
            })
            .collect();
        let mut rows: Vec<HeapRow> = merged
            .into_iter()
            .map(|(key, a)| {
                let (leaked_bytes, held_bytes, held_by) =
                    leaked.remove(&key).unwrap_or((0, 0, None));
                let i = a.allocator as usize;
                while i >= allocators.len() {
                    allocators.push(HeapAllocator {
                        name: super::live::allocator_name(&names, allocators.len() as u32),
                        temporary: has_temporary.then_some(0),
                        ..Default::default()
                    });
                }
                let t = &mut allocators[i];
                t.calls += a.allocations;
                t.bytes += a.bytes;
                t.temporary = t.temporary.map(|v| v + a.temporary);
                t.leaked_bytes += leaked_bytes;
                let buckets = a
                    .lifetimes
                    .iter()
                    .enumerate()
                    .filter(|(_, &c)| c > 0)
                    .map(|(i, &c)| Log2Bin {
                        low: if i == 0 { 0 } else { 1u64 << (i - 1) },
                        high: if i == 0 {
                            1
                        } else if i >= 64 {
                            u64::MAX
                        } else {
                            1u64 << i
                        },
                        count: c,
                    })
                    .collect();
                HeapRow {
                    allocator: super::live::allocator_name(&names, a.allocator),
                    allocations: a.allocations,
                    bytes: a.bytes,
                    frames: a.frames,
                    held_bytes,
                    held_by: held_by.filter(|_| held_bytes > 0),
                    leaked_bytes,
                    lifetime: Lifetime {
                        buckets,
                        never_freed: a.never_freed,
                    },
                    peak_bytes: has_peak.then_some(a.peak),
                    temporary: has_temporary.then_some(a.temporary),
                }
            })
            .collect();
        rows.sort_by(|a, b| {
            by.pick(b)
                .cmp(&by.pick(a))
                .then_with(|| b.allocations.cmp(&a.allocations))
                .then_with(|| a.frames.cmp(&b.frames))
        });
        rows.truncate(n);

        let mut processes: Vec<HeapProcess> = self
            .gens
            .iter()
            .filter(|(_, g)| g.any)
            .map(|(generation, g)| (generation as u32, g))
            .map(|(generation, g)| HeapProcess {
                generation,
                pid: l
                    .tables
                    .generations
                    .get(&generation)
                    .map_or(0, |i| i.process.pid),
                peak_bytes: g.peak,
                peak_time_ns: g.peak_time.saturating_sub(start),
                at_trace_peak_bytes: g.at_trace_peak,
            })
            .collect();
        processes.sort_by(|a, b| {
            b.peak_bytes
                .cmp(&a.peak_bytes)
                .then(a.generation.cmp(&b.generation))
        });

        let totals = HeapTotals {
            calls: self.calls,
            bytes: self.bytes,
            frees: self.frees_seen,
            temporary: has_temporary.then_some(self.temporary),
            peak_bytes: has_peak.then_some(self.peak),
            peak_time_ns: has_peak.then(|| self.peak_time.saturating_sub(start)),
            leaked_bytes: (!no_free).then(|| lt("bytes")),
            leaked_count: (!no_free).then(|| lt("count")),
            held_bytes: (!no_free).then(|| lt("held_bytes")),
            held_count: (!no_free).then(|| lt("held_count")),
        };
        if self.alloc_events == 0 {
            notes.insert(0, empty_note("alloc", filter, &l.losses));
        }
        let report = HeapReport {
            kind: "heap",
            by,
            exact: inexact.is_empty() && self.aggregated == 0,
            inexact,
            totals,
            allocators,
            processes,
            rows,
            losses: l.losses.clone(),
            notes,
        };
        (report, leak)
    }
}

impl HeapReport {
    /// `root;…;leaf value` of every row with a non-zero `by` (rows that fold alike summed),
    /// sorted: the folded stacks of a heap measure, for `ebsym folded` and `flamegraph
    /// --by temporary|peak|leaked`. Complete only when the report kept every row.
    pub fn folded_lines(&self, by: HeapMeasure) -> Vec<String> {
        let mut lines: std::collections::BTreeMap<String, u64> = Default::default();
        for r in &self.rows {
            let v = by.pick(r);
            if v > 0 {
                *lines
                    .entry(super::folded::folded_key(&r.frames))
                    .or_default() += v;
            }
        }
        lines.into_iter().map(|(s, v)| format!("{s} {v}")).collect()
    }
}

fn opt_num(v: Option<u64>) -> String {
    v.map_or_else(|| "n/a".into(), |v| v.to_string())
}

impl HeapReport {
    /// The report for people.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let t = &self.totals;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "heap by {}: {}",
            self.by.name(),
            if self.exact {
                "exact (every allocator call)"
            } else {
                "NOT exact (see below)"
            }
        );
        let _ = writeln!(
            s,
            "calls to allocation functions: {} ({} allocated)",
            t.calls,
            human_bytes(t.bytes)
        );
        let _ = writeln!(
            s,
            "temporary allocations: {}",
            match t.temporary {
                Some(v) => format!(
                    "{v} ({:.1}% of calls)",
                    v as f64 * 100.0 / t.calls.max(1) as f64
                ),
                None => "n/a".into(),
            }
        );
        let _ = writeln!(
            s,
            "peak heap: {}",
            match (t.peak_bytes, t.peak_time_ns) {
                (Some(b), Some(at)) =>
                    format!("{} ({b} bytes) at {}", human_bytes(b), human_ns(at)),
                _ => "n/a".into(),
            }
        );
        let _ = writeln!(
            s,
            "leaked: {} to act on ({} blocks), {} held by the runtime ({} blocks)",
            t.leaked_bytes.map_or_else(|| "n/a".into(), human_bytes),
            opt_num(t.leaked_count),
            t.held_bytes.map_or_else(|| "n/a".into(), human_bytes),
            opt_num(t.held_count),
        );
        if self.allocators.len() > 1 {
            for a in &self.allocators {
                let _ = writeln!(
                    s,
                    "  allocator {}: {} calls ({}), temporary {}, leaked {}",
                    a.name,
                    a.calls,
                    human_bytes(a.bytes),
                    opt_num(a.temporary),
                    human_bytes(a.leaked_bytes)
                );
            }
        }
        for why in &self.inexact {
            let _ = writeln!(s, "not exact: {why}");
        }
        for note in &self.notes {
            let _ = writeln!(s, "note: {note}");
        }
        if self.processes.len() > 1 {
            let _ = writeln!(s, "\nprocesses (peak each, bytes at the trace's peak):");
            for p in &self.processes {
                let _ = writeln!(
                    s,
                    "  pid {} (generation {}): peak {} at {}, {} at the trace's peak",
                    p.pid,
                    p.generation,
                    human_bytes(p.peak_bytes),
                    human_ns(p.peak_time_ns),
                    human_bytes(p.at_trace_peak_bytes)
                );
            }
        }
        for (i, r) in self.rows.iter().enumerate() {
            let mut vals = vec![
                format!("allocations {}", r.allocations),
                format!("bytes {}", r.bytes),
                format!("temporary {}", opt_num(r.temporary)),
                format!("peak_bytes {}", opt_num(r.peak_bytes)),
                format!("leaked_bytes {}", r.leaked_bytes),
            ];
            if r.held_bytes > 0 {
                vals.push(format!("held_bytes {}", r.held_bytes));
            }
            if r.allocator != "malloc" {
                vals.push(format!("allocator {}", r.allocator));
            }
            let _ = writeln!(s, "\n#{} {}", i + 1, vals.join("  "));
            if let Some(h) = &r.held_by {
                let _ = writeln!(s, "  held by: {h}");
            }
            if !r.lifetime.buckets.is_empty() {
                s.push_str(&log2_text(&r.lifetime.buckets).replacen(
                    "ns (log2):",
                    "lifetime, ns (log2):",
                    1,
                ));
            }
            if r.lifetime.never_freed > 0 {
                let _ = writeln!(s, "    never freed: {}", r.lifetime.never_freed);
            }
            for f in &r.frames {
                let _ = writeln!(s, "    {}", f.display());
            }
        }
        s.push_str(&losses_text(&self.losses));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ebtrace_format::events::{AllocEvent, FreeEvent};
    use ebtrace_format::proto::AllocKind;

    fn alloc(t: u64, g: u32, address: u64, stack: u64, size: u64) -> AllocEvent {
        AllocEvent {
            time_ns: t,
            generation: g,
            tid: 7,
            stack,
            size,
            address,
            kind: AllocKind::Malloc,
            sample_period: 0,
            allocator: 0,
        }
    }

    fn free(t: u64, g: u32, address: u64) -> FreeEvent {
        FreeEvent {
            time_ns: t,
            generation: g,
            tid: 7,
            address,
            allocator: 0,
        }
    }

    /// What the test feeds: an allocation or a free, in file order.
    enum E {
        A(AllocEvent),
        F(FreeEvent),
        End(u32, u64),
    }

    fn run(events: &[E]) -> HeapSink {
        let mut s = HeapSink::default();
        for e in events {
            match e {
                E::A(a) => s.event(&Event::Alloc(a)),
                E::F(f) => s.event(&Event::Free(f)),
                E::End(g, t) => s.generation_end(*g, *t),
            }
        }
        s.finish();
        s
    }

    /// A small random number generator (xorshift).
    struct Rnd(u64);
    impl Rnd {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// Runs against a sorted list: batches in order, batches out of order within and
    /// against what waits, single events that extend the last run or not, taken in
    /// between; every event comes out once, in (time, seq) order.
    #[test]
    fn runs_give_events_back_in_time_and_arrival_order() {
        let mut rnd = Rnd(0x9e37_79b9_7f4a_7c15);
        for round in 0..50 {
            let mut runs: Runs<FreeEvent> = Runs::default();
            let mut model: Vec<(u64, u64)> = Vec::new();
            let (mut seq, mut t) = (0u64, 1000u64);
            for _ in 0..300 {
                let n = if rnd.below(3) == 0 {
                    1
                } else {
                    rnd.below(40) as usize
                };
                let batch: Vec<FreeEvent> = (0..n)
                    .map(|_| {
                        t += rnd.below(5);
                        // Some from the past (further back in later rounds).
                        let back = if rnd.below(6) == 0 {
                            rnd.below(20 + round)
                        } else {
                            0
                        };
                        free(t - back, 1, 0x10)
                    })
                    .collect();
                for (i, e) in batch.iter().enumerate() {
                    model.push((e.time_ns, seq + 1 + i as u64));
                }
                if n == 1 && rnd.below(2) == 0 {
                    runs.push_one(batch[0], seq + 1);
                } else {
                    runs.push(batch, seq + 1);
                }
                seq += n as u64;
                // A gap in the numbering (events of the other queue).
                seq += rnd.below(3);
                model.sort_unstable();
                assert_eq!(runs.len(), model.len());
                for _ in 0..rnd.below(30) {
                    let Some(op) = runs.pop_front() else {
                        assert!(model.is_empty());
                        break;
                    };
                    assert_eq!((op.time, op.seq), model.remove(0), "round {round}");
                }
                assert_eq!(runs.front_key(), model.first().copied());
            }
            while let Some(op) = runs.pop_front() {
                assert_eq!((op.time, op.seq), model.remove(0));
            }
            assert!(model.is_empty());
        }
    }

    /// Batches given whole ([`Sink::allocs`], [`Sink::frees`]) take the same events in
    /// the same order as the same events one by one, and end with the same numbers:
    /// batches in time order, batches with late events (past the watermark), generation
    /// ends between them, and past [`MAX_PENDING`] waiting.
    #[test]
    fn batches_are_taken_as_their_events_one_by_one() {
        let mut rnd = Rnd(0x2545_f491_4f6c_dd1d);
        for round in 0..6u64 {
            // (allocations?, batch, or a generation's end)
            let mut batches: Vec<Result<(Vec<AllocEvent>, Vec<FreeEvent>), (u32, u64)>> =
                Vec::new();
            let mut t = 1_000_000_000u64;
            let mut live: Vec<(u32, u64)> = Vec::new();
            let big = round >= 4;
            let count = if big { 60 } else { 400 };
            for b in 0..count {
                let n = if big {
                    8192
                } else {
                    1 + rnd.below(300) as usize
                };
                let step = if big { 10 } else { 1 + rnd.below(200_000) };
                let start = t;
                let mut allocs = Vec::new();
                for _ in 0..n {
                    t += rnd.below(step);
                    let g = 1 + rnd.below(2) as u32;
                    let a = 0x5555_0000_0000 + rnd.below(1 << 12) * 16;
                    // Late ones: up to 30 ms back (the slack is 10).
                    let late = if rnd.below(50) == 0 {
                        rnd.below(30_000_000)
                    } else {
                        0
                    };
                    allocs.push(alloc(
                        t.saturating_sub(late),
                        g,
                        a,
                        rnd.below(9),
                        1 + rnd.below(100),
                    ));
                    live.push((g, a));
                }
                let mut frees = Vec::new();
                let mut ft = start;
                // In the big rounds frees fall behind: allocations pile up past MAX_PENDING.
                let nf = if big && b % 3 != 0 {
                    0
                } else {
                    live.len().min(n + 50)
                };
                for _ in 0..nf {
                    let i = rnd.below(live.len() as u64) as usize;
                    let (g, a) = live.swap_remove(i);
                    ft += rnd.below(step.max(2) * 2);
                    frees.push(free(ft, g, a));
                }
                batches.push(Ok((allocs, Vec::new())));
                batches.push(Ok((Vec::new(), frees)));
                if rnd.below(40) == 0 {
                    batches.push(Err((1 + rnd.below(2) as u32, t - rnd.below(1_000_000))));
                }
            }
            let one_by_one = {
                let mut s = HeapSink::default();
                for b in &batches {
                    match b {
                        Ok((a, f)) => {
                            a.iter().for_each(|e| s.event(&Event::Alloc(e)));
                            f.iter().for_each(|e| s.event(&Event::Free(e)));
                        }
                        Err((g, t)) => s.generation_end(*g, *t),
                    }
                }
                s.finish();
                s
            };
            let whole = {
                let mut s = HeapSink::default();
                for b in batches {
                    match b {
                        Ok((a, f)) => {
                            if !a.is_empty() {
                                s.allocs(a);
                            }
                            if !f.is_empty() {
                                s.frees(f);
                            }
                        }
                        Err((g, t)) => s.generation_end(g, t),
                    }
                }
                s.finish();
                s
            };
            assert!(one_by_one.taken.len() > 1000);
            assert_eq!(one_by_one.taken, whole.taken, "round {round}");
            assert_eq!(one_by_one.late, whole.late);
            assert_eq!(one_by_one.temporary, whole.temporary);
            assert_eq!(one_by_one.peak, whole.peak);
            assert_eq!(one_by_one.unmatched_frees, whole.unmatched_frees);
            assert_eq!(one_by_one.alloc_events, whole.alloc_events);
            assert_eq!(one_by_one.last_ns, whole.last_ns);
            if round == 0 {
                assert!(one_by_one.late > 0, "some events came late");
            }
        }
    }

    fn temporary(s: &HeapSink, stack: u64) -> u64 {
        s.stacks.get(stack).map_or(0, |x| x.temporary)
    }

    fn at_peak(s: &HeapSink, stack: u64) -> u64 {
        s.stacks.get(stack).map_or(0, |x| x.at_peak)
    }

    /// heaptrack's rule: a free is temporary when the previous event of its process was
    /// the allocation of the same block; any allocation or free in between (of any
    /// thread) breaks it, another process's events do not.
    #[test]
    fn temporary_is_a_free_right_after_its_allocation() {
        use E::*;
        let s = run(&[
            A(alloc(10, 1, 0xa0, 1, 16)), // freed at once: temporary
            F(free(11, 1, 0xa0)),
            A(alloc(20, 1, 0xb0, 2, 16)), // another allocation before its free: not
            A(alloc(21, 1, 0xc0, 3, 16)),
            F(free(22, 1, 0xb0)),
            F(free(23, 1, 0xc0)),         // a free before it: not
            A(alloc(30, 1, 0xd0, 4, 16)), // only another process in between: temporary
            A(alloc(31, 2, 0xe0, 5, 16)),
            F(free(32, 1, 0xd0)),
            F(free(33, 2, 0xe0)), // its process's previous event was its allocation
            A(alloc(40, 1, 0xf0, 6, 16)), // a free of an untraced block between: temporary
            F(free(41, 1, 0x999)),
            F(free(42, 1, 0xf0)),
        ]);
        assert_eq!(s.temporary, 4);
        assert_eq!(
            [1, 2, 3, 4, 5, 6].map(|k| temporary(&s, k)),
            [1, 0, 0, 1, 1, 1],
            "per stack"
        );
        assert_eq!(s.calls, 6);
        assert_eq!(s.frees_seen, 6);
        assert_eq!(s.unmatched_frees, 1);
        assert_eq!(s.late, 0);
    }

    /// realloc is a free of the old block then the allocation of the new one (both
    /// recording paths send them in that order): a block reallocated right after its
    /// allocation was temporary, as heaptrack counts it; the new block lives on.
    #[test]
    fn realloc_frees_the_old_block_then_allocates() {
        use E::*;
        let mut r = alloc(12, 1, 0xa0, 2, 64);
        r.kind = AllocKind::Realloc;
        let s = run(&[
            A(alloc(10, 1, 0xa0, 1, 32)),
            F(free(11, 1, 0xa0)), // realloc in place
            A(r),
        ]);
        assert_eq!(s.temporary, 1);
        assert_eq!(temporary(&s, 1), 1);
        assert_eq!(s.calls, 2);
        assert_eq!(s.peak, 64, "the old block is gone when the new one comes");
        assert_eq!(s.live_total, 64);
        let left: Vec<_> = s.live.blocks().map(|(_, b)| (b.stack, b.size)).collect();
        assert_eq!(left, [(2, 64)]);
    }

    /// The writer puts a batch's allocations before its frees: the free of a block comes
    /// after the allocation that reused its address. In time order the free follows its
    /// allocation (temporary), and the two blocks were never live together.
    #[test]
    fn frees_read_after_later_allocations_are_put_in_time_order() {
        use E::*;
        let s = run(&[
            // batch 1: allocations, then frees
            A(alloc(10, 1, 0xa0, 1, 100)),
            A(alloc(30, 1, 0xa0, 2, 100)), // the address reused after the free at 20
            A(alloc(40, 1, 0xb0, 3, 10)),
            F(free(20, 1, 0xa0)),
            // batch 2
            A(alloc(60, 1, 0xc0, 3, 10)),
            F(free(50, 1, 0xa0)),
            F(free(55, 1, 0xb0)),
        ]);
        assert_eq!(
            s.temporary, 1,
            "only the block freed at 20 right after its alloc"
        );
        assert_eq!(temporary(&s, 1), 1);
        assert_eq!(
            s.peak, 110,
            "not 210: the first block was freed before the second"
        );
        assert_eq!(s.peak_time, 40);
        assert_eq!(
            (at_peak(&s, 1), at_peak(&s, 2), at_peak(&s, 3)),
            (0, 100, 10)
        );
        assert_eq!(s.late, 0);
        let left: Vec<_> = s.live.blocks().map(|(_, b)| b.time).collect();
        assert_eq!(left, [60]);
        // Lifetimes: 10 ns (bucket [8, 16)), 20 ns ([16, 32)), 15 ns ([8, 16)).
        assert_eq!(s.stacks[1].lifetimes[bucket(10)], 1);
        assert_eq!(s.stacks[2].lifetimes[bucket(20)], 1);
        assert_eq!(s.stacks[3].lifetimes[bucket(15)], 1);
        assert_eq!(bucket(10), 4);
    }

    /// The peak and the stacks that held it: the peak's stacks are their bytes at that
    /// moment, whatever they did after.
    #[test]
    fn the_peak_is_what_was_live_at_its_moment() {
        use E::*;
        let s = run(&[
            A(alloc(10, 1, 0x10, 1, 100)),
            A(alloc(20, 1, 0x20, 2, 50)), // 150: the peak
            F(free(30, 1, 0x10)),
            A(alloc(40, 1, 0x30, 2, 30)), // 80
            A(alloc(50, 1, 0x40, 3, 60)), // 140
            F(free(60, 1, 0x20)),
        ]);
        assert_eq!((s.peak, s.peak_time), (150, 20));
        assert_eq!([1, 2, 3].map(|k| at_peak(&s, k)), [100, 50, 0]);
        // A later, higher peak moves it.
        let s = run(&[
            A(alloc(10, 1, 0x10, 1, 100)),
            A(alloc(20, 1, 0x20, 2, 50)),
            F(free(30, 1, 0x10)),
            A(alloc(40, 1, 0x30, 2, 200)), // 250
            F(free(50, 1, 0x30)),
        ]);
        assert_eq!((s.peak, s.peak_time), (250, 40));
        assert_eq!([1, 2].map(|k| at_peak(&s, k)), [0, 250]);
        assert_eq!(s.gens[1].peak, 250);
        assert_eq!(s.gens[1].at_trace_peak, 250);
    }

    /// Processes: each has its own peak; the trace's is of their sum, and a process's
    /// blocks stop counting when it ends (they are still leaks).
    #[test]
    fn processes_peak_apart_and_their_end_frees_their_blocks() {
        use E::*;
        let s = run(&[
            A(alloc(10, 1, 0x10, 1, 100)),
            A(alloc(20, 2, 0x10, 2, 70)), // 170: the trace's peak
            End(1, 25),                   // process 1 exits: its 100 bytes go
            A(alloc(30, 2, 0x20, 2, 80)), // 150
            F(free(40, 2, 0x10)),
        ]);
        assert_eq!((s.peak, s.peak_time), (170, 20));
        assert_eq!((s.gens[1].peak, s.gens[2].peak), (100, 150));
        assert_eq!(s.gens[2].peak_time, 30);
        assert_eq!(
            (s.gens[1].at_trace_peak, s.gens[2].at_trace_peak),
            (100, 70)
        );
        assert_eq!(s.live_total, 80);
        assert_eq!([1, 2].map(|k| at_peak(&s, k)), [100, 70]);
        assert_eq!(s.stacks[1].live, 0, "ended with its process");
        assert_eq!(
            s.live.blocks().count(),
            2,
            "the blocks never freed stay leaks"
        );
    }

    /// An event older than what was already taken (past the slack and the bound) is
    /// counted as late, not silently misplaced.
    #[test]
    fn events_past_the_slack_are_counted_late() {
        let mut s = HeapSink::default();
        let big = SLACK_NS * 10;
        s.event(&Event::Alloc(&alloc(big, 1, 0x10, 1, 8)));
        s.event(&Event::Free(&free(big + 1, 1, 0x10)));
        s.event(&Event::Alloc(&alloc(big * 2, 1, 0x20, 1, 8)));
        s.event(&Event::Free(&free(big * 2, 1, 0x30)));
        // Taken up to the watermark: the first two.
        assert_eq!(s.allocs.len() + s.frees.len(), 2);
        s.event(&Event::Free(&free(5, 1, 0x40)));
        s.finish();
        assert_eq!(s.late, 1);
    }

    /// Sampled weights: a block's free takes off exactly what its allocation added.
    #[test]
    fn sampled_blocks_weigh_the_same_at_both_ends() {
        let mut a = alloc(10, 1, 0x10, 1, 100);
        a.sample_period = 1000;
        let mut s = HeapSink::default();
        s.event(&Event::Alloc(&a));
        s.event(&Event::Free(&free(20, 1, 0x10)));
        s.finish();
        assert_eq!(s.peak, weight(100, 1000));
        assert!(
            s.peak > 1000,
            "100 bytes at a 1000-byte period stand for ~1050"
        );
        assert_eq!(s.live_total, 0);
        assert_eq!(s.max_period, 1000);
        assert_eq!(weight(4096, 0), 4096);
        assert_eq!(weight(64, 1), 64);
    }
}
