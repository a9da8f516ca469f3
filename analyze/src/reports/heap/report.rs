//! What `ebsym heap` prints as JSON: the report, its totals, allocators, processes and
//! rows, and the measures rows are sorted by.
use crate::histogram::Log2Bin;
use crate::model::Losses;
use serde::Serialize;

/// The allocation measures `ebsym heap --by` sorts rows by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HeapMeasure {
    /// Allocator calls (heaptrack_print's first table: the default).
    Allocations,
    /// Bytes allocated.
    Bytes,
    /// Temporary allocations.
    Temporary,
    /// Bytes live at the trace's peak.
    Peak,
    /// Bytes leaked (to act on).
    Leaked,
}

impl HeapMeasure {
    /// Every measure, by name, default first.
    pub const ALL: [(&'static str, HeapMeasure); 5] = [
        ("allocations", HeapMeasure::Allocations),
        ("bytes", HeapMeasure::Bytes),
        ("temporary", HeapMeasure::Temporary),
        ("peak", HeapMeasure::Peak),
        ("leaked", HeapMeasure::Leaked),
    ];

    pub fn parse(s: &str) -> Option<HeapMeasure> {
        Self::ALL.iter().find(|(n, _)| *n == s).map(|&(_, m)| m)
    }

    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, m)| *m == self)
            .map_or("", |(n, _)| n)
    }

    pub(super) fn pick(self, r: &HeapRow) -> u64 {
        match self {
            HeapMeasure::Allocations => r.allocations,
            HeapMeasure::Bytes => r.bytes,
            HeapMeasure::Temporary => r.temporary.unwrap_or(0),
            HeapMeasure::Peak => r.peak_bytes.unwrap_or(0),
            HeapMeasure::Leaked => r.leaked_bytes,
        }
    }
}

/// The whole trace's numbers. `None` (null) where the trace cannot say (see
/// [`HeapReport::exact`] and the notes).
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct HeapTotals {
    /// Allocator calls that returned a block (realloc included, as heaptrack counts them).
    pub calls: u64,
    /// Bytes those calls asked for.
    pub bytes: u64,
    /// Traced blocks seen freed.
    pub frees: u64,
    /// Allocations freed with no other allocation or free of their process in between.
    pub temporary: Option<u64>,
    /// The most bytes live at once over the trace (all processes together).
    pub peak_bytes: Option<u64>,
    /// When: ns since the recording started.
    pub peak_time_ns: Option<u64>,
    /// Bytes never freed, to act on (`leaks`' `bytes`).
    pub leaked_bytes: Option<u64>,
    pub leaked_count: Option<u64>,
    /// Bytes never freed that the runtime (or a --suppress rule) holds by design (`leaks`'
    /// `held_bytes`).
    pub held_bytes: Option<u64>,
    pub held_count: Option<u64>,
}

/// One process generation's peak.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct HeapProcess {
    pub generation: u32,
    pub pid: u32,
    /// The most bytes this generation had live at once, and when (ns since the recording
    /// started).
    pub peak_bytes: u64,
    pub peak_time_ns: u64,
    /// Its bytes live at the trace's peak.
    pub at_trace_peak_bytes: u64,
}

/// Block lifetimes under one stack: log2 buckets of ns from allocation to free, and the
/// blocks never freed.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Lifetime {
    pub buckets: Vec<Log2Bin>,
    pub never_freed: u64,
}

/// One allocator's share of the totals: malloc's family, or a custom allocator of
/// `ebrec record --alloc-fn` (its blocks are often inside blocks malloc gave it, so its
/// bytes are counted in malloc's too).
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct HeapAllocator {
    /// "malloc", or the NAME of `--alloc-fn NAME:SIZE_ARG[:FREE_NAME]`.
    pub name: String,
    pub calls: u64,
    pub bytes: u64,
    pub temporary: Option<u64>,
    pub leaked_bytes: u64,
}

/// One stack of `ebsym heap`.
#[derive(Debug, Clone, Serialize)]
pub struct HeapRow {
    /// Whose allocations: "malloc" (the system allocator) or a `--alloc-fn` NAME.
    pub allocator: String,
    pub allocations: u64,
    pub bytes: u64,
    /// Shared with the rows that show the same frames (a profile holds every row).
    #[serde(serialize_with = "crate::reports::top::sorted_frames")]
    pub frames: Vec<crate::interned::SharedFrame>,
    /// Bytes never freed that the runtime (or a --suppress rule) holds by design.
    pub held_bytes: u64,
    /// What holds them, as `leaks` says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_by: Option<String>,
    /// Bytes never freed, to act on.
    pub leaked_bytes: u64,
    pub lifetime: Lifetime,
    /// Bytes of this stack live at the trace's peak.
    pub peak_bytes: Option<u64>,
    pub temporary: Option<u64>,
}

/// `ebsym heap`'s report.
#[derive(Debug, Serialize)]
pub struct HeapReport {
    /// "heap".
    pub kind: &'static str,
    pub by: HeapMeasure,
    /// Whether every allocator call is counted as it was (no sampling estimate, no
    /// threshold, no loss, no pause): heaptrack's exact counts. When false, `inexact` says
    /// why, and the numbers are estimates or lower bounds.
    pub exact: bool,
    pub inexact: Vec<String>,
    pub totals: HeapTotals,
    /// The totals per allocator: "malloc" first, then each `--alloc-fn` in its order. The
    /// totals above are their sums.
    pub allocators: Vec<HeapAllocator>,
    /// Each process generation with allocations, largest peak first.
    pub processes: Vec<HeapProcess>,
    pub rows: Vec<HeapRow>,
    pub losses: Losses,
    /// What the report could not do, and why (events put in order late, frees of blocks
    /// not seen allocated, no frees recorded, …).
    pub notes: Vec<String>,
}

impl HeapReport {
    /// `root;…;leaf value` of every row with a non-zero `by` (rows that fold alike summed),
    /// sorted: the folded stacks of a heap measure, for `ebsym folded` and `flamegraph
    /// --by temporary|peak|leaked`. Complete only when the report kept every row.
    pub fn folded_lines(&self, by: HeapMeasure) -> Vec<String> {
        let mut lines: std::collections::BTreeMap<String, u64> = Default::default();
        for r in &self.rows {
            let v = by.pick(r);
            if v > 0 {
                *lines
                    .entry(crate::reports::folded::folded_key(&r.frames))
                    .or_default() += v;
            }
        }
        lines.into_iter().map(|(s, v)| format!("{s} {v}")).collect()
    }
}
