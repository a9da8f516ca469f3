//! `ebsym summary` (and `ebrec diagnose`'s summary.txt/summary.json): the top finding of
//! each family in a trace, one line each: "most off-CPU time: futex_wait in
//! Queue::pop, 42% of 12.1 s", "slowest syscall: fsync p99 38.20 ms (120 calls)".
use super::system::{human_ns, system_latency_from, tcp_from};
use super::{top_from, EventKind, Row};
use crate::model::{Filter, Frame, Trace};
use serde::Serialize;
use std::collections::BTreeMap;

/// The findings, one per family that has events, in the registry's order.
#[derive(Debug, Serialize)]
pub struct Summary {
    pub findings: Vec<Finding>,
}

/// The top finding of one family.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// The family's name (cpu, offcpu, lock, memgrowth, alloc, syscall, bio, runq, tcp).
    pub family: String,
    /// The sentence for people.
    pub finding: String,
    /// What it is about: a function, a syscall, a device and op, a process, an address.
    pub subject: String,
    /// Its main number, in `unit` (samples, ns, bytes, count).
    pub value: u64,
    pub unit: &'static str,
    /// Its share of the family's total, 0 to 1, where one applies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share: Option<f64>,
    /// The family's total, in `unit`.
    pub total: u64,
}

/// Whether a frame's module is the system's C and C++ runtime (libc, the loader,
/// libstdc++, libm, libgcc, the vDSO): code a service calls, not its own.
pub(crate) fn runtime(module: &str) -> bool {
    const RUNTIME: &[&str] = &[
        "libc.so",
        "libc-",
        "ld-linux",
        "ld64.so",
        "libstdc++",
        "libm.so",
        "libpthread",
        "libgcc_s",
        "libdl",
        "librt",
        "[vdso]",
        "[uprobes]",
    ];
    let file = module.rsplit('/').next().unwrap_or(module);
    RUNTIME.iter().any(|r| file.starts_with(r))
}

/// The user function a stack is "in": its first user frame outside the C and C++ runtime
/// (the service's own code), else its first user frame, else its first frame.
pub(crate) fn user_place(frames: &[Frame]) -> String {
    let user = || frames.iter().filter(|f| !f.module.starts_with("[kernel"));
    // (An inlined frame of a system header, std::mutex's __gthread_mutex_lock, is the
    // runtime's too.)
    let system_header = |f: &Frame| {
        f.file
            .as_deref()
            .is_some_and(|p| p.starts_with("/usr/include/"))
    };
    user()
        .find(|f| !runtime(&f.module) && !system_header(f))
        .or_else(|| user().next())
        .or_else(|| frames.first())
        .map_or_else(
            || "(no stack)".to_string(),
            |f| short(&f.function).to_string(),
        )
}

/// "LEAF in PLACE" for a sample's stack: the function on the CPU, and the service's
/// function it was called from when that is another.
fn leaf_in_place(frames: &[Frame]) -> String {
    let place = user_place(frames);
    match frames.first().map(|f| short(&f.function)) {
        Some(leaf) if leaf != place => format!("{leaf} in {place}"),
        _ => place,
    }
}

/// The kernel function a blocked stack waits in: the first kernel frame that is not the
/// scheduler itself.
fn kernel_place(frames: &[Frame]) -> Option<String> {
    frames
        .iter()
        .filter(|f| f.module == "[kernel]")
        .find(|f| {
            let n = f.function.as_str();
            !(n.contains("schedule") || n.starts_with("__traceiter") || n == "finish_task_switch")
        })
        .map(|f| f.function.clone())
}

/// A demangled name without its parameters.
pub(crate) fn short(name: &str) -> &str {
    name.split('(').next().unwrap_or(name)
}

/// Bytes for people: 512 B, 12.5 KiB, 506.0 MiB.
fn human_bytes(b: u64) -> String {
    let v = b as f64;
    if b < 1024 {
        format!("{b} B")
    } else if b < 1 << 20 {
        format!("{:.1} KiB", v / 1024.0)
    } else if b < 1 << 30 {
        format!("{:.1} MiB", v / (1u64 << 20) as f64)
    } else {
        format!("{:.2} GiB", v / (1u64 << 30) as f64)
    }
}

fn pct(share: f64) -> String {
    format!("{:.0}%", share * 100.0)
}

/// Rows of `kind` grouped by `place`, with the measure summed: the largest group.
fn largest(
    rows: &[Row],
    by: impl Fn(&Row) -> u64,
    place: impl Fn(&Row) -> String,
) -> Option<(String, u64, u64)> {
    let mut groups: BTreeMap<String, u64> = BTreeMap::new();
    let mut total = 0;
    for r in rows {
        let v = by(r);
        total += v;
        *groups.entry(place(r)).or_default() += v;
    }
    let (k, v) = groups
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))?;
    (v > 0).then_some((k, v, total))
}

