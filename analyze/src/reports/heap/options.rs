//! What a heap report is asked for, and what the trace lets it say.
use super::report::HeapMeasure;
use crate::model::Filter;
use crate::reports::suppress::Suppressions;

/// What a heap report is asked for: the filter the trace was read with, the measure its
/// rows are sorted by and how many it keeps, the rows kept of the leak report it
/// classifies the blocks never freed with, and the rules for which are held by design.
#[derive(Clone, Copy)]
pub(crate) struct HeapOptions<'a> {
    pub(crate) filter: &'a Filter,
    pub(crate) by: HeapMeasure,
    pub(crate) n: usize,
    pub(crate) leak_n: usize,
    pub(crate) rules: &'a Suppressions,
}

/// Which of the measures that need every event in order the trace can give: the peak
/// (and each stack's bytes at it), and temporary allocations (`None` in the report when
/// not).
#[derive(Debug, Clone, Copy)]
pub(super) struct Known {
    pub(super) peak: bool,
    pub(super) temporary: bool,
}
