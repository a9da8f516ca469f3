//! Several reports of one trace from one pass over it: every report's sink is fed the same
//! events by one `Loaded::from_trace` ([`Passed::read`]), then each report is made from the
//! one [`Loaded`], with the losses it would have had reading the trace alone (each starts
//! from the losses of the reading; its own notes and unresolved frames are its own). What
//! `ebsym report` and `ebsym summary` read a trace with.
use super::heap::{HeapMeasure, HeapOptions, HeapReport, HeapSink, HeapTimeline};
use super::heatmap::HeatPoint;
use super::idle::IdleRules;
use super::kind::{EventKind, Measure};
use super::leaks::LeakSink;
use super::stacks::{stacks_of, Merged, StackSink, Stacks};
use super::suppress::Suppressions;
use super::system::{HistSink, PointSink, SystemLatencyReport, TcpReport, TcpSink};
use super::threads::{report_of, ThreadsReport, ThreadsSink};
use super::top::{learn_merged, top_rows, Report, Row, TopOptions};
use super::wrappers::{site_place, site_place_of_parts, Learner, WrapperRules};
use crate::hash::FastMap;
use crate::model::{Event, Filter, Loaded, Losses, Sink, Trace};
use std::collections::BTreeMap;

/// [`super::top_from`] of each of `kinds` by its default measure, the trace read once (each
/// report as `top_from` of that kind alone gives it).
pub fn tops_from(trace: impl Trace, kinds: &[EventKind], n: usize) -> Vec<(EventKind, Report)> {
    let wants = Wants {
        stacks: kinds.to_vec(),
        ..Default::default()
    };
    let mut p = Passed::read(trace, &Filter::default(), &wants, None);
    kinds
        .iter()
        .map(|&k| (k, p.top(k, k.default_measure(), n)))
        .collect()
}

/// What a pass keeps, for which reports.
#[derive(Debug, Clone, Default)]
pub(crate) struct Wants {
    /// The kinds whose stacks are merged ([`Passed::top`], [`Passed::stacks`]).
    pub stacks: Vec<EventKind>,
    /// The kinds whose kernel histograms are read ([`Passed::latency`]: syscall, bio,
    /// runq).
    pub latency: Vec<EventKind>,
    /// The TCP connections ([`Passed::tcp`]).
    pub tcp: bool,
    /// The kinds whose heat map points are kept ([`Passed::heat_points`]).
    pub heat: Vec<EventKind>,
    /// The live blocks of the allocations ([`Passed::leaks`]).
    pub leaks: bool,
    /// `ebsym heap`'s sink ([`Passed::heap`]), with the heap over time: (from start, at
    /// most buckets), buckets that widen as the events come. Its live blocks also make
    /// [`Passed::leaks`] (leave `leaks` false: one store of the live blocks).
    pub heap: Option<(u64, u64)>,
    /// Where each thread group's time goes ([`Passed::threads`]).
    pub threads: bool,
}

/// The sinks of one pass, fed every event.
struct Sinks<'a> {
    stacks: Vec<(EventKind, StackSink)>,
    hists: Vec<(EventKind, HistSink)>,
    tcp: Option<TcpSink>,
    points: Vec<(EventKind, PointSink)>,
    leaks: Option<LeakSink>,
    heap: Option<HeapSink>,
    threads: Option<ThreadsSink>,
    /// The caller's own sink (the HTML page's).
    also: Option<&'a mut dyn Sink>,
}

impl Sink for Sinks<'_> {
    fn header(&mut self, h: &ebtrace_format::proto::Header) {
        if let Some(s) = &mut self.also {
            s.header(h);
        }
        if let Some(s) = &mut self.threads {
            s.header(h);
        }
    }

    fn event(&mut self, ev: &Event<'_>) {
        if let Some(s) = &mut self.also {
            s.event(ev);
        }
        for (_, s) in &mut self.stacks {
            s.event(ev);
        }
        for (_, s) in &mut self.hists {
            s.event(ev);
        }
        if let Some(s) = &mut self.tcp {
            s.event(ev);
        }
        for (_, s) in &mut self.points {
            s.event(ev);
        }
        if let Some(s) = &mut self.leaks {
            s.event(ev);
        }
        if let Some(s) = &mut self.heap {
            s.event(ev);
        }
        if let Some(s) = &mut self.threads {
            s.event(ev);
        }
    }

    fn generation_end(&mut self, generation: u32, time_ns: u64) {
        if let Some(s) = &mut self.heap {
            s.generation_end(generation, time_ns);
        }
    }
}

