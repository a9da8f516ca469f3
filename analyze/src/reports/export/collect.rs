//! What an export keeps of a trace, in one pass ([`collect`]): every event that passes the
//! filter is counted, and a bounded number of them is kept (see [`Caps`]); the stacks are
//! named after the whole trace is read (the symbolizer's records come at the end of a
//! symbolized trace). What Perfetto's and Firefox's writers share.
use crate::event::EventView;
use crate::model::{Event, Filter, Frame, Loaded, Losses, Sink, Trace};
use crate::reports::requests::{Boundaries, Req};
use crate::reports::EventKind;
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

/// The kinds an export shows, in the order it writes them (Perfetto) or adds them
/// (Firefox): the intervals (slices, markers), then the instants. TCP events are in
/// `ebsym tcp`, not here.
pub(crate) const KINDS: [EventKind; 9] = [
    EventKind::OffCpu,
    EventKind::Lock,
    EventKind::Func,
    EventKind::Syscall,
    EventKind::Bio,
    EventKind::Runq,
    EventKind::Alloc,
    EventKind::Cpu,
    EventKind::MemGrowth,
];

/// How long an event lasted (0 for an instant): what the slices are kept by.
fn dur(v: &EventView) -> u64 {
    v.duration_ns.unwrap_or(0)
}

/// The events of one kind: kept ones, and how many passed the filter.
#[derive(Debug, Default)]
struct Kept {
    recs: Vec<EventView>,
    seen: u64,
    /// Intervals (the view has a duration): the longest are kept, else a sample.
    slices: bool,
}

/// Keeps the `cap` longest: trims to them whenever twice as many are held.
fn keep_longest(k: &mut Kept, r: EventView, cap: usize) {
    k.seen += 1;
    if cap == 0 {
        return;
    }
    k.recs.push(r);
    if k.recs.len() >= cap.saturating_mul(2) {
        trim_longest(&mut k.recs, cap);
    }
}

fn trim_longest(recs: &mut Vec<EventView>, cap: usize) {
    if recs.len() > cap {
        recs.select_nth_unstable_by(cap - 1, |a, b| {
            dur(b).cmp(&dur(a)).then(a.time_ns.cmp(&b.time_ns))
        });
        recs.truncate(cap);
    }
}

/// Reservoir sampling (algorithm R) with a fixed seed: a uniform sample of `cap`, the
/// same for the same trace.
fn keep_sample(k: &mut Kept, r: EventView, cap: usize, rng: &mut u64) {
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
    /// The kept events of each kind that had any, in [`KINDS`]' order, each kind's in time
    /// order; and how many of the kind passed the filter.
    pub kinds: Vec<(EventKind, Vec<EventView>, u64)>,
    /// Every thread with an event that passed the filter: tid -> its last generation.
    pub threads: HashMap<u32, u32>,
    /// A trace recorded with --request: its spec and requests (the longest `caps.slices`,
    /// in time order), and how many were paired.
    pub requests: Option<(String, Vec<Req>, u64)>,
}

struct Collector {
    format: Format,
    caps: Caps,
    kept: BTreeMap<EventKind, Kept>,
    threads: HashMap<u32, u32>,
    rng: u64,
    requests: Boundaries,
}

impl Sink for Collector {
    fn header(&mut self, h: &ebtrace_format::proto::Header) {
        self.requests.header(h);
    }

