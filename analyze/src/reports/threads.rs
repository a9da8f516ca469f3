//! `ebsym threads`: where each thread's time goes, per thread group (the thread's name
//! with its digits folded: `worker-12` and `worker-3` are `worker-*`), from the events a
//! trace already has: on-CPU time from the cpu samples (samples × the sampling period),
//! run-queue waits from the runq events (those past `--runq`'s threshold), and off-CPU time
//! by cause from the off-CPU blocks (past `--offcpu`'s threshold; sampled blocks count for
//! what they stand for), the cause read from the blocked thread's kernel stack. Each cause
//! comes with its top stacks. The rest of the wall time is "not seen": running or waiting
//! below the thresholds, or a family that was not recorded.
//!
//! The view VTune's threading analysis and a poor man's profiler give: a pool whose
//! workers spend 80% on a futex is a lock problem; one that spends 80% in epoll is idle.
use super::kind::EventKind;
use super::text::losses_text;
use crate::event::Fields;
use crate::model::{Event, Filter, Frame, Loaded, Losses, Sink, Trace};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

/// Why a thread was off the CPU, from its kernel stack: the first rule a frame matches,
/// innermost first. Order matters: a futex wait inside a poll is a lock wait.
const CAUSES: &[(&str, &[&str])] = &[
    (
        "lock",
        &[
            "futex_",
            "__futex_",
            "rt_mutex_",
            "rwsem_down",
            "mutex_lock",
            "__mutex_lock",
        ],
    ),
    (
        "disk",
        &[
            "io_schedule",
            "folio_wait_bit",
            "wait_on_page_bit",
            "blk_mq_",
            "jbd2_",
            "ext4_sync",
            "xfs_",
            "btrfs_",
            "filemap_fault",
            "wait_on_buffer",
            "file_write_and_wait",
            "submit_bio_wait",
            "fsync",
        ],
    ),
    (
        "idle wait",
        &[
            "ep_poll",
            "do_epoll_wait",
            "do_sys_poll",
            "do_select",
            "core_sys_select",
            "inet_csk_accept",
            "io_uring_",
        ],
    ),
    (
        "network or pipe",
        &[
            "anon_pipe_",
            "sk_wait_data",
            "tcp_recvmsg",
            "tcp_sendmsg",
            "unix_stream_read",
            "unix_stream_sendmsg",
            "sock_",
            "skb_",
            "pipe_read",
            "pipe_write",
            "wait_woken",
        ],
    ),
    (
        "sleep",
        &[
            "hrtimer_nanosleep",
            "do_nanosleep",
            "clock_nanosleep",
            "msleep",
        ],
    ),
    (
        "wait for child or signal",
        &[
            "do_wait",
            "kernel_wait4",
            "sigsuspend",
            "sigtimedwait",
            "do_sigtimedwait",
        ],
    ),
    ("page fault", &["do_user_addr_fault", "handle_mm_fault"]),
];

pub(crate) fn cause_of(frames: &[Frame]) -> &'static str {
    for f in frames.iter().filter(|f| f.module.starts_with("[kernel")) {
        for (cause, pats) in CAUSES {
            if pats.iter().any(|p| f.function.starts_with(p)) {
                return cause;
            }
        }
    }
    if frames.iter().any(|f| f.module.starts_with("[kernel")) {
        "other"
    } else {
        "unknown (no kernel stack)"
    }
}

/// A thread's name with its digits folded: `worker-12` -> `worker-*`, `pool7:3` ->
/// `pool*:*`; a name without digits is itself.
pub fn fold_digits(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut in_digits = false;
    for c in name.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('*');
            }
            in_digits = true;
        } else {
            out.push(c);
            in_digits = false;
        }
    }
    out
}

/// How many thread groups a row's `thread` names before "+N more".
const LABEL_GROUPS: usize = 3;

/// The `thread` of a report row, from the names of the threads whose events it holds
/// and their events: the name when there is one (`sleeper`); the group when the names
/// fold alike (`pingpong-1`, `pingpong-2` -> `pingpong-*`); else the groups, most events
/// first (a group of one name by its name), at most three, then "+N more":
/// `reader, pingpong-*, writer +1 more`. None without names.
pub fn thread_label(names: &[(String, u64)]) -> Option<String> {
    // group -> (events, the names in it)
    let mut groups: BTreeMap<String, (u64, Vec<&str>)> = BTreeMap::new();
    for (name, n) in names {
        let g = groups.entry(fold_digits(name)).or_default();
        g.0 += n;
        if !g.1.contains(&name.as_str()) {
            g.1.push(name);
        }
    }
    let mut groups: Vec<(String, u64, Vec<&str>)> =
        groups.into_iter().map(|(k, (n, v))| (k, n, v)).collect();
    groups.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let shown: Vec<String> = groups
        .iter()
        .take(LABEL_GROUPS)
        .map(|(g, _, names)| match names.as_slice() {
            [one] => one.to_string(),
            _ => g.clone(),
        })
        .collect();
    if shown.is_empty() {
        return None;
    }
    let mut label = shown.join(", ");
    if groups.len() > LABEL_GROUPS {
        label.push_str(&format!(" +{} more", groups.len() - LABEL_GROUPS));
    }
    Some(label)
}