/// A trace read once, and the reports it makes. Each report of [`Wants`] can be asked
/// for; the stacks of a kind are merged once, however many reports use them.
pub(crate) struct Passed {
    /// The trace as read: its tables, header, first and last events; its losses are those
    /// of the last report made.
    pub loaded: Loaded,
    /// The losses of the reading, before any report.
    read: Losses,
    filter: Filter,
    stacks: BTreeMap<EventKind, StackSink>,
    /// Merged stacks per kind, with the losses after merging them.
    merged: BTreeMap<EventKind, (Vec<Merged>, Losses)>,
    hists: BTreeMap<EventKind, HistSink>,
    latency: BTreeMap<EventKind, SystemLatencyReport>,
    tcp: Option<TcpSink>,
    tcp_report: Option<TcpReport>,
    points: BTreeMap<EventKind, PointSink>,
    leaks: Option<LeakSink>,
    heap: Option<HeapSink>,
    threads: Option<ThreadsSink>,
    threads_report: Option<ThreadsReport>,
    /// The leak report the heap report made (every row), for [`Passed::leaks`].
    heap_leaks: Option<Report>,
    /// The merged stacks' [`super::wrappers::SiteParts`], kept by merged stack id when the
    /// wrappers were learnt from `kind`'s, for [`Passed::each_merged_site`].
    site_parts: Option<(EventKind, FastMap<u64, (u32, Option<u32>)>)>,
    /// Which offcpu and lock waits [`Passed::top`] calls idle.
    pub idle: IdleRules,
    /// Which frames of an allocation's stack are allocator wrappers (the summary's alloc
    /// finding names the site past them).
    pub wrappers: WrapperRules,
}

impl Passed {
    /// Reads `trace` once, keeping what the reports `wants` says need, the events that pass
    /// `filter` also fed to `also`.
    pub(crate) fn read(
        trace: impl Trace,
        filter: &Filter,
        wants: &Wants,
        also: Option<&mut dyn Sink>,
    ) -> Passed {
        let mut sinks = Sinks {
            stacks: wants
                .stacks
                .iter()
                .map(|&k| (k, StackSink::new(k, false)))
                .collect(),
            hists: wants
                .latency
                .iter()
                .map(|&k| (k, HistSink::new(k)))
                .collect(),
            tcp: wants.tcp.then(TcpSink::default),
            points: wants.heat.iter().map(|&k| (k, PointSink::new(k))).collect(),
            leaks: wants.leaks.then(LeakSink::default),
            heap: wants.heap.map(|(t0, max)| HeapSink::with_timeline(t0, max)),
            threads: wants.threads.then(ThreadsSink::default),
            also,
        };
        let loaded = Loaded::from_trace(trace, filter, &mut sinks);
        Passed {
            read: loaded.losses.clone(),
            loaded,
            filter: filter.clone(),
            stacks: sinks.stacks.into_iter().collect(),
            merged: BTreeMap::new(),
            hists: sinks.hists.into_iter().collect(),
            latency: BTreeMap::new(),
            tcp: sinks.tcp,
            tcp_report: None,
            points: sinks.points.into_iter().collect(),
            leaks: sinks.leaks,
            heap: sinks.heap,
            threads: sinks.threads,
            threads_report: None,
            heap_leaks: None,
            site_parts: None,
            idle: IdleRules::default(),
            wrappers: WrapperRules::default(),
        }
    }

    /// The loaded trace with the losses of the reading, for a report of the caller's.
    pub(crate) fn fresh(&mut self) -> &mut Loaded {
        self.loaded.losses = self.read.clone();
        &mut self.loaded
    }

