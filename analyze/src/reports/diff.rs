//! `ebsym diff`: per folded stack, its value in two traces, sorted by how much it changed.
use super::folded::folded_key;
use super::kind::{EventKind, Measure};
use super::stacks::{stacks_from, Stacks};
use super::text::losses_text;
use crate::model::{Filter, Frame, Losses, Trace};
use ebtrace_format::TraceReader;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// `ebsym diff`: per folded stack, its value before and after, sorted by how much it
/// changed.
///
/// JSON: `{"kind", "by", "totals": {"before", "after", "delta"}, "rows": [{"before",
/// "after", "delta", "frames"}], "losses_before", "losses_after", "notes"}`, frames leaf
/// first (from the after trace when the stack is in both).
#[derive(Debug, Serialize)]
pub struct DiffReport {
    pub kind: String,
    pub by: Measure,
    pub totals: DiffRow,
    pub rows: Vec<DiffRow>,
    pub losses_before: Losses,
    pub losses_after: Losses,
    /// Why a side has no rows (no events of the kind, lost events).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The folded stacks of both sides, for [`super::diff_flamegraph`].
    #[serde(skip)]
    pub folded_before: Vec<String>,
    #[serde(skip)]
    pub folded_after: Vec<String>,
}

#[derive(Debug, Serialize, Clone)]
pub struct DiffRow {
    pub before: u64,
    pub after: u64,
    pub delta: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frames: Option<Vec<Frame>>,
}

/// Which stacks a diff compares: those of `kind` read through `filter`; it keeps the `n`
/// rows that changed most.
#[derive(Debug, Clone, Copy)]
pub struct DiffOptions<'a> {
    pub kind: EventKind,
    pub filter: &'a Filter,
    pub n: usize,
}

/// [`diff_from`] of the traces at `before` and `after`, `by` a measure's name (the
/// kind's default if it names none).
pub fn diff(
    before: &Path,
    after: &Path,
    by: &str,
    opts: &DiffOptions,
) -> Result<DiffReport, ebtrace_format::Error> {
    let (b, a) = (TraceReader::open(before)?, TraceReader::open(after)?);
    Ok(diff_from(b, a, opts.kind.measure_or_default(by), opts))
}

/// Compares the `opts.kind` stacks of two open traces by `by`; keeps the `opts.n` rows
/// that changed most.
pub fn diff_from(
    before: impl Trace,
    after: impl Trace,
    by: Measure,
    opts: &DiffOptions,
) -> DiffReport {
    let b = stacks_from(before, opts.kind, opts.filter);
    let a = stacks_from(after, opts.kind, opts.filter);
    diff_stacks(b, a, by, opts.n)
}

/// Compares two sets of stacks of one kind (of `before`'s kind) by `by`; keeps the `n`
/// rows that changed most.
pub fn diff_stacks(b: Stacks, a: Stacks, by: Measure, n: usize) -> DiffReport {
    let kind = b.kind;
    // folded key -> (before, after, frames)
    let mut by_key: BTreeMap<String, (u64, u64, Vec<Frame>)> = BTreeMap::new();
    for (side, st) in [(0, &b), (1, &a)] {
        for s in &st.stacks {
            let v = s.value(kind, by);
            if v == 0 {
                continue;
            }
            let e = by_key
                .entry(folded_key(&s.frames))
                .or_insert_with(|| (0, 0, s.frames.clone()));
            if side == 0 {
                e.0 += v;
            } else {
                if e.1 == 0 {
                    e.2 = s.frames.clone();
                }
                e.1 += v;
            }
        }
    }
    let fold = |i: usize| -> Vec<String> {
        by_key
            .iter()
            .map(|(k, v)| (k, if i == 0 { v.0 } else { v.1 }))
            .filter(|(_, v)| *v > 0)
            .map(|(k, v)| format!("{k} {v}"))
            .collect()
    };
    let (folded_before, folded_after) = (fold(0), fold(1));
    let (mut tb, mut ta) = (0u64, 0u64);
    let mut rows: Vec<(String, DiffRow)> = by_key
        .into_iter()
        .map(|(k, (before, after, frames))| {
            tb += before;
            ta += after;
            (
                k,
                DiffRow {
                    before,
                    after,
                    delta: after as i64 - before as i64,
                    frames: Some(frames),
                },
            )
        })
        .collect();
    rows.sort_by(|x, y| {
        y.1.delta
            .unsigned_abs()
            .cmp(&x.1.delta.unsigned_abs())
            .then_with(|| y.1.delta.cmp(&x.1.delta))
            .then_with(|| x.0.cmp(&y.0))
    });
    let notes = [("before", b.note), ("after", a.note)]
        .into_iter()
        .filter_map(|(side, note)| note.map(|n| format!("{side}: {n}")))
        .collect();
    DiffReport {
        kind: kind.name().into(),
        by,
        totals: DiffRow {
            before: tb,
            after: ta,
            delta: ta as i64 - tb as i64,
            frames: None,
        },
        rows: rows.into_iter().take(n).map(|r| r.1).collect(),
        losses_before: b.losses,
        losses_after: a.losses,
        notes,
        folded_before,
        folded_after,
    }
}

impl DiffReport {
    /// The diff for people.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let t = &self.totals;
        let _ = writeln!(
            s,
            "{} by {}: before {}, after {}, delta {:+}",
            self.kind, self.by, t.before, t.after, t.delta
        );
        for n in &self.notes {
            let _ = writeln!(s, "{n}");
        }
        for (i, r) in self.rows.iter().enumerate() {
            let _ = writeln!(
                s,
                "\n#{} delta {:+}  before {}  after {}",
                i + 1,
                r.delta,
                r.before,
                r.after
            );
            for f in r.frames.iter().flatten() {
                let _ = writeln!(s, "    {}", f.display());
            }
        }
        let _ = write!(s, "\nbefore:");
        s.push_str(&losses_text(&self.losses_before));
        let _ = write!(s, "\nafter:");
        s.push_str(&losses_text(&self.losses_after));
        s
    }
}
