//! Chrome's JSON trace-event format, as ui.perfetto.dev and chrome://tracing load it:
//! `{"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}`.
//!
//! - One process per pid (`process_name` metadata, the comm), one thread per tid
//!   (`thread_name`: the comm, and the tid for other threads than the main one).
//! - Slices (`"ph": "X"`, `ts`/`dur` in µs since the trace's start, fractional) on their
//!   thread, `cat` the family: off-CPU blocks (named after the user function that blocked;
//!   args `stack`, `blocked_in` the kernel function, `state`, `woken_by` "thread" with
//!   `waker_tid` or "interrupt" with `interrupted_tid` (the thread an interrupt's wake
//!   happened to run on: its kernel stack, `waker_stack`, says so), `waker_stack`),
//!   lock waits ("lock wait in F"; `mutex` address, `kind`, `hold_ns`, `waker_tid`, the
//!   releasing thread's `waker_stack`), `--func` calls (the probed function), slow system
//!   calls ("syscall read"), block I/O ("bio write sda"), run-queue waits.
//! - A trace recorded with `--request`: a slice per request on its thread (`cat` "request",
//!   named "request ID"; args `request` the spec, `id`, and the kernel's split: `on_cpu_ns`,
//!   `runq_ns`, `off_cpu_interruptible_ns`, `off_cpu_uninterruptible_ns`, `blocks`), drawn
//!   before the thread's other slices so that it holds them.
//! - Instants (`"ph": "i"`, thread scope): allocations ("alloc", args `size`, `stack`),
//!   CPU samples (named after the leaf function; args `cpu`, `stack`), memory growth.
//! - Flows (`"ph": "s"` on the waker, `"f"` with `"bp": "e"` on the wakee, one `id`) from
//!   the thread that woke an off-CPU block (not an interrupt) to the block: the `s` binds to a short
//!   "wakeup" slice drawn on the waker's thread ending at the wake (the block's end less its
//!   `runnable_ns`, the wait for a CPU after the wake; at the block's end in traces
//!   without it).
//! - Every `stack` is a list of "function (file:line)" strings, leaf first
//!   ([`Frame::display`]); unnamed frames as other reports show them (`lib.so+0x1a2b`).
//! - `otherData`: the trace's clock, start (boottime and wall clock), the caps and per
//!   kind how many events passed the filters (`events_KIND`) and were dropped by a cap
//!   (`dropped_KIND`), and the recording's losses.
use super::collect::{Caps, Collected, ExportStats, StackNames};
use crate::reports::describe::{describe, Description, Value as V};
use crate::reports::places::stack_lines;
use serde::Serialize;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::rc::Rc;

#[derive(Serialize)]
struct Ev<'a> {
    ph: &'static str,
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    cat: Option<&'static str>,
    ts: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    pid: u32,
    tid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    s: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bp: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<Value>,
}

impl<'a> Ev<'a> {
    fn new(ph: &'static str, name: &'a str, ts_ns: u64, pid: u32, tid: u32) -> Self {
        Ev {
            ph,
            name,
            cat: None,
            ts: us(ts_ns),
            dur: None,
            pid,
            tid,
            s: None,
            id: None,
            bp: None,
            args: None,
        }
    }
}

/// ns as µs.
fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// The comma-separated event list of `traceEvents`.
struct Events<'w> {
    out: &'w mut dyn Write,
    first: bool,
    n: u64,
}

impl Events<'_> {
    fn push(&mut self, ev: &Ev<'_>) -> std::io::Result<()> {
        if !self.first {
            self.out.write_all(b",\n")?;
        }
        self.first = false;
        self.n += 1;
        serde_json::to_writer(&mut *self.out, ev)?;
        Ok(())
    }
}

/// Stack lines named once per stack id.
#[derive(Default)]
struct Lines {
    names: StackNames,
    lines: HashMap<u64, Rc<Vec<String>>>,
}

impl Lines {
    fn get(
        &mut self,
        c: &mut Collected,
        id: u64,
    ) -> (Rc<Vec<crate::model::Frame>>, Rc<Vec<String>>) {
        let frames = self.names.frames(&mut c.loaded, id);
        let lines = self
            .lines
            .entry(id)
            .or_insert_with(|| Rc::new(stack_lines(&frames)))
            .clone();
        (frames, lines)
    }
}

