//! `ebsym report`: one self-contained HTML page of a trace (and, with a base trace, of
//! what changed): the summary, a flame graph per event kind, one timeline of all families
//! per process and thread, latency heat maps and sortable tables. Everything is inline
//! (the data as one JSON blob, the viewer as plain JavaScript and CSS kept beside this file
//! and pulled in with `include_str!`), so the file opens from disk with no network.
//!
//! The data is aggregated here, never embedded raw: stacks are interned once (a frame table
//! of `[function, file, line, module, inlined]` and a stack table of frame indices, leaf
//! first) and everything refers to stacks by index; per kind, the flame graph's input is
//! per (stack, time bucket) sums, from which the page recomputes a flame graph for any time
//! range; the timeline gets at most [`TIMELINE_CAP`] events per kind (the longest, largest
//! or latest, see [`timeline_rule`]), the page says how many were left out. No memory of
//! the target is embedded: stack copies are dropped when the trace is read, and only the
//! symbolized frames are written.
//!
//! The trace is read twice: for `info`, whose span sets the time buckets before the first
//! event, then once for the page's own sink and every report it shows (summary, latency,
//! locks, leaks, heat maps, thread groups, the after side of the diffs), all fed the same
//! events (`pass.rs`). A base trace is read for its info, then once for its stacks.
use super::diff::diff_stacks;
use super::heatmap::{build, HeatmapOptions};
use super::idle::IdleRules;
use super::kind::{EventKind, Measure};
use super::names::{bio_name, function_name, syscall_name};
use super::pass::{Passed, Wants};
use super::summary::summary_of;
use super::suppress::Suppressions;
use super::time_buckets::TimeBuckets;
use super::top::Row;
use super::wrappers::WrapperRules;
use crate::event::{EventView, Fields, Waker};
use crate::hash::{FastMap, FastSet};
use crate::histogram::Histogram;
use crate::model::{Event, Filter, Frame, Loaded, Losses, Sink};
use ebtrace_format::events::AggregateRow;
use ebtrace_format::proto::EventFamily;
use ebtrace_format::TraceReader;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::io::Read;

/// Timeline events embedded per kind, at most: the longest (off-CPU, lock, func, syscall,
/// bio, runq), the largest (alloc, memgrowth) or the latest (tcp). CPU samples are drawn
/// as a density per thread and time bucket instead.
pub const TIMELINE_CAP: usize = 50_000;
/// Time buckets over the trace's span for the per-(stack, bucket) sums.
pub const TIME_BUCKETS: u64 = 500;
/// (stack, bucket) entries per kind, at most: past it, buckets are merged two by two.
pub const AGG_CAP: usize = 300_000;
/// Rows of a base-versus-trace diff embedded per kind, at most (the largest changes).
pub const DIFF_CAP: usize = 20_000;
/// Columns of the latency heat maps.
pub const HEAT_COLUMNS: usize = 200;
/// Thread groups embedded for the Threads section, at most (the most wall time).
pub const THREAD_GROUPS_CAP: usize = 100;
/// Distinct stacks a kind's flame graph and timeline draw: the heaviest (by the kind's
/// first measure, then count); the others are one stack, `[N more stacks ...]`, their sums
/// kept, so that a trace with tens of thousands of stacks makes a page of bounded size
/// (`ebsym top`, `folded` and `flamegraph` have every stack).
pub const STACKS_CAP: usize = 1_000;

const TEMPLATE: &str = include_str!("template.html");
const CSS: &str = include_str!("report.css");
const JS: &str = include_str!("report.js");

/// What the page holds, for the command's closing line.
#[derive(Debug, Default, Clone, Serialize)]
pub struct HtmlStats {
    pub bytes: usize,
    pub kinds: Vec<String>,
    pub stacks: usize,
    pub frames: usize,
    /// Per kind: (timeline events embedded, events in all).
    pub timeline: BTreeMap<String, (usize, u64)>,
}

/// The rule by which a kind's timeline events are kept under [`TIMELINE_CAP`].
pub fn timeline_rule(kind: EventKind) -> &'static str {
    match kind {
        EventKind::Alloc | EventKind::MemGrowth => "largest",
        EventKind::Tcp | EventKind::Cpu => "latest",
        _ => "longest",
    }
}

/// One timeline event: start (boottime ns), duration, thread, stack, the waker (thread and
/// stack) and one more value of the kind (lock hold ns, syscall nr, bio bytes, alloc size).
#[derive(Debug, Clone, Copy)]
struct TlEv {
    key: u64,
    t: u64,
    dur: u64,
    tid: u32,
    generation: u32,
    stack: u64,
    wtid: u32,
    wstack: u64,
    extra: u64,
}

#[derive(Default)]
struct KindAcc {
    /// (raw stack, bucket) -> (count, a, b): a and b as `Measure::pick` takes them.
    agg: FastMap<(u64, u32), [u64; 3]>,
    /// (raw stack, raw waker stack) -> count, for the waker column of the tables.
    wakers: FastMap<(u64, u64), u64>,
    tl: Vec<TlEv>,
    events: u64,
    /// Latency (wait, duration) of every event, per name (syscall nr, bio dev and op, probed
    /// function; u64::MAX for the kind as a whole).
    lat: BTreeMap<u64, Histogram>,
}

impl KindAcc {
    fn keep(&mut self, e: TlEv) {
        self.tl.push(e);
        if self.tl.len() >= 2 * TIMELINE_CAP {
            self.trim();
        }
    }
    fn trim(&mut self) {
        if self.tl.len() > TIMELINE_CAP {
            self.tl
                .select_nth_unstable_by(TIMELINE_CAP - 1, |a, b| (b.key, b.t).cmp(&(a.key, a.t)));
            self.tl.truncate(TIMELINE_CAP);
        }
    }
}

struct ReportSink {
    /// Widened as the events come: the sums of the narrower buckets merged two by two.
    buckets: TimeBuckets,
    kinds: Vec<KindAcc>,
    /// (tid, generation) -> events, all kinds.
    threads: FastMap<(u32, u32), u64>,
    /// (tid, generation, bucket) -> cpu samples.
    cpu: FastMap<(u32, u32, u32), u64>,
}

fn kind_index(k: EventKind) -> usize {
    EventKind::ALL.iter().position(|x| *x == k).unwrap()
}

