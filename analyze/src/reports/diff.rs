//! `ebsym diff`: per folded stack, its value in two traces, sorted by how much it changed.
use super::folded::folded_key;
use super::kind::{EventKind, Measure};
use super::stacks::{stacks_from, Stacks};
use super::text::losses_text;
use crate::interned::SharedFrame;
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
    /// Every folded stack of either side, sorted, with its value before and after: what
    /// [`DiffReport::folded_before`] and `folded_after` print.
    #[serde(skip)]
    pub folded: Vec<(String, u64, u64)>,
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
/// rows that changed most. Every stack is held as its folded key and shared frames; only
/// the rows kept get frames of their own.
pub fn diff_stacks(b: Stacks, a: Stacks, by: Measure, n: usize) -> DiffReport {
    let kind = b.kind;
    // folded key -> (before, after, frames)
    let mut by_key: BTreeMap<String, (u64, u64, Vec<SharedFrame>)> = BTreeMap::new();
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
    let (mut tb, mut ta) = (0u64, 0u64);
    let mut folded = Vec::with_capacity(by_key.len());
    let mut frames = Vec::with_capacity(by_key.len());
    for (k, (before, after, f)) in by_key {
        tb += before;
        ta += after;
        folded.push((k, before, after));
        frames.push(f);
    }
    // By how much each changed, grown first among equals, then by the folded key (the
    // order of `folded`).
    let delta = |i: usize| folded[i].2 as i64 - folded[i].1 as i64;
    let mut order: Vec<usize> = (0..folded.len()).collect();
    order.sort_by(|&x, &y| {
        delta(y)
            .unsigned_abs()
            .cmp(&delta(x).unsigned_abs())
            .then_with(|| delta(y).cmp(&delta(x)))
            .then_with(|| x.cmp(&y))
    });
    let rows = order
        .into_iter()
        .take(n)
        .map(|i| DiffRow {
            before: folded[i].1,
            after: folded[i].2,
            delta: delta(i),
            frames: Some(frames[i].iter().map(|f| Frame::clone(f)).collect()),
        })
        .collect();
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
        rows,
        losses_before: b.losses,
        losses_after: a.losses,
        notes,
        folded,
    }
}

impl DiffReport {
    /// `root;…;leaf value` of the stacks with a value before, sorted (for
    /// [`super::diff_flamegraph`]).
    pub fn folded_before(&self) -> Vec<String> {
        self.folded_side(|f| f.1)
    }

    /// [`DiffReport::folded_before`] of the after side.
    pub fn folded_after(&self) -> Vec<String> {
        self.folded_side(|f| f.2)
    }

    fn folded_side(&self, value: impl Fn(&(String, u64, u64)) -> u64) -> Vec<String> {
        self.folded
            .iter()
            .filter(|f| value(f) > 0)
            .map(|f| format!("{} {}", f.0, value(f)))
            .collect()
    }

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
