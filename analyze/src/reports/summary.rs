//! `ebsym summary` (and `ebrec diagnose`'s summary.txt/summary.json): the top finding of
//! each family in a trace, one line each: "most off-CPU time: futex_wait in
//! Queue::pop, 42% of 12.1 s", "slowest syscall: fsync p99 38.20 ms (120 calls)"; then
//! where the time of the busiest thread groups goes (`ebsym threads`' rows, from the same
//! pass over the trace).
use super::idle::lock_place;
use super::idle::IdleRules;
use super::kind::EventKind;
use super::pass::{Passed, Wants};
use super::places::{core_kernel_place, leaf_in_place, user_place};
use super::text::{human_bytes, human_ns, pct};
use super::threads::GroupRow;
use super::top::Row;
use super::wrappers::{site_place, WrapperRules};
use crate::model::{Filter, Trace};
use serde::Serialize;
use std::collections::BTreeMap;

/// Thread groups the summary shows, at most: those with the most wall time.
pub const SUMMARY_THREAD_GROUPS: usize = 10;

/// The findings, one per family that has events, in the registry's order.
#[derive(Debug, Serialize)]
pub struct Summary {
    pub findings: Vec<Finding>,
    /// Where each thread group's time goes: the first [`SUMMARY_THREAD_GROUPS`] groups of
    /// `ebsym threads` (most wall time first), the same rows; empty without cpu, offcpu or
    /// runq events.
    pub threads: Vec<GroupRow>,
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
    /// offcpu and lock: the share of the total that was idle waits (a thread waiting for
    /// work, `reports::idle`), 0 to 1, shown apart from the finding; absent when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_share: Option<f64>,
    /// The idle share of each idle reason ("epoll wait": 0.4), 0 to 1 of the total.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub idle: BTreeMap<String, f64>,
}

/// Rows of `kind` grouped by `place`, with the measure summed: the largest group.
fn largest<'a>(rows: impl IntoIterator<Item = &'a Brief>) -> Option<(String, u64, u64)> {
    let mut groups: BTreeMap<&str, u64> = BTreeMap::new();
    let mut total = 0;
    for r in rows {
        total += r.value;
        *groups.entry(&r.place).or_default() += r.value;
    }
    let (k, v) = groups
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))?;
    (v > 0).then_some((k.to_string(), v, total))
}

/// What a finding takes of one row of the top stacks: its place, value, idle reason and
/// whether it is a wait for a mutex another thread held, or contention. Rows go by one at
/// a time ([`Passed::top_each`]): the summary holds these, not every stack's frames.
struct Brief {
    place: String,
    value: u64,
    idle: Option<String>,
    mutex: bool,
    contention: bool,
}

impl Brief {
    fn of(r: &Row, place: &Place) -> Brief {
        Brief {
            place: place(r),
            value: row_value(r),
            idle: r.idle_reason().map(String::from),
            mutex: matches!(r, Row::Lock(l) if matches!(l.wait_kind, "mutex" | "condvar_mutex")),
            contention: matches!(r, Row::Lock(l) if l.contention),
        }
    }
}

/// The kinds the summary takes its stack findings from, in its order.
const STACK_KINDS: [EventKind; 5] = [
    EventKind::Cpu,
    EventKind::OffCpu,
    EventKind::Lock,
    EventKind::MemGrowth,
    EventKind::Alloc,
];

/// The kinds whose kernel histograms give the summary's latency findings.
const LATENCY_KINDS: [EventKind; 3] = [EventKind::Syscall, EventKind::Bio, EventKind::Runq];

/// What a pass over a trace keeps for its summary ([`summary_of`]).
pub(crate) fn wants() -> Wants {
    Wants {
        stacks: STACK_KINDS.to_vec(),
        latency: LATENCY_KINDS.to_vec(),
        tcp: true,
        threads: true,
        ..Wants::default()
    }
}

/// The summary of the trace `open` opens (read once), of the events that pass `f`.
pub fn summary_from<T: Trace>(open: impl FnMut() -> Option<T>, f: &Filter) -> Summary {
    summary_with(open, f, &IdleRules::default())
}

