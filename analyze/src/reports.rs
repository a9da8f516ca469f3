//! The reports: top stacks, leaks, locks, folded stacks and flame graphs.
//!
//! JSON (`--json`), the same shape for every report:
//! `{"kind", "by", "totals": {…}, "losses": {…}, "rows": [{…values…, "frames": [{"function",
//! "file", "line", "inlined", "module", "address"}]}]}`, frames leaf first. Values: alloc
//! `count`, `bytes`; leaks `count`, `bytes`, `oldest_ns`, `alive`; locks `count`, `wait_ns`,
//! `wait_p99_ns`, `hold_ns`, `hold_p99_ns`, `mutex`, `kind`, `waker_frames`; func `count`,
//! `total_ns`, `p50_ns`, `p90_ns`, `p99_ns`, `max_ns`; cpu `count`; offcpu `count`, `total_ns`.
use crate::model::{Event, Filter, Frame, Loaded, Losses, Sink};
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
}

#[derive(Debug, Default, Clone)]
struct Agg {
    count: u64,
    a: u64,
    b: u64,
    samples_a: Vec<u64>,
    samples_b: Vec<u64>,
    mutex: u64,
    futex_op: u32,
    wakers: HashMap<u64, u64>,
}

fn pct(v: &mut [u64], p: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

/// Per-stack aggregation of one kind.
struct TopSink {
    kind: EventKind,
    by_stack: HashMap<(u64, u64), Agg>,
}

impl Sink for TopSink {
    fn event(&mut self, ev: &Event<'_>) {
        let (key, a, b, sample_b) = match (self.kind, ev) {
            (EventKind::Alloc, Event::Alloc(e)) => ((e.stack, 0), e.size, 0, None),
            (EventKind::MemGrowth, Event::MemGrowth(e)) => ((e.stack, 0), e.size, 0, None),
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
            g.samples_a.push(a);
        }
        if let Some(h) = sample_b {
            g.samples_b.push(h);
        }
        if let Event::Lock(e) = ev {
            g.mutex = e.mutex;
            g.futex_op = e.futex_op;
            if e.waker_stack != 0 {
                *g.wakers.entry(e.waker_stack).or_default() += 1;
            }
        }
    }
}

/// Frames without their addresses: the key under which stacks of several generations (or
/// stack ids that symbolize alike) merge.
fn frame_key(frames: &[Frame]) -> Vec<(String, Option<String>, Option<u32>, bool)> {
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

/// `ebsym top` (and `locks`, `latency`): rows of stacks sorted by `by`.
pub fn top(
    path: &Path,
    kind: EventKind,
    by: &str,
    filter: &Filter,
    n: usize,
) -> Result<Report, ebtrace_format::Error> {
    let mut sink = TopSink {
        kind,
        by_stack: HashMap::new(),
    };
    let mut l = Loaded::read(path, filter, &mut sink)?;
    // Resolve and merge.
    let mut merged: BTreeMap<
        (u64, Vec<(String, Option<String>, Option<u32>, bool)>),
        (Vec<Frame>, Agg),
    > = BTreeMap::new();
    let mut keys: Vec<(u64, u64)> = sink.by_stack.keys().copied().collect();
    keys.sort_unstable();
    let mut resolved: HashMap<u64, Vec<Frame>> = HashMap::new();
    for key in keys {
        let agg = sink.by_stack.remove(&key).unwrap();
        let frames = resolved
            .entry(key.0)
            .or_insert_with(|| l.frames(key.0))
            .clone();
        let e = merged
            .entry((key.1, frame_key(&frames)))
            .or_insert_with(|| (frames, Agg::default()));
        e.1.count += agg.count;
        e.1.a += agg.a;
        e.1.b += agg.b;
        e.1.samples_a.extend(agg.samples_a);
        e.1.samples_b.extend(agg.samples_b);
        e.1.mutex = agg.mutex;
        e.1.futex_op = agg.futex_op;
        for (w, c) in agg.wakers {
            *e.1.wakers.entry(w).or_default() += c;
        }
    }
    let mut totals = BTreeMap::new();
    let mut rows: Vec<(u64, Value)> = Vec::new();
    for ((sub, _), (frames, mut agg)) in merged {
        *totals.entry("count".to_string()).or_default() += agg.count;
        let (measure, mut v) = match kind {
            EventKind::Alloc | EventKind::MemGrowth => {
                *totals.entry("bytes".into()).or_default() += agg.a;
                (
                    if by == "count" { agg.count } else { agg.a },
                    json!({"count": agg.count, "bytes": agg.a}),
                )
            }
            EventKind::Lock => {
                *totals.entry("wait_ns".into()).or_default() += agg.a;
                if agg.b > 0 {
                    *totals.entry("hold_ns".into()).or_default() += agg.b;
                }
                let waker = agg
                    .wakers
                    .iter()
                    .max_by_key(|(s, c)| (**c, std::cmp::Reverse(**s)))
                    .map(|(s, _)| *s);
                let waker_frames = waker.map(|w| l.frames(w)).unwrap_or_default();
                let has_hold = agg.b > 0;
                let mut v = json!({
                    "count": agg.count,
                    "wait_ns": agg.a,
                    "wait_p99_ns": pct(&mut agg.samples_a, 0.99),
                    "mutex": format!("{:#x}", agg.mutex),
                    "kind": lock_kind(&frames, agg.futex_op),
                    "waker_frames": frames_json(&waker_frames),
                });
                if has_hold {
                    v["hold_ns"] = json!(agg.b);
                    v["hold_p99_ns"] = json!(pct(&mut agg.samples_b, 0.99));
                }
                (
                    match by {
                        "hold" => agg.b,
                        "count" => agg.count,
                        _ => agg.a,
                    },
                    v,
                )
            }
            EventKind::Func => {
                *totals.entry("total_ns".into()).or_default() += agg.a;
                let max = agg.samples_a.iter().copied().max().unwrap_or(0);
                let v = json!({
                    "count": agg.count, "total_ns": agg.a, "function_id": sub,
                    "p50_ns": pct(&mut agg.samples_a, 0.5), "p90_ns": pct(&mut agg.samples_a, 0.9),
                    "p99_ns": pct(&mut agg.samples_a, 0.99), "max_ns": max,
                });
                (if by == "count" { agg.count } else { agg.a }, v)
            }
            EventKind::Cpu => (agg.count, json!({"count": agg.count})),
            EventKind::OffCpu => {
                *totals.entry("total_ns".into()).or_default() += agg.a;
                (
                    if by == "count" { agg.count } else { agg.a },
                    json!({"count": agg.count, "total_ns": agg.a}),
                )
            }
        };
        v["frames"] = frames_json(&frames);
        rows.push((measure, v));
    }
    // Largest first; ties in a fixed order (the frames) so output is deterministic.
    rows.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then_with(|| a.1["frames"].to_string().cmp(&b.1["frames"].to_string()))
    });
    let rows = rows.into_iter().take(n).map(|r| r.1).collect();
    Ok(Report {
        kind: kind.name().into(),
        by: by.into(),
        totals,
        losses: l.losses,
        rows,
    })
}

