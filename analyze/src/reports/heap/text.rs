//! `ebsym heap`'s report for people.
use super::report::{HeapReport, HeapRow};
use crate::reports::text::{human_bytes, human_ns, log2_text, losses_text};
use std::fmt::Write;

fn opt_num(v: Option<u64>) -> String {
    v.map_or_else(|| "n/a".into(), |v| v.to_string())
}

impl HeapReport {
    /// The report for people.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        self.totals_text(&mut s);
        self.processes_text(&mut s);
        for (i, r) in self.rows.iter().enumerate() {
            row_text(&mut s, i, r);
        }
        s.push_str(&losses_text(&self.losses));
        s
    }

    /// The head: exact or not, the totals, each allocator's share when there are several,
    /// why the numbers are not exact, the notes.
    fn totals_text(&self, s: &mut String) {
        let t = &self.totals;
        let _ = writeln!(
            s,
            "heap by {}: {}",
            self.by.name(),
            if self.exact {
                "exact (every allocator call)"
            } else {
                "NOT exact (see below)"
            }
        );
        let _ = writeln!(
            s,
            "calls to allocation functions: {} ({} allocated)",
            t.calls,
            human_bytes(t.bytes)
        );
        let _ = writeln!(
            s,
            "temporary allocations: {}",
            match t.temporary {
                Some(v) => format!(
                    "{v} ({:.1}% of calls)",
                    v as f64 * 100.0 / t.calls.max(1) as f64
                ),
                None => "n/a".into(),
            }
        );
        let _ = writeln!(
            s,
            "peak heap: {}",
            match (t.peak_bytes, t.peak_time_ns) {
                (Some(b), Some(at)) =>
                    format!("{} ({b} bytes) at {}", human_bytes(b), human_ns(at)),
                _ => "n/a".into(),
            }
        );
        let _ = writeln!(
            s,
            "leaked: {} to act on ({} blocks), {} held by the runtime ({} blocks)",
            t.leaked_bytes.map_or_else(|| "n/a".into(), human_bytes),
            opt_num(t.leaked_count),
            t.held_bytes.map_or_else(|| "n/a".into(), human_bytes),
            opt_num(t.held_count),
        );
        if self.allocators.len() > 1 {
            for a in &self.allocators {
                let _ = writeln!(
                    s,
                    "  allocator {}: {} calls ({}), temporary {}, leaked {}",
                    a.name,
                    a.calls,
                    human_bytes(a.bytes),
                    opt_num(a.temporary),
                    human_bytes(a.leaked_bytes)
                );
            }
        }
        for why in &self.inexact {
            let _ = writeln!(s, "not exact: {why}");
        }
        for note in &self.notes {
            let _ = writeln!(s, "note: {note}");
        }
    }

    /// Each process's peak, when there are several.
    fn processes_text(&self, s: &mut String) {
        if self.processes.len() > 1 {
            let _ = writeln!(s, "\nprocesses (peak each, bytes at the trace's peak):");
            for p in &self.processes {
                let _ = writeln!(
                    s,
                    "  pid {} (generation {}): peak {} at {}, {} at the trace's peak",
                    p.pid,
                    p.generation,
                    human_bytes(p.peak_bytes),
                    human_ns(p.peak_time_ns),
                    human_bytes(p.at_trace_peak_bytes)
                );
            }
        }
    }
}

/// Row `i` (from 0): its values, what holds it, its lifetimes, its frames.
fn row_text(s: &mut String, i: usize, r: &HeapRow) {
    let mut vals = vec![
        format!("allocations {}", r.allocations),
        format!("bytes {}", r.bytes),
        format!("temporary {}", opt_num(r.temporary)),
        format!("peak_bytes {}", opt_num(r.peak_bytes)),
        format!("leaked_bytes {}", r.leaked_bytes),
    ];
    if r.held_bytes > 0 {
        vals.push(format!("held_bytes {}", r.held_bytes));
    }
    if r.allocator != "malloc" {
        vals.push(format!("allocator {}", r.allocator));
    }
    let _ = writeln!(s, "\n#{} {}", i + 1, vals.join("  "));
    if let Some(h) = &r.held_by {
        let _ = writeln!(s, "  held by: {h}");
    }
    if !r.lifetime.buckets.is_empty() {
        s.push_str(&log2_text(&r.lifetime.buckets).replacen(
            "ns (log2):",
            "lifetime, ns (log2):",
            1,
        ));
    }
    if r.lifetime.never_freed > 0 {
        let _ = writeln!(s, "    never freed: {}", r.lifetime.never_freed);
    }
    for f in &r.frames {
        let _ = writeln!(s, "    {}", f.display());
    }
}