    /// Merges the stacks of `kind` once: the merged stacks and the losses after merging
    /// them, in `self.merged`.
    fn merge_once(&mut self, kind: EventKind) {
        self.merge_once_seeing(kind, None);
    }

    /// [`Passed::merge_once`], `see` shown each merged stack's frames if it merges now
    /// ([`StackSink::merge_seeing`]); false when `kind` was merged before.
    fn merge_once_seeing(
        &mut self,
        kind: EventKind,
        see: Option<&mut super::stacks::SeeFrames>,
    ) -> bool {
        if self.merged.contains_key(&kind) {
            return false;
        }
        let sink = self
            .stacks
            .remove(&kind)
            .expect("the pass kept the stacks of the kind");
        let merged = sink.merge_seeing(self.fresh(), see);
        let losses = self.loaded.losses.clone();
        self.merged.insert(kind, (merged, losses));
        true
    }

    /// The merged stacks of `kind`, and the losses after merging them.
    fn merged(&mut self, kind: EventKind) -> (Vec<Merged>, Losses) {
        self.merge_once(kind);
        self.merged[&kind].clone()
    }

    /// `top_from` of the trace: the `n` stacks of `kind` with the most `by` (the merged
    /// stacks read in place, not copied).
    pub(crate) fn top(&mut self, kind: EventKind, by: Measure, n: usize) -> Report {
        let mut rows = Vec::new();
        let mut r = self.top_rows(kind, by, n, true, &mut |row| rows.push(row));
        r.rows = rows;
        r
    }

    /// [`Passed::top`] of every row, each handed to `each` instead of kept, in no
    /// particular order: for a caller that sums them.
    pub(crate) fn top_each(&mut self, kind: EventKind, by: Measure, each: &mut dyn FnMut(Row)) {
        self.top_rows(kind, by, usize::MAX, false, each);
    }

    /// [`top_rows`] of the merged stacks of `kind`.
    fn top_rows(
        &mut self,
        kind: EventKind,
        by: Measure,
        n: usize,
        ordered: bool,
        each: &mut dyn FnMut(Row),
    ) -> Report {
        self.merge_once(kind);
        let (merged, losses) = &self.merged[&kind];
        self.loaded.losses = losses.clone();
        let opts = TopOptions {
            kind,
            by,
            filter: &self.filter,
            n,
            idle: &self.idle,
        };
        top_rows(&mut self.loaded, merged, &opts, ordered, each)
    }

    /// Each merged stack of `kind` (in no particular order): its allocation site (as
    /// [`site_place`] names it) by `wrappers`, and its sums. The site comes from what
    /// learning `wrappers` kept of the stack ([`Passed::learn_wrappers`],
    /// [`super::wrappers::SiteParts`]), else from its frames resolved again (on a
    /// compiler's trace, resolving its 125,000 merged stacks again was a twentieth of a
    /// page's time).
    pub(crate) fn each_merged_site(
        &mut self,
        kind: EventKind,
        wrappers: &WrapperRules,
        each: &mut dyn FnMut(String, &super::stacks::Agg),
    ) {
        let parts = match self.site_parts.take() {
            Some((k, parts)) if k == kind => parts,
            _ => FastMap::default(),
        };
        self.merge_once(kind);
        let (merged, losses) = &self.merged[&kind];
        self.loaded.losses = losses.clone();
        for m in merged {
            let names = &self.loaded.names;
            let site = match parts
                .get(&m.stack)
                .and_then(|&p| site_place_of_parts(wrappers, names, p))
            {
                Some(site) => site,
                None => {
                    let frames = m.frames(&mut self.loaded);
                    site_place(wrappers, &self.loaded.names.view(&frames))
                }
            };
            each(site, &m.agg);
        }
    }