struct LeakSink {
    /// (generation, address) -> [(time, stack, size)], oldest first.
    live: HashMap<(u32, u64), Vec<(u64, u64, u64)>>,
    last_ns: u64,
}

impl Sink for LeakSink {
    fn event(&mut self, ev: &Event<'_>) {
        match ev {
            Event::Alloc(e) => {
                self.last_ns = self.last_ns.max(e.time_ns);
                let v = self.live.entry((e.generation, e.address)).or_default();
                let i = v.partition_point(|x| x.0 <= e.time_ns);
                v.insert(i, (e.time_ns, e.stack, e.size));
            }
            Event::Free(e) => {
                self.last_ns = self.last_ns.max(e.time_ns);
                // Frees come in their own batches, possibly after a later allocation at the
                // same address was stored: free the latest allocation made before it.
                if let Some(v) = self.live.get_mut(&(e.generation, e.address)) {
                    let i = v.partition_point(|x| x.0 <= e.time_ns);
                    if i > 0 {
                        v.remove(i - 1);
                    }
                    if v.is_empty() {
                        self.live.remove(&(e.generation, e.address));
                    }
                }
            }
            _ => {}
        }
    }
}

/// `ebsym leaks`: allocations never freed before the end of the recording or the exit of
/// their process, grouped by stack.
pub fn leaks(path: &Path, filter: &Filter, n: usize) -> Result<Report, ebtrace_format::Error> {
    let mut sink = LeakSink {
        live: HashMap::new(),
        last_ns: 0,
    };
    let mut l = Loaded::read(path, filter, &mut sink)?;
    // (stack, generation) -> (count, bytes, oldest time)
    let mut by: BTreeMap<(u64, u32), (u64, u64, u64)> = BTreeMap::new();
    for ((generation, _), v) in &sink.live {
        for &(t, stack, size) in v {
            let e = by.entry((stack, *generation)).or_insert((0, 0, u64::MAX));
            e.0 += 1;
            e.1 += size;
            e.2 = e.2.min(t);
        }
    }
    let mut merged: BTreeMap<
        (Vec<(String, Option<String>, Option<u32>, bool)>, bool),
        (Vec<Frame>, u64, u64, u64),
    > = BTreeMap::new();
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
    let mut totals = BTreeMap::new();
    let mut rows: Vec<(u64, Value)> = merged
        .into_iter()
        .map(|((_, alive), (frames, count, bytes, oldest))| {
            *totals.entry("count".to_string()).or_default() += count;
            *totals.entry("bytes".to_string()).or_default() += bytes;
            (bytes, json!({"count": count, "bytes": bytes, "oldest_ns": sink.last_ns.saturating_sub(oldest), "alive": alive, "frames": frames_json(&frames)}))
        })
        .collect();
    rows.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then_with(|| a.1["frames"].to_string().cmp(&b.1["frames"].to_string()))
    });
    if l.losses.recorded.keys().any(|k| k.starts_with("free/")) {
        l.losses
            .damage
            .push("frees were lost while recording: some blocks shown may have been freed".into());
    }
    Ok(Report {
        kind: "leaks".into(),
        by: "bytes".into(),
        totals,
        losses: l.losses,
        rows: rows.into_iter().take(n).map(|r| r.1).collect(),
    })
}