/// [`thread_label`] of events counted per thread (generation, tid), each thread named
/// by [`Loaded::thread_name`].
pub(crate) fn label_of<S: std::hash::BuildHasher>(
    l: &Loaded,
    threads: &HashMap<(u32, u32), u64, S>,
) -> Option<String> {
    let mut names: BTreeMap<String, u64> = BTreeMap::new();
    for (&(generation, tid), &n) in threads {
        *names.entry(l.thread_name(generation, tid)).or_default() += n;
    }
    let names: Vec<(String, u64)> = names.into_iter().collect();
    thread_label(&names)
}

#[derive(Default)]
struct PerThread {
    cpu_samples: u64,
    runq_ns: u64,
    runq_waits: u64,
    /// stack -> (blocks, ns)
    offcpu: HashMap<u64, (u64, u64)>,
    /// stack -> samples
    cpu_stacks: HashMap<u64, u64>,
    first_ns: u64,
    last_ns: u64,
}

/// The per-thread sums of `ebsym threads`, fed every event of a pass (its own in
/// [`threads_from`]; the summary's and the HTML page's, `pass.rs`); [`report_of`] makes the
/// report.
#[derive(Default)]
pub(crate) struct ThreadsSink {
    threads: HashMap<(u32, u32), PerThread>,
    /// --runq's threshold, when the trace has the runq family: an off-CPU block's run-queue
    /// wait after its wake (`runnable_ns`) of at least that is a runq event of its own, and
    /// is counted there, not also as off CPU.
    runq_min_ns: Option<u64>,
}

impl Sink for ThreadsSink {
    fn header(&mut self, h: &ebtrace_format::proto::Header) {
        self.runq_min_ns = h
            .options
            .iter()
            .find(|o| o.key == "runq")
            .and_then(|o| o.value.parse::<u64>().ok())
            .map(|us| us * 1000);
    }

    fn event(&mut self, ev: &Event<'_>) {
        let Some(v) = ev.view() else { return };
        if v.tid == 0 {
            return;
        }
        let t = self.threads.entry((v.generation, v.tid)).or_default();
        let end = v.end_ns().unwrap_or(v.time_ns);
        if t.first_ns == 0 || v.time_ns < t.first_ns {
            t.first_ns = v.time_ns;
        }
        t.last_ns = t.last_ns.max(end);
        match (v.kind, v.fields) {
            (EventKind::Cpu, _) => {
                t.cpu_samples += 1;
                *t.cpu_stacks.entry(v.stack).or_default() += 1;
            }
            (EventKind::Runq, Fields::Runq { weight, waits, .. }) => {
                t.runq_waits += waits;
                t.runq_ns += weight;
            }
            (EventKind::OffCpu, Fields::OffCpu { weight, blocks, .. }) => {
                let e = t.offcpu.entry(v.stack).or_default();
                e.0 += blocks;
                e.1 += weight - in_runq(ev, weight, self.runq_min_ns);
            }
            _ => {}
        }
    }
}

/// The part of an off-CPU block's `weight` that its run-queue wait after the wake stands
/// for, when a runq event holds that wait too (it passed --runq's threshold `runq_min`).
fn in_runq(ev: &Event<'_>, weight: u64, runq_min: Option<u64>) -> u64 {
    match (ev, runq_min) {
        (Event::OffCpu(o), Some(min))
            if o.runnable_ns >= min.max(1) && o.runnable_ns <= o.duration_ns =>
        {
            (weight as u128 * o.runnable_ns as u128 / o.duration_ns.max(1) as u128) as u64
        }
        _ => 0,
    }
}

