//! The text renderings for people: a [`Report`]'s rows, latency histograms, and the
//! losses paragraph every report ends with.
use super::top::Report;
use crate::histogram::Log2Bin;
use crate::model::Losses;

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
            let _ = writeln!(s, "\n#{} {}", i + 1, vals.join("  "));
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