/// Folded stacks (`root;…;leaf value`), for flamegraph.pl and inferno.
pub fn folded(
    path: &Path,
    kind: EventKind,
    by: &str,
    filter: &Filter,
) -> Result<(Vec<String>, Losses), ebtrace_format::Error> {
    let r = top(path, kind, by, filter, usize::MAX)?;
    let key = match (kind, by) {
        (EventKind::Alloc | EventKind::MemGrowth, "count") => "count",
        (EventKind::Alloc | EventKind::MemGrowth, _) => "bytes",
        (EventKind::Lock, "hold") => "hold_ns",
        (EventKind::Lock, "count") => "count",
        (EventKind::Lock, _) => "wait_ns",
        (EventKind::Func | EventKind::OffCpu, "count") => "count",
        (EventKind::Func | EventKind::OffCpu, _) => "total_ns",
        (EventKind::Cpu, _) => "count",
    };
    let mut lines: BTreeMap<String, u64> = BTreeMap::new();
    for row in &r.rows {
        let v = row[key].as_u64().unwrap_or(0);
        if v == 0 {
            continue;
        }
        let frames: Vec<Frame> = serde_json::from_value(row["frames"].clone()).unwrap_or_default();
        let names: Vec<String> = frames
            .iter()
            .rev()
            .map(|f| f.function.replace(';', ":"))
            .collect();
        let stack = if names.is_empty() {
            "[no stack]".to_string()
        } else {
            names.join(";")
        };
        *lines.entry(stack).or_default() += v;
    }
    Ok((
        lines.into_iter().map(|(s, v)| format!("{s} {v}")).collect(),
        r.losses,
    ))
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
        if self.rows.is_empty() {
            let _ = writeln!(
                s,
                "no {} events in this trace{}",
                self.kind,
                if self.losses.recorded.is_empty() {
                    ""
                } else {
                    " (but events were lost: see below)"
                }
            );
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
            let frames: Vec<Frame> =
                serde_json::from_value(row["frames"].clone()).unwrap_or_default();
            for f in &frames {
                let _ = writeln!(s, "    {}", f.display());
            }
            if let Some(w) = row.get("waker_frames") {
                let wf: Vec<Frame> = serde_json::from_value(w.clone()).unwrap_or_default();
                if !wf.is_empty() {
                    let _ = writeln!(s, "  woken by (the holder releasing it):");
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