    fn event(&mut self, ev: &Event<'_>) {
        self.requests.event(ev);
        // Frees have no stack and no duration; histograms and aggregates have no
        // per-event time or thread.
        let Some(v) = ev.view() else {
            return;
        };
        if !KINDS.contains(&v.kind) {
            return;
        }
        self.threads.insert(v.tid, v.generation);
        let k = self.kept.entry(v.kind).or_default();
        k.slices = v.duration_ns.is_some();
        if k.slices {
            keep_longest(k, v, self.caps.slices);
        } else if v.kind == EventKind::Cpu && self.format == Format::Firefox {
            keep_sample(k, v, self.caps.samples, &mut self.rng);
        } else {
            keep_sample(k, v, self.caps.instants, &mut self.rng);
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
        requests: Boundaries::default(),
    };
    let loaded = Loaded::from_trace(trace, filter, &mut c);
    let spec = c.requests.spec().map(str::to_string);
    let requests = match (spec, std::mem::take(&mut c.requests).requests(&loaded)) {
        (Some(spec), Ok((mut reqs, _))) => {
            let n = reqs.len() as u64;
            if reqs.len() > caps.slices {
                reqs.select_nth_unstable_by(caps.slices.max(1) - 1, |a, b| {
                    (b.end - b.start).cmp(&(a.end - a.start))
                });
                reqs.truncate(caps.slices);
            }
            reqs.sort_by_key(|r| (r.start, r.tid));
            for r in &reqs {
                c.threads.entry(r.tid).or_insert(r.generation);
            }
            Some((spec, reqs, n))
        }
        // (no probe of the pair ever hit: no request)
        (Some(spec), Err(_)) => Some((spec, Vec::new(), 0)),
        _ => None,
    };
    let mut kinds = Vec::new();
    for kind in KINDS {
        let Some(mut k) = c.kept.remove(&kind) else {
            continue;
        };
        if k.slices {
            trim_longest(&mut k.recs, caps.slices);
        }
        k.recs
            .sort_by_key(|r| (r.time_ns, std::cmp::Reverse(dur(r)), r.tid));
        kinds.push((kind, k.recs, k.seen));
    }
    Collected {
        loaded,
        kinds,
        threads: c.threads,
        requests,
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

    /// The name a thread is shown with: its own name (the trace's Thread records: the last
    /// one it was given) then its tid, the main thread by its name alone; "comm tid" when
    /// the trace names no thread (older traces, a thread gone before it was seen).
    pub(crate) fn thread_display(&self, pid: u32, tid: u32, comm: &str) -> String {
        let name = self
            .threads
            .get(&tid)
            .and_then(|&g| self.loaded.tables.threads.get(&(g, tid)))
            .and_then(|v| v.last())
            .map(|&(_, id)| self.loaded.tables.string(id).into_owned());
        match name {
            Some(n) if tid == pid => n,
            Some(n) => format!("{n} {tid}"),
            None if tid == pid => comm.to_string(),
            None => format!("{comm} {tid}"),
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
            .map(|(k, kept, seen)| (k.name(), (kept.len() as u64, *seen)))
            .collect()
    }

    /// The threads to show: pid -> (comm, tids), from the events kept and the wakers
    /// they name.
    pub(crate) fn thread_tree(&self) -> BTreeMap<u32, (String, Vec<u32>)> {
        let mut tids: BTreeMap<u32, u32> = BTreeMap::new();
        for r in self.requests.iter().flat_map(|r| &r.1) {
            tids.insert(r.tid, r.generation);
        }
        for r in self.kinds.iter().flat_map(|k| &k.1) {
            tids.insert(r.tid, r.generation);
            let waker = r.waker.map_or(0, |w| w.tid);
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

    fn rec(time: u64, dur: u64) -> EventView {
        EventView {
            kind: EventKind::OffCpu,
            generation: 1,
            tid: 1,
            stack: 0,
            time_ns: time,
            duration_ns: Some(dur),
            waker: None,
            fields: crate::event::Fields::OffCpu {
                runnable_ns: 0,
                state: 0,
                weight: dur,
                blocks: 1,
            },
        }
    }

    #[test]
    fn longest_are_kept() {
        let mut k = Kept::default();
        for i in 0..1000u64 {
            keep_longest(&mut k, rec(i, (i * 7919) % 1000), 10);
        }
        trim_longest(&mut k.recs, 10);
        let mut d: Vec<u64> = k.recs.iter().map(dur).collect();
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
        let first = k.recs.iter().filter(|r| r.time_ns < 10_000).count();
        assert!((50..=150).contains(&first), "{first}");
    }
}
