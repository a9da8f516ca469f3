//! The reports: top stacks, leaks, locks, folded stacks and flame graphs.
//!
//! JSON (`--json`), the same shape for every report:
//! `{"kind", "by", "totals": {…}, "losses": {…}, "rows": [{…values…, "frames": [{"function",
//! "file", "line", "inlined", "module", "address"}]}]}`, frames leaf first. Values: alloc
//! `count`, `bytes`; leaks `count`, `bytes`, `oldest_ns`, `alive`; locks `count`, `wait_ns`,
//! `wait_p99_ns`, `hold_ns`, `hold_p99_ns`, `mutex`, `kind`, `waker_frames`; func `count`,
//! `total_ns`, `p50_ns`, `p90_ns`, `p99_ns`, `max_ns`, `function` (the probed function's
//! demangled name, null if the trace does not say), `function_id`; cpu `count`; offcpu
//! `count`, `total_ns`, `waker_frames` (the stack of the thread that most often ended these
//! blocks; empty when woken by an interrupt); memgrowth `count`, `bytes` (brk, mmap and
//! first-touch growth; releases — munmap, a shrinking brk — are not counted).
//!
//! Percentiles (`wait_p99_ns`, `hold_p99_ns`, `p50_ns`, `p90_ns`, `p99_ns`) are nearest-rank
//! percentiles read from a log-linear histogram ([`crate::histogram`]), not from every
//! value: each is within 1/64 (1.6%) of the exact one, exact below 64 ns, and exact when
//! the rank is the highest (p99 of fewer than 100 events is the maximum). `count`,
//! `wait_ns`, `hold_ns`, `total_ns` and `max_ns` are exact.
use crate::hash::FastMap;
use crate::histogram::{Histogram, Log2Bin};
use crate::model::{Event, Filter, Frame, Loaded, Losses, MappingInfo, Sink};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// Event kinds a report can be about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Alloc,
    Lock,
    Func,
    Cpu,
    OffCpu,
    MemGrowth,
}

impl EventKind {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "alloc" => EventKind::Alloc,
            "lock" | "locks" => EventKind::Lock,
            "func" | "latency" => EventKind::Func,
            "cpu" => EventKind::Cpu,
            "offcpu" => EventKind::OffCpu,
            "memgrowth" | "mem" => EventKind::MemGrowth,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Alloc => "alloc",
            EventKind::Lock => "lock",
            EventKind::Func => "func",
            EventKind::Cpu => "cpu",
            EventKind::OffCpu => "offcpu",
            EventKind::MemGrowth => "memgrowth",
        }
    }
    /// What `--by` may be, the first being the default.
    pub fn measures(self) -> &'static [&'static str] {
        match self {
            EventKind::Alloc | EventKind::MemGrowth => &["bytes", "count"],
            EventKind::Lock => &["wait", "hold", "count"],
            EventKind::Func => &["latency", "count"],
            EventKind::Cpu => &["samples"],
            EventKind::OffCpu => &["time", "count"],
        }
    }
    /// Unit of the measure, for flame graphs.
    pub fn unit(self, by: &str) -> &'static str {
        match by {
            "bytes" => "bytes",
            "count" => "calls",
            "samples" => "samples",
            _ => "ns",
        }
    }
}

