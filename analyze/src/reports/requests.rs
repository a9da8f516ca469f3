//! `ebsym requests`: why the slow requests were slow. A recording with `ebrec record
//! --request SPEC` marks each request's start and end on its thread (a USDT start/done
//! pair, or a function's calls); this report pairs them (as `latency --kind usdt` does:
//! never wrongly, the unpaired counted), gives the exact latency distribution, and splits
//! each of the slowest requests' time by cause from the events the trace has on that thread
//! inside the request: on CPU (its cpu samples × the sampling period, with their stacks),
//! in the run queue (runq waits), off the CPU by cause (the blocked thread's kernel stack,
//! as `ebsym threads` reads it: lock, disk, network or pipe, sleep, ...), and the part no
//! event accounts for, stated. Then the differential that answers the question: what the
//! tail (the requests at or above `--tail`'s percentile) spends more on than the requests
//! around the median, per cause and per stack, largest first.
//!
//! The split comes from the sampled families (one cpu sample per period, off-CPU blocks
//! past --offcpu's threshold, run-queue waits past --runq's): a request shorter than those
//! has most of its time "not seen". Two passes over the trace: the first finds the
//! requests, the second attributes events only to the requests it details (the slowest,
//! the tail, those around the median), so memory follows those, never every event.
use super::idle::lock_place;
use super::kind::EventKind;
use super::places::user_place;
use super::text::losses_text;
use super::threads::{cause_of, header_option, thread_name};
use crate::histogram::Histogram;
use crate::histogram::Log2Bin;
use crate::model::{Event, Filter, Frame, Loaded, Losses, Sink, Trace};
use ebtrace_format::events::RequestSplit;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;

/// What `ebsym requests` is asked.
#[derive(Debug, Clone)]
pub struct RequestOptions {
    /// The slowest requests shown one by one.
    pub slowest: usize,
    /// The tail's percentile (99: the requests at or above p99).
    pub tail: f64,
    /// Stacks shown per cause.
    pub stacks: usize,
}

impl Default for RequestOptions {
    fn default() -> Self {
        RequestOptions {
            slowest: 10,
            tail: 99.0,
            stacks: 3,
        }
    }
}

/// The report.
#[derive(Debug, Serialize)]
pub struct RequestsReport {
    pub kind: String,
    /// The `--request` spec the trace was recorded with.
    pub request: String,
    /// Requests paired, and their exact latency.
    pub count: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
    pub total_ns: u64,
    pub histogram: Vec<Log2Bin>,
    /// Boundaries left unpaired: a start while one was open on the thread (the whole nest),
    /// a done with no start open, a start still open at the end.
    pub nested: u64,
    pub unmatched_done: u64,
    pub open_at_end: u64,
    /// The start's first argument repeats across requests (fewer distinct values than half
    /// the requests, e.g. PostgreSQL's query__start, whose argument is the query text's
    /// address): not a request id, so every `id` is null; how many distinct of how many.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ids_repeat: Option<IdsRepeat>,
    /// The families the split uses that the trace has (cpu, offcpu, runq).
    pub families: Vec<&'static str>,
    /// Every request's time as the kernel split it (recorded with --offcpu), summed; absent
    /// when no request has the kernel's split.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_split: Option<KernelSplit>,
    /// --request-slow (recorded with --offcpu): from what length on a request's blocks were
    /// kept whole, whatever the sample; absent when off or recorded without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slow_detail: Option<SlowDetail>,
    pub cpu_period_ns: u64,
    pub slowest: Vec<RequestRow>,
    pub tail: Option<TailDiff>,
    pub losses: Losses,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Tail-based detail (`ebrec record --request-slow`): every block that ended once its
/// request had run `threshold_ns` was kept whole, with its stacks and waker.
#[derive(Debug, Clone, Serialize)]
pub struct SlowDetail {
    /// As recorded: `p99` (adaptive: a quantile of the requests done so far) or a fixed
    /// duration (`5000us`).
    pub setting: String,
    /// The threshold last in force (None: adaptive, and too few requests were done to set
    /// one: no block was kept for its request's length).
    pub threshold_ns: Option<u64>,
    /// Adaptive: how many times the threshold moved (`ebsym info` lists each value).
    pub changes: u64,
}

impl SlowDetail {
    /// The text report's `detail:` line.
    fn line(&self) -> String {
        match (self.threshold_ns, self.setting.starts_with('p')) {
            (Some(t), true) => format!(
                "detail: every block of a request past {} kept whole (--request-slow {}: the last of {} adaptive value{})",
                ms(t),
                self.setting,
                self.changes,
                if self.changes == 1 { "" } else { "s" }
            ),
            (Some(t), false) => format!(
                "detail: every block of a request past {} kept whole (--request-slow)",
                ms(t)
            ),
            (None, _) => format!(
                "detail: --request-slow {} set no threshold (too few requests done): the sample alone names the blocks",
                self.setting
            ),
        }
    }
}

/// The recording's --request-slow, from the header and the ProbeChange records.
fn slow_detail(l: &Loaded) -> Option<SlowDetail> {
    let setting = l
        .header
        .options
        .iter()
        .find(|o| o.key == "request-slow")
        .map(|o| o.value.clone())
        .filter(|v| v != "off")?;
    let changes: Vec<u64> = l
        .probe_changes
        .iter()
        .filter(|c| c.setting == "request-slow-ns")
        .map(|c| c.value)
        .collect();
    let fixed = setting
        .strip_suffix("us")
        .and_then(|v| v.parse::<u64>().ok())
        .map(|us| us * 1000);
    Some(SlowDetail {
        threshold_ns: fixed.or(changes.last().copied()),
        changes: changes.len() as u64,
        setting,
    })
}

/// The kernel's split of the requests, summed over those that have it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct KernelSplit {
    /// Requests with the kernel's split (of `count`).
    pub requests: u64,
    pub total_ns: u64,
    pub on_cpu_ns: u64,
    pub runq_ns: u64,
    /// Off CPU, interruptible: locks, condition variables, network, sleeps.
    pub sleep_ns: u64,
    /// Off CPU, uninterruptible: disk, page faults.
    pub disk_ns: u64,
    pub blocks: u64,
}

/// One request, its time by cause.
#[derive(Debug, Clone, Serialize)]
pub struct RequestRow {
    /// The start probe's first argument, when it has one (the request's id).
    pub id: Option<u64>,
    pub pid: u32,
    pub tid: u32,
    pub thread: String,
    /// Seconds from the recording's start.
    pub at_s: f64,
    pub duration_ns: u64,
    /// The start hit's string argument (recorded with --usdt-string: a query's text).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Largest first; "not seen" last.
    pub causes: Vec<CauseTime>,
    pub not_seen_ns: u64,
}

/// Time of one cause in a request (or the mean over a set of requests), with its stacks.
#[derive(Debug, Clone, Serialize)]
pub struct CauseTime {
    pub cause: String,
    pub ns: u64,
    pub stacks: Vec<StackTime>,
    /// Off CPU: who woke the request's thread (for a lock, the holder releasing it), the
    /// largest first; empty for the other causes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub woken_by: Vec<WokenBy>,
}

