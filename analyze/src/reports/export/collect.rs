//! What an export keeps of a trace, in one pass ([`collect`]): every event that passes the
//! filter is counted, and a bounded number of them is kept (see [`Caps`]); the stacks are
//! named after the whole trace is read (the symbolizer's records come at the end of a
//! symbolized trace). What Perfetto's and Firefox's writers share.
use crate::model::{Filter, Frame, Loaded, Losses, Sink, Trace};
use ebtrace_format::proto::LockSource;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

/// The file format of an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Perfetto,
    Firefox,
}

/// How much an export keeps, so that a large trace still gives a file a browser loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// Instant events per kind (alloc, cpu, memgrowth in Perfetto; allocation samples in
    /// Firefox): a uniform sample of this many (reservoir sampling, the same every run).
    pub instants: usize,
    /// Slices (Perfetto) or interval markers (Firefox) per kind (offcpu, lock, func,
    /// syscall, bio, runq): the longest this many.
    pub slices: usize,
    /// CPU samples in the Firefox profile: a uniform sample of this many.
    pub samples: usize,
}

impl Default for Caps {
    fn default() -> Self {
        Caps {
            instants: DEFAULT_MAX_INSTANTS,
            slices: DEFAULT_MAX_SLICES,
            samples: DEFAULT_MAX_SAMPLES,
        }
    }
}

pub const DEFAULT_MAX_INSTANTS: usize = 200_000;
pub const DEFAULT_MAX_SLICES: usize = 200_000;
pub const DEFAULT_MAX_SAMPLES: usize = 2_000_000;

/// What an export wrote.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ExportStats {
    /// Per kind: (events kept, events that passed the filter).
    pub kinds: BTreeMap<&'static str, (u64, u64)>,
    /// Wake-up flows (Perfetto) drawn, and those left out because the waker thread has no
    /// event in the export (another process, a kernel thread, or filtered out).
    pub flows: u64,
    pub flows_without_waker_thread: u64,
    pub processes: usize,
    pub threads: usize,
    /// Bytes written (before gzip).
    pub bytes: u64,
    pub losses: Losses,
}

impl ExportStats {
    /// Kinds that were capped: "alloc 200000 of 1234567".
    pub fn capped(&self) -> Vec<String> {
        self.kinds
            .iter()
            .filter(|(_, (kept, all))| kept < all)
            .map(|(k, (kept, all))| format!("{k} {kept} of {all}"))
            .collect()
    }
}

/// The families an export shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Kind {
    OffCpu,
    Lock,
    Func,
    Syscall,
    Bio,
    Runq,
    Alloc,
    Cpu,
    MemGrowth,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::OffCpu => "offcpu",
            Kind::Lock => "lock",
            Kind::Func => "func",
            Kind::Syscall => "syscall",
            Kind::Bio => "bio",
            Kind::Runq => "runq",
            Kind::Alloc => "alloc",
            Kind::Cpu => "cpu",
            Kind::MemGrowth => "memgrowth",
        }
    }
}

/// The per-family part of a kept event.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Extra {
    OffCpu {
        waker_tid: u32,
        waker_stack: u64,
        state: u32,
    },
    Lock {
        mutex: u64,
        hold_ns: u64,
        waker_tid: u32,
        waker_stack: u64,
        futex_op: u32,
        source: LockSource,
        result: i32,
    },
    Func {
        function: u64,
    },
    Syscall {
        nr: u32,
        ret: i64,
    },
    Bio {
        dev: u32,
        op: u32,
        bytes: u64,
        error: i32,
    },
    Runq {
        preempted: u32,
        cpu: u32,
    },
    Alloc {
        size: u64,
        address: u64,
    },
    Cpu {
        cpu: u32,
    },
    MemGrowth {
        kind: ebtrace_format::proto::MemGrowthKind,
        size: u64,
    },
}

/// A kept event: boottime start and duration (0 for instants), thread, stack.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rec {
    pub time: u64,
    pub dur: u64,
    pub generation: u32,
    pub tid: u32,
    pub stack: u64,
    pub extra: Extra,
}

/// The events of one kind: kept ones, and how many passed the filter.
#[derive(Debug, Default)]
struct Kept {
    recs: Vec<Rec>,
    seen: u64,
}

/// Keeps the `cap` longest: trims to them whenever twice as many are held.
fn keep_longest(k: &mut Kept, r: Rec, cap: usize) {
    k.seen += 1;
    if cap == 0 {
        return;
    }
    k.recs.push(r);
    if k.recs.len() >= cap.saturating_mul(2) {
        trim_longest(&mut k.recs, cap);
    }
}