    /// `w` learns the program's own allocator wrappers from every merged stack of `kind`
    /// ([`WrapperRules::learn`]).
    pub(crate) fn learn_wrappers(&mut self, kind: EventKind, w: &mut WrapperRules) {
        // Learnt while merging, from each merged stack's frames in hand (resolving every
        // merged stack again was a tenth of a page's time on a compiler's trace); from the
        // merged stacks when they were merged before.
        let mut seen = Learner::default();
        let rules = &*w;
        let mut parts = FastMap::default();
        if self.merge_once_seeing(
            kind,
            Some(&mut |names, stack, frames| {
                if let Some(p) = rules.learn_one(&mut seen, &names.view(frames)) {
                    parts.insert(stack, p);
                }
            }),
        ) {
            w.learn_from(seen);
            self.site_parts = Some((kind, parts));
        } else {
            learn_merged(&mut self.loaded, &self.merged[&kind].0, w);
        }
    }

    /// `stacks_from` of the trace: the merged stacks of `kind` with their values.
    pub(crate) fn stacks(&mut self, kind: EventKind) -> Stacks {
        let (merged, losses) = self.merged(kind);
        self.loaded.losses = losses;
        stacks_of(&mut self.loaded, kind, &self.filter, merged)
    }

    /// `system_latency_from` of the trace, every row: `ebsym latency --kind
    /// syscall|bio|runq`.
    pub(crate) fn latency(&mut self, kind: EventKind) -> &SystemLatencyReport {
        if !self.latency.contains_key(&kind) {
            let sink = self
                .hists
                .remove(&kind)
                .expect("the pass kept the histograms of the kind");
            let filter = self.filter.clone();
            let report = sink.report(self.fresh(), kind, &filter, usize::MAX);
            self.latency.insert(kind, report);
        }
        &self.latency[&kind]
    }

    /// `tcp_from` of the trace.
    pub(crate) fn tcp(&mut self) -> &TcpReport {
        if self.tcp_report.is_none() {
            let sink = self.tcp.take().expect("the pass kept the connections");
            let filter = self.filter.clone();
            self.tcp_report = Some(sink.report(self.fresh(), &filter));
        }
        self.tcp_report.as_ref().unwrap()
    }

    /// `threads_from` of the trace: where each thread group's time goes.
    pub(crate) fn threads(&mut self) -> &ThreadsReport {
        if self.threads_report.is_none() {
            let sink = self.threads.take().expect("the pass kept the threads");
            self.threads_report = Some(report_of(sink, self.fresh()));
        }
        self.threads_report.as_ref().unwrap()
    }

    /// `heat_points` of the trace (once).
    pub(crate) fn heat_points(&mut self, kind: EventKind) -> Vec<HeatPoint> {
        self.points
            .remove(&kind)
            .expect("the pass kept the heat map's points of the kind (once)")
            .points()
    }

    /// `leaks_with` of the trace (once): of its own sink, or the one the heap report
    /// made ([`Passed::heap`] first).
    pub(crate) fn leaks(&mut self, n: usize, rules: &Suppressions) -> Report {
        if let Some(mut r) = self.heap_leaks.take() {
            r.rows.truncate(n);
            return r;
        }
        let sink = self
            .leaks
            .take()
            .expect("the pass kept the live blocks (once)");
        let filter = self.filter.clone();
        sink.report(self.fresh(), &filter, n, rules)
    }

    /// `heap_with` of the trace (once, its first `n` rows), and the heap over time; the
    /// leak report it classified the blocks with (its first `leak_n` rows) is kept for
    /// [`Passed::leaks`] (with the same `rules`).
    pub(crate) fn heap(
        &mut self,
        by: HeapMeasure,
        rules: &Suppressions,
        n: usize,
        leak_n: usize,
    ) -> (HeapReport, Option<HeapTimeline>) {
        let mut sink = self.heap.take().expect("the pass kept the heap (once)");
        sink.finish();
        let timeline = sink.take_timeline();
        let filter = self.filter.clone();
        let query = HeapOptions {
            filter: &filter,
            by,
            n,
            leak_n,
            rules,
        };
        let (report, leaks) = sink.report_and_leaks(self.fresh(), &query);
        self.heap_leaks = Some(leaks);
        (report, timeline)
    }
}
