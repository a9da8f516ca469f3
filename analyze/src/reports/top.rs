//! `ebsym top` (and `locks`, `latency`): the stacks of one kind sorted by a measure, and
//! the [`Report`] with its typed [`Row`]s that `leaks` shares.
use super::idle::IdleRules;
use super::kind::{EventKind, Measure};
use super::names::{bio_op_name, device_name, probed_name, syscall_name};
use super::places::{lock_kind, wait_kind};
use super::stacks::{merge, merge_split, Agg, Merged, ThreadSplit};
use super::text::{empty_note, log2_text, losses_text};
use super::wrappers::{Site, WrapperRules};
use crate::histogram::Log2Bin;
use crate::interned::{FrameView, IFrame, Named};
use crate::model::{Filter, Frame, Loaded, Losses, Trace};
use crate::reports::wrappers::Learner;
use ebtrace_format::TraceReader;
use serde::{Serialize, Serializer};
use std::collections::BTreeMap;
use std::path::Path;

/// A report ready to print or serialize.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The event kind's name, or "leaks".
    pub kind: String,
    pub by: Measure,
    /// What a row is when not a stack: "site" (`--by site`: the allocation sites, stacks
    /// merged by the first frame that is no allocator wrapper) or "thread" (`--by thread`:
    /// a stack of one thread group); absent for stacks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<&'static str>,
    /// `--by site`: the program's own functions recognised as allocator wrappers by their
    /// shape (docs/guide.md, "Blame the caller"), folded into their callers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wrappers_learnt: Option<Vec<String>>,
    pub totals: BTreeMap<String, u64>,
    pub losses: Losses,
    pub rows: Vec<Row>,
    /// For `func` (`ebsym latency`): the log2 histogram of each row's durations, shown in
    /// the text (the JSON has the percentiles).
    #[serde(skip)]
    pub histograms: Vec<Vec<Log2Bin>>,
    /// Set when there are no rows to show: why (no events of the kind, with the losses
    /// that may explain it; or, for leaks, that every allocation was freed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
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
            let vals: Vec<String> = row
                .values()
                .into_iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            let idle = row
                .idle_reason()
                .map(|r| format!("[idle: {r}]  "))
                .unwrap_or_default();
            let _ = writeln!(s, "\n#{} {idle}{}", i + 1, vals.join("  "));
            if let Some(site) = row.site() {
                let _ = writeln!(
                    s,
                    "  site (of {} stack{}), through {}:",
                    site.stacks,
                    if site.stacks == 1 { "" } else { "s" },
                    if site.wrappers.is_empty() {
                        "no wrapper".to_string()
                    } else {
                        site.wrappers.join(" <- ")
                    }
                );
            }
            if let Some(bins) = self.histograms.get(i).filter(|b| !b.is_empty()) {
                s.push_str(&log2_text(bins));
            }
            for f in row.frames() {
                let _ = writeln!(s, "    {}", f.display());
            }
            if let Some(wf) = row.waker_frames().filter(|w| !w.is_empty()) {
                let by = if self.kind == "offcpu" {
                    "  woken by:"
                } else {
                    "  woken by (the holder releasing it):"
                };
                let _ = writeln!(s, "{by}");
                for f in wf {
                    let _ = writeln!(s, "    {}", f.display());
                }
            }
        }
        s.push_str(&losses_text(&self.losses));
        s
    }
}

/// One row of a [`Report`]: a stack and its values, of the report's kind. Serializes as
/// the row's object alone (the JSON has no tag); the fields of each row type are in
/// alphabetical order, as JSON and text show them.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Row {
    /// alloc and memgrowth.
    Bytes(BytesRow),
    Lock(LockRow),
    Func(FuncRow),
    Cpu(CpuRow),
    OffCpu(OffCpuRow),
    Leak(LeakRow),
    Syscall(SyscallRow),
    Bio(BioRow),
    Runq(RunqRow),
    Tcp(TcpStackRow),
    Usdt(UsdtRow),
}

/// A row of `top --kind syscall`: the slow calls (past --syscalls' threshold) of one
/// syscall under one stack.
#[derive(Debug, Clone, Serialize)]
pub struct SyscallRow {
    pub count: u64,
    #[serde(serialize_with = "sorted_frames")]
    pub frames: Vec<Frame>,
    pub max_ns: u64,
    pub nr: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub syscall: String,
    /// The threads of these events (see `BytesRow::thread`).
    pub thread: Option<String>,
    pub total_ns: u64,
}

/// A row of `top --kind bio`: requests of one device and op under one issuing stack.
#[derive(Debug, Clone, Serialize)]
pub struct BioRow {
    pub bytes: u64,
    pub count: u64,
    pub device: String,
    #[serde(serialize_with = "sorted_frames")]
    pub frames: Vec<Frame>,
    pub max_ns: u64,
    pub op: &'static str,
    pub p50_ns: u64,
    pub p99_ns: u64,
    /// The threads of these events (see `BytesRow::thread`).
    pub thread: Option<String>,
    pub total_ns: u64,
}