/// A thread that ended off-CPU time of a request by waking its thread, and what of it.
#[derive(Debug, Clone, Serialize)]
pub struct WokenBy {
    /// Off-CPU ns of the request (or the mean, in the tail) that this waker ended.
    pub ns: u64,
    /// The waker's thread name ("interrupt" for a wake from no task: a timer, a device).
    pub thread: String,
    pub tid: u32,
    /// Its first frame past the kernel and the runtime, as `place` is for stacks.
    pub place: String,
    /// The waker's stack at the wake, leaf first.
    pub frames: Vec<String>,
    /// The request the waker was itself inside when it woke this one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<WakerRequest>,
}

/// The waker's own request at the wake.
#[derive(Debug, Clone, Serialize)]
pub struct WakerRequest {
    pub id: Option<u64>,
    pub at_s: f64,
    pub duration_ns: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct StackTime {
    pub ns: u64,
    /// The service's function the stack is in: its first frame past the kernel and the
    /// runtime (libc, libstdc++), as the summary names places.
    pub place: String,
    /// Leaf first, `function (file:line)`.
    pub frames: Vec<String>,
}

/// What the tail spends more on than the median requests: mean ns per request of each
/// cause, and of each stack under it.
#[derive(Debug, Clone, Serialize)]
pub struct TailDiff {
    /// The tail's percentile and its threshold.
    pub percentile: f64,
    pub threshold_ns: u64,
    pub tail_requests: u64,
    /// The requests around the median (p40 to p60) compared with.
    pub median_requests: u64,
    pub tail_mean_ns: u64,
    pub median_mean_ns: u64,
    /// Largest increase first.
    pub causes: Vec<CauseDiff>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CauseDiff {
    pub cause: String,
    pub tail_ns: u64,
    pub median_ns: u64,
    pub delta_ns: i64,
    /// The stacks under the cause whose mean grew most in the tail.
    pub stacks: Vec<StackDiff>,
    /// Off CPU: the wakers (by thread name and place) whose mean grew most in the tail.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub woken_by: Vec<WakerDiff>,
}

#[derive(Debug, Clone, Serialize)]
pub struct WakerDiff {
    pub delta_ns: i64,
    pub thread: String,
    pub place: String,
    pub frames: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct StackDiff {
    pub delta_ns: i64,
    pub place: String,
    pub frames: Vec<String>,
}

/// The error of a trace recorded without `--request`.
pub const NO_REQUEST: &str = "the trace was recorded without --request: record with ebrec record --request usdt:PROVIDER:START,DONE (or func:NAME), and --cpu --offcpu --runq for the split";

const ON_CPU: &str = "on CPU";
const RUNQ: &str = "run queue";
const NOT_SEEN: &str = "not seen";
/// Off-CPU time of a request the kernel split that no kept block holds.
const SHORT_BLOCKS: &str = "off CPU: blocks the sample left out";

/// See `RequestsReport::ids_repeat`.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct IdsRepeat {
    pub distinct: u64,
    pub requests: u64,
}

/// A request found by the first pass.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Req {
    pub generation: u32,
    pub tid: u32,
    pub start: u64,
    pub end: u64,
    pub id: Option<u64>,
    /// Its time as the kernel split it (recorded with --offcpu), when the done's hit has it
    /// and it spans this very start.
    pub kernel: Option<RequestSplit>,
}

/// The first pass: the boundary events (only those of a trace recorded with --request:
/// set by its header).
#[derive(Default)]
pub(crate) struct Boundaries {
    spec: Option<String>,
    /// USDT hits: (probe, generation, tid, time, first argument, index into `splits`).
    usdt: Vec<(u64, u32, u32, u64, Option<u64>, Option<u32>)>,
    /// The kernel's splits of the done hits that have one.
    splits: Vec<RequestSplit>,
    /// Function calls: (function, generation, tid, entry, duration, first argument, index
    /// into `splits`).
    calls: Vec<(u64, u32, u32, u64, u64, Option<u64>, Option<u32>)>,
}

impl Sink for Boundaries {
    fn header(&mut self, h: &ebtrace_format::proto::Header) {
        self.spec = h
            .options
            .iter()
            .find(|o| o.key == "request")
            .map(|o| o.value.clone());
    }

    fn event(&mut self, ev: &Event<'_>) {
        if self.spec.is_none() {
            return;
        }
        match ev {
            Event::Usdt(e) => {
                let split = e.request.map(|r| {
                    self.splits.push(r);
                    self.splits.len() as u32 - 1
                });
                self.usdt.push((
                    e.probe,
                    e.generation,
                    e.tid,
                    e.time_ns,
                    e.args.first().copied(),
                    split,
                ))
            }
            Event::Func(e) => {
                let split = e.request.map(|r| {
                    self.splits.push(r);
                    self.splits.len() as u32 - 1
                });
                self.calls.push((
                    e.function,
                    e.generation,
                    e.tid,
                    e.time_ns,
                    e.duration_ns,
                    e.args.first().copied(),
                    split,
                ))
            }
            _ => {}
        }
    }
}

/// Unpaired boundaries.
#[derive(Default)]
pub(crate) struct Unpaired {
    nested: u64,
    unmatched_done: u64,
    open_at_end: u64,
    ids_repeat: Option<IdsRepeat>,
}

impl Boundaries {
    /// The trace's `--request` spec (None: recorded without it).
    pub(crate) fn spec(&self) -> Option<&str> {
        self.spec.as_deref()
    }