fn trim_longest(recs: &mut Vec<Rec>, cap: usize) {
    if recs.len() > cap {
        recs.select_nth_unstable_by(cap - 1, |a, b| b.dur.cmp(&a.dur).then(a.time.cmp(&b.time)));
        recs.truncate(cap);
    }
}

/// Reservoir sampling (algorithm R) with a fixed seed: a uniform sample of `cap`, the
/// same for the same trace.
fn keep_sample(k: &mut Kept, r: Rec, cap: usize, rng: &mut u64) {
    k.seen += 1;
    if k.recs.len() < cap {
        k.recs.push(r);
        return;
    }
    if cap == 0 {
        return;
    }
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    let j = *rng % k.seen;
    if (j as usize) < cap {
        k.recs[j as usize] = r;
    }
}

/// What one pass over the trace keeps.
pub(crate) struct Collected {
    pub loaded: Loaded,
    /// Kept events per kind, in time order.
    pub kinds: BTreeMap<Kind, Vec<Rec>>,
    pub seen: BTreeMap<Kind, u64>,
    /// Every thread with an event that passed the filter: tid -> its last generation.
    pub threads: HashMap<u32, u32>,
}

struct Collector {
    format: Format,
    caps: Caps,
    kept: BTreeMap<Kind, Kept>,
    threads: HashMap<u32, u32>,
    rng: u64,
}

impl Sink for Collector {
    fn event(&mut self, ev: &crate::model::Event<'_>) {
        use crate::model::Event as E;
        let (time, generation, tid) = ev.time_generation_tid();
        let rec = |dur: u64, stack: u64, extra: Extra| Rec {
            time,
            dur,
            generation,
            tid,
            stack,
            extra,
        };
        let (kind, r) = match ev {
            E::OffCpu(e) => (
                Kind::OffCpu,
                rec(
                    e.duration_ns,
                    e.stack,
                    Extra::OffCpu {
                        waker_tid: e.waker_tid,
                        waker_stack: e.waker_stack,
                        state: e.state,
                    },
                ),
            ),
            E::Lock(e) => (
                Kind::Lock,
                rec(
                    e.wait_ns,
                    e.stack,
                    Extra::Lock {
                        mutex: e.mutex,
                        hold_ns: e.hold_ns,
                        waker_tid: e.waker_tid,
                        waker_stack: e.waker_stack,
                        futex_op: e.futex_op,
                        source: e.source,
                        result: e.result,
                    },
                ),
            ),
            E::Func(e) => (
                Kind::Func,
                rec(
                    e.duration_ns,
                    e.stack,
                    Extra::Func {
                        function: e.function,
                    },
                ),
            ),
            E::Syscall(e) => (
                Kind::Syscall,
                rec(
                    e.duration_ns,
                    e.stack,
                    Extra::Syscall {
                        nr: e.nr,
                        ret: e.ret,
                    },
                ),
            ),
            E::Bio(e) => (
                Kind::Bio,
                rec(
                    e.duration_ns,
                    e.stack,
                    Extra::Bio {
                        dev: e.dev,
                        op: e.op,
                        bytes: e.bytes,
                        error: e.error,
                    },
                ),
            ),
            E::Runq(e) => (
                Kind::Runq,
                rec(
                    e.duration_ns,
                    e.stack,
                    Extra::Runq {
                        preempted: e.preempted,
                        cpu: e.cpu,
                    },
                ),
            ),
            E::Alloc(e) => (
                Kind::Alloc,
                rec(
                    0,
                    e.stack,
                    Extra::Alloc {
                        size: e.size,
                        address: e.address,
                    },
                ),
            ),
            E::Cpu(e) => (Kind::Cpu, rec(0, e.stack, Extra::Cpu { cpu: e.cpu })),
            E::MemGrowth(e) => (
                Kind::MemGrowth,
                rec(
                    0,
                    e.stack,
                    Extra::MemGrowth {
                        kind: e.kind,
                        size: e.size,
                    },
                ),
            ),
            // Frees have no stack and no duration; histograms and aggregates have no
            // per-event time or thread; TCP events are in `ebsym tcp`.
            _ => return,
        };
        self.threads.insert(tid, generation);
        let k = self.kept.entry(kind).or_default();
        match kind {
            Kind::Cpu if self.format == Format::Firefox => {
                keep_sample(k, r, self.caps.samples, &mut self.rng)
            }
            Kind::Alloc | Kind::Cpu | Kind::MemGrowth => {
                keep_sample(k, r, self.caps.instants, &mut self.rng)
            }
            _ => keep_longest(k, r, self.caps.slices),
        }
    }
}