/// A row of `top --kind runq`: the long run-queue waits under one stack.
#[derive(Debug, Clone, Serialize)]
pub struct RunqRow {
    pub count: u64,
    #[serde(serialize_with = "sorted_frames")]
    pub frames: Vec<Frame>,
    pub max_ns: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    /// The threads of these events (see `BytesRow::thread`).
    pub thread: Option<String>,
    pub total_ns: u64,
}

/// A row of `top --kind tcp`: the connects or accepts made from one stack.
#[derive(Debug, Clone, Serialize)]
pub struct TcpStackRow {
    pub count: u64,
    #[serde(serialize_with = "sorted_frames")]
    pub frames: Vec<Frame>,
    /// "connect" or "accept".
    pub kind: &'static str,
    /// The threads of these events (see `BytesRow::thread`).
    pub thread: Option<String>,
}

/// A row of `top --kind usdt`: the hits of one USDT probe under one stack (no stack without
/// --usdt-stack: a row per probe).
#[derive(Debug, Clone, Serialize)]
pub struct UsdtRow {
    pub count: u64,
    #[serde(serialize_with = "sorted_frames")]
    pub frames: Vec<Frame>,
    /// `provider:name`.
    pub probe: String,
    /// The threads of these events (see `BytesRow::thread`).
    pub thread: Option<String>,
}

/// A row of `top --kind alloc` or `--kind memgrowth`.
#[derive(Debug, Clone, Serialize)]
pub struct BytesRow {
    pub bytes: u64,
    pub count: u64,
    /// Leaf first; with `--by site`, from the site outwards (the wrappers left out), of
    /// the row's heaviest stack.
    #[serde(serialize_with = "sorted_frames")]
    pub frames: Vec<Frame>,
    /// `--by site`: the allocation site, the wrappers folded into it and the stacks
    /// merged; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub site: Option<Site>,
    /// The threads whose events these are: the thread's name (the last the trace gives
    /// it, else its process's comm); the group when several threads' names fold alike
    /// (`worker-*`); else the groups, most events first, at most three then "+N more"
    /// (`reader, pingpong-*`). null when no event says (--aggregate's counts).
    pub thread: Option<String>,
}

/// A row of `ebsym locks`.
#[derive(Debug, Clone, Serialize)]
pub struct LockRow {
    /// Whether these waits are contention: a mutex another thread held (`wait_kind`
    /// mutex, condvar_mutex), or a condvar wait whose thread then waited for the
    /// condvar's mutex (a contended reacquire); `ebsym locks` ranks these first.
    pub contention: bool,
    pub count: u64,
    #[serde(serialize_with = "sorted_frames")]
    pub frames: Vec<Frame>,
    /// Absent when no hold was recorded (futex mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hold_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hold_p99_ns: Option<u64>,
    /// Whether a rule says these are a thread waiting for work ([`IdleRules`]); shown
    /// after the others.
    pub idle: bool,
    /// The rule that said so ("thread pool waiting for a task", "--idle PATTERN"); null
    /// when not idle.
    pub idle_reason: Option<String>,
    /// "mutex", "condvar" or "other".
    pub kind: &'static str,
    /// The lock's address, hex.
    pub mutex: String,
    /// The threads that waited (see `BytesRow::thread`).
    pub thread: Option<String>,
    /// What the waits were for: "mutex", "condvar" (the condition's signal),
    /// "condvar_mutex" (a condvar's mutex, reacquired after the signal while another
    /// thread held it) or "other".
    pub wait_kind: &'static str,
    pub wait_ns: u64,
    /// null when the waits were counted in the kernel (--aggregate): no per-wait values.
    pub wait_p99_ns: Option<u64>,
    /// The stack of the thread that most often released the lock to these waiters.
    #[serde(serialize_with = "sorted_frames")]
    pub waker_frames: Vec<Frame>,
}

/// A row of `ebsym latency`.
#[derive(Debug, Clone, Serialize)]
pub struct FuncRow {
    pub count: u64,
    #[serde(serialize_with = "sorted_frames")]
    pub frames: Vec<Frame>,
    /// The probed function's demangled name, None (null) if the trace does not say.
    pub function: Option<String>,
    pub function_id: u64,
    pub max_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    /// The threads that made these calls (see `BytesRow::thread`).
    pub thread: Option<String>,
    pub total_ns: u64,
}