/// Off-CPU time of one cause in a group, with its top stacks.
#[derive(Debug, Clone, Serialize)]
pub struct CauseRow {
    pub cause: &'static str,
    pub blocks: u64,
    pub ns: u64,
    /// The stacks with the most time under this cause: (ns, frames, leaf first).
    pub top_stacks: Vec<CauseStack>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CauseStack {
    pub ns: u64,
    pub blocks: u64,
    pub frames: Vec<String>,
}

/// One thread group: the threads of one process whose names fold to the same pattern.
#[derive(Debug, Clone, Serialize)]
pub struct GroupRow {
    /// The process's comm.
    pub process: String,
    pub pid: u32,
    /// The thread names folded (`worker-*`); the process's comm for threads the trace does
    /// not name.
    pub thread: String,
    /// The names in the group, as given (at most 8), in thread order (generation, tid).
    pub names: Vec<String>,
    pub threads: u64,
    /// Wall time of the group: each thread's span in the trace (first to last event),
    /// summed.
    pub wall_ns: u64,
    /// On the CPU: samples × the sampling period (0 without --cpu).
    pub on_cpu_ns: u64,
    pub cpu_samples: u64,
    /// Waiting for a CPU, runnable (waits past --runq's threshold).
    pub runq_ns: u64,
    /// Off the CPU, by cause, largest first (blocks past --offcpu's threshold).
    pub offcpu_ns: u64,
    pub offcpu: Vec<CauseRow>,
    /// The wall time no event accounts for (running or waiting below the thresholds, or
    /// families not recorded).
    pub not_seen_ns: u64,
    /// The hottest on-CPU stack of the group, leaf first.
    pub top_cpu_stack: Vec<String>,
}

/// `ebsym threads`.
#[derive(Debug, Serialize)]
pub struct ThreadsReport {
    /// The cpu sampling period used for on-CPU time (0: no --cpu in the trace).
    pub cpu_period_ns: u64,
    /// The families the trace has that the split uses.
    pub families: Vec<&'static str>,
    pub groups: Vec<GroupRow>,
    pub losses: Losses,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A header option's value as a number (`cpu`: the sampling rate).
pub(crate) fn header_option(l: &Loaded, key: &str) -> Option<u64> {
    option(l, key)
}

fn option(l: &Loaded, key: &str) -> Option<u64> {
    l.header
        .options
        .iter()
        .find(|o| o.key == key)
        .and_then(|o| o.value.parse().ok())
}

/// The name of thread (generation, tid): the last one the trace gives it.
pub(crate) fn thread_name(l: &Loaded, generation: u32, tid: u32) -> Option<String> {
    l.tables
        .threads
        .get(&(generation, tid))
        .and_then(|v| v.last())
        .map(|&(_, id)| l.tables.string(id).into_owned())
}

fn names(l: &mut Loaded, stack: u64) -> (Vec<Frame>, Vec<String>) {
    let frames = l.frames(stack);
    let text = frames.iter().map(|f| f.function.clone()).collect();
    (frames, text)
}

/// `ebsym threads` of a trace.
pub fn threads_from(trace: impl Trace, filter: &Filter) -> ThreadsReport {
    let mut sink = ThreadsSink::default();
    let mut l = Loaded::from_trace(trace, filter, &mut sink);
    report_of(sink, &mut l)
}

#[derive(Default)]
struct Acc {
    names: Vec<String>,
    threads: u64,
    wall_ns: u64,
    cpu_samples: u64,
    runq_ns: u64,
    offcpu: HashMap<u64, (u64, u64)>,
    cpu_stacks: HashMap<u64, u64>,
}

/// `ebsym threads` of the events `sink` was fed, from the trace `l` they were read from.
pub(crate) fn report_of(sink: ThreadsSink, l: &mut Loaded) -> ThreadsReport {
    let hz = option(l, "cpu").unwrap_or(0);
    let period = if hz > 0 { 1_000_000_000 / hz } else { 0 };
    let mut families = Vec::new();
    for (k, name) in [("cpu", "cpu"), ("offcpu", "offcpu"), ("runq", "runq")] {
        if option(l, k).is_some() || l.header.options.iter().any(|o| o.key == k) {
            families.push(name);
        }
    }
    let mut groups: BTreeMap<(u32, String, String), Acc> = BTreeMap::new();
    // in thread order: a group's names are the same from one report to the next
    let mut threads: Vec<((u32, u32), PerThread)> = sink.threads.into_iter().collect();
    threads.sort_unstable_by_key(|t| t.0);
    for ((generation, tid), t) in threads {
        let (pid, comm) = l
            .tables
            .generations
            .get(&generation)
            .map_or((0, String::new()), |g| {
                (g.process.pid, l.tables.string(g.process.comm).into_owned())
            });
        let name = thread_name(l, generation, tid).unwrap_or_else(|| comm.clone());
        let a = groups.entry((pid, comm, fold_digits(&name))).or_default();
        if a.names.len() < 8 && !a.names.contains(&name) {
            a.names.push(name);
        }
        a.threads += 1;
        a.wall_ns += t.last_ns.saturating_sub(t.first_ns);
        a.cpu_samples += t.cpu_samples;
        a.runq_ns += t.runq_ns;
        for (s, (n, ns)) in t.offcpu {
            let e = a.offcpu.entry(s).or_default();
            e.0 += n;
            e.1 += ns;
        }
        for (s, n) in t.cpu_stacks {
            *a.cpu_stacks.entry(s).or_default() += n;
        }
    }
    let mut rows = Vec::new();
    for ((pid, process, thread), a) in groups {
        let mut by_cause: BTreeMap<&'static str, (u64, u64, Vec<CauseStack>)> = BTreeMap::new();
        for (&s, &(n, ns)) in &a.offcpu {
            let (frames, text) = names(l, s);
            let c = by_cause.entry(cause_of(&frames)).or_default();
            c.0 += n;
            c.1 += ns;
            c.2.push(CauseStack {
                ns,
                blocks: n,
                frames: text,
            });
        }
        let mut offcpu: Vec<CauseRow> = by_cause
            .into_iter()
            .map(|(cause, (blocks, ns, mut stacks))| {
                stacks.sort_by(|a, b| {
                    b.ns.cmp(&a.ns)
                        .then(a.frames.cmp(&b.frames))
                        .then(b.blocks.cmp(&a.blocks))
                });
                stacks.truncate(3);
                CauseRow {
                    cause,
                    blocks,
                    ns,
                    top_stacks: stacks,
                }
            })
            .collect();
        offcpu.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.cause.cmp(b.cause)));
        let offcpu_ns: u64 = offcpu.iter().map(|c| c.ns).sum();
        let on_cpu_ns = a.cpu_samples * period;
        let top_cpu = a
            .cpu_stacks
            .iter()
            .max_by(|x, y| x.1.cmp(y.1).then(y.0.cmp(x.0)))
            .map(|(&s, _)| s);
        let top_cpu_stack = top_cpu.map(|s| names(l, s).1).unwrap_or_default();
        let wall_ns = a.wall_ns.max(on_cpu_ns + a.runq_ns + offcpu_ns);
        rows.push(GroupRow {
            process,
            pid,
            thread,
            names: a.names,
            threads: a.threads,
            wall_ns,
            on_cpu_ns,
            cpu_samples: a.cpu_samples,
            runq_ns: a.runq_ns,
            offcpu_ns,
            offcpu,
            not_seen_ns: wall_ns.saturating_sub(on_cpu_ns + a.runq_ns + offcpu_ns),
            top_cpu_stack,
        });
    }
    rows.sort_by(|a, b| {
        b.wall_ns
            .cmp(&a.wall_ns)
            .then(a.pid.cmp(&b.pid))
            .then(a.thread.cmp(&b.thread))
    });
    let note = rows.is_empty().then(|| {
        "no cpu, offcpu or runq events in this trace: record with --cpu --offcpu --runq".into()
    });
    ThreadsReport {
        cpu_period_ns: period,
        families,
        groups: rows,
        losses: l.losses.clone(),
        note,
    }
}