/// [`summary_from`] with `idle` saying which offcpu and lock waits are idle.
pub fn summary_with<T: Trace>(
    open: impl FnMut() -> Option<T>,
    f: &Filter,
    idle: &IdleRules,
) -> Summary {
    summary_rules(open, f, idle, &WrapperRules::default())
}

/// [`summary_with`] with `wrappers` saying which frames of an allocation's stack are
/// allocator wrappers: the alloc finding names the site they lead to.
pub fn summary_rules<T: Trace>(
    mut open: impl FnMut() -> Option<T>,
    f: &Filter,
    idle: &IdleRules,
    wrappers: &WrapperRules,
) -> Summary {
    match open() {
        Some(t) => {
            let mut p = Passed::read(t, f, &wants(), None);
            p.idle = idle.clone();
            p.wrappers = wrappers.clone();
            summary_of(&mut p)
        }
        None => Summary {
            findings: Vec::new(),
            threads: Vec::new(),
        },
    }
}

/// The summary of a trace read for it (with at least [`wants`]).
pub(crate) fn summary_of(p: &mut Passed) -> Summary {
    let mut findings = Vec::new();
    for kind in STACK_KINDS {
        let mut wrappers = p.wrappers.clone();
        if kind == EventKind::Alloc {
            p.learn_wrappers(kind, &mut wrappers);
        }
        let Some((place, unit, what)) = naming(kind, &wrappers) else {
            continue;
        };
        let mut rows = Vec::new();
        if kind == EventKind::Alloc {
            // The site is the frames' alone: named from what learning the wrappers kept of
            // each stack (a row of strings a stack was a tenth of a page's time on a
            // compiler's trace, 125,000 stacks).
            p.each_merged_site(kind, &wrappers, &mut |site, agg| {
                rows.push(Brief {
                    place: site,
                    value: agg.a,
                    idle: None,
                    mutex: false,
                    contention: false,
                })
            });
        } else {
            p.top_each(kind, kind.default_measure(), &mut |r| {
                rows.push(Brief::of(&r, &place))
            });
        }
        findings.extend(stack_finding(kind, &rows, unit, what));
    }
    for kind in LATENCY_KINDS {
        let rep = p.latency(kind);
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
            idle_share: None,
            idle: BTreeMap::new(),
        });
    }
    let rep = p.tcp();
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
            idle_share: None,
            idle: BTreeMap::new(),
        });
    }
    let threads = p
        .threads()
        .groups
        .iter()
        .take(SUMMARY_THREAD_GROUPS)
        .cloned()
        .collect();
    Summary { findings, threads }
}

/// The finding of `rep`, the top stacks of `kind` (one of [`STACK_KINDS`]): the place
/// with the most of the kind's measure among the waits that are not idle (for lock, among
/// the waits for a mutex another thread held first, then the condvar waits that were
/// contention); the
/// idle waits' share said apart, by reason. Its share is of the whole total.
/// The alloc finding's place is the allocation site: the first frame of the stack that is
/// no allocator wrapper of `wrappers` ([`super::wrappers`]).
fn stack_finding(
    kind: EventKind,
    rows: &[Brief],
    unit: &'static str,
    what: &str,
) -> Option<Finding> {
    let total: u64 = rows.iter().map(|r| r.value).sum();
    let idle_rows = || rows.iter().filter(|r| r.idle.is_some());
    let busy = || rows.iter().filter(|r| r.idle.is_none());
    let mutexes = || busy().filter(|r| r.mutex);
    let contended = || busy().filter(|r| r.contention);
    let (subject, v, _) = largest(mutexes())
        .or_else(|| largest(contended()))
        .or_else(|| largest(busy()))
        .or_else(|| largest(idle_rows()))?;
    let share = v as f64 / total.max(1) as f64;
    let amount = |x: u64| match unit {
        "ns" => human_ns(x),
        "bytes" => human_bytes(x),
        _ => format!("{x} samples"),
    };
    let idle = idle_by_reason(rows);
    let idle_total: u64 = idle.values().sum();
    let mut finding = if busy().any(|r| r.value > 0) {
        format!("{what}: {subject}, {} of {}", pct(share), amount(total))
    } else {
        format!(
            "{what}: only idle waits, the most {subject}, {} of {}",
            pct(share),
            amount(total)
        )
    };
    if idle_total > 0 {
        finding.push_str(&idle_note(&idle, idle_total, total));
    }
    Some(Finding {
        family: kind.name().into(),
        finding,
        subject,
        value: v,
        unit,
        share: Some(share),
        total,
        idle_share: (idle_total > 0).then(|| idle_total as f64 / total.max(1) as f64),
        idle: idle
            .into_iter()
            .map(|(r, v)| (r, v as f64 / total.max(1) as f64))
            .collect(),
    })
}