/// A row of `top --kind cpu`.
#[derive(Debug, Clone, Serialize)]
pub struct CpuRow {
    pub count: u64,
    #[serde(serialize_with = "sorted_frames")]
    pub frames: Vec<Frame>,
    /// The threads sampled (see `BytesRow::thread`).
    pub thread: Option<String>,
}

/// A row of `top --kind offcpu`.
#[derive(Debug, Clone, Serialize)]
pub struct OffCpuRow {
    pub count: u64,
    #[serde(serialize_with = "sorted_frames")]
    pub frames: Vec<Frame>,
    /// Whether a rule says these blocks are a thread waiting for work ([`IdleRules`]);
    /// shown after the others.
    pub idle: bool,
    /// The rule that said so ("epoll wait", "--idle PATTERN"); null when not idle.
    pub idle_reason: Option<String>,
    /// The threads that blocked (see `BytesRow::thread`).
    pub thread: Option<String>,
    pub total_ns: u64,
    /// The stack of the thread that most often ended these blocks; empty when woken by an
    /// interrupt.
    #[serde(serialize_with = "sorted_frames")]
    pub waker_frames: Vec<Frame>,
}

/// A row of `ebsym leaks`.
#[derive(Debug, Clone, Serialize)]
pub struct LeakRow {
    /// Whose blocks: "malloc" (the system allocator) or a custom allocator's NAME
    /// (`ebrec record --alloc-fn NAME:SIZE_ARG[:FREE_NAME]`).
    pub allocator: String,
    /// Whether the process was still alive at the end of the recording.
    pub alive: bool,
    pub bytes: u64,
    pub count: u64,
    #[serde(serialize_with = "sorted_frames")]
    pub frames: Vec<Frame>,
    /// What keeps these blocks by design, when a rule says so (the C/C++ runtime's,
    /// "runtime: …", or the user's --suppress file, "suppressed: FILE:LINE leak:PATTERN"):
    /// shown after the leaks to act on, and out of the leak totals.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_by: Option<String>,
    /// Age of the oldest block at the end of the recording.
    pub oldest_ns: u64,
    /// `--by site`: the allocation site (see `BytesRow::site`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub site: Option<Site>,
    /// The threads that allocated these blocks (see `BytesRow::thread`).
    pub thread: Option<String>,
}

/// A row's scalar value, as the text shows it.
fn num(v: u64) -> String {
    v.to_string()
}

impl Row {
    /// The stack, leaf first.
    pub fn frames(&self) -> &[Frame] {
        match self {
            Row::Bytes(r) => &r.frames,
            Row::Lock(r) => &r.frames,
            Row::Func(r) => &r.frames,
            Row::Cpu(r) => &r.frames,
            Row::OffCpu(r) => &r.frames,
            Row::Leak(r) => &r.frames,
            Row::Syscall(r) => &r.frames,
            Row::Bio(r) => &r.frames,
            Row::Runq(r) => &r.frames,
            Row::Tcp(r) => &r.frames,
            Row::Usdt(r) => &r.frames,
        }
    }

    /// The waker's stack, for the kinds that have one (lock, offcpu).
    pub fn waker_frames(&self) -> Option<&[Frame]> {
        match self {
            Row::Lock(r) => Some(&r.waker_frames),
            Row::OffCpu(r) => Some(&r.waker_frames),
            _ => None,
        }
    }

    /// The threads of the row's events (see [`BytesRow::thread`]).
    pub fn thread(&self) -> Option<&str> {
        match self {
            Row::Bytes(r) => r.thread.as_deref(),
            Row::Lock(r) => r.thread.as_deref(),
            Row::Func(r) => r.thread.as_deref(),
            Row::Cpu(r) => r.thread.as_deref(),
            Row::OffCpu(r) => r.thread.as_deref(),
            Row::Leak(r) => r.thread.as_deref(),
            Row::Syscall(r) => r.thread.as_deref(),
            Row::Bio(r) => r.thread.as_deref(),
            Row::Runq(r) => r.thread.as_deref(),
            Row::Tcp(r) => r.thread.as_deref(),
            Row::Usdt(r) => r.thread.as_deref(),
        }
    }

    /// The allocation site of a `--by site` row.
    pub fn site(&self) -> Option<&Site> {
        match self {
            Row::Bytes(r) => r.site.as_ref(),
            Row::Leak(r) => r.site.as_ref(),
            _ => None,
        }
    }

    /// Why the row's waits are idle (offcpu and lock rows a rule matched).
    pub fn idle_reason(&self) -> Option<&str> {
        match self {
            Row::OffCpu(r) => r.idle_reason.as_deref(),
            Row::Lock(r) => r.idle_reason.as_deref(),
            _ => None,
        }
    }