/// A report ready to print or serialize.
#[derive(Debug, Serialize)]
pub struct Report {
    pub kind: String,
    pub by: String,
    pub totals: BTreeMap<String, u64>,
    pub losses: Losses,
    pub rows: Vec<Value>,
    /// For `func` (`ebsym latency`): the log2 histogram of each row's durations, shown in
    /// the text (the JSON has the percentiles).
    #[serde(skip)]
    pub histograms: Vec<Vec<Log2Bin>>,
    /// Set when there are no rows to show: why (no events of the kind, with the losses
    /// that may explain it; or, for leaks, that every allocation was freed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Debug, Default, Clone)]
struct Agg {
    count: u64,
    a: u64,
    b: u64,
    /// lock and func: the histograms of a (wait, duration) and b (hold).
    hists: Option<Box<[Histogram; 2]>>,
    mutex: u64,
    futex_op: u32,
    wakers: HashMap<u64, u64>,
}

impl Agg {
    fn hist(&self, i: usize) -> Histogram {
        self.hists
            .as_ref()
            .map(|h| h[i].clone())
            .unwrap_or_default()
    }
}

/// Per-stack aggregation of one kind.
struct TopSink {
    kind: EventKind,
    by_stack: FastMap<(u64, u64), Agg>,
}

impl Sink for TopSink {
    fn event(&mut self, ev: &Event<'_>) {
        let (key, a, b, sample_b) = match (self.kind, ev) {
            (EventKind::Alloc, Event::Alloc(e)) => ((e.stack, 0), e.size, 0, None),
            // Growth only: an munmap (or a shrinking brk) releases memory, it does not grow it.
            (EventKind::MemGrowth, Event::MemGrowth(e))
                if e.kind != ebtrace_format::proto::MemGrowthKind::Munmap =>
            {
                ((e.stack, 0), e.size, 0, None)
            }
            (EventKind::Lock, Event::Lock(e)) => {
                ((e.stack, e.mutex), e.wait_ns, e.hold_ns, Some(e.hold_ns))
            }
            (EventKind::Func, Event::Func(e)) => ((e.stack, e.function), e.duration_ns, 0, None),
            (EventKind::Cpu, Event::Cpu(e)) => ((e.stack, 0), 1, 0, None),
            (EventKind::OffCpu, Event::OffCpu(e)) => ((e.stack, 0), e.duration_ns, 0, None),
            _ => return,
        };
        let g = self.by_stack.entry(key).or_default();
        g.count += 1;
        g.a += a;
        g.b += b;
        if matches!(self.kind, EventKind::Lock | EventKind::Func) {
            let h = g.hists.get_or_insert_default();
            h[0].record(a);
            if let Some(hold) = sample_b {
                h[1].record(hold);
            }
        }
        if let Event::Lock(e) = ev {
            g.mutex = e.mutex;
            g.futex_op = e.futex_op;
            if e.waker_stack != 0 {
                *g.wakers.entry(e.waker_stack).or_default() += 1;
            }
        }
        if let Event::OffCpu(e) = ev {
            if e.waker_stack != 0 {
                *g.wakers.entry(e.waker_stack).or_default() += 1;
            }
        }
    }
}

/// The waker stack seen most often in `agg` (ties: the lowest id).
fn top_waker(agg: &Agg) -> Option<u64> {
    agg.wakers
        .iter()
        .max_by_key(|(s, c)| (**c, std::cmp::Reverse(**s)))
        .map(|(s, _)| *s)
}

/// A stack's frames as (function, file, line, inlined): see [`frame_key`].
type FrameKey = Vec<(String, Option<String>, Option<u32>, bool)>;

/// Frames without their addresses: the key under which stacks of several generations (or
/// stack ids that symbolize alike) merge.
fn frame_key(frames: &[Frame]) -> FrameKey {
    frames
        .iter()
        .map(|f| (f.function.clone(), f.file.clone(), f.line, f.inlined))
        .collect()
}

fn lock_kind(frames: &[Frame], futex_op: u32) -> &'static str {
    let has = |s: &str| frames.iter().any(|f| f.function.contains(s));
    if has("pthread_cond_") || has("condition_variable") {
        "condvar"
    } else if has("lll_lock") || has("pthread_mutex_") || has("mutex::lock") {
        "mutex"
    } else {
        // glibc: mutexes wait with FUTEX_WAIT (or LOCK_PI), condition variables with
        // FUTEX_WAIT_BITSET.
        match futex_op {
            0 | 6 | 13 => "mutex",
            9 => "condvar",
            _ => "other",
        }
    }
}

fn frames_json(frames: &[Frame]) -> Value {
    serde_json::to_value(frames).unwrap_or(Value::Null)
}

/// One stack after merging (stack ids that symbolize alike, across processes), with what
/// was aggregated under it.
struct Merged {
    sub: u64,
    frames: Vec<Frame>,
    mappings: Vec<Option<MappingInfo>>,
    agg: Agg,
}

/// Reads the trace and folds events of `kind` into merged stacks, in a fixed order.
fn merge(
    path: &Path,
    kind: EventKind,
    filter: &Filter,
) -> Result<(Loaded, Vec<Merged>), ebtrace_format::Error> {
    let mut sink = TopSink {
        kind,
        by_stack: FastMap::default(),
    };
    let mut l = Loaded::read(path, filter, &mut sink)?;
    type Key = (u64, FrameKey);
    let mut merged: BTreeMap<Key, Merged> = BTreeMap::new();
    let mut keys: Vec<(u64, u64)> = sink.by_stack.keys().copied().collect();
    keys.sort_unstable();
    // Keys are sorted by stack id: resolve each stack once, keeping only the last one.
    let mut resolved: Option<(u64, Vec<Frame>, Vec<Option<MappingInfo>>)> = None;
    for key in keys {
        let agg = sink.by_stack.remove(&key).unwrap();
        if resolved.as_ref().is_none_or(|r| r.0 != key.0) {
            let (f, m) = l.frames_and_mappings(key.0);
            resolved = Some((key.0, f, m));
        }
        let (_, frames, mappings) = resolved.as_ref().unwrap();
        let e = merged
            .entry((key.1, frame_key(frames)))
            .or_insert_with(|| Merged {
                sub: key.1,
                frames: frames.clone(),
                mappings: mappings.clone(),
                agg: Agg::default(),
            });
        let m = &mut e.agg;
        m.count += agg.count;
        m.a += agg.a;
        m.b += agg.b;
        if let Some(h) = agg.hists {
            match &mut m.hists {
                Some(mh) => {
                    mh[0].merge(&h[0]);
                    mh[1].merge(&h[1]);
                }
                None => m.hists = Some(h),
            }
        }
        m.mutex = agg.mutex;
        m.futex_op = agg.futex_op;
        for (w, c) in agg.wakers {
            *m.wakers.entry(w).or_default() += c;
        }
    }
    Ok((l, merged.into_values().collect()))
}

/// The message a report gives instead of an empty table: no event of `what` (passed the
/// filters), and how many events were lost while recording, which may be why.
pub fn empty_note(what: &str, filter: &Filter, losses: &Losses) -> String {
    let mut s = format!("no {what} events in this trace");
    if !filter.is_empty() {
        s.push_str(" match the filters");
    }
    let lost: u64 = losses.recorded.values().sum();
    if lost > 0 {
        let v: Vec<String> = losses
            .recorded
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        s.push_str(&format!(
            " (but {lost} events were lost while recording: {})",
            v.join(", ")
        ));
    }
    s
}

