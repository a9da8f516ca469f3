//! What `ebrec record --max-cpu` changed while recording, as notes for the report of one
//! kind: the cpu sampling rate (`cpu-hz`), the off-CPU threshold (`offcpu-min-ns`), the
//! time-weighted samples' units `--offcpu-rate` and its kin raised (`offcpu-sample-ns`,
//! `syscalls-sample-ns`, `runq-sample-ns`), and the pauses of any family (the allocator's are noted in `stacks.rs`, as they were first).
use super::kind::EventKind;
use crate::model::Loaded;
use ebtrace_format::proto::{EventFamily, ProbeChange, ProbeChangeKind};

/// Seconds from the start of the recording to `t`.
fn at(l: &Loaded, t: u64) -> f64 {
    t.saturating_sub(l.header.start_time_ns) as f64 / 1e9
}

/// The value the user recorded with (`--cpu`, `--offcpu` in µs), from the header.
fn option(l: &Loaded, key: &str) -> Option<u64> {
    l.header
        .options
        .iter()
        .find(|o| o.key == key)
        .and_then(|o| o.value.parse().ok())
}

fn rates<'a>(l: &'a Loaded, family: EventFamily, setting: &str) -> Vec<&'a ProbeChange> {
    l.probe_changes
        .iter()
        .filter(|p| {
            p.family == family as i32
                && p.kind == ProbeChangeKind::Rate as i32
                && p.setting == setting
        })
        .collect()
}

/// "to X at T s, to Y at U s" (the first and last four of many).
fn steps(l: &Loaded, ch: &[&ProbeChange], value: impl Fn(u64) -> String) -> String {
    let one = |c: &&ProbeChange| format!("{} at {:.1} s", value(c.value), at(l, c.time_ns));
    if ch.len() <= 8 {
        return ch.iter().map(one).collect::<Vec<_>>().join(", ");
    }
    let head: Vec<String> = ch[..4].iter().map(one).collect();
    let tail: Vec<String> = ch[ch.len() - 4..].iter().map(one).collect();
    format!(
        "{}, … {} more, {}",
        head.join(", "),
        ch.len() - 8,
        tail.join(", ")
    )
}

/// What `--offcpu-rate` and its kin (record/src/pacer.rs) did to the time-weighted sample's
/// unit of `kind`'s family, for the report's estimates (`Losses::paced`).
pub(crate) fn paced(l: &Loaded, kind: EventKind) -> Vec<String> {
    let mut out = Vec::new();
    // --offcpu-rate and its kin (record/src/pacer.rs): the time-weighted samples' units.
    let paced = match kind {
        EventKind::OffCpu => Some((
            EventFamily::Offcpu,
            "offcpu-sample-ns",
            "offcpu-sample",
            "--offcpu-rate",
            "blocks",
        )),
        EventKind::Syscall => Some((
            EventFamily::Syscall,
            "syscalls-sample-ns",
            "syscalls-sample",
            "--syscalls-rate",
            "calls",
        )),
        EventKind::Runq => Some((
            EventFamily::Runq,
            "runq-sample-ns",
            "runq-sample",
            "--runq-rate",
            "waits",
        )),
        _ => None,
    };
    if let Some((family, setting, opt, flag, what)) = paced {
        let ch = rates(l, family, setting);
        if let Some(highest) = ch.iter().map(|c| c.value).max() {
            let from_us = option(l, opt).unwrap_or(0);
            out.push(format!(
                "the time-weighted sample's unit went from {from_us} us up to {} us by {flag} ({}): shorter {what} were kept with probability length/unit, each standing for the unit in force when it was kept, so totals stay unbiased estimates with fewer {what} behind them (ebsym info lists the changes)",
                highest / 1000,
                steps(l, &ch, |v| format!("{} us", v / 1000))
            ));
        }
    }
    out
}

/// The notes for a report on `kind`.
pub(crate) fn notes(l: &Loaded, kind: EventKind) -> Vec<String> {
    let mut out = Vec::new();
    if kind == EventKind::Cpu {
        let ch = rates(l, EventFamily::Cpu, "cpu-hz");
        if let (Some(first), Some(last)) = (ch.first(), ch.last()) {
            let from = option(l, "cpu").unwrap_or(first.value);
            out.push(format!(
                "cpu sampling went from {from} Hz to {} Hz by --max-cpu ({}): sample counts are not comparable across the changes (ebsym info lists them)",
                last.value,
                steps(l, &ch, |v| format!("{v} Hz"))
            ));
        }
    }
    if kind == EventKind::OffCpu {
        let ch = rates(l, EventFamily::Offcpu, "offcpu-min-ns");
        if let Some(last) = ch.last() {
            let from_us = option(l, "offcpu").unwrap_or(0);
            let highest = ch.iter().map(|c| c.value).max().unwrap_or(0);
            let since = ch.iter().find(|c| c.value == highest).unwrap();
            if highest > from_us * 1000 {
                out.push(format!(
                    "off-CPU blocks shorter than {} us were dropped from {:.1} s into the recording on: --max-cpu raised the threshold from {from_us} us to {} us ({}), short blocks are under-counted after the changes (ebsym info lists them)",
                    highest / 1000,
                    at(l, since.time_ns),
                    last.value / 1000,
                    steps(l, &ch, |v| format!("{} us", v / 1000))
                ));
            }
        }
    }
    let family = kind.family();
    if family != EventFamily::Alloc {
        let mut pauses: Vec<(u64, u64)> = Vec::new();
        for p in l.probe_changes.iter().filter(|p| p.family == family as i32) {
            if p.kind == ProbeChangeKind::Paused as i32 {
                pauses.push((p.time_ns, u64::MAX));
            } else if p.kind == ProbeChangeKind::Resumed as i32 {
                if let Some(last) = pauses.last_mut().filter(|l| l.1 == u64::MAX) {
                    last.1 = p.time_ns;
                }
            }
        }
        if !pauses.is_empty() {
            let open = pauses.iter().any(|p| p.1 == u64::MAX);
            let spans: Vec<String> = pauses
                .iter()
                .map(|&(a, b)| {
                    if b == u64::MAX {
                        format!("from {:.1} s to the end", at(l, a))
                    } else {
                        format!("{:.1}-{:.1} s", at(l, a), at(l, b))
                    }
                })
                .collect();
            out.push(format!(
                "the {} probes were paused {} time(s) by --max-cpu{} ({}): events while paused are not counted (ebsym info lists the changes)",
                kind_name(kind),
                pauses.len(),
                if open { ", the last until the end" } else { "" },
                spans.join(", ")
            ));
        }
    }
    out
}

fn kind_name(kind: EventKind) -> &'static str {
    match kind {
        EventKind::Alloc => "allocator",
        EventKind::Lock => "lock",
        EventKind::Func => "--func",
        EventKind::Cpu => "cpu",
        EventKind::OffCpu => "off-CPU",
        EventKind::MemGrowth => "memory growth",
        EventKind::Syscall => "syscall",
        EventKind::Bio => "block I/O",
        EventKind::Runq => "run-queue",
        EventKind::Tcp => "TCP",
        EventKind::Usdt => "USDT",
    }
}