/// A row's value in the finding: samples, off-CPU time, lock wait, bytes, else its count.
fn row_value(r: &Row) -> u64 {
    match r {
        Row::Cpu(x) => x.count,
        Row::OffCpu(x) => x.total_ns,
        Row::Lock(x) => x.wait_ns,
        Row::Bytes(x) => x.bytes,
        _ => r.count(),
    }
}

/// How a finding of `kind` names a row's place.
type Place = Box<dyn Fn(&Row) -> String>;

/// How a finding of `kind` names its place, its unit, and what it is the most of; None for
/// a kind with no finding of its stacks.
fn naming(kind: EventKind, wrappers: &WrapperRules) -> Option<(Place, &'static str, &'static str)> {
    Some(match kind {
        EventKind::Cpu => (
            Box::new(|r: &Row| leaf_in_place(r.frames())),
            "samples",
            "most CPU",
        ),
        EventKind::OffCpu => (
            // a wait inside a lock acquisition is named after the lock, not after the
            // generic wait functions under it
            Box::new(|r: &Row| {
                let user = lock_place(r.frames()).unwrap_or_else(|| user_place(r.frames()));
                match core_kernel_place(r.frames()) {
                    Some(k) => format!("{k} in {user}"),
                    None => user,
                }
            }),
            "ns",
            "most off-CPU time",
        ),
        EventKind::Lock => (
            Box::new(|r: &Row| match r {
                Row::Lock(l) => format!(
                    "{} {} in {}",
                    match l.wait_kind {
                        "condvar_mutex" => "condvar's mutex",
                        k => k,
                    },
                    l.mutex,
                    lock_place(&l.frames).unwrap_or_else(|| user_place(&l.frames))
                ),
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
            {
                let w = wrappers.clone();
                Box::new(move |r: &Row| site_place(&w, r.frames()))
            },
            "bytes",
            "most allocated",
        ),
        _ => return None,
    })
}

/// The idle waits' values by reason.
fn idle_by_reason(rows: &[Brief]) -> BTreeMap<String, u64> {
    let mut idle: BTreeMap<String, u64> = BTreeMap::new();
    for r in rows {
        if let Some(reason) = &r.idle {
            *idle.entry(reason.clone()).or_default() += r.value;
        }
    }
    idle
}

/// " (idle waits, N%, shown apart: reason N%, …)": the idle waits' share of `total`, and
/// each reason's, largest first.
fn idle_note(idle: &BTreeMap<String, u64>, idle_total: u64, total: u64) -> String {
    let mut reasons: Vec<(&String, &u64)> = idle.iter().collect();
    reasons.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let list: Vec<String> = reasons
        .iter()
        .map(|(r, v)| format!("{r} {}", pct(**v as f64 / total.max(1) as f64)))
        .collect();
    format!(
        " (idle waits, {}, shown apart: {})",
        pct(idle_total as f64 / total.max(1) as f64),
        list.join(", ")
    )
}

impl Summary {
    /// One line per family, then one per thread group.
    pub fn to_text(&self) -> String {
        if self.findings.is_empty() && self.threads.is_empty() {
            return "no events: nothing to summarize\n".into();
        }
        let mut s: String = self
            .findings
            .iter()
            .map(|f| format!("{:<10} {}\n", f.family, f.finding))
            .collect();
        if !self.threads.is_empty() {
            s.push_str(
                "\nwhere each thread group's time goes (wall: each thread's span; \
                 ebsym threads for the stacks):\n",
            );
            for g in &self.threads {
                s.push_str(&format!(
                    "{:<10} {}: {}\n",
                    "threads",
                    g.title(),
                    g.split_text()
                ));
            }
        }
        s
    }
}