    /// The requests of the boundaries `l` was read with, paired per thread (in the order
    /// of their ends), and the boundaries left unpaired.
    pub(crate) fn requests(mut self, l: &Loaded) -> Result<(Vec<Req>, Unpaired), String> {
        let spec = self.spec.clone().ok_or(NO_REQUEST)?;
        let src = source(l, &spec)?;
        let mut un = Unpaired::default();
        let mut reqs = pair(&mut self, &src, &mut un, l.requests_held);
        un.ids_repeat = drop_repeated_ids(&mut reqs);
        Ok((reqs, un))
    }
}

/// A first argument that repeats across many requests is not their id (a pointer to a
/// reused buffer, a kind): all ids dropped, and how many distinct of how many said.
fn drop_repeated_ids(reqs: &mut [Req]) -> Option<IdsRepeat> {
    let ids: Vec<u64> = reqs.iter().filter_map(|r| r.id).collect();
    if ids.len() < 20 {
        return None;
    }
    let distinct = ids.iter().collect::<HashSet<_>>().len();
    if distinct * 2 >= ids.len() {
        return None;
    }
    for r in reqs.iter_mut() {
        r.id = None;
    }
    Some(IdsRepeat {
        distinct: distinct as u64,
        requests: ids.len() as u64,
    })
}

/// What the trace's `--request` spec names: a (start, done) USDT probe pair or a function.
enum Source {
    Usdt { start: u64, done: u64 },
    Func(u64),
}

fn source(l: &Loaded, spec: &str) -> Result<Source, String> {
    if let Some(rest) = spec.strip_prefix("usdt:") {
        let (start, done) = rest
            .rsplit_once(',')
            .ok_or_else(|| format!("--request '{spec}': no START,DONE"))?;
        let start_name = start.rsplit(':').next().unwrap_or(start);
        let done_name = done.rsplit(':').next().unwrap_or(done);
        let name = |id: u64| l.tables.string(id).into_owned();
        let find = |want: &str| {
            l.usdt_probes
                .values()
                .find(|p| name(p.name) == want)
                .map(|p| p.id)
        };
        let (Some(s), Some(d)) = (find(start_name), find(done_name)) else {
            return Err(format!(
                "the trace has no USDT probes {start_name} and {done_name} (recorded with --request '{spec}')"
            ));
        };
        return Ok(Source::Usdt { start: s, done: d });
    }
    if let Some(f) = spec.strip_prefix("func:") {
        // SPEC[:MIN_US], as --func: only a trailing number is the threshold (a C++ name
        // has `::` of its own).
        let want = match f.rsplit_once(':') {
            Some((name, us)) if !us.is_empty() && us.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => f,
        };
        let mut ids: Vec<u64> = l
            .probed
            .iter()
            .filter(|(_, n)| {
                let n = l.tables.string(**n);
                n == want || n.starts_with(&format!("{want}("))
            })
            .map(|(&id, _)| id)
            .collect();
        ids.sort();
        return ids.first().map(|&id| Source::Func(id)).ok_or_else(|| {
            format!("the trace has no probed function {want} (--request '{spec}')")
        });
    }
    Err(format!("--request '{spec}': not usdt:… or func:…"))
}

/// Pairs the boundaries: per thread, a start with the next done; a start while one is open
/// makes the whole nest unpaired.
fn pair(b: &mut Boundaries, src: &Source, un: &mut Unpaired, held: u64) -> Vec<Req> {
    // In time order (the ring buffer's order is the reservations', nearly so).
    b.usdt.sort_by_key(|h| h.3);
    let mut out = Vec::new();
    match *src {
        Source::Func(f) => {
            for &(function, generation, tid, t, d, id, split) in &b.calls {
                if function == f {
                    out.push(Req {
                        generation,
                        tid,
                        start: t,
                        end: t + d,
                        id,
                        kernel: split.map(|i| b.splits[i as usize]).filter(|k| k.ns == d),
                    });
                }
            }
        }
        Source::Usdt { start, done } => {
            // (generation, tid) -> (open since, id, depth)
            let mut open: HashMap<(u32, u32), (u64, Option<u64>, u64)> = HashMap::new();
            for &(probe, generation, tid, t, arg, split) in &b.usdt {
                let key = (generation, tid);
                if probe == start {
                    let o = open.entry(key).or_insert((t, arg, 0));
                    if o.2 == 0 {
                        *o = (t, arg, 0);
                    }
                    o.2 += 1;
                } else if probe == done {
                    match open.get_mut(&key) {
                        Some(o) if o.2 == 1 => {
                            let kernel = split
                                .map(|i| b.splits[i as usize])
                                .filter(|k| t.checked_sub(k.ns) == Some(o.0));
                            out.push(Req {
                                generation,
                                tid,
                                start: o.0,
                                end: t,
                                id: o.1,
                                kernel,
                            });
                            o.2 = 0;
                        }
                        Some(o) if o.2 > 1 => {
                            // The nest: every start of it and this done.
                            un.nested += o.2 + 1;
                            o.2 = 0;
                        }
                        _ => un.unmatched_done += 1,
                    }
                }
            }
            // and the starts the kernel held whose done had not come (none sent)
            un.open_at_end += open.values().map(|o| o.2).sum::<u64>() + held;
        }
    }
    out
}

/// The second pass: events attributed to the detailed requests.
struct Attribute<'a> {
    /// Per thread, the detailed requests sorted by start: (start, end, index).
    by_thread: HashMap<(u32, u32), Vec<(u64, u64, usize)>>,
    details: &'a mut HashMap<usize, Detail>,
}

/// One detailed request's events on its thread.
#[derive(Default)]
struct Detail {
    /// cpu samples per stack.
    cpu: HashMap<u64, u64>,
    /// Run-queue waits overlapping the request: (start, end).
    runq: Vec<(u64, u64)>,
    /// Off-CPU blocks overlapping it (the cause is read from the stack's kernel frames
    /// later).
    offcpu: Vec<Block>,
    /// The start hit's string argument (--usdt-string).
    text: Option<String>,
}

/// An off-CPU block, switch-out to switch-in: it includes the run-queue wait after its
/// wake (`runnable`, when the recorder saw the wake), which the runq family records too
/// when it passes --runq's threshold (split() counts that part once, as run queue).
#[derive(Clone, Copy)]
struct Block {
    start: u64,
    end: u64,
    runnable: u64,
    stack: u64,
    generation: u32,
    waker_tid: u32,
    waker_stack: u64,
    /// The off-CPU time it stands for per ns of its own (a time-weighted sample: inside a
    /// request, a block under the threshold; with --offcpu-sample, one under the unit); 1:
    /// itself.
    scale: f64,
}

impl Sink for Attribute<'_> {
    fn event(&mut self, ev: &Event<'_>) {
        // A detailed request's start hit, with the string argument --usdt-string kept.
        if let Event::Usdt(u) = ev {
            if u.text.is_empty() {
                return;
            }
            let Some(reqs) = self.by_thread.get(&(u.generation, u.tid)) else {
                return;
            };
            if let Ok(k) = reqs.binary_search_by_key(&u.time_ns, |r| r.0) {
                self.details.entry(reqs[k].2).or_default().text =
                    Some(String::from_utf8_lossy(&u.text).into_owned());
            }
            return;
        }
        let Some(v) = ev.view() else { return };
        if !matches!(v.kind, EventKind::Cpu | EventKind::Runq | EventKind::OffCpu) {
            return;
        }
        let Some(reqs) = self.by_thread.get(&(v.generation, v.tid)) else {
            return;
        };
        let (lo, hi) = (v.time_ns, v.end_ns().unwrap_or(v.time_ns));
        // Requests on one thread do not overlap: those that start before `hi`, back from
        // the last, while they end after `lo`.
        let upto = reqs.partition_point(|r| r.0 <= hi);
        for &(s, e, i) in reqs[..upto].iter().rev() {
            if e < lo {
                break;
            }
            let d = self.details.entry(i).or_default();
            match v.kind {
                EventKind::Cpu if lo >= s && lo <= e => {
                    *d.cpu.entry(v.stack).or_default() += 1;
                }
                EventKind::Runq if hi > s && lo < e => d.runq.push((lo, hi)),
                EventKind::OffCpu if hi > s && lo < e => {
                    let (waker_tid, waker_stack) = v.waker.map_or((0, 0), |w| (w.tid, w.stack));
                    let (runnable, scale) = match ev {
                        Event::OffCpu(o) => (
                            o.runnable_ns.min(hi - lo),
                            if o.weight_ns > o.duration_ns && o.duration_ns > 0 {
                                o.weight_ns as f64 / o.duration_ns as f64
                            } else {
                                1.0
                            },
                        ),
                        _ => (0, 1.0),
                    };
                    d.offcpu.push(Block {
                        start: lo,
                        end: hi,
                        runnable,
                        stack: v.stack,
                        generation: v.generation,
                        waker_tid,
                        waker_stack,
                        scale,
                    })
                }
                _ => {}
            }
        }
    }
}

