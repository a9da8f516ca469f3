//! The heap report from a finished sink: its caveats, the leak report's classification of
//! the blocks never freed, the rows, the processes and the totals.
use super::caveats::Caveats;
use super::leaked::Leaked;
use super::options::{HeapOptions, Known};
use super::report::{HeapReport, HeapTotals};
use super::sink::HeapSink;
use crate::model::Loaded;
use crate::reports::text::empty_note;
use crate::reports::top::Report;

impl HeapSink {
    /// The report, and the leak report (every row) it classified the blocks never freed
    /// with: `ebsym report` shows both from one sink.
    pub(crate) fn report_and_leaks(
        mut self,
        l: &mut Loaded,
        q: &HeapOptions,
    ) -> (HeapReport, Report) {
        let Caveats {
            inexact,
            mut notes,
            all_seen,
            no_free,
        } = self.caveats(l);
        let has_peak = self.aggregated == 0 && !no_free && self.alloc_events > 0;
        let known = Known {
            peak: has_peak,
            temporary: all_seen && has_peak,
        };
        let mut leaked = self.leaked(l, q);
        let (rows, allocators) = self.rows(l, &mut leaked, known, q);
        let processes = self.processes(l);
        let totals = self.totals(l, &leaked, known, no_free);
        if self.alloc_events == 0 {
            notes.insert(0, empty_note("alloc", q.filter, &l.losses));
        }
        let report = HeapReport {
            kind: "heap",
            by: q.by,
            exact: inexact.is_empty() && self.aggregated == 0,
            inexact,
            totals,
            allocators,
            processes,
            rows,
            losses: l.losses.clone(),
            notes,
        };
        (report, leaked.report)
    }

    /// The whole trace's numbers: what `known` says the trace can give, and the leaked and
    /// held bytes unless frees were not tracked.
    fn totals(&self, l: &Loaded, leaked: &Leaked, known: Known, no_free: bool) -> HeapTotals {
        let start = l.header.start_time_ns;
        HeapTotals {
            calls: self.calls,
            bytes: self.bytes,
            frees: self.frees_seen,
            temporary: known.temporary.then_some(self.temporary),
            peak_bytes: known.peak.then_some(self.peak),
            peak_time_ns: known.peak.then(|| self.peak_time.saturating_sub(start)),
            leaked_bytes: (!no_free).then(|| leaked.total("bytes")),
            leaked_count: (!no_free).then(|| leaked.total("count")),
            held_bytes: (!no_free).then(|| leaked.total("held_bytes")),
            held_count: (!no_free).then(|| leaked.total("held_count")),
        }
    }
}