/// One merged stack and its values, for pprof, folded stacks and diffs.
#[derive(Debug, Clone)]
pub struct StackValues {
    /// Leaf first, inlined frames expanded (innermost first).
    pub frames: Vec<Frame>,
    /// The mapping of each frame (None for kernel frames and frames outside any mapping).
    pub mappings: Vec<Option<MappingInfo>>,
    /// lock: the mutex; func: the probed function id; else 0.
    pub sub: u64,
    /// Events.
    pub count: u64,
    /// alloc and memgrowth: bytes; lock: wait ns; func and offcpu: total ns; cpu: samples.
    pub total: u64,
    /// lock: hold ns (0 when not recorded).
    pub hold: u64,
}

impl StackValues {
    /// The value `by` measures (as `top` sorts and `folded` prints).
    pub fn measure(&self, kind: EventKind, by: &str) -> u64 {
        match (kind, by) {
            (EventKind::Cpu, _) => self.count,
            (_, "count") => self.count,
            (EventKind::Lock, "hold") => self.hold,
            _ => self.total,
        }
    }
}

/// The merged stacks of one kind with their values: what `top` sorts and prints.
#[derive(Debug)]
pub struct Stacks {
    pub kind: EventKind,
    pub stacks: Vec<StackValues>,
    pub losses: Losses,
    pub header: ebtrace_format::proto::Header,
    /// Boottime ns of the first and last event that passed the filter.
    pub first_event_ns: Option<u64>,
    pub last_event_ns: Option<u64>,
    /// Set when no event passed: the message to give instead of an empty report.
    pub note: Option<String>,
}

/// The merged stacks of `kind` with their values (the aggregation of `top`, with the
/// mapping of every frame), in a fixed order.
pub fn stacks(
    path: &Path,
    kind: EventKind,
    filter: &Filter,
) -> Result<Stacks, ebtrace_format::Error> {
    let (l, merged) = merge(path, kind, filter)?;
    let note = merged
        .is_empty()
        .then(|| empty_note(kind.name(), filter, &l.losses));
    Ok(Stacks {
        kind,
        stacks: merged
            .into_iter()
            .map(|m| StackValues {
                frames: m.frames,
                mappings: m.mappings,
                sub: m.sub,
                count: m.agg.count,
                total: m.agg.a,
                hold: m.agg.b,
            })
            .collect(),
        losses: l.losses,
        header: l.header,
        first_event_ns: l.first_event_ns,
        last_event_ns: l.last_event_ns,
        note,
    })
}

/// `ebsym top` (and `locks`, `latency`): rows of stacks sorted by `by`.
pub fn top(
    path: &Path,
    kind: EventKind,
    by: &str,
    filter: &Filter,
    n: usize,
) -> Result<Report, ebtrace_format::Error> {
    let (mut l, merged) = merge(path, kind, filter)?;
    let note = merged
        .is_empty()
        .then(|| empty_note(kind.name(), filter, &l.losses));
    let mut totals: BTreeMap<String, u64> = BTreeMap::new();
    let mut scored: Vec<(u64, Merged)> = Vec::with_capacity(merged.len());
    for m in merged {
        let agg = &m.agg;
        *totals.entry("count".to_string()).or_default() += agg.count;
        let measure = match kind {
            EventKind::Alloc | EventKind::MemGrowth => {
                *totals.entry("bytes".into()).or_default() += agg.a;
                if by == "count" {
                    agg.count
                } else {
                    agg.a
                }
            }
            EventKind::Lock => {
                *totals.entry("wait_ns".into()).or_default() += agg.a;
                if agg.b > 0 {
                    *totals.entry("hold_ns".into()).or_default() += agg.b;
                }
                match by {
                    "hold" => agg.b,
                    "count" => agg.count,
                    _ => agg.a,
                }
            }
            EventKind::Func | EventKind::OffCpu => {
                *totals.entry("total_ns".into()).or_default() += agg.a;
                if by == "count" {
                    agg.count
                } else {
                    agg.a
                }
            }
            EventKind::Cpu => agg.count,
        };
        scored.push((measure, m));
    }
    // Largest first; ties in a fixed order (the frames) so output is deterministic. Only
    // the rows shown are rendered.
    scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.frames.cmp(&b.1.frames)));
    let mut rows: Vec<Value> = Vec::with_capacity(n.min(scored.len()));
    let mut histograms = Vec::new();
    for (
        _,
        Merged {
            sub, frames, agg, ..
        },
    ) in scored.into_iter().take(n)
    {
        let mut v = match kind {
            EventKind::Alloc | EventKind::MemGrowth => {
                json!({"count": agg.count, "bytes": agg.a})
            }
            EventKind::Lock => {
                let waker_frames = top_waker(&agg).map(|w| l.frames(w)).unwrap_or_default();
                let mut v = json!({
                    "count": agg.count,
                    "wait_ns": agg.a,
                    "wait_p99_ns": agg.hist(0).quantile(0.99),
                    "mutex": format!("{:#x}", agg.mutex),
                    "kind": lock_kind(&frames, agg.futex_op),
                    "waker_frames": frames_json(&waker_frames),
                });
                if agg.b > 0 {
                    v["hold_ns"] = json!(agg.b);
                    v["hold_p99_ns"] = json!(agg.hist(1).quantile(0.99));
                }
                v
            }
            EventKind::Func => {
                let h = agg.hist(0);
                histograms.push(h.log2_bins());
                let name = l.probed.get(&sub).map(|&n| l.tables.string(n).into_owned());
                json!({
                    "count": agg.count, "total_ns": agg.a, "function": name, "function_id": sub,
                    "p50_ns": h.quantile(0.5), "p90_ns": h.quantile(0.9),
                    "p99_ns": h.quantile(0.99), "max_ns": h.max(),
                })
            }
            EventKind::Cpu => json!({"count": agg.count}),
            EventKind::OffCpu => {
                // The stack of the thread that most often ended these blocks.
                let waker_frames = top_waker(&agg).map(|w| l.frames(w)).unwrap_or_default();
                json!({"count": agg.count, "total_ns": agg.a,
                       "waker_frames": frames_json(&waker_frames)})
            }
        };
        v["frames"] = frames_json(&frames);
        rows.push(v);
    }
    Ok(Report {
        kind: kind.name().into(),
        by: by.into(),
        totals,
        losses: l.losses,
        rows,
        histograms,
        note,
    })
}