/// A request's time by cause (or a set's total).
type Split = BTreeMap<String, CauseSum>;

/// One cause's time, by stack and (off CPU) by waker.
#[derive(Default, Clone)]
struct CauseSum {
    ns: u64,
    stacks: HashMap<Shown, u64>,
    wakers: HashMap<WakerKey, u64>,
}

/// A stack as shown: (place, frames).
type Shown = (String, Vec<String>);

/// A waker as shown: its thread, its stack and the request it was in (an index into the
/// requests).
#[derive(Clone, PartialEq, Eq, Hash)]
struct WakerKey {
    thread: String,
    tid: u32,
    shown: Shown,
    request: Option<usize>,
}

/// Names looked up once: stacks (cause, shown), wakers' stacks and threads.
#[derive(Default)]
struct Names {
    stacks: HashMap<u64, (String, Shown)>,
    wakers: HashMap<u64, Shown>,
    threads: HashMap<(u32, u32), String>,
}

/// A waker's place: the service's function, as for any stack; a stack of kernel frames
/// only (a kernel thread, an interrupt's completion) by its first frame past the wake-up
/// machinery (try_to_wake_up, wake_up_q, __wake_up_common, ...).
fn waker_place(f: &[Frame]) -> String {
    if f.iter().any(|x| !x.module.starts_with("[kernel")) {
        return user_place(f);
    }
    f.iter()
        .find(|x| !x.function.contains("wake"))
        .or(f.first())
        .map_or_else(|| "(no stack)".to_string(), |x| x.function.clone())
}

impl Names {
    fn waker(&mut self, l: &mut Loaded, stack: u64) -> Shown {
        self.wakers
            .entry(stack)
            .or_insert_with(|| {
                let f = l.frames(stack);
                (waker_place(&f), f.iter().map(|x| x.display()).collect())
            })
            .clone()
    }

    fn stack(&mut self, l: &mut Loaded, stack: u64) -> (String, Shown) {
        self.stacks
            .entry(stack)
            .or_insert_with(|| {
                let f = l.frames(stack);
                let mut cause = cause_of(&f).to_string();
                let mut place = user_place(&f);
                // A wait inside a lock acquisition is a lock wait, named after the lock,
                // whatever the kernel waits in (PostgreSQL's row lock sleeps in epoll_wait
                // under ProcSleep, XactLockTableWait), as the summary reads it.
                if let Some(lock) =
                    lock_place(&f).filter(|_| cause == "idle wait" || cause == "lock")
                {
                    cause = "lock".into();
                    place = lock;
                }
                (cause, (place, f.iter().map(|x| x.display()).collect()))
            })
            .clone()
    }

    /// The name of waker `tid` seen from a block of `generation`: its name in that process,
    /// else in any process of the trace, else "tid N" (a thread the trace does not name).
    fn thread(&mut self, l: &Loaded, generation: u32, tid: u32) -> String {
        self.threads
            .entry((generation, tid))
            .or_insert_with(|| {
                let named = |g: u32| thread_name(l, g, tid);
                named(generation)
                    .or_else(|| {
                        let mut gens: Vec<u32> = l
                            .tables
                            .threads
                            .keys()
                            .filter(|k| k.1 == tid)
                            .map(|k| k.0)
                            .collect();
                        gens.sort();
                        gens.into_iter().find_map(named)
                    })
                    .unwrap_or_else(|| format!("tid {tid}"))
            })
            .clone()
    }
}

/// Every request by thread id, sorted by start: (start, end, index). A waker is a tid
/// (the block does not say its process); a tid has one thread at a time.
type ByTid = HashMap<u32, Vec<(u64, u64, usize)>>;

/// Two ends taken by two programs at the same switch-in, ns apart.
const SAME_SWITCH_NS: u64 = 50_000;

/// A request's time by cause, in parts: `exact` (measured, or with no kernel split the
/// estimates too), and with the kernel's split the off-CPU time its kept blocks do not
/// hold (`rest`, exact) and the time-weighted sample of those short blocks (`sampled`,
/// estimates) that names it. A set of requests is named from its parts' sums (`compose`):
/// the sample's estimate is unbiased over many requests, not in each.
#[derive(Default, Clone)]
struct Parts {
    exact: Split,
    sampled: Split,
    rest: u64,
}

impl Parts {
    /// The causes: `rest` named by the sample's shares, up to what the sample holds; what
    /// is left is a cause of its own.
    fn compose(mut self) -> Split {
        let est: u64 = self.sampled.values().map(|c| c.ns).sum();
        if est > 0 {
            let f = (self.rest as f64 / est as f64).min(1.0);
            merge(&mut self.exact, self.sampled, f);
        }
        if self.rest > est {
            self.exact.entry(SHORT_BLOCKS.to_string()).or_default().ns += self.rest - est;
        }
        self.exact
    }
}

