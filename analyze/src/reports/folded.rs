//! Folded stacks (`root;…;leaf value`), for flamegraph.pl, inferno and `ebsym diff`.
use super::kind::{EventKind, Measure};
use super::stacks::{stacks_from, Stacks};
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
pub fn folded_key(frames: &[Frame]) -> String {
    if frames.is_empty() {
        return "[no stack]".to_string();
    }
    let names: Vec<String> = frames
        .iter()
        .rev()
        .map(|f| f.function.replace(';', ":"))
        .collect();
    names.join(";")
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

/// The folded stacks of `kind` in an open trace, valued by `by`.
pub fn folded_from(trace: impl Trace, kind: EventKind, by: Measure, filter: &Filter) -> Folded {
    let st = stacks_from(trace, kind, filter);
    Folded {
        kind,
        by,
        lines: st.folded_lines(by),
        losses: st.losses,
        note: st.note,
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
        let mut lines: BTreeMap<String, u64> = BTreeMap::new();
        for s in &self.stacks {
            let v = s.value(self.kind, by);
            if v == 0 {
                continue;
            }
            *lines.entry(folded_key(&s.frames)).or_default() += v;
        }
        lines.into_iter().map(|(s, v)| format!("{s} {v}")).collect()
    }
}