/// A live block: allocation time, stack id, size.
#[derive(Debug, Clone, Copy)]
struct Block {
    time: u64,
    stack: u64,
    size: u64,
}

/// No next block.
const NONE: u32 = u32::MAX;

/// A live block in the slab, with the next (later) live block at the same address.
#[derive(Debug, Clone, Copy)]
struct Node {
    block: Block,
    next: u32,
}

/// The live blocks of the leak report.
///
/// Each generation maps an address to the slab index of its oldest live block (16 bytes a
/// bucket, so the table of tens of thousands of live blocks stays in the L2 cache: with the
/// blocks in the table itself, lookups were cache misses and the report ran at 3–5 M
/// events/s instead of 7–8). The blocks at one address are chained oldest first: usually
/// one, two when an allocation reused the address before the free of the previous block was
/// read (the writer puts a batch's allocations before its frees, and allocators hand a
/// freed block straight back, so that is common). Freed slots are reused last-in first-out,
/// so the slab's hot part is as small as the blocks that churn.
#[derive(Debug, Default)]
struct Live {
    /// Per generation, address -> first node; the previous event's generation cached.
    generations: Vec<(u32, FastMap<u64, u32>)>,
    last: usize,
    /// Generation -> index in `generations`.
    index: FastMap<u32, usize>,
    nodes: Vec<Node>,
    free: Vec<u32>,
}

impl Live {
    fn generation(&mut self, generation: u32) -> usize {
        if self
            .generations
            .get(self.last)
            .is_none_or(|g| g.0 != generation)
        {
            let n = self.generations.len();
            self.last = *self.index.entry(generation).or_insert(n);
            if self.last == n {
                self.generations.push((generation, FastMap::default()));
            }
        }
        self.last
    }

    /// A slot for `block` (a free one if any).
    fn node(nodes: &mut Vec<Node>, free: &mut Vec<u32>, block: Block, next: u32) -> u32 {
        let n = Node { block, next };
        match free.pop() {
            Some(i) => {
                nodes[i as usize] = n;
                i
            }
            None => {
                // 4 G live blocks would take 128 GiB here first.
                let i = u32::try_from(nodes.len()).expect("fewer than 4 G live blocks");
                nodes.push(n);
                i
            }
        }
    }

    /// Adds `b` at `address`, after every block there allocated at or before its time.
    #[inline]
    fn alloc(&mut self, generation: u32, address: u64, b: Block) {
        use std::collections::hash_map::Entry;
        let g = self.generation(generation);
        let (nodes, free) = (&mut self.nodes, &mut self.free);
        let mut head = match self.generations[g].1.entry(address) {
            Entry::Vacant(v) => {
                v.insert(Self::node(nodes, free, b, NONE));
                return;
            }
            Entry::Occupied(o) => o,
        };
        let first = *head.get();
        if b.time < nodes[first as usize].block.time {
            head.insert(Self::node(nodes, free, b, first));
            return;
        }
        let mut at = first;
        loop {
            let next = nodes[at as usize].next;
            if next == NONE || b.time < nodes[next as usize].block.time {
                let i = Self::node(nodes, free, b, next);
                nodes[at as usize].next = i;
                return;
            }
            at = next;
        }
    }

    /// Frees the latest block at `address` allocated at or before `time`, if any.
    #[inline]
    fn free(&mut self, generation: u32, address: u64, time: u64) {
        let g = self.generation(generation);
        let map = &mut self.generations[g].1;
        let Some(&head) = map.get(&address) else {
            return;
        };
        // The last node with time <= `time`, and the one before it.
        let (mut prev, mut found) = (NONE, NONE);
        let mut at = head;
        while at != NONE && self.nodes[at as usize].block.time <= time {
            (prev, found) = (found, at);
            at = self.nodes[at as usize].next;
        }
        if found == NONE {
            return;
        }
        let next = self.nodes[found as usize].next;
        if prev == NONE {
            if next == NONE {
                map.remove(&address);
            } else {
                map.insert(address, next);
            }
        } else {
            self.nodes[prev as usize].next = next;
        }
        self.free.push(found);
    }

    /// Every live block, with its generation.
    fn blocks(&self) -> impl Iterator<Item = (u32, &Block)> + '_ {
        self.generations.iter().flat_map(move |(generation, map)| {
            map.values().flat_map(move |&head| {
                let mut at = head;
                std::iter::from_fn(move || {
                    let n = self.nodes.get(at as usize)?;
                    at = n.next;
                    Some((*generation, &n.block))
                })
            })
        })
    }
}

struct LeakSink {
    live: Live,
    last_ns: u64,
    allocs: u64,
}