/// Request `r`'s time by cause, from its thread's events `d`. An off-CPU block runs from
/// the switch-out to the switch-in, so it holds the run-queue wait after its wake: that
/// part is run queue, counted once (a runq event inside a block is that same wait).
fn split(
    d: &Detail,
    r: &Req,
    period: u64,
    l: &mut Loaded,
    names: &mut Names,
    by_tid: &ByTid,
) -> Parts {
    let (s, e) = (r.start, r.end);
    let clip = |a: u64, b: u64| b.min(e).saturating_sub(a.max(s));
    let mut out: Split = BTreeMap::new();
    // The sampled blocks' estimates, apart: with the kernel's split they name its remainder.
    let mut sampled: Split = BTreeMap::new();
    for (&stack, &n) in &d.cpu {
        let ns = n * period;
        let (_, shown) = names.stack(l, stack);
        let c = out.entry(ON_CPU.to_string()).or_default();
        c.ns += ns;
        *c.stacks.entry(shown).or_default() += ns;
    }
    // The run-queue waits outside the blocks (a preempted thread's); those inside are the
    // blocks' own ends, counted with them below.
    let mut runq: u64 = d
        .runq
        .iter()
        .map(|&(a, z)| {
            let inside: u64 = d
                .offcpu
                .iter()
                .map(|b| clip(a.max(b.start), z.min(b.end)))
                .sum();
            clip(a, z).saturating_sub(inside)
        })
        .sum();
    for b in &d.offcpu {
        // The wake: from the block's own account, else where a run-queue wait that ends
        // the block began, else not known (a trace from an older recorder, a wait under
        // --runq's threshold): the block's end, and the waker's request is not named (it
        // may have ended in that wait and the waker started the next).
        let wake = if b.runnable > 0 {
            Some(b.end - b.runnable)
        } else {
            d.runq
                .iter()
                .filter(|&&(a, z)| a >= b.start && z.abs_diff(b.end) <= SAME_SWITCH_NS)
                .map(|&(a, _)| a)
                .min()
        };
        let waker = waker_key(l, names, by_tid, b, wake);
        let wake = wake.unwrap_or(b.end);
        runq += clip(wake, b.end);
        let ns = clip(b.start, wake);
        if ns == 0 {
            continue;
        }
        let (cause, shown) = names.stack(l, b.stack);
        let (into, ns) = if b.scale > 1.0 {
            (&mut sampled, (ns as f64 * b.scale) as u64)
        } else {
            (&mut out, ns)
        };
        let c = into.entry(format!("off CPU: {cause}")).or_default();
        c.ns += ns;
        *c.stacks.entry(shown).or_default() += ns;
        *c.wakers.entry(waker).or_default() += ns;
    }
    if runq > 0 {
        out.entry(RUNQ.to_string()).or_default().ns += runq;
    }
    match r.kernel {
        Some(k) => kernel_totals(out, sampled, &k),
        None => {
            merge(&mut out, sampled, 1.0);
            Parts {
                exact: out,
                ..Parts::default()
            }
        }
    }
}

/// `from`'s causes into `out`, each scaled by `f`.
fn merge(out: &mut Split, from: Split, f: f64) {
    let m = |ns: u64| (ns as f64 * f) as u64;
    for (cause, c) in from {
        let o = out.entry(cause).or_default();
        o.ns += m(c.ns);
        for (k, ns) in c.stacks {
            *o.stacks.entry(k).or_default() += m(ns);
        }
        for (k, ns) in c.wakers {
            *o.wakers.entry(k).or_default() += m(ns);
        }
    }
}

/// A request the kernel split (recorded with --offcpu): its on-CPU and run-queue time are
/// the kernel's, exact (the samples only give the stacks). The off-CPU time the kept blocks
/// do not hold (blocks under --offcpu's threshold) is the rest, named by the time-weighted
/// sample of those (`sampled`). Kept blocks that hold more than the kernel counted off CPU
/// (a block ended at the return to user space holds its run-queue wait) are scaled to the
/// kernel's count.
fn kernel_totals(mut out: Split, sampled: Split, k: &RequestSplit) -> Parts {
    for (cause, ns) in [(ON_CPU, k.on_cpu_ns), (RUNQ, k.runq_ns)] {
        if ns > 0 || out.contains_key(cause) {
            out.entry(cause.to_string()).or_default().ns = ns;
        }
    }
    let kept: u64 = out
        .iter()
        .filter(|(c, _)| c.starts_with("off CPU: "))
        .map(|(_, c)| c.ns)
        .sum();
    let off = k.sleep_ns + k.disk_ns;
    if kept > off {
        let offcpu: Split = out
            .extract_if(.., |c, _| c.starts_with("off CPU: "))
            .collect();
        merge(&mut out, offcpu, off as f64 / kept as f64);
        return Parts {
            exact: out,
            ..Parts::default()
        };
    }
    Parts {
        exact: out,
        sampled,
        rest: off - kept,
    }
}

/// Who woke block `b` at `wake`, and the request it was in then (when the wake's time is
/// known).
fn waker_key(
    l: &mut Loaded,
    names: &mut Names,
    by_tid: &ByTid,
    b: &Block,
    wake: Option<u64>,
) -> WakerKey {
    if b.waker_tid == 0 {
        return WakerKey {
            thread: "(an interrupt)".into(),
            tid: 0,
            shown: (String::new(), Vec::new()),
            request: None,
        };
    }
    let thread = names.thread(l, b.generation, b.waker_tid);
    let shown = if b.waker_stack != 0 {
        names.waker(l, b.waker_stack)
    } else {
        ("(no stack)".to_string(), Vec::new())
    };
    let request = wake.zip(by_tid.get(&b.waker_tid)).and_then(|(wake, v)| {
        let k = v.partition_point(|r| r.0 <= wake).checked_sub(1)?;
        (v[k].1 >= wake).then_some(v[k].2)
    });
    WakerKey {
        thread,
        tid: b.waker_tid,
        shown,
        request,
    }
}

fn top_wakers(
    wakers: &HashMap<WakerKey, u64>,
    n: usize,
    reqs: &[Req],
    start_ns: u64,
) -> Vec<WokenBy> {
    // By thread, place and request: the frames of the largest (one unlock site or another
    // of the same function is one waker to the reader).
    let mut by: HashMap<(&str, u32, &str, Option<usize>), (u64, u64, &Vec<String>)> =
        HashMap::new();
    for (k, &ns) in wakers {
        let e = by
            .entry((&k.thread, k.tid, &k.shown.0, k.request))
            .or_insert((0, 0, &k.shown.1));
        e.0 += ns;
        if ns > e.1 || (ns == e.1 && k.shown.1 < *e.2) {
            (e.1, e.2) = (ns, &k.shown.1);
        }
    }
    let mut v: Vec<WokenBy> = by
        .into_iter()
        .map(|((thread, tid, place, request), (ns, _, frames))| WokenBy {
            ns,
            thread: thread.to_string(),
            tid,
            place: place.to_string(),
            frames: frames.clone(),
            request: request.map(|i| {
                let r = reqs[i];
                WakerRequest {
                    id: r.id,
                    at_s: r.start.saturating_sub(start_ns) as f64 / 1e9,
                    duration_ns: r.end - r.start,
                }
            }),
        })
        .collect();
    v.sort_by(|a, b| {
        b.ns.cmp(&a.ns)
            .then_with(|| a.thread.cmp(&b.thread))
            .then_with(|| a.frames.cmp(&b.frames))
    });
    v.truncate(n);
    v
}

fn top_stacks(stacks: &HashMap<Shown, u64>, n: usize) -> Vec<StackTime> {
    let mut v: Vec<StackTime> = stacks
        .iter()
        .map(|((place, f), &ns)| StackTime {
            ns,
            place: place.clone(),
            frames: f.clone(),
        })
        .collect();
    v.sort_by(|a, b| b.ns.cmp(&a.ns).then_with(|| a.frames.cmp(&b.frames)));
    v.truncate(n);
    v
}