impl ReportSink {
    /// At most [`TIME_BUCKETS`] time buckets from `start_ns`.
    fn new(start_ns: u64) -> Self {
        ReportSink {
            buckets: TimeBuckets::new(start_ns, TIME_BUCKETS),
            kinds: EventKind::ALL.iter().map(|_| KindAcc::default()).collect(),
            threads: FastMap::default(),
            cpu: FastMap::default(),
        }
    }

    /// The bucket of time `t`, the sums widened first when it is past the last.
    fn bucket(&mut self, t: u64) -> u32 {
        let (b, doublings) = self.buckets.place(t);
        if doublings > 0 {
            for acc in &mut self.kinds {
                let mut agg = FastMap::default();
                agg.reserve(acc.agg.len());
                for ((s, b), v) in acc.agg.drain() {
                    let e: &mut [u64; 3] = agg.entry((s, b >> doublings)).or_default();
                    for j in 0..3 {
                        e[j] += v[j];
                    }
                }
                acc.agg = agg;
            }
            let mut cpu = FastMap::default();
            for ((tid, g, b), n) in self.cpu.drain() {
                *cpu.entry((tid, g, b >> doublings)).or_default() += n;
            }
            self.cpu = cpu;
        }
        b
    }
}

impl ReportSink {
    /// What the kernel counted under one stack in an interval (--aggregate): into the
    /// flame graph's sums, not the timeline.
    fn aggregated(&mut self, family: EventFamily, r: &AggregateRow, bucket: u32) {
        let Some(kind) = EventKind::of_family(family) else {
            return;
        };
        if r.count == 0 && r.sum == 0 && r.sum2 == 0 {
            return;
        }
        let a = if kind == EventKind::Cpu {
            r.count
        } else {
            r.sum
        };
        let acc = &mut self.kinds[kind_index(kind)];
        acc.events += r.count;
        let g = acc.agg.entry((r.stack, bucket)).or_default();
        g[0] += r.count;
        g[1] += a;
        g[2] += r.sum2;
    }
}

/// Of an event's values ([`EventView::values`]), the one its kind's timeline keeps the
/// most of ([`timeline_rule`]): the size (alloc, memgrowth), the time (tcp, cpu), else the
/// duration.
fn timeline_key(v: &EventView, a: u64) -> u64 {
    match v.kind {
        EventKind::Alloc | EventKind::MemGrowth => a,
        EventKind::Tcp | EventKind::Cpu => v.time_ns,
        _ => v.duration_ns.unwrap_or(0),
    }
}

/// The one value of its kind a timeline event carries to the page (`report.js` reads
/// it): the lock's hold ns, the probed function, the off-CPU task state, the syscall
/// number, a bio's bytes, an allocation's or growth's size, the tcp event kind.
fn timeline_extra(v: &EventView) -> u64 {
    match v.fields {
        Fields::Lock { hold_ns, .. } => hold_ns,
        Fields::Func { function } => function,
        Fields::Usdt { probe } => probe,
        Fields::OffCpu { state, .. } => u64::from(state),
        Fields::Syscall { nr, .. } => u64::from(nr),
        Fields::Bio { bytes, .. } => bytes,
        Fields::Alloc { size, .. } | Fields::MemGrowth { size, .. } => size,
        Fields::Tcp { kind, .. } => kind as u64,
        Fields::Runq { .. } | Fields::Cpu { .. } => 0,
    }
}

impl Sink for ReportSink {
    fn event(&mut self, ev: &Event<'_>) {
        let (t, generation, tid) = ev.time_generation_tid();
        let b = self.bucket(t);
        let Some(v) = ev.view() else {
            if let Event::Aggregated(family, r) = ev {
                self.aggregated(*family, r, b);
            }
            return;
        };
        // memgrowth: growth only.
        if v.is_release() {
            return;
        }
        if v.kind == EventKind::Cpu {
            *self.cpu.entry((tid, generation, b)).or_default() += 1;
        }
        *self.threads.entry((tid, generation)).or_default() += 1;
        let (a, second) = v.values();
        // a block kept by --offcpu-sample stands for `blocks` of its length
        let (n, lat) = match v.fields {
            Fields::OffCpu { blocks, .. } => (blocks, v.duration_ns.unwrap_or(0)),
            Fields::Syscall { calls, .. } => (calls, v.duration_ns.unwrap_or(0)),
            Fields::Runq { waits, .. } => (waits, v.duration_ns.unwrap_or(0)),
            Fields::MemGrowth { count, .. } => (count, a),
            _ => (1, a),
        };
        let acc = &mut self.kinds[kind_index(v.kind)];
        acc.events += 1;
        let g = acc.agg.entry((v.stack, b)).or_default();
        g[0] += n;
        g[1] += a;
        g[2] += second;
        let waker = v.waker.unwrap_or(Waker { tid: 0, stack: 0 });
        if waker.stack != 0 {
            *acc.wakers.entry((v.stack, waker.stack)).or_default() += 1;
        }
        if v.kind.has_latency() {
            acc.lat.entry(u64::MAX).or_default().record_n(lat, n);
            if matches!(
                v.kind,
                EventKind::Syscall | EventKind::Bio | EventKind::Func
            ) {
                acc.lat.entry(v.sub_key()).or_default().record_n(lat, n);
            }
        }
        // CPU samples are a density per thread, not timeline events.
        if v.kind != EventKind::Cpu {
            acc.keep(TlEv {
                key: timeline_key(&v, a),
                t,
                dur: v.duration_ns.unwrap_or(0),
                tid,
                generation,
                stack: v.stack,
                wtid: waker.tid,
                wstack: waker.stack,
                extra: timeline_extra(&v),
            });
        }
    }
}

/// What makes two frames one: function, file, line, module, inlined.
type FrameKey = (String, Option<String>, Option<u32>, String, bool);

/// Frames and stacks, interned once for the whole page.
#[derive(Default)]
struct Interner {
    frames: Vec<Value>,
    frame_ids: HashMap<FrameKey, u32>,
    stacks: Vec<Vec<u32>>,
    stack_ids: HashMap<Vec<u32>, u32>,
    /// Raw stack id of the main trace -> interned.
    raw: FastMap<u64, u32>,
    /// The raw stacks drawn of the kind being made, when capped ([`STACKS_CAP`]); the
    /// others are [`Interner::other`].
    kept: Option<FastSet<u64>>,
    /// The stack that stands for those not drawn.
    other: Option<u32>,
}