pub(super) fn write(
    mut c: Collected,
    caps: Caps,
    out: &mut dyn Write,
) -> std::io::Result<ExportStats> {
    let tree = c.thread_tree();
    let mut stats = ExportStats {
        kinds: c.kind_counts(),
        processes: tree.len(),
        threads: tree.values().map(|(_, t)| t.len()).sum(),
        ..Default::default()
    };
    out.write_all(b"{\"traceEvents\":[\n")?;
    let mut evs = Events {
        out,
        first: true,
        n: 0,
    };
    let pid_of = names(&mut evs, &c, &tree)?;
    request_slices(&mut evs, &mut c, &mut stats)?;
    let mut lines = Lines::default();
    let mut flow_id = 0u64;
    let kinds = std::mem::take(&mut c.kinds);
    for (kind, recs, _) in &kinds {
        for v in recs {
            let pid = c.process(v.generation).0;
            let ts = c.rel(v.time_ns);
            let (frames, stack) = lines.get(&mut c, v.stack);
            let waker_frames = match v.waker {
                Some(w) => lines.get(&mut c, w.stack).0,
                None => Rc::default(),
            };
            let d = describe(v, &frames, &waker_frames, &c.loaded);
            let args = args(&mut c, &mut lines, &stack, &d);
            let slice = v.duration_ns.is_some();
            let mut e = Ev::new(if slice { "X" } else { "i" }, &d.title, ts, pid, v.tid);
            e.cat = Some(kind.name());
            match v.duration_ns {
                Some(dur) => e.dur = Some(us(dur)),
                None => e.s = Some("t"),
            }
            e.args = Some(Value::Object(args));
            evs.push(&e)?;
            // The waker's flow into the block.
            let (Some(waker_tid), Some(dur)) = (d.waker_thread, v.duration_ns) else {
                continue;
            };
            if waker_tid == v.tid {
                continue;
            }
            let Some(&wpid) = pid_of.get(&waker_tid) else {
                stats.flows_without_waker_thread += 1;
                continue;
            };
            flow_id += 1;
            // The wake: measured (the block's wait for a CPU after it, runnable_ns), else
            // the block's end.
            let runnable = match v.fields {
                crate::event::Fields::OffCpu { runnable_ns, .. } => runnable_ns.min(dur),
                _ => 0,
            };
            let end = ts + dur - runnable;
            // A 500 ns "wakeup" slice on the waker, ending at the wake, that the flow starts
            // in; the flow ends inside the block, just before the wake.
            let w = 500.min(end);
            let mut e = Ev::new("X", "wakeup", end - w, wpid, waker_tid);
            e.cat = Some("wakeup");
            e.dur = Some(us(w));
            e.args = Some(json!({ "wakee_tid": v.tid, "wakee_block": &d.title }));
            evs.push(&e)?;
            let mut s = Ev::new("s", "wakeup", end - w / 2, wpid, waker_tid);
            s.cat = Some("wakeup");
            s.id = Some(flow_id);
            evs.push(&s)?;
            let inset = ((dur - runnable) / 2).min(100);
            let mut f = Ev::new("f", "wakeup", end - inset, pid, v.tid);
            f.cat = Some("wakeup");
            f.id = Some(flow_id);
            f.bp = Some("e");
            evs.push(&f)?;
            stats.flows += 1;
        }
    }
    let out = evs.out;
    out.write_all(b"\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":")?;
    serde_json::to_writer(&mut *out, &other_data(&c, &caps, &stats))?;
    out.write_all(b"}\n")?;
    stats.losses = c.loaded.losses.clone();
    Ok(stats)
}

/// The processes' and threads' names (the main thread first, then by tid); the pid of
/// each thread shown.
fn names(
    evs: &mut Events<'_>,
    c: &Collected,
    tree: &BTreeMap<u32, (String, Vec<u32>)>,
) -> std::io::Result<HashMap<u32, u32>> {
    let mut pid_of: HashMap<u32, u32> = HashMap::new();
    for (&pid, (comm, tids)) in tree {
        let mut e = Ev::new("M", "process_name", 0, pid, pid);
        e.args = Some(json!({ "name": comm }));
        evs.push(&e)?;
        for &tid in tids {
            pid_of.insert(tid, pid);
            let name = c.thread_display(pid, tid, comm);
            let mut e = Ev::new("M", "thread_name", 0, pid, tid);
            e.args = Some(json!({ "name": name }));
            evs.push(&e)?;
            // The main thread first, then by tid.
            let mut e = Ev::new("M", "thread_sort_index", 0, pid, tid);
            e.args = Some(json!({ "sort_index": if tid == pid { 0 } else { tid } }));
            evs.push(&e)?;
        }
    }
    Ok(pid_of)
}

/// An event's args: its stack's lines, then the description's arg fields in their order.
fn args(
    c: &mut Collected,
    lines: &mut Lines,
    stack: &[String],
    d: &Description,
) -> Map<String, Value> {
    let mut args = Map::new();
    args.insert("stack".into(), json!(stack));
    for f in d.fields.iter().filter(|f| f.arg) {
        let value = match &f.value {
            V::Text(s) => json!(s),
            V::Integer(n) => json!(n),
            V::Ns(n) | V::Bytes(n) => json!(n),
            V::Stack(id) => json!(&*lines.get(c, *id).1),
            V::YesNo(b) => json!(b),
        };
        args.insert(f.key.into(), value);
    }
    args
}

/// A trace recorded with --request: one slice per request on its thread (cat "request",
/// named "request" and its id), around the blocks and calls inside it; args the id and, when
/// the kernel split it, its time by phase.
fn request_slices(
    evs: &mut Events<'_>,
    c: &mut Collected,
    stats: &mut ExportStats,
) -> std::io::Result<()> {
    let Some((spec, reqs, n)) = c.requests.take() else {
        return Ok(());
    };
    stats.kinds.insert("request", (reqs.len() as u64, n));
    for r in &reqs {
        let pid = c.process(r.generation).0;
        let name = match r.id {
            Some(id) => format!("request {id}"),
            None => "request".to_string(),
        };
        let mut e = Ev::new("X", &name, c.rel(r.start), pid, r.tid);
        e.cat = Some("request");
        e.dur = Some(us(r.end - r.start));
        let mut args = Map::new();
        args.insert("request".into(), json!(spec));
        if let Some(id) = r.id {
            args.insert("id".into(), json!(id));
        }
        if let Some(k) = r.kernel {
            args.insert("on_cpu_ns".into(), json!(k.on_cpu_ns));
            args.insert("runq_ns".into(), json!(k.runq_ns));
            args.insert("off_cpu_interruptible_ns".into(), json!(k.sleep_ns));
            args.insert("off_cpu_uninterruptible_ns".into(), json!(k.disk_ns));
            args.insert("blocks".into(), json!(k.blocks));
        }
        e.args = Some(Value::Object(args));
        evs.push(&e)?;
    }
    c.requests = Some((spec, reqs, n));
    Ok(())
}

/// The trace's `otherData`: where it came from, its clock and start, the caps and what
/// they dropped, the flows, the losses.
fn other_data(c: &Collected, caps: &Caps, stats: &ExportStats) -> Value {
    let h = &c.loaded.header;
    let mut other = Map::new();
    other.insert("producer".into(), json!("ebsym export"));
    other.insert(
        "time".into(),
        json!("µs since the trace's start (header start_time_ns, boottime)"),
    );
    other.insert("clock".into(), json!(h.clock));
    other.insert("start_time_ns".into(), json!(h.start_time_ns));
    other.insert("start_realtime_ns".into(), json!(h.start_realtime_ns));
    other.insert("hostname".into(), json!(h.hostname));
    other.insert("kernel".into(), json!(h.kernel_release));
    other.insert("max_instants".into(), json!(caps.instants));
    other.insert("max_slices".into(), json!(caps.slices));
    for (k, (kept, all)) in &stats.kinds {
        other.insert(format!("events_{k}"), json!(all));
        other.insert(format!("dropped_{k}"), json!(all - kept));
    }
    other.insert("flows".into(), json!(stats.flows));
    other.insert(
        "flows_without_waker_thread".into(),
        json!(stats.flows_without_waker_thread),
    );
    let lost: u64 = c.loaded.losses.recorded.values().sum();
    other.insert("lost_while_recording".into(), json!(lost));
    other.insert(
        "losses".into(),
        json!(crate::reports::losses_text(&c.loaded.losses)),
    );
    Value::Object(other)
}