    /// Events under the stack.
    pub fn count(&self) -> u64 {
        match self {
            Row::Bytes(r) => r.count,
            Row::Lock(r) => r.count,
            Row::Func(r) => r.count,
            Row::Cpu(r) => r.count,
            Row::OffCpu(r) => r.count,
            Row::Leak(r) => r.count,
            Row::Syscall(r) => r.count,
            Row::Bio(r) => r.count,
            Row::Runq(r) => r.count,
            Row::Tcp(r) => r.count,
            Row::Usdt(r) => r.count,
        }
    }

    /// The values other than the stacks, named as in the JSON and in its order (strings
    /// as they are, a missing function name as `null`): what the text's row line shows.
    pub fn values(&self) -> Vec<(&'static str, String)> {
        let mut v = self.own_values();
        if let Some(t) = self.thread() {
            // In the JSON's alphabetical order: before total_ns (and the lock's wait_*),
            // after the others.
            let at = v.iter().position(|(k, _)| *k > "thread").unwrap_or(v.len());
            v.insert(at, ("thread", t.to_string()));
        }
        v
    }

    fn own_values(&self) -> Vec<(&'static str, String)> {
        match self {
            Row::Bytes(r) => vec![("bytes", num(r.bytes)), ("count", num(r.count))],
            Row::Lock(r) => {
                let mut v = vec![
                    ("contention", r.contention.to_string()),
                    ("count", num(r.count)),
                ];
                if let Some(h) = r.hold_ns {
                    v.push(("hold_ns", num(h)));
                }
                if let Some(h) = r.hold_p99_ns {
                    v.push(("hold_p99_ns", num(h)));
                }
                v.extend([
                    ("kind", r.kind.to_string()),
                    ("mutex", r.mutex.clone()),
                    ("wait_kind", r.wait_kind.to_string()),
                    ("wait_ns", num(r.wait_ns)),
                    (
                        "wait_p99_ns",
                        r.wait_p99_ns.map_or_else(|| "null".into(), num),
                    ),
                ]);
                v
            }
            Row::Func(r) => vec![
                ("count", num(r.count)),
                (
                    "function",
                    r.function.clone().unwrap_or_else(|| "null".into()),
                ),
                ("function_id", num(r.function_id)),
                ("max_ns", num(r.max_ns)),
                ("p50_ns", num(r.p50_ns)),
                ("p90_ns", num(r.p90_ns)),
                ("p99_ns", num(r.p99_ns)),
                ("total_ns", num(r.total_ns)),
            ],
            Row::Cpu(r) => vec![("count", num(r.count))],
            Row::OffCpu(r) => vec![("count", num(r.count)), ("total_ns", num(r.total_ns))],
            Row::Leak(r) => {
                let mut v = vec![];
                if r.allocator != "malloc" {
                    v.push(("allocator", r.allocator.clone()));
                }
                v.extend([
                    ("alive", r.alive.to_string()),
                    ("bytes", num(r.bytes)),
                    ("count", num(r.count)),
                ]);
                if let Some(h) = &r.held_by {
                    v.push(("held_by", h.clone()));
                }
                v.push(("oldest_ns", num(r.oldest_ns)));
                v
            }
            Row::Syscall(r) => vec![
                ("count", num(r.count)),
                ("max_ns", num(r.max_ns)),
                ("nr", num(r.nr)),
                ("p50_ns", num(r.p50_ns)),
                ("p99_ns", num(r.p99_ns)),
                ("syscall", r.syscall.clone()),
                ("total_ns", num(r.total_ns)),
            ],
            Row::Bio(r) => vec![
                ("bytes", num(r.bytes)),
                ("count", num(r.count)),
                ("device", r.device.clone()),
                ("max_ns", num(r.max_ns)),
                ("op", r.op.to_string()),
                ("p50_ns", num(r.p50_ns)),
                ("p99_ns", num(r.p99_ns)),
                ("total_ns", num(r.total_ns)),
            ],
            Row::Runq(r) => vec![
                ("count", num(r.count)),
                ("max_ns", num(r.max_ns)),
                ("p50_ns", num(r.p50_ns)),
                ("p99_ns", num(r.p99_ns)),
                ("total_ns", num(r.total_ns)),
            ],
            Row::Tcp(r) => vec![("count", num(r.count)), ("kind", r.kind.to_string())],
            Row::Usdt(r) => vec![("count", num(r.count)), ("probe", r.probe.clone())],
        }
    }
}

/// Frames in a row serialize with their fields in alphabetical order (a row's JSON has
/// always been sorted that way), unlike [`Frame`]'s own order (used by `diff`).
pub(crate) fn sorted_frames<S: Serializer, F: std::borrow::Borrow<Frame>>(
    frames: &[F],
    s: S,
) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Sorted<'a> {
        address: &'a str,
        file: &'a Option<String>,
        function: &'a str,
        inlined: bool,
        line: Option<u32>,
        module: &'a str,
    }
    s.collect_seq(
        frames
            .iter()
            .map(std::borrow::Borrow::borrow)
            .map(|f: &Frame| Sorted {
                address: &f.address,
                file: &f.file,
                function: &f.function,
                inlined: f.inlined,
                line: f.line,
                module: &f.module,
            }),
    )
}