impl Interner {
    /// The one-frame stack that stands for the stacks past [`STACKS_CAP`].
    fn other(&mut self) -> u32 {
        if let Some(id) = self.other {
            return id;
        }
        let id = self.stack(&[Frame {
            function: format!(
                "[more stacks: the page draws the {STACKS_CAP} heaviest of a kind; ebsym top, folded and flamegraph have all]"
            ),
            file: None,
            line: None,
            inlined: false,
            module: String::new(),
            address: String::new(),
        }]);
        self.other = Some(id);
        id
    }

    fn stack<F: std::borrow::Borrow<Frame>>(&mut self, frames: &[F]) -> u32 {
        let ids: Vec<u32> = frames
            .iter()
            .map(|f| {
                let f: &Frame = f.borrow();
                let key = (
                    f.function.clone(),
                    f.file.clone(),
                    f.line,
                    f.module.clone(),
                    f.inlined,
                );
                if let Some(&id) = self.frame_ids.get(&key) {
                    return id;
                }
                let id = self.frames.len() as u32;
                self.frames.push(json!([
                    f.function,
                    f.file,
                    f.line.unwrap_or(0),
                    f.module,
                    u8::from(f.inlined)
                ]));
                self.frame_ids.insert(key, id);
                id
            })
            .collect();
        if let Some(&id) = self.stack_ids.get(&ids) {
            return id;
        }
        let id = self.stacks.len() as u32;
        self.stacks.push(ids.clone());
        self.stack_ids.insert(ids, id);
        id
    }

    /// The interned id of raw stack `raw` of the main trace (0: no stack, the empty one);
    /// a stack past the cap is [`Interner::other`].
    fn raw(&mut self, l: &mut Loaded, raw: u64) -> u32 {
        if raw != 0 && self.kept.as_ref().is_some_and(|k| !k.contains(&raw)) {
            return self.other();
        }
        if let Some(&id) = self.raw.get(&raw) {
            return id;
        }
        let frames = if raw == 0 { Vec::new() } else { l.frames(raw) };
        let id = self.stack(&frames);
        self.raw.insert(raw, id);
        id
    }
}

fn kind_unit(kind: EventKind) -> &'static str {
    kind.default_measure().unit()
}

/// The measures of a kind as the page offers them: name, which of (count, a, b) it reads,
/// unit.
fn measures(kind: EventKind) -> Vec<Value> {
    kind.valid_measures()
        .iter()
        .map(|m| {
            let col = match m.pick(kind, 0, 1, 2) {
                0 => 0,
                1 => 1,
                _ => 2,
            };
            json!({"name": m.name(), "col": col, "unit": m.unit()})
        })
        .collect()
}

/// The name of a latency sub key of `kind` (syscall nr, bio dev/op, probed function).
fn lat_name(l: &Loaded, kind: EventKind, key: u64) -> String {
    match (kind, key) {
        (_, u64::MAX) => "(all)".to_string(),
        (EventKind::Syscall, nr) => syscall_name(&l.header.arch, nr),
        (EventKind::Bio, k) => bio_name(l, k),
        (EventKind::Func, f) => function_name(l, f),
        _ => "(all)".to_string(),
    }
}

fn losses_json(losses: &Losses) -> Value {
    serde_json::to_value(losses).unwrap_or(Value::Null)
}

/// The rules the page's summary and tables decide with: which waits are idle, which
/// frames of an allocation are allocator wrappers (the defaults unless the user says).
#[derive(Debug, Clone, Default)]
pub struct PageRules {
    pub idle: IdleRules,
    pub wrappers: WrapperRules,
}

/// What the page shows of the traces [`report`] opens.
#[derive(Debug, Clone, Copy)]
pub struct PageOptions<'a> {
    /// The filter both traces are read with.
    pub filter: &'a Filter,
    /// What the page calls the trace, and the trace it is compared against.
    pub name: &'a str,
    pub base_name: Option<&'a str>,
    /// The rows of the lock and leak tables.
    pub n: usize,
    /// The idle and wrapper rules (`ebsym report --idle`, `--wrapper`).
    pub rules: &'a PageRules,
}

/// Builds the page. `open` opens the (symbolized) trace three times: for its header's
/// start, then for its info and for every report at once (`pass.rs`), read side by side;
/// `base`, when given, opens the trace to compare against (the differential flame graphs)
/// twice.
pub fn report<R: Read + Send, B: Read + Send>(
    open: &mut dyn FnMut() -> Option<TraceReader<R>>,
    base: Option<&mut dyn FnMut() -> Option<TraceReader<B>>>,
    opts: &PageOptions,
) -> (String, HtmlStats) {
    let data = data(open, base, opts);
    let (html, mut stats) = render(&data);
    stats.bytes = html.len();
    (html, stats)
}

/// What the page's pass keeps besides its own sink: every kind's stacks (the summary, the
/// latency and lock tables, the diffs), the kernel histograms and the connections (the
/// summary, the latency table), the heat maps' points, the live blocks (leaks), the
/// per-thread sums (the Threads section and the summary's thread groups).
fn wants(t0: u64) -> Wants {
    let latency = [EventKind::Syscall, EventKind::Bio, EventKind::Runq];
    Wants {
        stacks: EventKind::ALL.to_vec(),
        latency: latency.to_vec(),
        tcp: true,
        heat: EventKind::ALL
            .into_iter()
            .filter(|k| k.has_latency())
            .collect(),
        // The heap's sink keeps the live blocks for the leaks table too.
        leaks: false,
        heap: Some((t0, TIME_BUCKETS)),
        threads: true,
    }
}

/// The start of the recording (the header's `start_time_ns`, boottime) from the trace's
/// first record: None when it is not a header, or says no start.
fn header_start<R: Read>(open: &mut dyn FnMut() -> Option<TraceReader<R>>) -> Option<u64> {
    match open()?.next()?.kind? {
        ebtrace_proto::v1::record::Kind::Header(h) => Some(h.start_time_ns).filter(|&t| t > 0),
        _ => None,
    }
}