/// Reads `trace` once, keeping what an export in `format` shows, within `caps`.
pub(crate) fn collect(trace: impl Trace, format: Format, filter: &Filter, caps: Caps) -> Collected {
    let mut c = Collector {
        format,
        caps,
        kept: BTreeMap::new(),
        threads: HashMap::new(),
        rng: 0x9e37_79b9_7f4a_7c15,
    };
    let loaded = Loaded::from_trace(trace, filter, &mut c);
    let mut kinds = BTreeMap::new();
    let mut seen = BTreeMap::new();
    for (kind, mut k) in c.kept {
        if !matches!(kind, Kind::Alloc | Kind::Cpu | Kind::MemGrowth) {
            trim_longest(&mut k.recs, caps.slices);
        }
        k.recs
            .sort_by_key(|r| (r.time, std::cmp::Reverse(r.dur), r.tid));
        seen.insert(kind, k.seen);
        kinds.insert(kind, k.recs);
    }
    Collected {
        loaded,
        kinds,
        seen,
        threads: c.threads,
    }
}

/// Frames of stacks, named once per stack id.
#[derive(Default)]
pub(crate) struct StackNames {
    frames: HashMap<u64, Rc<Vec<Frame>>>,
}

impl StackNames {
    /// The frames of stack `id`, leaf first (none for stack 0).
    pub(crate) fn frames(&mut self, l: &mut Loaded, id: u64) -> Rc<Vec<Frame>> {
        if id == 0 {
            return Rc::default();
        }
        self.frames
            .entry(id)
            .or_insert_with(|| Rc::new(l.frames(id)))
            .clone()
    }
}

impl Collected {
    /// (pid, comm) of a generation.
    pub(crate) fn process(&self, generation: u32) -> (u32, String) {
        match self.loaded.tables.generations.get(&generation) {
            Some(g) => (
                g.process.pid,
                self.loaded.tables.string(g.process.comm).into_owned(),
            ),
            None => (0, format!("generation {generation}")),
        }
    }

    /// ns since the trace's start.
    pub(crate) fn rel(&self, t: u64) -> u64 {
        t.saturating_sub(self.loaded.header.start_time_ns)
    }

    /// Kept and seen, per kind name.
    pub(crate) fn kind_counts(&self) -> BTreeMap<&'static str, (u64, u64)> {
        self.kinds
            .iter()
            .map(|(k, v)| (k.name(), (v.len() as u64, self.seen[k])))
            .collect()
    }

    /// The threads to show: pid -> (comm, tids), from the events kept and the wakers
    /// they name.
    pub(crate) fn thread_tree(&self) -> BTreeMap<u32, (String, Vec<u32>)> {
        let mut tids: BTreeMap<u32, u32> = BTreeMap::new();
        for r in self.kinds.values().flatten() {
            tids.insert(r.tid, r.generation);
            let waker = match r.extra {
                Extra::OffCpu { waker_tid, .. } | Extra::Lock { waker_tid, .. } => waker_tid,
                _ => 0,
            };
            if waker != 0 {
                if let Some(&g) = self.threads.get(&waker) {
                    tids.entry(waker).or_insert(g);
                }
            }
        }
        let mut out: BTreeMap<u32, (String, Vec<u32>)> = BTreeMap::new();
        for (tid, g) in tids {
            let (pid, comm) = self.process(g);
            let e = out.entry(pid).or_insert_with(|| (comm, Vec::new()));
            e.1.push(tid);
        }
        // The main thread first.
        for (pid, (_, tids)) in out.iter_mut() {
            tids.sort_by_key(|t| (t != pid, *t));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(time: u64, dur: u64) -> Rec {
        Rec {
            time,
            dur,
            generation: 1,
            tid: 1,
            stack: 0,
            extra: Extra::Cpu { cpu: 0 },
        }
    }

    #[test]
    fn longest_are_kept() {
        let mut k = Kept::default();
        for i in 0..1000u64 {
            keep_longest(&mut k, rec(i, (i * 7919) % 1000), 10);
        }
        trim_longest(&mut k.recs, 10);
        let mut d: Vec<u64> = k.recs.iter().map(|r| r.dur).collect();
        d.sort();
        assert_eq!(d, (990..1000).collect::<Vec<_>>());
        assert_eq!(k.seen, 1000);
    }

    #[test]
    fn reservoir_is_bounded_and_spread() {
        let mut k = Kept::default();
        let mut rng = 0x9e37_79b9_7f4a_7c15;
        for i in 0..100_000u64 {
            keep_sample(&mut k, rec(i, 0), 1000, &mut rng);
        }
        assert_eq!(k.recs.len(), 1000);
        assert_eq!(k.seen, 100_000);
        // Uniform: about a tenth in each tenth of the time.
        let first = k.recs.iter().filter(|r| r.time < 10_000).count();
        assert!((50..=150).contains(&first), "{first}");
    }
}