/// The waker stack seen most often in `agg` (ties: the lowest id).
fn top_waker(agg: &Agg) -> Option<u64> {
    agg.wakers
        .iter()
        .max_by_key(|(s, c)| (**c, std::cmp::Reverse(**s)))
        .map(|(s, _)| *s)
}

/// [`top_from`] of the trace at `path`, `by` a measure's name (the kind's default if it
/// names none).
pub fn top(
    path: &Path,
    kind: EventKind,
    by: &str,
    filter: &Filter,
    n: usize,
) -> Result<Report, ebtrace_format::Error> {
    let trace = TraceReader::open(path)?;
    Ok(top_from(
        trace,
        kind,
        kind.measure_or_default(by),
        filter,
        n,
    ))
}

/// `ebsym top` (and `locks`, `latency`) of an open trace: the `n` stacks of `kind` with
/// the most `by`.
pub fn top_from(
    trace: impl Trace,
    kind: EventKind,
    by: Measure,
    filter: &Filter,
    n: usize,
) -> Report {
    top_with(
        trace,
        &TopOptions {
            kind,
            by,
            filter,
            n,
            idle: &IdleRules::default(),
        },
    )
}

/// What a top report is asked for: the stacks of `kind` read through `filter`, the `n`
/// with the most `by`, with `idle` saying which offcpu and lock waits are idle.
#[derive(Debug, Clone, Copy)]
pub struct TopOptions<'a> {
    pub kind: EventKind,
    pub by: Measure,
    pub filter: &'a Filter,
    pub n: usize,
    pub idle: &'a IdleRules,
}

/// [`top_from`] with `opts.idle` saying which offcpu and lock waits are idle: the waits
/// inside work first, then the idle ones, each group by `by`; for lock, within each, the
/// waits for a mutex another thread held first (`wait_kind` mutex, condvar_mutex), then
/// the condvar waits that were contention, then the rest.
pub fn top_with(trace: impl Trace, opts: &TopOptions) -> Report {
    let (mut l, merged) = merge(trace, opts.kind, opts.filter, false);
    top_of(&mut l, &merged, opts)
}

/// What a row of `top` (or `leaks`) is: a stack (the default), a stack of one thread
/// group (`--by thread`), or an allocation site (`--by site`, alloc only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Group {
    #[default]
    Stack,
    Thread,
    Site,
}

impl Group {
    /// `--by`'s word for it: "stack", "thread", "site".
    pub fn parse(word: &str) -> Option<Group> {
        match word {
            "stack" => Some(Group::Stack),
            "thread" => Some(Group::Thread),
            "site" => Some(Group::Site),
            _ => None,
        }
    }

    /// The report's `group` (None for stacks).
    pub fn name(self) -> Option<&'static str> {
        match self {
            Group::Stack => None,
            Group::Thread => Some("thread"),
            Group::Site => Some("site"),
        }
    }
}

/// [`top_with`] with rows grouped as `group` says: `Group::Thread`, a row per stack and
/// thread group; `Group::Site` (alloc and memgrowth), a row per allocation site, the
/// wrappers `wrappers` (and what it learns from the stacks) name folded into it.
pub fn top_grouped(
    trace: impl Trace,
    opts: &TopOptions,
    group: Group,
    wrappers: &WrapperRules,
) -> Report {
    let split = if group == Group::Thread {
        ThreadSplit::Group
    } else {
        ThreadSplit::None
    };
    let (mut l, merged) = merge_split(trace, opts.kind, opts.filter, false, split);
    let mut learnt = None;
    let merged = if group == Group::Site {
        let mut w = wrappers.clone();
        learn_merged(&mut l, &merged, &mut w);
        learnt = Some(w.learnt().map(String::from).collect());
        by_site(&mut l, merged, &w)
    } else {
        merged
    };
    let mut r = top_of(&mut l, &merged, opts);
    r.group = group.name();
    r.wrappers_learnt = learnt;
    r
}

/// `w` learns the program's own allocator wrappers ([`WrapperRules::learn`]) from the
/// merged stacks, each resolved again in turn (none held as frames).
pub(crate) fn learn_merged(l: &mut Loaded, merged: &[Merged], w: &mut WrapperRules) {
    let mut seen = Learner::default();
    for m in merged {
        let frames = m.frames(l);
        w.learn_one(&mut seen, &l.names.view(&frames));
    }
    w.learn_from(seen);
}