/// The page's data. The trace is read twice at once: for `info`, on a thread of its own,
/// and for everything else ([`Passed`]), its time buckets widening as the events come
/// ([`TimeBuckets`]; the page read the info first for the span that set them); and once
/// more for the header's start alone (the first record). A base trace is read twice (its
/// info says which kinds it has, then their stacks).
fn data<R: Read + Send, B: Read + Send>(
    open: &mut dyn FnMut() -> Option<TraceReader<R>>,
    base: Option<&mut dyn FnMut() -> Option<TraceReader<B>>>,
    opts: &PageOptions,
) -> Value {
    let PageOptions {
        filter,
        name,
        base_name,
        n,
        rules,
    } = *opts;
    // The start is the header's (what --from/--to count from); a trace without one starts
    // at its first event, which its info, read first then, says.
    let (t0, info_first) = match header_start(open) {
        Some(t0) => (t0, None),
        None => {
            let info = open().map(|r| crate::info::summarize_from(r, name));
            let first = info.as_ref().and_then(|i| i.span.as_ref());
            (first.map_or(0, |s| s.first_event_ns), Some(info))
        }
    };
    let info_reader = if info_first.is_none() { open() } else { None };
    let Some(trace) = open() else {
        return json!({"error": format!("cannot read {name}")});
    };
    let mut sink = ReportSink::new(t0);
    let (mut p, info) = std::thread::scope(|s| {
        let job = info_reader.map(|r| s.spawn(move || crate::info::summarize_from(r, name)));
        let p = Passed::read(trace, filter, &wants(t0), Some(&mut sink));
        let info = match job {
            Some(job) => Some(job.join().unwrap_or_else(|e| std::panic::resume_unwind(e))),
            None => info_first.flatten(),
        };
        (p, info)
    });
    let last = info
        .as_ref()
        .and_then(|i| i.span.as_ref())
        .map_or(0, |s| s.last_event_ns);
    p.idle = rules.idle.clone();
    p.wrappers = rules.wrappers.clone();
    let end_rel = p
        .loaded
        .last_event_ns
        .unwrap_or(last)
        .max(last)
        .saturating_sub(t0);

    // Stacks are interned in the order the page's parts come: the kinds, the latency,
    // lock and leak tables, the diffs.
    let mut int = Interner::default();
    let mut kinds = serde_json::Map::new();
    let mut present = Vec::new();
    let l = p.fresh();
    for (i, acc) in sink.kinds.iter_mut().enumerate() {
        if acc.events > 0 || !acc.agg.is_empty() {
            let kind = EventKind::ALL[i];
            present.push(kind);
            let buckets = Buckets {
                t0,
                ns: sink.buckets.ns(),
            };
            let v = kind_json(kind, acc, buckets, l, &mut int);
            kinds.insert(kind.name().to_string(), v);
        }
    }
    let mut stats = HtmlStats {
        kinds: present.iter().map(|k| k.name().to_string()).collect(),
        ..Default::default()
    };
    for (i, acc) in sink.kinds.iter().enumerate() {
        // CPU samples are a density on the timeline, not events.
        if acc.events > 0 && EventKind::ALL[i] != EventKind::Cpu {
            stats
                .timeline
                .insert(EventKind::ALL[i].name().into(), (acc.tl.len(), acc.events));
        }
    }
    let threads = threads_json(&sink, &p.loaded);
    let cpu = cpu_json(&sink);
    let losses = p.loaded.losses.clone();
    // The summary first: its merge of the allocation stacks resolves each one's frames
    // (it learns the wrappers from them) and makes the stacks' classes, which the heap and
    // leak rows then look up (made by the heap rows first, the merge resolved every stack
    // again for its frames).
    let summary = summary_of(&mut p);
    let heat = heatmaps_json(&mut p, &present, t0, end_rel);
    let latency = latency_json(&mut p, &present, &mut int);
    let locks = locks_json(&mut p, &present, n, &mut int);
    let heap = heap_json(&mut p, &present, n, &mut int);
    let (leaks, leaks_note) = leaks_json(&mut p, &present, n, &mut int);
    let diff = match base {
        Some(base) => diff_json(base, opts, &mut p, &present, &mut int),
        None => serde_json::Map::new(),
    };
    let thread_groups = thread_groups_json(&mut p);
    // A trace recorded with --request: `ebsym requests`' report (two more passes).
    let requests = info
        .as_ref()
        .filter(|i| i.header.options.contains_key("request"))
        .map(|_| requests_json(open, filter));

    let stack_mode = info
        .as_ref()
        .and_then(|i| i.header.options.get("stack-mode").cloned());
    stats.stacks = int.stacks.len();
    stats.frames = int.frames.len();
    json!({
        "format": 1,
        "name": name,
        "base": base_name,
        "filter": {
            "pids": filter.pids, "tids": filter.tids, "comms": filter.comms,
            "from": filter.from, "to": filter.to,
        },
        "start_ns": t0,
        "end_ns": end_rel,
        "caps": {"timeline": TIMELINE_CAP, "agg": AGG_CAP, "diff": DIFF_CAP, "buckets": TIME_BUCKETS},
        "info": info.as_ref().map(|i| serde_json::to_value(i).unwrap_or(Value::Null)),
        "stack_memory": info.as_ref().map(|i| i.stack_memory_line()),
        "stack_mode": stack_mode,
        "summary": summary.findings,
        "losses": losses_json(&losses),
        "frames": int.frames,
        "stacks": int.stacks,
        "kinds": kinds,
        "threads": threads,
        "thread_groups": thread_groups,
        "requests": requests,
        "cpu": cpu,
        "heatmaps": heat,
        "latency": latency,
        "locks": locks,
        "heap": heap,
        "leaks": leaks,
        "leaks_note": leaks_note,
        "diff": diff,
        "stats": stats,
    })
}

/// The Requests section: `ebsym requests`' report, its default options (the 10 slowest, the
/// tail at p99), or why there is none.
fn requests_json<R: Read + Send>(
    open: &mut dyn FnMut() -> Option<TraceReader<R>>,
    filter: &Filter,
) -> Value {
    match crate::reports::requests_from(open, filter, &crate::reports::RequestOptions::default()) {
        Ok(r) => serde_json::to_value(&r).unwrap_or(Value::Null),
        Err(e) => json!({ "error": e }),
    }
}