fn ms(ns: u64) -> String {
    format!("{:.1} ms", ns as f64 / 1e6)
}

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".into()
    } else {
        format!("{:.0}%", part as f64 * 100.0 / whole as f64)
    }
}

impl GroupRow {
    /// Who the group is: `comm [pid] thread (N threads)`.
    pub fn title(&self) -> String {
        format!(
            "{} [{}] {} ({} thread{})",
            self.process,
            self.pid,
            self.thread,
            self.threads,
            if self.threads == 1 { "" } else { "s" }
        )
    }

    /// The split in one line, each part's share of the wall time, largest first, the parts
    /// with no time left out: `wall 250.0 ms: sleep 98%, on CPU 1%, not seen 1%`.
    pub fn split_text(&self) -> String {
        let mut parts: Vec<(&str, u64)> =
            vec![("on CPU", self.on_cpu_ns), ("run queue", self.runq_ns)];
        parts.extend(self.offcpu.iter().map(|c| (c.cause, c.ns)));
        parts.push(("not seen", self.not_seen_ns));
        parts.retain(|p| p.1 > 0);
        // stable: equal parts keep the order above
        parts.sort_by(|a, b| b.1.cmp(&a.1));
        let shown: Vec<String> = parts
            .iter()
            .map(|(what, ns)| format!("{what} {}", pct(*ns, self.wall_ns)))
            .collect();
        format!("wall {}: {}", ms(self.wall_ns), shown.join(", "))
    }
}