/// The stacks of `merged` merged by allocation site ([`WrapperRules::site`]): each
/// site's row has the sum of its stacks, the frames of the heaviest from the site
/// outwards, and the threads of all.
pub(crate) fn by_site(l: &mut Loaded, merged: Vec<Merged>, rules: &WrapperRules) -> Vec<Merged> {
    /// A site's row so far: its merged stack, the weight of its heaviest stack, the
    /// wrappers folded, the stacks merged.
    struct Acc {
        m: Merged,
        best: u64,
        wrappers: Vec<String>,
        stacks: u64,
    }
    type Key = (String, Option<String>, Option<u32>);
    let mut sites: BTreeMap<Key, Acc> = BTreeMap::new();
    for mut m in merged {
        let frames = m.frames(l);
        let view = l.names.view(&frames);
        let (i, wrappers) = rules.site(&view).unwrap_or((0, Vec::new()));
        let key: Key = view
            .get(i)
            .map(|f| {
                (
                    f.function().to_string(),
                    f.file().map(String::from),
                    f.line(),
                )
            })
            .unwrap_or_default();
        drop(view);
        // From the site outwards.
        m.skip += i.min(frames.len());
        let weight = m.agg.a.max(m.agg.count);
        let Some(acc) = sites.get_mut(&key) else {
            sites.insert(
                key,
                Acc {
                    m,
                    best: weight,
                    wrappers,
                    stacks: 1,
                },
            );
            continue;
        };
        acc.stacks += 1;
        for w in wrappers {
            if !acc.wrappers.contains(&w) {
                acc.wrappers.push(w);
            }
        }
        let a = &mut acc.m.agg;
        a.count += m.agg.count;
        a.a += m.agg.a;
        a.b += m.agg.b;
        a.inuse.0 += m.agg.inuse.0;
        a.inuse.1 += m.agg.inuse.1;
        for (t, c) in m.agg.threads {
            *a.threads.entry(t).or_default() += c;
        }
        if weight > acc.best {
            acc.best = weight;
            acc.m.stack = m.stack;
            acc.m.skip = m.skip;
        }
    }
    sites
        .into_values()
        .map(|acc| {
            let mut m = acc.m;
            let frames = m.frames(l);
            let names = &l.names;
            let f = frames.first().map(|&frame| Named { names, frame });
            m.site = Some(Site {
                file: f.and_then(|f| f.file().map(String::from)),
                function: f.map_or_else(|| "(no stack)".into(), |f| f.function().to_string()),
                line: f.and_then(|f| f.line()),
                module: f.map(|f| f.module().to_string()).unwrap_or_default(),
                stacks: acc.stacks,
                wrappers: acc.wrappers,
            });
            m.thread = super::threads::label_of(l, &m.agg.threads);
            m
        })
        .collect()
}

/// What [`top_of`] decides of a lock or offcpu stack before sorting: (wait kind,
/// contention, idle reason).
type Decision = (&'static str, bool, Option<String>);

fn decide(kind: EventKind, m: &Merged, idle: &IdleRules, l: &mut Loaded) -> Decision {
    if !matches!(kind, EventKind::Lock | EventKind::OffCpu) {
        return ("", false, None);
    }
    let frames = m.frames(l);
    let frames = l.names.view(&frames);
    match kind {
        EventKind::Lock => {
            let a = &m.agg;
            let wk = wait_kind(
                &frames,
                a.op_known.then_some(a.futex_op),
                a.uprobe,
                a.after_condvar > 0 && a.after_condvar * 2 >= a.count,
            );
            let contended = matches!(wk, "mutex" | "condvar_mutex");
            let contention = contended || (wk == "condvar" && a.contended_reacquires > 0);
            (wk, contention, idle.classify(&frames, contended))
        }
        EventKind::OffCpu => ("", false, idle.classify(&frames, false)),
        _ => ("", false, None),
    }
}

/// The `opts.n` stacks of `opts.kind` with the most `opts.by`, of `merged`, the stacks
/// merged from the trace `l` was read into (only the rows shown are copied out of it).
pub(crate) fn top_of(l: &mut Loaded, merged: &[Merged], opts: &TopOptions) -> Report {
    let mut rows: Vec<Row> = Vec::with_capacity(opts.n.min(merged.len()));
    let mut r = top_rows(l, merged, opts, true, &mut |row| rows.push(row));
    r.rows = rows;
    r
}

/// [`top_of`] with each row handed to `each` instead of kept: a caller that takes a
/// little of every row (the summary) holds one row at a time. In the report's order when
/// `ordered`; else in the merged stacks' (the same rows, none sorted by its frames).
pub(crate) fn top_rows(
    l: &mut Loaded,
    merged: &[Merged],
    opts: &TopOptions,
    ordered: bool,
    each: &mut dyn FnMut(Row),
) -> Report {
    let TopOptions {
        kind,
        by,
        filter,
        n,
        idle,
    } = *opts;
    let note = merged
        .is_empty()
        .then(|| empty_note(kind.name(), filter, &l.losses));
    let mut totals: BTreeMap<String, u64> = BTreeMap::new();
    let mut scored: Vec<((bool, u8, u64), &Merged, Decision)> = Vec::with_capacity(merged.len());
    if matches!(kind, EventKind::Lock | EventKind::OffCpu) {
        totals.insert("idle_ns".into(), 0);
    }
    if kind == EventKind::Lock {
        totals.insert("contention_wait_ns".into(), 0);
    }
    for m in merged {
        let d = decide(kind, m, idle, l);
        add_totals(&mut totals, kind, &m.agg, &d);
        let key = rank(kind, by, &m.agg, &d);
        scored.push((key, m, d));
    }
    if ordered {
        scored = first_rows(l, scored, n);
    }
    let mut histograms = Vec::new();
    for (_, m, d) in scored.into_iter().take(n) {
        each(row(l, kind, m.clone(), d, &mut histograms));
    }
    Report {
        kind: kind.name().into(),
        by,
        group: None,
        wrappers_learnt: None,
        totals,
        losses: l.losses.clone(),
        rows: Vec::new(),
        histograms,
        note,
    }
}

/// A merged stack as [`top_rows`] sorts it: (its rank, it, the decision on its waits).
type Scored<'a> = ((bool, u8, u64), &'a Merged, Decision);