/// The kernel's splits of the requests that have one, summed (None: no request has one).
fn kernel_split(reqs: &[Req]) -> Option<KernelSplit> {
    let mut kernel = KernelSplit::default();
    for k in reqs.iter().filter_map(|r| r.kernel) {
        kernel.requests += 1;
        kernel.total_ns += k.ns;
        kernel.on_cpu_ns += k.on_cpu_ns;
        kernel.runq_ns += k.runq_ns;
        kernel.sleep_ns += k.sleep_ns;
        kernel.disk_ns += k.disk_ns;
        kernel.blocks += u64::from(k.blocks);
    }
    (kernel.requests > 0).then_some(kernel)
}

/// Request `i`'s row: its causes, largest first, with `stacks` stacks and wakers each.
fn row(l: &Loaded, reqs: &[Req], i: usize, s: &Split, stacks: usize) -> RequestRow {
    let start_ns = l.header.start_time_ns;
    let r = reqs[i];
    let dur = r.end - r.start;
    let mut causes: Vec<CauseTime> = s
        .iter()
        .map(|(c, cs)| CauseTime {
            cause: c.clone(),
            ns: cs.ns.min(dur),
            stacks: top_stacks(&cs.stacks, stacks),
            woken_by: top_wakers(&cs.wakers, stacks, reqs, start_ns),
        })
        .collect();
    causes.sort_by(|a, b| b.ns.cmp(&a.ns).then_with(|| a.cause.cmp(&b.cause)));
    let seen: u64 = causes.iter().map(|c| c.ns).sum();
    RequestRow {
        id: r.id,
        pid: l.pid(r.generation),
        tid: r.tid,
        thread: l.thread_name(r.generation, r.tid),
        at_s: r.start.saturating_sub(start_ns) as f64 / 1e9,
        duration_ns: dur,
        text: None,
        causes,
        not_seen_ns: dur.saturating_sub(seen),
    }
}

/// `ebsym requests`: `open` gives the trace for each of the two passes.
pub fn requests_from<T: Trace>(
    mut open: impl FnMut() -> Option<T>,
    filter: &Filter,
    opts: &RequestOptions,
) -> Result<RequestsReport, String> {
    // Pass 1: the requests.
    let mut b = Boundaries::default();
    let t = open().ok_or("cannot read the trace")?;
    let l = Loaded::from_trace(t, filter, &mut b);
    let spec = l
        .header
        .options
        .iter()
        .find(|o| o.key == "request")
        .map(|o| o.value.clone())
        .ok_or(NO_REQUEST)?;
    let (mut reqs, un) = b.requests(&l)?;
    reqs.sort_by_key(|r| (r.end - r.start, r.start));
    let mut hist = Histogram::default();
    for r in &reqs {
        hist.record(r.end - r.start);
    }
    let n = reqs.len();
    let q = |p: f64| hist.quantile(p);
    let threshold = q(opts.tail / 100.0);
    // Which requests to detail: the slowest, the tail, those around the median.
    let slowest: Vec<usize> = (0..n).rev().take(opts.slowest).collect();
    let tail: Vec<usize> = (0..n)
        .filter(|&i| reqs[i].end - reqs[i].start >= threshold)
        .collect();
    let median: Vec<usize> = (n * 2 / 5..n * 3 / 5).collect();
    let wanted: HashSet<usize> = slowest
        .iter()
        .chain(&tail)
        .chain(&median)
        .copied()
        .collect();

    // Pass 2: their events.
    let mut by_thread: HashMap<(u32, u32), Vec<(u64, u64, usize)>> = HashMap::new();
    for &i in &wanted {
        let r = reqs[i];
        by_thread
            .entry((r.generation, r.tid))
            .or_default()
            .push((r.start, r.end, i));
    }
    for v in by_thread.values_mut() {
        v.sort();
    }
    let mut details: HashMap<usize, Detail> = HashMap::new();
    let mut l = match open() {
        Some(t) => Loaded::from_trace(
            t,
            filter,
            &mut Attribute {
                by_thread,
                details: &mut details,
            },
        ),
        None => return Err("cannot read the trace".into()),
    };
    let hz = header_option(&l, "cpu").unwrap_or(0);
    let period = if hz > 0 { 1_000_000_000 / hz } else { 0 };
    let mut families = Vec::new();
    for k in ["cpu", "offcpu", "runq"] {
        if l.header.options.iter().any(|o| o.key == k) {
            families.push(k);
        }
    }
    let mut by_tid: ByTid = HashMap::new();
    for (i, r) in reqs.iter().enumerate() {
        by_tid.entry(r.tid).or_default().push((r.start, r.end, i));
    }
    for v in by_tid.values_mut() {
        v.sort();
    }
    let mut names = Names::default();
    let mut splits: HashMap<usize, Parts> = HashMap::new();
    let mut texts: HashMap<usize, String> = HashMap::new();
    for &i in &wanted {
        let mut d = details.remove(&i).unwrap_or_default();
        if let Some(t) = d.text.take() {
            texts.insert(i, t);
        }
        splits.insert(i, split(&d, &reqs[i], period, &mut l, &mut names, &by_tid));
    }
    drop(by_tid);
    let rows = slowest
        .iter()
        .map(|&i| RequestRow {
            text: texts.remove(&i),
            ..row(&l, &reqs, i, &splits[&i].clone().compose(), opts.stacks)
        })
        .collect();
    let tail_diff = (!tail.is_empty() && !median.is_empty())
        .then(|| diff(&reqs, &splits, &tail, &median, opts, threshold));
    let note = if n == 0 {
        Some(format!("no request of --request '{spec}' in this trace"))
    } else if families.is_empty() {
        Some("the trace has no cpu, offcpu or runq events: each request's time is all \"not seen\"; record --cpu --offcpu --runq with --request for the split".into())
    } else {
        None
    };
    Ok(RequestsReport {
        kind: "requests".into(),
        request: spec,
        count: n as u64,
        p50_ns: q(0.5),
        p90_ns: q(0.9),
        p99_ns: q(0.99),
        p999_ns: q(0.999),
        max_ns: hist.max(),
        total_ns: hist.total(),
        histogram: hist.log2_bins(),
        nested: un.nested,
        unmatched_done: un.unmatched_done,
        open_at_end: un.open_at_end,
        ids_repeat: un.ids_repeat,
        families,
        kernel_split: kernel_split(&reqs),
        slow_detail: slow_detail(&l),
        cpu_period_ns: period,
        slowest: rows,
        tail: tail_diff,
        losses: l.losses.clone(),
        note,
    })
}