impl Sink for LeakSink {
    #[inline]
    fn event(&mut self, ev: &Event<'_>) {
        match ev {
            Event::Alloc(e) => {
                self.allocs += 1;
                self.last_ns = self.last_ns.max(e.time_ns);
                let block = Block {
                    time: e.time_ns,
                    stack: e.stack,
                    size: e.size,
                };
                self.live.alloc(e.generation, e.address, block);
            }
            Event::Free(e) => {
                self.last_ns = self.last_ns.max(e.time_ns);
                // Frees come in their own batches, possibly after a later allocation at the
                // same address was stored: free the latest allocation made before it.
                self.live.free(e.generation, e.address, e.time_ns);
            }
            _ => {}
        }
    }
}

/// `ebsym leaks`: allocations never freed before the end of the recording or the exit of
/// their process, grouped by stack.
pub fn leaks(path: &Path, filter: &Filter, n: usize) -> Result<Report, ebtrace_format::Error> {
    let mut sink = LeakSink {
        live: Live::default(),
        last_ns: 0,
        allocs: 0,
    };
    let mut l = Loaded::read(path, filter, &mut sink)?;
    // (stack, generation) -> (count, bytes, oldest time)
    let mut by: BTreeMap<(u64, u32), (u64, u64, u64)> = BTreeMap::new();
    for (generation, b) in sink.live.blocks() {
        let e = by.entry((b.stack, generation)).or_insert((0, 0, u64::MAX));
        e.0 += 1;
        e.1 += b.size;
        e.2 = e.2.min(b.time);
    }
    // (frames, alive) -> (frames, count, bytes, oldest time)
    type Row = (Vec<Frame>, u64, u64, u64);
    let mut merged: BTreeMap<(FrameKey, bool), Row> = BTreeMap::new();
    for ((stack, generation), (count, bytes, oldest)) in by {
        let alive = l
            .tables
            .generations
            .get(&generation)
            .is_some_and(|g| g.exit.is_none());
        let frames = l.frames(stack);
        let e = merged
            .entry((frame_key(&frames), alive))
            .or_insert((frames, 0, 0, u64::MAX));
        e.1 += count;
        e.2 += bytes;
        e.3 = e.3.min(oldest);
    }
    let mut totals: BTreeMap<String, u64> = BTreeMap::new();
    let mut rows: Vec<(bool, Vec<Frame>, u64, u64, u64)> = merged
        .into_iter()
        .map(|((_, alive), (frames, count, bytes, oldest))| {
            *totals.entry("count".to_string()).or_default() += count;
            *totals.entry("bytes".to_string()).or_default() += bytes;
            (alive, frames, count, bytes, oldest)
        })
        .collect();
    // Largest first; ties in a fixed order. Only the rows shown are rendered.
    rows.sort_by(|a, b| {
        b.3.cmp(&a.3)
            .then_with(|| a.1.cmp(&b.1))
            .then_with(|| a.0.cmp(&b.0))
    });
    let rows: Vec<Value> = rows
        .into_iter()
        .take(n)
        .map(|(alive, frames, count, bytes, oldest)| {
            json!({"count": count, "bytes": bytes, "oldest_ns": sink.last_ns.saturating_sub(oldest), "alive": alive, "frames": frames_json(&frames)})
        })
        .collect();
    if l.losses.recorded.keys().any(|k| k.starts_with("free/")) {
        l.losses
            .damage
            .push("frees were lost while recording: some blocks shown may have been freed".into());
    }
    let note = if sink.allocs == 0 {
        Some(empty_note("alloc", filter, &l.losses))
    } else if totals.is_empty() {
        Some(format!(
            "no leaks: all {} traced allocations{} were freed",
            sink.allocs,
            if filter.is_empty() {
                ""
            } else {
                " that match the filters"
            }
        ))
    } else {
        None
    };
    Ok(Report {
        kind: "leaks".into(),
        by: "bytes".into(),
        totals,
        losses: l.losses,
        rows,
        histograms: Vec::new(),
        note,
    })
}

/// Folded stacks and what a report says with them.
#[derive(Debug)]
pub struct Folded {
    /// `root;…;leaf value`, sorted.
    pub lines: Vec<String>,
    pub losses: Losses,
    /// Set when there was no event to fold: why.
    pub note: Option<String>,
}

/// The folded key of `frames` (leaf first): function names root to leaf, `;`-separated.
pub fn folded_key(frames: &[Frame]) -> String {
    if frames.is_empty() {
        return "[no stack]".to_string();
    }
    let names: Vec<String> = frames
        .iter()
        .rev()
        .map(|f| f.function.replace(';', ":"))
        .collect();
    names.join(";")
}

/// Folded stacks (`root;…;leaf value`), for flamegraph.pl and inferno.
pub fn folded(
    path: &Path,
    kind: EventKind,
    by: &str,
    filter: &Filter,
) -> Result<Folded, ebtrace_format::Error> {
    let st = stacks(path, kind, filter)?;
    let mut lines: BTreeMap<String, u64> = BTreeMap::new();
    for s in &st.stacks {
        let v = s.measure(kind, by);
        if v == 0 {
            continue;
        }
        *lines.entry(folded_key(&s.frames)).or_default() += v;
    }
    Ok(Folded {
        lines: lines.into_iter().map(|(s, v)| format!("{s} {v}")).collect(),
        losses: st.losses,
        note: st.note,
    })
}