/// The first `n` of `scored` in the report's order: largest first within each group,
/// ties in a fixed order (the frames) so output is deterministic. Sorted by rank, then
/// only those that can be among the first `n` (the ties at the last place included) are
/// resolved again and ordered by their frames.
fn first_rows<'a>(l: &mut Loaded, mut scored: Vec<Scored<'a>>, n: usize) -> Vec<Scored<'a>> {
    scored.sort_by_key(|s| s.0);
    if n == 0 {
        return Vec::new();
    }
    if n < scored.len() {
        let last = scored[n - 1].0;
        let keep = scored.partition_point(|s| s.0 <= last);
        scored.truncate(keep);
    }
    let mut framed: Vec<(Vec<IFrame>, Scored<'a>)> =
        scored.into_iter().map(|s| (s.1.frames(l), s)).collect();
    let names = &l.names;
    framed.sort_by(|a, b| a.1 .0.cmp(&b.1 .0).then_with(|| names.cmp(&a.0, &b.0)));
    framed.truncate(n);
    framed.into_iter().map(|(_, s)| s).collect()
}

/// Adds a merged stack's `agg` to the report's totals, and its waits to `idle_ns` or
/// `contention_wait_ns` as `d` decided.
fn add_totals(totals: &mut BTreeMap<String, u64>, kind: EventKind, agg: &Agg, d: &Decision) {
    *totals.entry("count".to_string()).or_default() += agg.count;
    match kind {
        EventKind::Alloc | EventKind::MemGrowth => {
            *totals.entry("bytes".into()).or_default() += agg.a;
        }
        EventKind::Lock => {
            *totals.entry("wait_ns".into()).or_default() += agg.a;
            if agg.b > 0 {
                *totals.entry("hold_ns".into()).or_default() += agg.b;
            }
        }
        EventKind::Func | EventKind::OffCpu | EventKind::Syscall | EventKind::Runq => {
            *totals.entry("total_ns".into()).or_default() += agg.a;
        }
        EventKind::Bio => {
            *totals.entry("total_ns".into()).or_default() += agg.a;
            *totals.entry("bytes".into()).or_default() += agg.b;
        }
        EventKind::Cpu | EventKind::Tcp | EventKind::Usdt => {}
    }
    if d.2.is_some() {
        *totals.entry("idle_ns".into()).or_default() += agg.a;
    }
    if d.1 && d.2.is_none() && kind == EventKind::Lock {
        *totals.entry("contention_wait_ns".into()).or_default() += agg.a;
    }
}

/// Where a merged stack sorts (smallest first): the waits inside work first (for lock,
/// contention first), then the idle ones; lock: a mutex another thread held first, then
/// condvar waits that were contention, then the rest; then by `by`, largest first.
fn rank(kind: EventKind, by: Measure, agg: &Agg, d: &Decision) -> (bool, u8, u64) {
    let tier = match d {
        _ if kind != EventKind::Lock => 0,
        ("mutex" | "condvar_mutex", ..) => 0,
        (_, true, _) => 1,
        _ => 2,
    };
    (
        d.2.is_some(),
        tier,
        u64::MAX - by.pick(kind, agg.count, agg.a, agg.b),
    )
}