/// The tail against the median: mean ns per request of each cause and stack.
fn diff(
    reqs: &[Req],
    splits: &HashMap<usize, Parts>,
    tail: &[usize],
    median: &[usize],
    opts: &RequestOptions,
    threshold: u64,
) -> TailDiff {
    // cause -> its total over a set, wakers by thread name and stack; plus "not seen".
    let mut frames_of: HashMap<(String, String), (u64, Vec<String>)> = HashMap::new();
    let mut add = |by: &mut Split, c: &String, cs: &CauseSum, ns: u64| {
        let e = by.entry(c.clone()).or_default();
        e.ns += ns;
        for (f, v) in &cs.stacks {
            *e.stacks.entry(f.clone()).or_default() += v;
        }
        for (w, v) in &cs.wakers {
            // By thread name and place: the stacks of the same function differ by
            // its lines, and the frames shown are the largest's (below).
            let k = WakerKey {
                tid: 0,
                request: None,
                shown: (w.shown.0.clone(), Vec::new()),
                thread: w.thread.clone(),
            };
            *e.wakers.entry(k).or_default() += v;
            let f = frames_of
                .entry((w.thread.clone(), w.shown.0.clone()))
                .or_insert((0, Vec::new()));
            if *v > f.0 {
                *f = (*v, w.shown.1.clone());
            }
        }
    };
    // The set's parts summed, then composed: the short blocks' sample names their sum.
    let mut sum = |set: &[usize]| {
        let mut set_parts = Parts::default();
        let mut wall = 0;
        let mut not_seen = 0;
        for &i in set {
            let dur = reqs[i].end - reqs[i].start;
            wall += dur;
            let p = &splits[&i];
            let mut seen = p.rest;
            for (c, cs) in &p.exact {
                let ns = cs.ns.min(dur);
                seen += ns;
                add(&mut set_parts.exact, c, cs, ns);
            }
            for (c, cs) in &p.sampled {
                add(&mut set_parts.sampled, c, cs, cs.ns);
            }
            set_parts.rest += p.rest;
            not_seen += dur.saturating_sub(seen);
        }
        let mut by = set_parts.compose();
        by.entry(NOT_SEEN.to_string()).or_default().ns += not_seen;
        (by, wall)
    };
    let (t, twall) = sum(tail);
    let (m, mwall) = sum(median);
    let (tn, mn) = (tail.len() as f64, median.len() as f64);
    let causes_set: HashSet<&String> = t.keys().chain(m.keys()).collect();
    let mut causes: Vec<CauseDiff> = causes_set
        .into_iter()
        .map(|c| {
            let empty = CauseSum::default();
            let ta = t.get(c).unwrap_or(&empty);
            let ma = m.get(c).unwrap_or(&empty);
            let tail_ns = (ta.ns as f64 / tn) as u64;
            let median_ns = (ma.ns as f64 / mn) as u64;
            let delta = |t: Option<&u64>, m: Option<&u64>| {
                (*t.unwrap_or(&0) as f64 / tn - *m.unwrap_or(&0) as f64 / mn) as i64
            };
            let keys: HashSet<&Shown> = ta.stacks.keys().chain(ma.stacks.keys()).collect();
            let mut stacks: Vec<StackDiff> = keys
                .into_iter()
                .map(|k| StackDiff {
                    delta_ns: delta(ta.stacks.get(k), ma.stacks.get(k)),
                    place: k.0.clone(),
                    frames: k.1.clone(),
                })
                .filter(|s| s.delta_ns > 0)
                .collect();
            stacks.sort_by(|a, b| {
                b.delta_ns
                    .cmp(&a.delta_ns)
                    .then_with(|| a.frames.cmp(&b.frames))
            });
            stacks.truncate(opts.stacks);
            let keys: HashSet<&WakerKey> = ta.wakers.keys().chain(ma.wakers.keys()).collect();
            let mut woken_by: Vec<WakerDiff> = keys
                .into_iter()
                .map(|k| WakerDiff {
                    delta_ns: delta(ta.wakers.get(k), ma.wakers.get(k)),
                    thread: k.thread.clone(),
                    place: k.shown.0.clone(),
                    frames: frames_of
                        .get(&(k.thread.clone(), k.shown.0.clone()))
                        .map(|f| f.1.clone())
                        .unwrap_or_default(),
                })
                .filter(|w| w.delta_ns > 0)
                .collect();
            woken_by.sort_by(|a, b| {
                b.delta_ns
                    .cmp(&a.delta_ns)
                    .then_with(|| a.thread.cmp(&b.thread))
                    .then_with(|| a.frames.cmp(&b.frames))
            });
            woken_by.truncate(opts.stacks);
            CauseDiff {
                cause: c.clone(),
                tail_ns,
                median_ns,
                delta_ns: tail_ns as i64 - median_ns as i64,
                stacks,
                woken_by,
            }
        })
        .collect();
    causes.retain(|c| c.tail_ns > 0 || c.median_ns > 0);
    causes.sort_by(|a, b| {
        b.delta_ns
            .cmp(&a.delta_ns)
            .then_with(|| a.cause.cmp(&b.cause))
    });
    TailDiff {
        percentile: opts.tail,
        threshold_ns: threshold,
        tail_requests: tail.len() as u64,
        median_requests: median.len() as u64,
        tail_mean_ns: (twall as f64 / tn) as u64,
        median_mean_ns: (mwall as f64 / mn) as u64,
        causes,
    }
}

/// " through CALL": a waker's first frame in user space (an unlock, a broadcast, a write),
/// when it is not the place itself.
fn through(frames: &[String], place: &str) -> String {
    frames
        .iter()
        .find(|f| !f.ends_with("[kernel]"))
        .map(|f| f.split(" (").next().unwrap_or(f))
        .filter(|f| !f.starts_with(place))
        .map_or(String::new(), |f| format!(" through {f}"))
}

/// " in PLACE", or nothing for a waker with no stack.
fn in_place(place: &str) -> String {
    if place.is_empty() {
        String::new()
    } else {
        format!(" in {place}")
    }
}

fn ms(ns: u64) -> String {
    super::text::human_ns(ns)
}