/// The summary of a trace that `open` opens again for each family (each report reads it
/// once), of the events that pass `f`.
pub fn summary_from<T: Trace>(mut open: impl FnMut() -> Option<T>, f: &Filter) -> Summary {
    let mut findings = Vec::new();
    let all = usize::MAX;
    let mut stack_finding = |kind: EventKind, findings: &mut Vec<Finding>| {
        let Some(t) = open() else { return };
        let rep = top_from(t, kind, kind.default_measure(), f, all);
        let value = |r: &Row| -> u64 {
            match r {
                Row::Cpu(x) => x.count,
                Row::OffCpu(x) => x.total_ns,
                Row::Lock(x) => x.wait_ns,
                Row::Bytes(x) => x.bytes,
                _ => r.count(),
            }
        };
        type Place = Box<dyn Fn(&Row) -> String>;
        let (place, unit, what): (Place, &'static str, &str) = match kind {
            EventKind::Cpu => (
                Box::new(|r: &Row| leaf_in_place(r.frames())),
                "samples",
                "most CPU",
            ),
            EventKind::OffCpu => (
                Box::new(|r: &Row| match kernel_place(r.frames()) {
                    Some(k) => format!("{k} in {}", user_place(r.frames())),
                    None => user_place(r.frames()),
                }),
                "ns",
                "most off-CPU time",
            ),
            EventKind::Lock => (
                Box::new(|r: &Row| match r {
                    Row::Lock(l) => format!("{} {} in {}", l.kind, l.mutex, user_place(&l.frames)),
                    _ => user_place(r.frames()),
                }),
                "ns",
                "most lock wait",
            ),
            EventKind::MemGrowth => (
                Box::new(|r: &Row| user_place(r.frames())),
                "bytes",
                "most memory growth",
            ),
            EventKind::Alloc => (
                Box::new(|r: &Row| user_place(r.frames())),
                "bytes",
                "most allocated",
            ),
            _ => return,
        };
        let Some((subject, v, total)) = largest(&rep.rows, value, place) else {
            return;
        };
        let share = v as f64 / total.max(1) as f64;
        let amount = |x: u64| match unit {
            "ns" => human_ns(x),
            "bytes" => human_bytes(x),
            _ => format!("{x} samples"),
        };
        findings.push(Finding {
            family: kind.name().into(),
            finding: format!("{what}: {subject}, {} of {}", pct(share), amount(total)),
            subject,
            value: v,
            unit,
            share: Some(share),
            total,
        });
    };
    for kind in [
        EventKind::Cpu,
        EventKind::OffCpu,
        EventKind::Lock,
        EventKind::MemGrowth,
        EventKind::Alloc,
    ] {
        stack_finding(kind, &mut findings);
    }
    for kind in [EventKind::Syscall, EventKind::Bio, EventKind::Runq] {
        let Some(t) = open() else { continue };
        let rep = system_latency_from(t, kind, f, all);
        let total = rep.totals.get("total_ns").copied().unwrap_or(0);
        let (what, pick): (&str, fn(&super::system::SystemLatencyRow) -> u64) = match kind {
            EventKind::Syscall => ("slowest syscall", |r| r.p99_ns),
            EventKind::Bio => ("slowest block I/O", |r| r.p99_ns),
            _ => ("longest run-queue waits", |r| r.p99_ns),
        };
        // The slowest by p99 among rows with a few events (one slow exec is not a finding);
        // else the slowest of all.
        let busy = |r: &&super::system::SystemLatencyRow| r.count >= 10;
        let best = rep
            .rows
            .iter()
            .filter(busy)
            .max_by_key(|r| pick(r))
            .or_else(|| rep.rows.iter().max_by_key(|r| pick(r)));
        let Some(r) = best else { continue };
        let mut finding = format!(
            "{what}: {} p99 {} ({} {}, max {})",
            r.name,
            human_ns(r.p99_ns),
            r.count,
            match kind {
                EventKind::Syscall => "calls",
                EventKind::Bio => "requests",
                _ => "waits",
            },
            human_ns(r.max_ns)
        );
        if kind == EventKind::Syscall {
            if let Some(most) = rep.rows.first().filter(|m| m.name != r.name) {
                finding.push_str(&format!(
                    "; most time: {} {} in {} calls",
                    most.name,
                    human_ns(most.total_ns),
                    most.count
                ));
            }
        }
        findings.push(Finding {
            family: kind.name().into(),
            finding,
            subject: r.name.clone(),
            value: r.p99_ns,
            unit: "ns",
            share: Some(r.total_ns as f64 / total.max(1) as f64),
            total,
        });
    }
    if let Some(t) = open() {
        let rep = tcp_from(t, f);
        let total: u64 = rep.rows.iter().map(|r| r.count).sum();
        if let Some(r) = rep.rows.first() {
            let failed: u64 = rep.rows.iter().map(|r| r.failed).sum();
            findings.push(Finding {
                family: "tcp".into(),
                finding: format!(
                    "most connections: {} {} ({} of {total}, lifetime p50 {}); {failed} failed in all",
                    r.role,
                    r.remote,
                    r.count,
                    human_ns(r.lifetime_p50_ns)
                ),
                subject: format!("{} {}", r.role, r.remote),
                value: r.count,
                unit: "count",
                share: Some(r.count as f64 / total.max(1) as f64),
                total,
            });
        }
    }
    Summary { findings }
}

impl Summary {
    /// One line per family.
    pub fn to_text(&self) -> String {
        if self.findings.is_empty() {
            return "no events: nothing to summarize\n".into();
        }
        self.findings
            .iter()
            .map(|f| format!("{:<10} {}\n", f.family, f.finding))
            .collect()
    }
}