impl Report {
    /// The report for people.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let totals: Vec<String> = self
            .totals
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(s, "{} by {}: {}", self.kind, self.by, totals.join(", "));
        if let Some(note) = &self.note {
            let _ = writeln!(s, "{note}");
        }
        for (i, row) in self.rows.iter().enumerate() {
            let mut vals = Vec::new();
            if let Value::Object(m) = row {
                for (k, v) in m {
                    if k != "frames" && k != "waker_frames" {
                        vals.push(format!(
                            "{k} {}",
                            v.as_str()
                                .map(String::from)
                                .unwrap_or_else(|| v.to_string())
                        ));
                    }
                }
            }
            let _ = writeln!(s, "\n#{} {}", i + 1, vals.join("  "));
            if let Some(bins) = self.histograms.get(i).filter(|b| !b.is_empty()) {
                s.push_str(&log2_text(bins));
            }
            let frames: Vec<Frame> =
                serde_json::from_value(row["frames"].clone()).unwrap_or_default();
            for f in &frames {
                let _ = writeln!(s, "    {}", f.display());
            }
            if let Some(w) = row.get("waker_frames") {
                let wf: Vec<Frame> = serde_json::from_value(w.clone()).unwrap_or_default();
                if !wf.is_empty() {
                    let by = if self.kind == "offcpu" {
                        "  woken by:"
                    } else {
                        "  woken by (the holder releasing it):"
                    };
                    let _ = writeln!(s, "{by}");
                    for f in &wf {
                        let _ = writeln!(s, "    {}", f.display());
                    }
                }
            }
        }
        s.push_str(&losses_text(&self.losses));
        s
    }
}

/// A power of two with a binary suffix, as bpftrace prints histogram bounds: 512, 1K, 2M.
fn pow2_label(v: u64) -> String {
    if v == u64::MAX {
        return "inf".into();
    }
    let mut v = v;
    for suffix in ["", "K", "M", "G", "T", "P"] {
        if v < 1024 || v & 1023 != 0 {
            return format!("{v}{suffix}");
        }
        v /= 1024;
    }
    format!("{v}E")
}

/// A log2 histogram in bpftrace's layout, one line per power of two of nanoseconds:
/// `[1K, 2K)   12 |@@@@@@@@    |`.
fn log2_text(bins: &[Log2Bin]) -> String {
    use std::fmt::Write;
    const WIDTH: u64 = 40;
    let most = bins.iter().map(|b| b.count).max().unwrap_or(0).max(1);
    let labels: Vec<String> = bins
        .iter()
        .map(|b| format!("[{}, {})", pow2_label(b.low), pow2_label(b.high)))
        .collect();
    let lw = labels.iter().map(String::len).max().unwrap_or(0);
    let cw = most.to_string().len();
    let mut s = String::from("    ns (log2):\n");
    for (b, label) in bins.iter().zip(&labels) {
        let bar = (b.count * WIDTH).div_ceil(most) as usize;
        let _ = writeln!(
            s,
            "    {label:<lw$} {:>cw$} |{:<w$}|",
            b.count,
            "@".repeat(bar),
            w = WIDTH as usize
        );
    }
    s
}

/// The losses paragraph every report ends with.
pub fn losses_text(l: &Losses) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s);
    if l.recorded.is_empty() {
        let _ = writeln!(s, "losses: no events lost while recording");
    } else {
        let v: Vec<String> = l.recorded.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let _ = writeln!(s, "losses: events lost while recording: {}", v.join(", "));
    }
    if !l.unresolved_frames.is_empty() {
        let v: Vec<String> = l
            .unresolved_frames
            .iter()
            .map(|(k, n)| format!("{k} ({n})"))
            .collect();
        let _ = writeln!(s, "unresolved frames: {}", v.join(", "));
    }
    if !l.stacks_cut.is_empty() {
        let v: Vec<String> = l
            .stacks_cut
            .iter()
            .map(|(k, n)| format!("{k} ({n})"))
            .collect();
        let _ = writeln!(s, "stacks cut short: {}", v.join(", "));
    }
    if !l.symbolized {
        let _ = writeln!(
            s,
            "note: the trace is not symbolized (run ebsym TRACE first)"
        );
    }
    if l.cut {
        let _ = writeln!(
            s,
            "note: the recording was cut (no trailer): the report covers what was written"
        );
    }
    for d in &l.damage {
        let _ = writeln!(s, "damage: {d}");
    }
    s
}

/// Writes a flame graph SVG of folded `lines` with inferno: the palette, title and unit
/// match the kind (memory palette for bytes, blue for off-CPU time, hot for CPU).
pub fn flamegraph(
    lines: &[String],
    kind: EventKind,
    by: &str,
    title: Option<&str>,
    out: impl std::io::Write,
) -> std::io::Result<()> {
    use inferno::flamegraph::{color::BasicPalette, Options, Palette};
    let mut o = Options::default();
    o.title = title.map(String::from).unwrap_or_else(|| match (kind, by) {
        (EventKind::Alloc, "count") => "Allocations (calls)".into(),
        (EventKind::Alloc, _) => "Allocated bytes".into(),
        (EventKind::MemGrowth, _) => "Memory growth".into(),
        (EventKind::Lock, "hold") => "Lock hold time".into(),
        (EventKind::Lock, _) => "Lock wait time".into(),
        (EventKind::Func, _) => "Function latency".into(),
        (EventKind::Cpu, _) => "CPU samples".into(),
        (EventKind::OffCpu, _) => "Off-CPU time".into(),
    });
    o.count_name = kind.unit(by).to_string();
    o.colors = Palette::Basic(match kind {
        EventKind::Alloc | EventKind::MemGrowth => BasicPalette::Mem,
        EventKind::OffCpu | EventKind::Lock => BasicPalette::Io,
        _ => BasicPalette::Hot,
    });
    if lines.is_empty() {
        return Err(std::io::Error::other(format!(
            "no {} events to draw",
            kind.name()
        )));
    }
    inferno::flamegraph::from_lines(&mut o, lines.iter().map(String::as_str), out)
        .map_err(std::io::Error::other)
}