impl RequestsReport {
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "requests ({}): {}  p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
            self.request,
            self.count,
            ms(self.p50_ns),
            ms(self.p90_ns),
            ms(self.p99_ns),
            ms(self.p999_ns),
            ms(self.max_ns)
        );
        if let Some(k) = &self.kernel_split {
            let pct = |ns: u64| 100.0 * ns as f64 / k.total_ns.max(1) as f64;
            let _ = writeln!(
                s,
                "split in the kernel ({} of {} requests): on CPU {:.1}%  run queue {:.1}%  off CPU {:.1}% (disk and other uninterruptible {:.1}%), {:.1} blocks a request",
                k.requests,
                self.count,
                pct(k.on_cpu_ns),
                pct(k.runq_ns),
                pct(k.sleep_ns + k.disk_ns),
                pct(k.disk_ns),
                k.blocks as f64 / k.requests as f64
            );
        }
        if let Some(d) = &self.slow_detail {
            let _ = writeln!(s, "{}", d.line());
        }
        if self.nested + self.unmatched_done + self.open_at_end > 0 {
            let _ = writeln!(
                s,
                "unpaired: {} nested, {} done without a start, {} open at the end",
                self.nested, self.unmatched_done, self.open_at_end
            );
        }
        if let Some(r) = &self.ids_repeat {
            let _ = writeln!(
                s,
                "ids: the start's first argument takes {} distinct value{} in {} requests: not a request id (an address or a kind), not shown",
                r.distinct,
                if r.distinct == 1 { "" } else { "s" },
                r.requests
            );
        }
        if let Some(t) = &self.tail {
            let _ = writeln!(
                s,
                "\nthe tail (>= p{} = {}, {} requests, mean {}) against the median ({} requests, mean {}), per request:",
                t.percentile,
                ms(t.threshold_ns),
                t.tail_requests,
                ms(t.tail_mean_ns),
                t.median_requests,
                ms(t.median_mean_ns)
            );
            for c in &t.causes {
                let sign = if c.delta_ns >= 0 { "+" } else { "-" };
                let _ = writeln!(
                    s,
                    "  {sign}{:<10} {}  ({} against {})",
                    ms(c.delta_ns.unsigned_abs()),
                    c.cause,
                    ms(c.tail_ns),
                    ms(c.median_ns)
                );
                for st in &c.stacks {
                    let leaf = st.frames.first().map(String::as_str).unwrap_or("");
                    let _ = writeln!(
                        s,
                        "      +{} in {}  ({leaf})",
                        ms(st.delta_ns as u64),
                        st.place
                    );
                }
                for w in &c.woken_by {
                    let _ = writeln!(
                        s,
                        "      +{} woken by {}{}",
                        ms(w.delta_ns as u64),
                        w.thread,
                        in_place(&w.place)
                    );
                }
            }
        }
        for (i, r) in self.slowest.iter().enumerate() {
            let id = r.id.map(|v| format!(" id {v}")).unwrap_or_default();
            let _ = writeln!(
                s,
                "\n#{} {}{id}  thread {} [{}/{}] at {:.3} s",
                i + 1,
                ms(r.duration_ns),
                r.thread,
                r.pid,
                r.tid,
                r.at_s
            );
            if let Some(t) = &r.text {
                let _ = writeln!(s, "    {t:?}");
            }
            for c in &r.causes {
                let _ = writeln!(s, "    {:<10} {}", ms(c.ns), c.cause);
                for st in c.stacks.iter().take(1) {
                    let leaf = st.frames.first().map(String::as_str).unwrap_or("");
                    let _ = writeln!(s, "               in {}  ({leaf})", st.place);
                }
                for w in c.woken_by.iter().take(2) {
                    let tid = if w.tid != 0 {
                        format!(" [{}]", w.tid)
                    } else {
                        String::new()
                    };
                    let req = w.request.as_ref().map_or(String::new(), |q| {
                        let id = q.id.map(|v| format!(" id {v}")).unwrap_or_default();
                        format!(
                            ", inside its request{id} ({} at {:.3} s)",
                            ms(q.duration_ns),
                            q.at_s
                        )
                    });
                    let _ = writeln!(
                        s,
                        "               woken by {}{tid}{}{}{req}  ({})",
                        w.thread,
                        in_place(&w.place),
                        through(&w.frames, &w.place),
                        ms(w.ns)
                    );
                }
            }
            let _ = writeln!(s, "    {:<10} {NOT_SEEN}", ms(r.not_seen_ns));
        }
        if let Some(n) = &self.note {
            let _ = writeln!(s, "\n{n}");
        }
        s.push_str(&losses_text(&self.losses));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cause(ns: u64) -> CauseSum {
        CauseSum {
            ns,
            ..CauseSum::default()
        }
    }

    fn split(on: u64, sleep: u64) -> RequestSplit {
        RequestSplit {
            ns: on + sleep,
            on_cpu_ns: on,
            sleep_ns: sleep,
            ..RequestSplit::default()
        }
    }

    fn ns(s: &Split, c: &str) -> u64 {
        s.get(c).map_or(0, |c| c.ns)
    }

    #[test]
    fn the_short_blocks_sample_names_the_rest_up_to_what_it_holds() {
        // 3 ms off CPU by the kernel, 1 ms of it in a kept block: 2 ms in short blocks.
        let exact = Split::from([("off CPU: lock".to_string(), cause(1_000_000))]);
        // The sample stands for 5 ms of lock waits: it names all 2 ms, scaled down.
        let sampled = Split::from([("off CPU: lock".to_string(), cause(5_000_000))]);
        let c = kernel_totals(exact.clone(), sampled, &split(500_000, 3_000_000)).compose();
        assert_eq!(ns(&c, "off CPU: lock"), 3_000_000);
        assert_eq!(ns(&c, ON_CPU), 500_000);
        assert_eq!(ns(&c, SHORT_BLOCKS), 0);
        // It stands for 0.5 ms: that much is named, the rest is said as not named.
        let sampled = Split::from([("off CPU: io".to_string(), cause(500_000))]);
        let c = kernel_totals(exact.clone(), sampled, &split(500_000, 3_000_000)).compose();
        assert_eq!(ns(&c, "off CPU: lock"), 1_000_000);
        assert_eq!(ns(&c, "off CPU: io"), 500_000);
        assert_eq!(ns(&c, SHORT_BLOCKS), 1_500_000);
        let all: u64 = c.values().map(|c| c.ns).sum();
        assert_eq!(all, 3_500_000);
    }

    #[test]
    fn kept_blocks_past_the_kernels_count_are_scaled_to_it() {
        // A block ended at the return to user space holds its run-queue wait: 4 ms kept,
        // the kernel counted 3 ms off CPU (and the rest as run queue).
        let exact = Split::from([
            ("off CPU: lock".to_string(), cause(3_000_000)),
            ("off CPU: io".to_string(), cause(1_000_000)),
        ]);
        let k = RequestSplit {
            runq_ns: 1_000_000,
            ..split(500_000, 3_000_000)
        };
        let c = kernel_totals(exact, Split::new(), &k).compose();
        assert_eq!(ns(&c, "off CPU: lock"), 2_250_000);
        assert_eq!(ns(&c, "off CPU: io"), 750_000);
        assert_eq!(ns(&c, RUNQ), 1_000_000);
        assert_eq!(ns(&c, SHORT_BLOCKS), 0);
    }

    #[test]
    fn a_set_is_named_from_its_summed_parts() {
        // Two requests with 1 ms of short blocks each; only one had a sampled block,
        // standing for 2 ms: over the set, both milliseconds are the lock's.
        let one = Parts {
            sampled: Split::from([("off CPU: lock".to_string(), cause(2_000_000))]),
            rest: 1_000_000,
            ..Parts::default()
        };
        let two = Parts {
            rest: 1_000_000,
            ..Parts::default()
        };
        assert_eq!(ns(&one.clone().compose(), "off CPU: lock"), 1_000_000);
        assert_eq!(ns(&two.clone().compose(), SHORT_BLOCKS), 1_000_000);
        let mut set = Parts::default();
        for p in [one, two] {
            merge(&mut set.sampled, p.sampled, 1.0);
            set.rest += p.rest;
        }
        let c = set.compose();
        assert_eq!(ns(&c, "off CPU: lock"), 2_000_000);
        assert_eq!(ns(&c, SHORT_BLOCKS), 0);
    }
}
