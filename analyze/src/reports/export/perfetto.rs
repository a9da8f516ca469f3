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
//! - Instants (`"ph": "i"`, thread scope): allocations ("alloc", args `size`, `stack`),
//!   CPU samples (named after the leaf function; args `cpu`, `stack`), memory growth.
//! - Flows (`"ph": "s"` on the waker, `"f"` with `"bp": "e"` on the wakee, one `id`) from
//!   the thread that woke an off-CPU block (not an interrupt) to the block: the `s` binds to a short
//!   "wakeup" slice drawn on the waker's thread just before the block ends (the wake
//!   itself has no timestamp in the trace: it happened before the wakee ran again).
//! - Every `stack` is a list of "function (file:line)" strings, leaf first
//!   ([`Frame::display`]); unnamed frames as other reports show them (`lib.so+0x1a2b`).
//! - `otherData`: the trace's clock, start (boottime and wall clock), the caps and per
//!   kind how many events passed the filters (`events_KIND`) and were dropped by a cap
//!   (`dropped_KIND`), and the recording's losses.
use super::collect::{Caps, Collected, ExportStats, Extra, StackNames};
use crate::reports::names::{
    bio_op_name, device_name, function_name, lock_source_name, memgrowth_name, syscall_name,
    task_state_name,
};
use crate::reports::places::{interrupt_wake, kernel_place, leaf, stack_lines, user_place};
use serde::Serialize;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
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
    // pid of each thread shown.
    let mut pid_of: HashMap<u32, u32> = HashMap::new();
    for (&pid, (comm, tids)) in &tree {
        let mut e = Ev::new("M", "process_name", 0, pid, pid);
        e.args = Some(json!({ "name": comm }));
        evs.push(&e)?;
        for &tid in tids {
            pid_of.insert(tid, pid);
            let name = if tid == pid {
                comm.clone()
            } else {
                format!("{comm} {tid}")
            };
            let mut e = Ev::new("M", "thread_name", 0, pid, tid);
            e.args = Some(json!({ "name": name }));
            evs.push(&e)?;
            // The main thread first, then by tid.
            let mut e = Ev::new("M", "thread_sort_index", 0, pid, tid);
            e.args = Some(json!({ "sort_index": if tid == pid { 0 } else { tid } }));
            evs.push(&e)?;
        }
    }
    let arch = c.loaded.header.arch.clone();
    let mut lines = Lines::default();
    let mut flow_id = 0u64;
    let kinds = std::mem::take(&mut c.kinds);
    for (kind, recs) in &kinds {
        for r in recs {
            let pid = c.process(r.generation).0;
            let ts = c.rel(r.time);
            let (frames, stack) = lines.get(&mut c, r.stack);
            let place = user_place(&frames);
            let mut args = Map::new();
            args.insert("stack".into(), json!(&*stack));
            let name: String;
            let mut slice = true;
            let mut woken_by_thread = false;
            match r.extra {
                Extra::OffCpu {
                    waker_tid,
                    waker_stack,
                    state,
                } => {
                    name = place.clone();
                    if let Some(k) = kernel_place(&frames) {
                        args.insert("blocked_in".into(), json!(k));
                    }
                    args.insert("state".into(), json!(task_state_name(state)));
                    let (wframes, w) = lines.get(&mut c, waker_stack);
                    if interrupt_wake(&wframes) {
                        // Whoever ran when the interrupt came: not a waker.
                        args.insert("woken_by".into(), json!("interrupt"));
                        args.insert("interrupted_tid".into(), json!(waker_tid));
                    } else if waker_tid != 0 {
                        args.insert("woken_by".into(), json!("thread"));
                        args.insert("waker_tid".into(), json!(waker_tid));
                        woken_by_thread = true;
                    } else {
                        // No waker: the recorder keeps none for a wake from the idle task,
                        // an interrupt on an idle CPU.
                        args.insert("woken_by".into(), json!("interrupt"));
                    }
                    if waker_stack != 0 {
                        args.insert("waker_stack".into(), json!(&*w));
                    }
                }
                Extra::Lock {
                    mutex,
                    hold_ns,
                    waker_tid,
                    waker_stack,
                    futex_op,
                    source,
                    result,
                } => {
                    name = format!("lock wait in {place}");
                    args.insert("mutex".into(), json!(format!("{mutex:#x}")));
                    args.insert("source".into(), json!(lock_source_name(source)));
                    if source == ebtrace_format::proto::LockSource::Futex {
                        args.insert("futex_op".into(), json!(futex_op));
                    }
                    if hold_ns != 0 {
                        args.insert("hold_ns".into(), json!(hold_ns));
                    }
                    if result != 0 {
                        args.insert("result".into(), json!(result));
                    }
                    if waker_tid != 0 {
                        args.insert("waker_tid".into(), json!(waker_tid));
                    }
                    if waker_stack != 0 {
                        let (_, w) = lines.get(&mut c, waker_stack);
                        args.insert("waker_stack".into(), json!(&*w));
                    }
                }
                Extra::Func { function } => {
                    name = function_name(&c.loaded, function);
                    args.insert("caller".into(), json!(place));
                }
                Extra::Syscall { nr, ret } => {
                    let s = syscall_name(&arch, u64::from(nr));
                    name = format!("syscall {s}");
                    args.insert("syscall".into(), json!(s));
                    args.insert("ret".into(), json!(ret));
                    args.insert("caller".into(), json!(place));
                }
                Extra::Bio {
                    dev,
                    op,
                    bytes,
                    error,
                } => {
                    let d = device_name(&c.loaded, dev);
                    let o = bio_op_name(op);
                    name = format!("bio {o} {d}");
                    args.insert("device".into(), json!(d));
                    args.insert("op".into(), json!(o));
                    args.insert("bytes".into(), json!(bytes));
                    if error != 0 {
                        args.insert("error".into(), json!(error));
                    }
                }
                Extra::Runq { preempted, cpu } => {
                    name = "runq wait".into();
                    args.insert("preempted".into(), json!(preempted != 0));
                    args.insert("cpu".into(), json!(cpu));
                }
                Extra::Alloc { size, .. } => {
                    slice = false;
                    name = "alloc".into();
                    args.insert("size".into(), json!(size));
                    args.insert("in".into(), json!(place));
                }
                Extra::Cpu { cpu } => {
                    slice = false;
                    name = leaf(&frames);
                    args.insert("cpu".into(), json!(cpu));
                }
                Extra::MemGrowth { kind, size } => {
                    slice = false;
                    name = memgrowth_name(kind).into();
                    args.insert("size".into(), json!(size));
                    args.insert("in".into(), json!(place));
                }
            }
            let mut e = Ev::new(if slice { "X" } else { "i" }, &name, ts, pid, r.tid);
            e.cat = Some(kind.name());
            if slice {
                e.dur = Some(us(r.dur));
            } else {
                e.s = Some("t");
            }
            e.args = Some(Value::Object(args));
            evs.push(&e)?;
            // The waker's flow into the block.
            if let Extra::OffCpu { waker_tid, .. } = r.extra {
                if !woken_by_thread || waker_tid == r.tid {
                    continue;
                }
                let Some(&wpid) = pid_of.get(&waker_tid) else {
                    stats.flows_without_waker_thread += 1;
                    continue;
                };
                flow_id += 1;
                let end = ts + r.dur;
                // A 500 ns "wakeup" slice on the waker, ending as the block does, that
                // the flow starts in; the flow ends inside the block, just before its end.
                let w = 500.min(end);
                let mut e = Ev::new("X", "wakeup", end - w, wpid, waker_tid);
                e.cat = Some("wakeup");
                e.dur = Some(us(w));
                e.args = Some(json!({ "wakee_tid": r.tid, "wakee_block": &name }));
                evs.push(&e)?;
                let mut s = Ev::new("s", "wakeup", end - w / 2, wpid, waker_tid);
                s.cat = Some("wakeup");
                s.id = Some(flow_id);
                evs.push(&s)?;
                let inset = (r.dur / 2).min(100);
                let mut f = Ev::new("f", "wakeup", end - inset, pid, r.tid);
                f.cat = Some("wakeup");
                f.id = Some(flow_id);
                f.bp = Some("e");
                evs.push(&f)?;
                stats.flows += 1;
            }
        }
    }
    let out = evs.out;
    out.write_all(b"\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":")?;
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
    serde_json::to_writer(&mut *out, &Value::Object(other))?;
    out.write_all(b"}\n")?;
    stats.losses = c.loaded.losses.clone();
    Ok(stats)
}