/// `ebsym diff`: per folded stack, its value before and after, sorted by how much it
/// changed.
///
/// JSON: `{"kind", "by", "totals": {"before", "after", "delta"}, "rows": [{"before",
/// "after", "delta", "frames"}], "losses_before", "losses_after", "notes"}`, frames leaf
/// first (from the after trace when the stack is in both).
#[derive(Debug, Serialize)]
pub struct DiffReport {
    pub kind: String,
    pub by: String,
    pub totals: DiffRow,
    pub rows: Vec<DiffRow>,
    pub losses_before: Losses,
    pub losses_after: Losses,
    /// Why a side has no rows (no events of the kind, lost events).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The folded stacks of both sides, for [`diff_flamegraph`].
    #[serde(skip)]
    pub folded_before: Vec<String>,
    #[serde(skip)]
    pub folded_after: Vec<String>,
}

#[derive(Debug, Serialize, Clone)]
pub struct DiffRow {
    pub before: u64,
    pub after: u64,
    pub delta: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frames: Option<Vec<Frame>>,
}

/// Compares the `kind` stacks of two traces by `by`; keeps the `n` rows that changed most.
pub fn diff(
    before: &Path,
    after: &Path,
    kind: EventKind,
    by: &str,
    filter: &Filter,
    n: usize,
) -> Result<DiffReport, ebtrace_format::Error> {
    let b = stacks(before, kind, filter)?;
    let a = stacks(after, kind, filter)?;
    // folded key -> (before, after, frames)
    let mut by_key: BTreeMap<String, (u64, u64, Vec<Frame>)> = BTreeMap::new();
    for (side, st) in [(0, &b), (1, &a)] {
        for s in &st.stacks {
            let v = s.measure(kind, by);
            if v == 0 {
                continue;
            }
            let e = by_key
                .entry(folded_key(&s.frames))
                .or_insert_with(|| (0, 0, s.frames.clone()));
            if side == 0 {
                e.0 += v;
            } else {
                if e.1 == 0 {
                    e.2 = s.frames.clone();
                }
                e.1 += v;
            }
        }
    }
    let fold = |i: usize| -> Vec<String> {
        by_key
            .iter()
            .map(|(k, v)| (k, if i == 0 { v.0 } else { v.1 }))
            .filter(|(_, v)| *v > 0)
            .map(|(k, v)| format!("{k} {v}"))
            .collect()
    };
    let (folded_before, folded_after) = (fold(0), fold(1));
    let (mut tb, mut ta) = (0u64, 0u64);
    let mut rows: Vec<(String, DiffRow)> = by_key
        .into_iter()
        .map(|(k, (before, after, frames))| {
            tb += before;
            ta += after;
            (
                k,
                DiffRow {
                    before,
                    after,
                    delta: after as i64 - before as i64,
                    frames: Some(frames),
                },
            )
        })
        .collect();
    rows.sort_by(|x, y| {
        y.1.delta
            .unsigned_abs()
            .cmp(&x.1.delta.unsigned_abs())
            .then_with(|| y.1.delta.cmp(&x.1.delta))
            .then_with(|| x.0.cmp(&y.0))
    });
    let notes = [("before", b.note), ("after", a.note)]
        .into_iter()
        .filter_map(|(side, note)| note.map(|n| format!("{side}: {n}")))
        .collect();
    Ok(DiffReport {
        kind: kind.name().into(),
        by: by.into(),
        totals: DiffRow {
            before: tb,
            after: ta,
            delta: ta as i64 - tb as i64,
            frames: None,
        },
        rows: rows.into_iter().take(n).map(|r| r.1).collect(),
        losses_before: b.losses,
        losses_after: a.losses,
        notes,
        folded_before,
        folded_after,
    })
}

impl DiffReport {
    /// The diff for people.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let t = &self.totals;
        let _ = writeln!(
            s,
            "{} by {}: before {}, after {}, delta {:+}",
            self.kind, self.by, t.before, t.after, t.delta
        );
        for n in &self.notes {
            let _ = writeln!(s, "{n}");
        }
        for (i, r) in self.rows.iter().enumerate() {
            let _ = writeln!(
                s,
                "\n#{} delta {:+}  before {}  after {}",
                i + 1,
                r.delta,
                r.before,
                r.after
            );
            for f in r.frames.iter().flatten() {
                let _ = writeln!(s, "    {}", f.display());
            }
        }
        let _ = write!(s, "\nbefore:");
        s.push_str(&losses_text(&self.losses_before));
        let _ = write!(s, "\nafter:");
        s.push_str(&losses_text(&self.losses_after));
        s
    }
}

