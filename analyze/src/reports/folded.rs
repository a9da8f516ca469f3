//! Folded stacks (`root;…;leaf value`), for flamegraph.pl, inferno and `ebsym diff`.
use super::kind::{EventKind, Measure};
use super::stacks::{merge, Stacks};
use super::text::empty_note;
use crate::model::{Filter, Frame, Losses, Trace};
use ebtrace_format::TraceReader;
use std::collections::BTreeMap;
use std::path::Path;

/// Folded stacks and what a report says with them.
#[derive(Debug)]
pub struct Folded {
    /// What was folded, and by what.
    pub kind: EventKind,
    pub by: Measure,
    /// `root;…;leaf value`, sorted.
    pub lines: Vec<String>,
    pub losses: Losses,
    /// Set when there was no event to fold: why.
    pub note: Option<String>,
}

/// The folded key of `frames` (leaf first): function names root to leaf, `;`-separated.
pub fn folded_key<F: std::borrow::Borrow<Frame>>(frames: &[F]) -> String {
    folded_key_of(frames.iter().map(|f| f.borrow().function.as_str()))
}

/// [`folded_key`] of the frames' function names (leaf first).
fn folded_key_of<'a>(functions: impl DoubleEndedIterator<Item = &'a str>) -> String {
    let mut key = String::new();
    let mut any = false;
    for f in functions.rev() {
        if any {
            key.push(';');
        }
        any = true;
        key.push_str(&f.replace(';', ":"));
    }
    if !any {
        return "[no stack]".to_string();
    }
    key
}

/// [`folded_from`] of the trace at `path`, `by` a measure's name (the kind's default if
/// it names none).
pub fn folded(
    path: &Path,
    kind: EventKind,
    by: &str,
    filter: &Filter,
) -> Result<Folded, ebtrace_format::Error> {
    let trace = TraceReader::open(path)?;
    Ok(folded_from(
        trace,
        kind,
        kind.measure_or_default(by),
        filter,
    ))
}

/// The folded stacks of `kind` in an open trace, valued by `by`: the merged stacks folded
/// one at a time from their interned frames (no stack's frames held as strings: the same
/// lines as [`Stacks::folded`] of [`super::stacks::stacks_from`]).
pub fn folded_from(trace: impl Trace, kind: EventKind, by: Measure, filter: &Filter) -> Folded {
    let (mut l, merged) = merge(trace, kind, filter, false);
    let note = merged
        .is_empty()
        .then(|| empty_note(kind.name(), filter, &l.losses));
    let lines = fold(merged.iter().filter_map(|m| {
        let v = by.pick(kind, m.agg.count, m.agg.a, m.agg.b);
        (v > 0).then(|| {
            let frames = m.frames(&mut l);
            (
                folded_key_of(frames.iter().map(|f| l.names.get(f.function))),
                v,
            )
        })
    }));
    Folded {
        kind,
        by,
        lines,
        losses: l.losses,
        note,
    }
}

impl Stacks {
    /// The folded stacks of these stacks, valued by `by`.
    pub fn folded(&self, by: Measure) -> Folded {
        Folded {
            kind: self.kind,
            by,
            lines: self.folded_lines(by),
            losses: self.losses.clone(),
            note: self.note.clone(),
        }
    }

    /// `root;…;leaf value` of every stack with a value, sorted; stacks that fold alike
    /// summed.
    fn folded_lines(&self, by: Measure) -> Vec<String> {
        fold(self.stacks.iter().filter_map(|s| {
            let v = s.value(self.kind, by);
            (v > 0).then(|| (folded_key(&s.frames), v))
        }))
    }
}

/// `key value` lines of (folded key, value) pairs, keys that fold alike summed, sorted.
fn fold(stacks: impl Iterator<Item = (String, u64)>) -> Vec<String> {
    let mut lines: BTreeMap<String, u64> = BTreeMap::new();
    for (key, v) in stacks {
        *lines.entry(key).or_default() += v;
    }
    lines.into_iter().map(|(s, v)| format!("{s} {v}")).collect()
}