impl ThreadsReport {
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        if let Some(n) = &self.note {
            let _ = writeln!(s, "{n}");
        }
        let _ = writeln!(
            s,
            "where each thread group's time goes (wall = each thread's span in the trace; families: {})",
            self.families.join(", ")
        );
        for g in &self.groups {
            let _ = writeln!(s, "\n{}: wall {}", g.title(), ms(g.wall_ns));
            let _ = writeln!(
                s,
                "  on CPU        {:>12} {:>5}",
                ms(g.on_cpu_ns),
                pct(g.on_cpu_ns, g.wall_ns)
            );
            let _ = writeln!(
                s,
                "  run queue     {:>12} {:>5}",
                ms(g.runq_ns),
                pct(g.runq_ns, g.wall_ns)
            );
            for c in &g.offcpu {
                let _ = writeln!(
                    s,
                    "  off: {:<22} {:>12} {:>5}  {} blocks",
                    c.cause,
                    ms(c.ns),
                    pct(c.ns, g.wall_ns),
                    c.blocks
                );
                if let Some(t) = c.top_stacks.first() {
                    let shown: Vec<&str> = t.frames.iter().take(6).map(|f| f.as_str()).collect();
                    let _ = writeln!(s, "      top: {}", shown.join(" <- "));
                }
            }
            let _ = writeln!(
                s,
                "  not seen      {:>12} {:>5}",
                ms(g.not_seen_ns),
                pct(g.not_seen_ns, g.wall_ns)
            );
            if !g.top_cpu_stack.is_empty() {
                let shown: Vec<&str> = g.top_cpu_stack.iter().take(6).map(|f| f.as_str()).collect();
                let _ = writeln!(s, "  hottest on-CPU stack: {}", shown.join(" <- "));
            }
        }
        s.push_str(&losses_text(&self.losses));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_is_labelled_by_its_name_its_group_or_its_groups() {
        let l = |v: &[(&str, u64)]| {
            thread_label(
                &v.iter()
                    .map(|(n, c)| (n.to_string(), *c))
                    .collect::<Vec<_>>(),
            )
        };
        assert_eq!(l(&[]), None);
        assert_eq!(l(&[("sleeper", 3)]).as_deref(), Some("sleeper"));
        assert_eq!(
            l(&[("pingpong-1", 3), ("pingpong-2", 5)]).as_deref(),
            Some("pingpong-*")
        );
        assert_eq!(
            l(&[("reader", 1), ("pingpong-1", 3), ("pingpong-2", 5)]).as_deref(),
            Some("pingpong-*, reader")
        );
        assert_eq!(
            l(&[("a", 1), ("b", 2), ("c", 3), ("d", 4), ("e", 4)]).as_deref(),
            Some("d, e, c +2 more")
        );
    }

    #[test]
    fn digits_fold_to_a_star() {
        assert_eq!(fold_digits("worker-12"), "worker-*");
        assert_eq!(fold_digits("pool7:3"), "pool*:*");
        assert_eq!(fold_digits("postgres"), "postgres");
        assert_eq!(fold_digits("2x"), "*x");
    }

    fn kframe(f: &str) -> Frame {
        Frame {
            function: f.into(),
            file: None,
            line: None,
            inlined: false,
            module: "[kernel]".into(),
            address: String::new(),
        }
    }

    #[test]
    fn causes_come_from_the_innermost_matching_kernel_frame() {
        let c = |fs: &[&str]| cause_of(&fs.iter().map(|f| kframe(f)).collect::<Vec<_>>());
        assert_eq!(c(&["futex_wait_queue", "futex_wait", "do_futex"]), "lock");
        assert_eq!(
            c(&["io_schedule", "folio_wait_bit_common", "ext4_fsync"]),
            "disk"
        );
        assert_eq!(
            c(&["schedule_hrtimeout_range", "ep_poll", "do_epoll_wait"]),
            "idle wait"
        );
        assert_eq!(
            c(&["wait_woken", "sk_wait_data", "tcp_recvmsg"]),
            "network or pipe"
        );
        assert_eq!(c(&["do_nanosleep", "hrtimer_nanosleep"]), "sleep");
        assert_eq!(c(&["something_else"]), "other");
        assert_eq!(cause_of(&[]), "unknown (no kernel stack)");
    }
}