/// A differential flame graph (inferno): widths from the after trace, red where a stack
/// grew, blue where it shrank. With `negate`, widths from the before trace (the inputs
/// swapped and the differentials negated, so red still means grew), to see what shrank or
/// disappeared.
pub fn diff_flamegraph(
    d: &DiffReport,
    kind: EventKind,
    title: Option<&str>,
    negate: bool,
    out: impl std::io::Write,
) -> std::io::Result<()> {
    use inferno::flamegraph::Options;
    if d.folded_before.is_empty() && d.folded_after.is_empty() {
        return Err(std::io::Error::other(format!(
            "no {} events to draw in either trace",
            kind.name()
        )));
    }
    let (first, second) = if negate {
        (&d.folded_after, &d.folded_before)
    } else {
        (&d.folded_before, &d.folded_after)
    };
    let mut two = Vec::new();
    inferno::differential::from_readers(
        inferno::differential::Options::default(),
        first.join("\n").as_bytes(),
        second.join("\n").as_bytes(),
        &mut two,
    )?;
    let mut o = Options::default();
    o.title = title.map(String::from).unwrap_or_else(|| {
        format!(
            "Differential flame graph: {} by {} ({})",
            kind.name(),
            d.by,
            if negate {
                "widths before, red grew, blue shrank"
            } else {
                "widths after, red grew, blue shrank"
            }
        )
    });
    o.count_name = kind.unit(&d.by).to_string();
    o.negate_differentials = negate;
    inferno::flamegraph::from_reader(&mut o, two.as_slice(), out).map_err(std::io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The live blocks as the leak report kept them before [`Live`]: per (generation,
    /// address), every block sorted by time, a free taking the latest at or before it.
    #[derive(Default)]
    struct Naive(BTreeMap<(u32, u64), Vec<Triple>>);
    /// (time, stack, size)
    type Triple = (u64, u64, u64);

    impl Naive {
        fn alloc(&mut self, g: u32, a: u64, b: Block) {
            let v = self.0.entry((g, a)).or_default();
            let i = v.partition_point(|x| x.0 <= b.time);
            v.insert(i, (b.time, b.stack, b.size));
        }
        fn free(&mut self, g: u32, a: u64, t: u64) {
            if let Some(v) = self.0.get_mut(&(g, a)) {
                let i = v.partition_point(|x| x.0 <= t);
                if i > 0 {
                    v.remove(i - 1);
                }
                if v.is_empty() {
                    self.0.remove(&(g, a));
                }
            }
        }
        fn blocks(&self) -> Vec<(u32, u64, u64, u64)> {
            let mut v: Vec<_> = self
                .0
                .iter()
                .flat_map(|(&(g, _), v)| v.iter().map(move |&(t, s, z)| (g, t, s, z)))
                .collect();
            v.sort_unstable();
            v
        }
    }

    fn live_blocks(l: &Live) -> Vec<(u32, u64, u64, u64)> {
        let mut v: Vec<_> = l
            .blocks()
            .map(|(g, b)| (g, b.time, b.stack, b.size))
            .collect();
        v.sort_unstable();
        v
    }

    /// Random allocations and frees over few addresses and generations, with frees that
    /// come after later allocations at the same address (as batches deliver them), frees
    /// of nothing, and times out of order: the slab gives the same live blocks as the
    /// plain model, and reuses its slots.
    #[test]
    fn live_blocks_match_a_plain_model() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for round in 0..20 {
            let (mut live, mut naive) = (Live::default(), Naive::default());
            let addresses = [4, 16, 64, 1000][round % 4];
            let mut t = 1000;
            for i in 0..20_000 {
                let g = rnd(3) as u32 + 1;
                let a = 0x7f00_0000_0000 + (rnd(addresses) << 16);
                // Mostly increasing times, some from the past (a free batch read late).
                t += rnd(10);
                let time = if rnd(4) == 0 { t - rnd(50).min(t) } else { t };
                if rnd(2) == 0 {
                    let b = Block {
                        time,
                        stack: i,
                        size: rnd(4096),
                    };
                    live.alloc(g, a, b);
                    naive.alloc(g, a, b);
                } else {
                    live.free(g, a, time);
                    naive.free(g, a, time);
                }
                if i % 997 == 0 {
                    assert_eq!(live_blocks(&live), naive.blocks(), "round {round} op {i}");
                }
            }
            assert_eq!(live_blocks(&live), naive.blocks(), "round {round}");
            // Slots are reused: no more than the most blocks ever live at once could need.
            assert!(live.nodes.len() - live.free.len() == naive.blocks().len());
        }
    }

    /// A block allocated at an address whose previous block's free is read later (same
    /// batch window): the free takes the older block, the newer stays.
    #[test]
    fn a_free_read_after_the_next_allocation_frees_the_older_block() {
        let mut live = Live::default();
        let b = |time, stack| Block {
            time,
            stack,
            size: 64,
        };
        live.alloc(1, 0x1000, b(10, 1));
        live.alloc(1, 0x1000, b(30, 2)); // reuse, allocated after the free at 20
        live.free(1, 0x1000, 20);
        assert_eq!(live_blocks(&live), [(1, 30, 2, 64)]);
        live.free(1, 0x1000, 5); // before every block there: frees nothing
        assert_eq!(live_blocks(&live), [(1, 30, 2, 64)]);
        live.free(1, 0x1000, 40);
        assert!(live_blocks(&live).is_empty());
        live.alloc(1, 0x1000, b(50, 3));
        live.alloc(2, 0x1000, b(50, 4)); // another process, same address
        live.alloc(1, 0x1000, b(45, 5)); // earlier than the head
        live.free(1, 0x1000, 47);
        assert_eq!(live_blocks(&live), [(1, 50, 3, 64), (2, 50, 4, 64)]);
        assert_eq!(live.nodes.len(), 3, "slots reused");
    }
}
