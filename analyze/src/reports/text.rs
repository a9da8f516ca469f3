//! Text for people that every report shares: latency histograms, durations and sizes, the
//! note a report gives instead of an empty table, and the losses paragraph every report
//! ends with. A leaf: it uses no other report module.
use crate::histogram::Log2Bin;
use crate::model::{Filter, Losses};

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
pub(crate) fn log2_text(bins: &[Log2Bin]) -> String {
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
    if let Some(sm) = &l.sampled {
        let period = if sm.min_period == sm.max_period {
            format!("1 sample per {} B allocated", sm.min_period)
        } else {
            format!(
                "1 sample per {}..{} B allocated",
                sm.min_period, sm.max_period
            )
        };
        let _ = writeln!(
            s,
            "estimates: allocations were sampled by bytes ({period}; {} sampled): counts and bytes are scaled by the inverse of each allocation's probability",
            sm.sampled_allocs
        );
    }
    if let Some(n) = l.offcpu_sampled {
        let _ = writeln!(
            s,
            "estimates: off-CPU blocks shorter than --offcpu-sample's unit are a time-weighted sample ({n} sampled blocks, each kept with probability length/unit): off-CPU times and counts are scaled by 1/p; longer blocks are all kept"
        );
    }
    for p in &l.paced {
        let _ = writeln!(s, "estimates: {p}");
    }
    if let Some(n) = l.memgrowth_sampled {
        let _ = writeln!(
            s,
            "estimates: first-touch page faults are a byte-weighted sample (--memgrowth-sample; {n} sampled faults, each kept with probability page/unit): memory growth and fault counts are scaled by 1/p; brk, mmap and munmap are all kept"
        );
    }
    if !l.aggregated.is_empty() {
        let v: Vec<String> = l
            .aggregated
            .iter()
            .map(|(k, n)| format!("{k} ({n} events)"))
            .collect();
        let _ = writeln!(
            s,
            "aggregated in the kernel (--aggregate): {}: counts per stack and interval, no per-event times, threads or addresses",
            v.join(", ")
        );
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

/// A duration for people: 812 ns, 38.2 us, 5.12 ms, 1.50 s.
pub fn human_ns(ns: u64) -> String {
    let v = ns as f64;
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.1} us", v / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.2} ms", v / 1e6)
    } else {
        format!("{:.2} s", v / 1e9)
    }
}

/// Bytes for people: 512 B, 12.5 KiB, 506.0 MiB.
pub(crate) fn human_bytes(b: u64) -> String {
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

/// A share (0 to 1) as a whole percentage: "42%".
pub(crate) fn pct(share: f64) -> String {
    format!("{:.0}%", share * 100.0)
}
