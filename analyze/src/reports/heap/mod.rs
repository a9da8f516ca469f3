//! `ebsym heap`: heaptrack's numbers from one pass over a trace's allocations and frees:
//! allocator calls, temporary allocations, the peak of live bytes and who held it, leaked
//! bytes (as `leaks` classifies them) and a lifetime histogram per stack.
//!
//! Allocations and frees are in the file batch by batch, each batch's allocations before its
//! frees, so a free can be read after a later allocation. Temporary allocations and the peak
//! depend on the order of events, so the sink puts them back in time order: allocations and
//! frees wait in two queues (each sorted as it is filled; the recorder writes them nearly
//! sorted) and are taken in (time, arrival) order up to a watermark, the older of the latest
//! allocation and the latest free read, less [`SLACK_NS`]; a bounded queue ([`MAX_PENDING`])
//! keeps the memory bounded by the live blocks and a window of events, not by the events.
//!
//! Temporary (heaptrack's `lastAllocationPtr == ptr`): a free is temporary when the event
//! just before it in its process, in time order, is the allocation of the same block: no
//! other allocation or free in between, of any thread.
//!
//! The peak is the most bytes live at once: per process generation, and over the whole
//! trace (the sum of every live generation's bytes; a generation's blocks are gone when it
//! exits or execs). A row's `peak_bytes` is its stack's bytes live at the moment of the
//! trace's peak, kept in O(1) per event: each stack remembers its live bytes at the peak it
//! last saw, and a stack changed after a later peak takes its current bytes first (a stack
//! not changed since the peak held then what it holds now).
//!
//! One file per job: `order` (the queues that put events back in time order), `sink` (the
//! `HeapSink` that reads the events and takes them in that order), `take` (one event
//! taken: the calls, temporary allocations, lifetimes and the peak), `stats` (what each
//! stack and each generation has had), `timeline` (the heap over time, for `ebsym
//! report`), `caveats` (what the recording's options say about the numbers), `leaked`
//! (the blocks never freed, as `leaks` classifies them), `rows` (stacks merged into rows,
//! the allocators' shares, the processes), `options` (what a report is asked for),
//! `assemble` (the report from a finished sink), `report` (the JSON) and `text` (the
//! report for people).
mod assemble;
mod caveats;
mod leaked;
mod options;
mod order;
mod report;
mod rows;
mod sink;
mod stats;
mod take;
#[cfg(test)]
mod tests;
mod text;
mod timeline;

pub(crate) use options::HeapOptions;
pub use order::{MAX_PENDING, SLACK_NS};
pub use report::{
    HeapAllocator, HeapMeasure, HeapProcess, HeapReport, HeapRow, HeapTotals, Lifetime,
};
pub(crate) use sink::HeapSink;
pub(crate) use timeline::HeapTimeline;

use crate::model::{Filter, Loaded, Trace};
use crate::reports::suppress::Suppressions;

/// [`heap_with`] with the runtime's rules for what is held by design.
pub fn heap_from(trace: impl Trace, filter: &Filter, by: HeapMeasure, n: usize) -> HeapReport {
    heap_with(trace, filter, by, n, &Suppressions::runtime())
}

/// `ebsym heap` of an open trace: the totals, each generation's peak, and the `n` stacks
/// with the most `by`; `rules` say which blocks never freed are held by design.
pub fn heap_with(
    trace: impl Trace,
    filter: &Filter,
    by: HeapMeasure,
    n: usize,
    rules: &Suppressions,
) -> HeapReport {
    let mut sink = HeapSink::default();
    let mut l = Loaded::from_trace(trace, filter, &mut sink);
    sink.finish();
    let opts = HeapOptions {
        filter,
        by,
        n,
        leak_n: 0,
        rules,
    };
    sink.report_and_leaks(&mut l, &opts).0
}