/// A merged stack's row, as `d` decided its waits; a func row's histogram added to
/// `histograms`.
fn row(
    l: &mut Loaded,
    kind: EventKind,
    m: Merged,
    d: Decision,
    histograms: &mut Vec<Vec<Log2Bin>>,
) -> Row {
    let frames = m.frames(l);
    let frames = l.names.frames(&frames);
    let Merged {
        sub,
        agg,
        thread,
        site,
        ..
    } = m;
    match kind {
        EventKind::Alloc | EventKind::MemGrowth => Row::Bytes(BytesRow {
            bytes: agg.a,
            count: agg.count,
            frames,
            site,
            thread,
        }),
        EventKind::Lock => lock_row(l, frames, &agg, thread, d),
        EventKind::Func => {
            let (row, bins) = func_row(l, sub, frames, &agg, thread);
            histograms.push(bins);
            row
        }
        EventKind::Cpu => Row::Cpu(CpuRow {
            count: agg.count,
            frames,
            thread,
        }),
        EventKind::OffCpu => {
            let (_, _, idle_reason) = d;
            Row::OffCpu(OffCpuRow {
                count: agg.count,
                idle: idle_reason.is_some(),
                idle_reason,
                thread,
                total_ns: agg.a,
                // The stack of the thread that most often ended these blocks.
                waker_frames: top_waker(&agg).map(|w| l.frames(w)).unwrap_or_default(),
                frames,
            })
        }
        EventKind::Syscall => {
            let h = agg.hist(0);
            Row::Syscall(SyscallRow {
                count: agg.count,
                frames,
                max_ns: h.max(),
                nr: sub,
                p50_ns: h.quantile(0.5),
                p99_ns: h.quantile(0.99),
                syscall: syscall_name(&l.header.arch, sub),
                thread,
                total_ns: agg.a,
            })
        }
        EventKind::Bio => {
            let h = agg.hist(0);
            Row::Bio(BioRow {
                bytes: agg.b,
                count: agg.count,
                device: device_name(l, (sub >> 8) as u32),
                frames,
                max_ns: h.max(),
                op: bio_op_name(sub as u32),
                p50_ns: h.quantile(0.5),
                p99_ns: h.quantile(0.99),
                thread,
                total_ns: agg.a,
            })
        }
        EventKind::Runq => {
            let h = agg.hist(0);
            Row::Runq(RunqRow {
                count: agg.count,
                frames,
                max_ns: h.max(),
                p50_ns: h.quantile(0.5),
                p99_ns: h.quantile(0.99),
                thread,
                total_ns: agg.a,
            })
        }
        EventKind::Tcp => Row::Tcp(TcpStackRow {
            count: agg.count,
            frames,
            kind: if sub == ebtrace_format::proto::TcpEventKind::Accept as u64 {
                "accept"
            } else {
                "connect"
            },
            thread,
        }),
        EventKind::Usdt => Row::Usdt(UsdtRow {
            count: agg.count,
            frames,
            probe: super::names::usdt_name(l, sub),
            thread,
        }),
    }
}

/// A probed function's row (`sub` the function's id): its calls' latency percentiles;
/// and their log2 histogram.
fn func_row(
    l: &Loaded,
    sub: u64,
    frames: Vec<Frame>,
    agg: &Agg,
    thread: Option<String>,
) -> (Row, Vec<Log2Bin>) {
    let h = agg.hist(0);
    let bins = h.log2_bins();
    let row = Row::Func(FuncRow {
        count: agg.count,
        frames,
        function: probed_name(l, sub),
        function_id: sub,
        max_ns: h.max(),
        p50_ns: h.quantile(0.5),
        p90_ns: h.quantile(0.9),
        p99_ns: h.quantile(0.99),
        thread,
        total_ns: agg.a,
    });
    (row, bins)
}

/// A lock row: its waits (and holds, when recorded), what it waited on, and the stack
/// that most often woke it.
fn lock_row(
    l: &mut Loaded,
    frames: Vec<Frame>,
    agg: &Agg,
    thread: Option<String>,
    (wk, contention, idle_reason): Decision,
) -> Row {
    let waker_frames = top_waker(agg).map(|w| l.frames(w)).unwrap_or_default();
    let held = agg.b > 0;
    Row::Lock(LockRow {
        contention,
        count: agg.count,
        idle: idle_reason.is_some(),
        idle_reason,
        wait_kind: wk,
        hold_ns: held.then_some(agg.b),
        hold_p99_ns: (held && !agg.aggregated).then(|| agg.hist(1).quantile(0.99)),
        kind: lock_kind(&frames, agg.futex_op),
        mutex: format!("{:#x}", agg.mutex),
        thread,
        wait_ns: agg.a,
        wait_p99_ns: (!agg.aggregated).then(|| agg.hist(0).quantile(0.99)),
        waker_frames,
        frames,
    })
}