/// The Threads section: where each thread group's time goes (`ebsym threads`' rows, the
/// first [`THREAD_GROUPS_CAP`] by wall time), the on-CPU, run-queue, off-CPU by cause and
/// not seen parts of each, with their top stacks as function names (leaf first).
fn thread_groups_json(p: &mut Passed) -> Value {
    let rep = p.threads();
    json!({
        "cpu_period_ns": rep.cpu_period_ns,
        "families": rep.families,
        "total": rep.groups.len(),
        "groups": &rep.groups[..rep.groups.len().min(THREAD_GROUPS_CAP)],
    })
}

/// The page's time buckets: `ns` each, from `t0`.
#[derive(Debug, Clone, Copy)]
struct Buckets {
    t0: u64,
    ns: u64,
}

/// One kind's part of the page: its flame graph's sums per (stack, time bucket), its
/// timeline events, the waker of each stack, its latencies.
fn kind_json(
    kind: EventKind,
    acc: &mut KindAcc,
    buckets: Buckets,
    l: &mut Loaded,
    int: &mut Interner,
) -> Value {
    acc.trim();
    let (kept, stacks_total) = heaviest_stacks(acc);
    int.kept = kept;
    let (flat, totals, factor) = flame_sums(acc, l, int);
    let tl = timeline(acc, l, int, buckets.t0);
    int.kept = None;
    let wakers = top_wakers(acc, l, int);
    let lat: Vec<Value> = acc
        .lat
        .iter()
        .rev()
        .map(|(k, h)| {
            json!({
                "name": lat_name(l, kind, *k),
                "count": h.count(), "p50_ns": h.quantile(0.5), "p90_ns": h.quantile(0.9),
                "p99_ns": h.quantile(0.99), "max_ns": h.max(), "total_ns": h.total(),
            })
        })
        .collect();
    let mut v = json!({
        "unit": kind_unit(kind),
        "measures": measures(kind),
        "bucket_ns": buckets.ns * u64::from(factor),
        "agg": flat,
        "totals": totals,
        "events": acc.events,
        "timeline": tl,
        "timeline_rule": timeline_rule(kind),
        "timeline_kept": acc.tl.len(),
        "wakers": wakers,
        "latency": lat,
    });
    // Said only when the cap applies (the page of a smaller trace is as it was).
    if stacks_total > STACKS_CAP {
        v["stacks_total"] = json!(stacks_total);
        v["stacks_shown"] = json!(STACKS_CAP);
    }
    v
}

/// The raw stacks of the heap's changes (bucket, raw stack, live bytes) that the heap
/// chart names when there are more than [`STACKS_CAP`]: those with the most live bytes at
/// any time, ties by id (None: all).
fn heap_kept(changes: &[(u32, u64, u64)]) -> Option<FastSet<u64>> {
    let mut most: FastMap<u64, u64> = FastMap::default();
    for &(_, raw, live) in changes {
        let m = most.entry(raw).or_default();
        *m = (*m).max(live);
    }
    if most.len() <= STACKS_CAP {
        return None;
    }
    let mut w: Vec<(u64, u64)> = most.into_iter().collect();
    w.select_nth_unstable_by(STACKS_CAP - 1, |a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    w.truncate(STACKS_CAP);
    Some(w.into_iter().map(|(raw, _)| raw).collect())
}

/// The raw stacks a kind's graphs draw when it has more than [`STACKS_CAP`]: the
/// heaviest by (first measure, count), ties by id (None: all); and how many it has.
fn heaviest_stacks(acc: &KindAcc) -> (Option<FastSet<u64>>, usize) {
    let mut by: FastMap<u64, (u64, u64)> = FastMap::default();
    for (&(raw, _), v) in &acc.agg {
        let e = by.entry(raw).or_default();
        e.0 += v[1];
        e.1 += v[0];
    }
    let total = by.len();
    if total <= STACKS_CAP {
        return (None, total);
    }
    let mut w: Vec<(u64, (u64, u64))> = by.into_iter().collect();
    w.select_nth_unstable_by(STACKS_CAP - 1, |a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    w.truncate(STACKS_CAP);
    (Some(w.into_iter().map(|(raw, _)| raw).collect()), total)
}

/// The (stack, bucket) sums under interned stacks, merged, then coarsened to [`AGG_CAP`]:
/// `[stack, bucket, count, a, b]` flat, the totals of (count, a, b), and how many buckets
/// each one merges.
fn flame_sums(acc: &KindAcc, l: &mut Loaded, int: &mut Interner) -> (Vec<u64>, [u64; 3], u32) {
    let mut agg: BTreeMap<(u32, u32), [u64; 3]> = BTreeMap::new();
    let mut keys: Vec<(u64, u32)> = acc.agg.keys().copied().collect();
    keys.sort_unstable();
    for k in keys {
        let v = acc.agg[&k];
        let s = int.raw(l, k.0);
        let e = agg.entry((s, k.1)).or_default();
        for j in 0..3 {
            e[j] += v[j];
        }
    }
    let mut factor = 1u32;
    while agg.len() > AGG_CAP {
        factor *= 2;
        let mut coarse: BTreeMap<(u32, u32), [u64; 3]> = BTreeMap::new();
        for ((s, b), v) in agg {
            let e = coarse.entry((s, b / 2)).or_default();
            for j in 0..3 {
                e[j] += v[j];
            }
        }
        agg = coarse;
    }
    let mut flat: Vec<u64> = Vec::with_capacity(agg.len() * 5);
    let mut totals = [0u64; 3];
    for ((s, b), v) in &agg {
        flat.extend([u64::from(*s), u64::from(*b), v[0], v[1], v[2]]);
        for j in 0..3 {
            totals[j] += v[j];
        }
    }
    (flat, totals, factor)
}

/// The timeline events kept, in time order, flat: [t since `t0`, dur, tid, pid, stack,
/// waker tid, waker stack + 1 (0: none), extra].
fn timeline(acc: &mut KindAcc, l: &mut Loaded, int: &mut Interner, t0: u64) -> Vec<u64> {
    acc.tl.sort_by_key(|e| e.t);
    let mut tl: Vec<u64> = Vec::with_capacity(acc.tl.len() * 7);
    for e in &acc.tl {
        let s = int.raw(l, e.stack);
        let w = if e.wstack != 0 {
            u64::from(int.raw(l, e.wstack)) + 1
        } else {
            0
        };
        tl.extend([
            e.t.saturating_sub(t0),
            e.dur,
            u64::from(e.tid),
            u64::from(l.pid(e.generation)),
            u64::from(s),
            u64::from(e.wtid),
            w,
            e.extra,
        ]);
    }
    tl
}

/// The waker seen most often per stack, interned: [stack, waker stack].
fn top_wakers(acc: &KindAcc, l: &mut Loaded, int: &mut Interner) -> Vec<[u32; 2]> {
    let mut top: BTreeMap<u32, (u64, u32)> = BTreeMap::new();
    let mut wk: Vec<((u64, u64), u64)> = acc.wakers.iter().map(|(k, v)| (*k, *v)).collect();
    wk.sort_unstable();
    for ((s, w), c) in wk {
        let s = int.raw(l, s);
        let w = int.raw(l, w);
        let e = top.entry(s).or_insert((0, w));
        if c > e.0 {
            *e = (c, w);
        }
    }
    top.iter().map(|(s, (_, w))| [*s, *w]).collect()
}

/// Threads, grouped by process: [pid, tid, comm, events, thread name ("": not named by the
/// trace)].
fn threads_json(sink: &ReportSink, l: &Loaded) -> Vec<Value> {
    let mut threads: BTreeMap<(u32, u32), (String, u64, String)> = BTreeMap::new();
    for (&(tid, generation), &c) in &sink.threads {
        let (pid, comm) = l
            .tables
            .generations
            .get(&generation)
            .map_or((0, String::new()), |g| {
                (g.process.pid, l.tables.string(g.process.comm).into_owned())
            });
        let name = l
            .tables
            .threads
            .get(&(generation, tid))
            .and_then(|v| v.last())
            .map(|&(_, id)| l.tables.string(id).into_owned())
            .unwrap_or_default();
        let e = threads
            .entry((pid, tid))
            .or_insert((comm, 0, String::new()));
        e.1 += c;
        if !name.is_empty() {
            e.2 = name;
        }
    }
    threads
        .iter()
        .map(|((pid, tid), (comm, c, name))| json!([pid, tid, comm, c, name]))
        .collect()
}

/// CPU samples per thread and time bucket, flat: [tid, bucket, samples].
fn cpu_json(sink: &ReportSink) -> Vec<u64> {
    let mut cpu: BTreeMap<(u32, u32), u64> = BTreeMap::new();
    for (&(tid, _, b), &c) in &sink.cpu {
        *cpu.entry((tid, b)).or_default() += c;
    }
    cpu.iter()
        .flat_map(|((tid, b), c)| [u64::from(*tid), u64::from(*b), *c])
        .collect()
}

/// Heat maps of every latency kind present.
fn heatmaps_json(
    p: &mut Passed,
    present: &[EventKind],
    t0: u64,
    end_rel: u64,
) -> serde_json::Map<String, Value> {
    let mut heat = serde_json::Map::new();
    for &kind in present.iter().filter(|k| k.has_latency()) {
        let points = p.heat_points(kind);
        let opts = HeatmapOptions {
            title: format!("{} latency", kind.name()),
            columns: HEAT_COLUMNS,
            start_ns: t0,
            end_ns: p
                .loaded
                .last_event_ns
                .unwrap_or(0)
                .max(t0 + end_rel)
                .max(t0 + 1),
            unit_label: "events".into(),
        };
        let from_histograms = points.iter().any(|p| p.span_ns > 0);
        let h = build(&points, &opts);
        let cells: Vec<u64> = h.cells.iter().flatten().copied().collect();
        heat.insert(
            kind.name().into(),
            json!({
                "start_ns": h.start_ns.saturating_sub(t0), "col_ns": h.col_ns,
                "columns": h.columns, "min_exp": h.min_exp, "rows": h.rows.len(),
                "cells": cells, "total": h.total,
                "source": if from_histograms { "the kernel's histograms (every call)" } else { "events" },
            }),
        );
    }
    heat
}

/// Latency tables: the kernel's histograms for the system families, the probed functions'
/// report (the events' own percentiles are in the kinds' "latency").
fn latency_json(p: &mut Passed, present: &[EventKind], int: &mut Interner) -> Vec<Value> {
    let mut latency: Vec<Value> = Vec::new();
    for &kind in present {
        match kind {
            EventKind::Syscall | EventKind::Bio | EventKind::Runq => {
                for row in &p.latency(kind).rows {
                    latency.push(json!({
                        "kind": kind.name(), "name": row.name, "source": "kernel histograms",
                        "count": row.count, "p50_ns": row.p50_ns, "p90_ns": row.p90_ns,
                        "p99_ns": row.p99_ns, "max_ns": row.max_ns, "total_ns": row.total_ns,
                    }));
                }
            }
            EventKind::Func => {
                for row in p.top(kind, Measure::Latency, usize::MAX).rows {
                    if let Row::Func(f) = row {
                        let stack = int.stack(&f.frames);
                        latency.push(json!({
                            "kind": "func", "name": f.function.unwrap_or_else(|| format!("function {}", f.function_id)),
                            "source": "probed calls, per stack", "stack": stack,
                            "count": f.count, "p50_ns": f.p50_ns, "p90_ns": f.p90_ns,
                            "p99_ns": f.p99_ns, "max_ns": f.max_ns, "total_ns": f.total_ns,
                        }));
                    }
                }
            }
            _ => {}
        }
    }
    latency
}

/// Locks: waiters' stacks with the stack of the thread that released the lock.
fn locks_json(p: &mut Passed, present: &[EventKind], n: usize, int: &mut Interner) -> Vec<Value> {
    if !present.contains(&EventKind::Lock) {
        return Vec::new();
    }
    let rows = p.top(EventKind::Lock, Measure::Wait, n).rows;
    rows.into_iter()
        .filter_map(|row| match row {
            Row::Lock(x) => Some(x),
            _ => None,
        })
        .map(|x| {
            let s = int.stack(&x.frames);
            let w = (!x.waker_frames.is_empty()).then(|| int.stack(&x.waker_frames));
            json!({
                "stack": s, "waker": w, "count": x.count, "wait_ns": x.wait_ns,
                "wait_p99_ns": x.wait_p99_ns, "hold_ns": x.hold_ns,
                "hold_p99_ns": x.hold_p99_ns, "kind": x.kind, "mutex": x.mutex,
                "wait_kind": x.wait_kind, "contention": x.contention,
                "idle_reason": x.idle_reason,
            })
        })
        .collect()
}

/// Stacks drawn in the heap chart, at most (the rest is "other").
pub const HEAP_SERIES: usize = 8;
/// Stacks listed per time bucket as holding the heap then, at most.
pub const HEAP_HOLDERS: usize = 10;

/// The heap over time (`ebsym heap`'s numbers per time bucket): the bytes live at each
/// bucket's end and the most in it, stacked by the [`HEAP_SERIES`] stacks that held the
/// most at some time (the rest "other"); per bucket the [`HEAP_HOLDERS`] stacks holding the
/// most at its end; the peak (bytes, time) and the stacks that held it (`ebsym heap`'s
/// `peak_bytes`). A stack's most is at least what it held at the peak, so the peak's
/// holders are drawn even when they held it only between two buckets' ends. Null without
/// allocations.
fn heap_json(p: &mut Passed, present: &[EventKind], n: usize, int: &mut Interner) -> Value {
    if !present.contains(&EventKind::Alloc) {
        return Value::Null;
    }
    // The rows by peak bytes: the series and the peak's holders take the first few (a row
    // past them held less at the peak than each of them); the leak report its `n`.
    let (rep, timeline) = p.heap(
        super::heap::HeapMeasure::Peak,
        &Suppressions::runtime(),
        HEAP_SERIES.max(HEAP_HOLDERS),
        n,
    );
    let Some(tl) = timeline else {
        return Value::Null;
    };
    let l = &mut p.loaded;
    let buckets = tl.totals.last().map_or(0, |t| t.0 as usize + 1);
    // The stacks' bytes at each bucket's end, by interned stack: replayed twice, to pick the
    // series (most bytes at any time), then to draw them.
    // Past [`STACKS_CAP`] stacks, the rest (those that held least at any time) are one.
    int.kept = heap_kept(&tl.changes);
    let mut raw_to: FastMap<u64, u32> = FastMap::default();
    for &(_, raw, _) in &tl.changes {
        if let std::collections::hash_map::Entry::Vacant(v) = raw_to.entry(raw) {
            v.insert(int.raw(l, raw));
        }
    }
    int.kept = None;
    type Each<'a> = Box<dyn FnMut(usize, &FastMap<u32, u64>) + 'a>;
    let replay = |mut each: Each<'_>| {
        let mut raw_live: FastMap<u64, u64> = FastMap::default();
        let mut cur: FastMap<u32, u64> = FastMap::default();
        let mut c = 0;
        for b in 0..buckets {
            while c < tl.changes.len() && tl.changes[c].0 as usize == b {
                let (_, raw, live) = tl.changes[c];
                let old = raw_live.insert(raw, live).unwrap_or(0);
                let e = cur.entry(raw_to[&raw]).or_default();
                *e = (*e + live).saturating_sub(old);
                c += 1;
            }
            each(b, &cur);
        }
    };
    let mut most: FastMap<u32, u64> = FastMap::default();
    replay(Box::new(|_, cur| {
        for (&s, &v) in cur {
            let m = most.entry(s).or_default();
            *m = (*m).max(v);
        }
    }));
    // The stacks that held the peak count with what they held then: a peak between two
    // buckets' ends (allocated and freed within one bucket) is still drawn by its holders.
    for r in &rep.rows {
        if let Some(b) = r.peak_bytes.filter(|&b| b > 0) {
            let m = most.entry(int.stack(&r.frames)).or_default();
            *m = (*m).max(b);
        }
    }
    let mut series: Vec<(u32, u64)> = most.into_iter().filter(|&(_, v)| v > 0).collect();
    series.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    series.truncate(HEAP_SERIES);
    let mut values: Vec<Vec<u64>> = vec![vec![0; buckets]; series.len()];
    let mut holders: Vec<Vec<[u64; 2]>> = vec![Vec::new(); buckets];
    replay(Box::new(|b, cur| {
        for (i, (s, _)) in series.iter().enumerate() {
            values[i][b] = cur.get(s).copied().unwrap_or(0);
        }
        let mut top: Vec<(u32, u64)> = cur
            .iter()
            .filter(|(_, &v)| v > 0)
            .map(|(&s, &v)| (s, v))
            .collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        top.truncate(HEAP_HOLDERS);
        holders[b] = top.into_iter().map(|(s, v)| [u64::from(s), v]).collect();
    }));
    let mut total = vec![0u64; buckets];
    let mut max = vec![0u64; buckets];
    let mut last = 0;
    let mut t = 0;
    for b in 0..buckets {
        // A bucket without events holds what the one before it held.
        if t < tl.totals.len() && tl.totals[t].0 as usize == b {
            total[b] = tl.totals[t].1;
            max[b] = tl.totals[t].2;
            last = total[b];
            t += 1;
        } else {
            total[b] = last;
            max[b] = last;
        }
    }
    let mut peak_holders: Vec<[u64; 2]> = rep
        .rows
        .iter()
        .filter(|r| r.peak_bytes.unwrap_or(0) > 0)
        .map(|r| [u64::from(int.stack(&r.frames)), r.peak_bytes.unwrap_or(0)])
        .collect();
    peak_holders.truncate(HEAP_HOLDERS);
    let t = &rep.totals;
    // The page's times are from its start; the report's peak time from the header's start.
    let header_start = l.header.start_time_ns;
    json!({
        "bucket_ns": tl.bucket_ns(),
        "total": total,
        "max": max,
        "series": series.iter().zip(values).map(|((s, _), v)| json!({"stack": s, "values": v})).collect::<Vec<_>>(),
        "holders": holders,
        "peak_bytes": t.peak_bytes,
        "peak_ns": t.peak_time_ns.map(|ns| (header_start + ns).saturating_sub(tl.buckets.t0)),
        "peak_holders": peak_holders,
        "calls": t.calls,
        "temporary": t.temporary,
        "leaked_bytes": t.leaked_bytes,
        "exact": rep.exact,
        "inexact": rep.inexact,
    })
}

/// Leaks (the allocations outstanding at the end), and the note of the leak report.
fn leaks_json(
    p: &mut Passed,
    present: &[EventKind],
    n: usize,
    int: &mut Interner,
) -> (Vec<Value>, Option<String>) {
    if !present.contains(&EventKind::Alloc) {
        return (Vec::new(), None);
    }
    let rep = p.leaks(n, &Suppressions::runtime());
    let leaks = rep
        .rows
        .into_iter()
        .filter_map(|row| match row {
            Row::Leak(x) => Some(x),
            _ => None,
        })
        .map(|x| {
            let s = int.stack(&x.frames);
            json!({
                "stack": s, "count": x.count, "bytes": x.bytes,
                "oldest_ns": x.oldest_ns, "alive": x.alive,
            })
        })
        .collect();
    (leaks, rep.note)
}

/// The differential flame graphs: per kind of either trace, stacks before (the base, read
/// for its info, then once for the stacks of every such kind) and after.
fn diff_json<B: Read + Send>(
    base: &mut dyn FnMut() -> Option<TraceReader<B>>,
    opts: &PageOptions,
    p: &mut Passed,
    present: &[EventKind],
    int: &mut Interner,
) -> serde_json::Map<String, Value> {
    let PageOptions {
        filter, base_name, ..
    } = *opts;
    let mut diff = serde_json::Map::new();
    let base_kinds: Vec<EventKind> = match base() {
        Some(r) => {
            let bi = crate::info::summarize_from(r, base_name.unwrap_or("base"));
            let e = &bi.events;
            let counts = [
                e.alloc,
                e.lock,
                e.func,
                e.cpu,
                e.offcpu,
                e.memgrowth,
                e.syscall,
                e.bio,
                e.runq,
                e.tcp,
            ];
            EventKind::ALL
                .into_iter()
                .zip(counts)
                .filter(|(_, c)| *c > 0)
                .map(|(k, _)| k)
                .collect()
        }
        None => Vec::new(),
    };
    let kinds: Vec<EventKind> = EventKind::ALL
        .into_iter()
        .filter(|k| present.contains(k) || base_kinds.contains(k))
        .collect();
    if kinds.is_empty() {
        return diff;
    }
    let Some(r) = base() else {
        return diff;
    };
    let wants = Wants {
        stacks: kinds.clone(),
        ..Wants::default()
    };
    let mut b = Passed::read(r, filter, &wants, None);
    for kind in kinds {
        let by = kind.default_measure();
        let d = diff_stacks(b.stacks(kind), p.stacks(kind), by, DIFF_CAP);
        let rows: Vec<[i64; 3]> = d
            .rows
            .iter()
            .map(|r| {
                let s = int.stack(r.frames.as_deref().unwrap_or(&[]));
                [i64::from(s), r.before as i64, r.after as i64]
            })
            .collect();
        diff.insert(
            kind.name().into(),
            json!({
                "by": by.name(), "unit": by.unit(), "rows": rows,
                "totals": [d.totals.before, d.totals.after],
                "notes": d.notes, "losses_before": losses_json(&d.losses_before),
            }),
        );
    }
    diff
}

/// JSON that is safe inside a `<script type="application/json">`: every `<` (which JSON
/// has only inside strings) written as `\u003c`, so no `</script>` or `<!--` can end or
/// change the element; U+2028/2029 escaped too.
pub fn script_json(v: &Value) -> String {
    let s = serde_json::to_string(v).unwrap_or_else(|_| "null".into());
    s.replace('<', "\\u003c")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

fn escape_html(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn render(data: &Value) -> (String, HtmlStats) {
    let stats: HtmlStats = data
        .get("stats")
        .and_then(|s| {
            let mut h = HtmlStats {
                kinds: s["kinds"]
                    .as_array()?
                    .iter()
                    .filter_map(|k| k.as_str().map(String::from))
                    .collect(),
                stacks: s["stacks"].as_u64()? as usize,
                frames: s["frames"].as_u64()? as usize,
                ..Default::default()
            };
            for (k, v) in s["timeline"].as_object()? {
                h.timeline.insert(
                    k.clone(),
                    (v[0].as_u64()? as usize, v[1].as_u64().unwrap_or(0)),
                );
            }
            Some(h)
        })
        .unwrap_or_default();
    let title = format!(
        "ebtrace report: {}",
        data["name"].as_str().unwrap_or("trace")
    );
    // The pieces go in with `replace` of placeholders that the pieces themselves do not
    // contain, last the data (which might).
    let html = TEMPLATE
        .replacen("{{TITLE}}", &escape_html(&title), 1)
        .replacen("{{CSS}}", CSS, 1)
        .replacen("{{JS}}", JS, 1)
        .replacen("{{DATA}}", &script_json(data), 1);
    (html, stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_cannot_end_its_script_element() {
        let v = json!({"f": "</script><script>alert(1)</script><!--", "g": "a\u{2028}b"});
        let s = script_json(&v);
        assert!(!s.contains('<'), "{s}");
        assert!(!s.contains('\u{2028}'));
        let back: Value = serde_json::from_str(&s).unwrap();
        assert_eq!(back, v);
    }

    #[test]
    fn the_viewer_is_inline_and_asks_no_host() {
        for (name, text) in [("report.js", JS), ("report.css", CSS)] {
            let lower = text.to_ascii_lowercase();
            for bad in [
                "</script", "</style", "http://", "https://", "@import", "url(",
            ] {
                assert!(!lower.contains(bad), "{name} contains {bad}");
            }
        }
        for p in ["{{TITLE}}", "{{CSS}}", "{{JS}}", "{{DATA}}"] {
            assert_eq!(TEMPLATE.matches(p).count(), 1, "{p}");
            assert!(!JS.contains(p) && !CSS.contains(p), "{p}");
        }
        let lower = TEMPLATE.to_ascii_lowercase();
        assert!(!lower.contains(" src=") && !lower.contains(" href=\"http"));
    }

    #[test]
    fn an_empty_trace_still_renders() {
        let (html, stats) = render(&json!({"name": "x</title>", "stats": {}}));
        assert!(html.contains("ebtrace report: x&lt;/title&gt;"));
        assert!(stats.kinds.is_empty());
    }
}
