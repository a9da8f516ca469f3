//! `ebsym leaks`: allocations never freed, grouped by stack (the live blocks are kept by
//! `live.rs` while the trace streams by).
use super::kind::Measure;
use super::live::Outstanding;
use super::stacks::{frame_key, FrameKey};
use super::suppress::Suppressions;
use super::text::empty_note;
use super::top::{LeakRow, Report, Row};
use crate::model::{Estimator, Event, Filter, Frame, Loaded, Sink, Trace};
use ebtrace_format::TraceReader;
use std::collections::BTreeMap;
use std::path::Path;

/// What the leak report keeps while the trace streams by: the live blocks, the last time
/// seen and the allocations counted.
#[derive(Default)]
pub(crate) struct LeakSink {
    /// The live blocks and, with --aggregate, the last live gauges per (stack,
    /// generation) with the start of the first interval they were non-zero in (the oldest
    /// block is at least that old).
    live: Outstanding,
    last_ns: u64,
    allocs: u64,
}

impl Sink for LeakSink {
    #[inline]
    fn event(&mut self, ev: &Event<'_>) {
        match ev {
            Event::Alloc(e) => {
                self.allocs += 1;
                self.last_ns = self.last_ns.max(e.time_ns);
            }
            Event::Aggregated(ebtrace_format::proto::EventFamily::Alloc, r) => {
                self.allocs += r.count;
                self.last_ns = self.last_ns.max(r.time_ns);
            }
            // Frees come in their own batches, possibly after a later allocation at the
            // same address was stored: the latest allocation made before it is freed.
            Event::Free(e) => self.last_ns = self.last_ns.max(e.time_ns),
            _ => return,
        }
        self.live.event(ev);
    }
}

/// [`leaks_from`] of the trace at `path`.
pub fn leaks(path: &Path, filter: &Filter, n: usize) -> Result<Report, ebtrace_format::Error> {
    Ok(leaks_from(TraceReader::open(path)?, filter, n))
}

/// `ebsym leaks` of an open trace: allocations never freed before the end of the
/// recording or the exit of their process, grouped by stack; the `n` with the most bytes,
/// what the C/C++ runtime keeps by design set apart ([`Suppressions::runtime`]).
pub fn leaks_from(trace: impl Trace, filter: &Filter, n: usize) -> Report {
    leaks_with(trace, filter, n, &Suppressions::runtime())
}

/// [`leaks_from`] with `rules` saying which blocks are held by design: the leaks to act on
/// first (largest first), then the held ones; the totals `count` and `bytes` are the leaks',
/// `held_count` and `held_bytes` the held blocks'.
pub fn leaks_with(trace: impl Trace, filter: &Filter, n: usize, rules: &Suppressions) -> Report {
    let mut sink = LeakSink::default();
    let mut l = Loaded::from_trace(trace, filter, &mut sink);
    sink.report(&mut l, filter, n, rules)
}

impl LeakSink {
    /// A sink that already holds `live`, the last event time `last_ns` and `allocs`
    /// allocations counted: `ebsym heap` keeps the blocks itself and asks the leak report
    /// for its classification of what is left.
    pub(crate) fn from_parts(live: Outstanding, last_ns: u64, allocs: u64) -> Self {
        LeakSink {
            live,
            last_ns,
            allocs,
        }
    }

    /// The leak report of what the sink kept from the trace `l` was read into.
    pub(crate) fn report(
        self,
        l: &mut Loaded,
        filter: &Filter,
        n: usize,
        rules: &Suppressions,
    ) -> Report {
        let sink = self;
        // (stack, generation) -> (count, bytes, oldest time)
        let mut by: BTreeMap<(u64, u32), (u64, u64, u64)> = BTreeMap::new();
        let mut est = Estimator::default();
        // A block allocated before a pause of the allocator probes (--max-cpu) may have been
        // freed while they were off: set aside, not called a leak.
        let mut uncertain = (0u64, 0u64);
        for (generation, b) in sink.live.blocks() {
            if l.alloc_pauses.iter().any(|&(start, _)| b.time < start) {
                let (c, bytes) = est.add(b.size, b.period);
                uncertain.0 += c;
                uncertain.1 += bytes;
                continue;
            }
            let e = by.entry((b.stack, generation)).or_insert((0, 0, u64::MAX));
            let (count, bytes) = est.add(b.size, b.period);
            e.0 += count;
            e.1 += bytes;
            e.2 = e.2.min(b.time);
        }
        for (&key, &(count, bytes, since)) in sink.live.gauges() {
            if count == 0 {
                continue;
            }
            // Blocks counted before a pause may have been freed while it lasted.
            if l.alloc_pauses.iter().any(|&(start, _)| since < start) {
                uncertain.0 += count;
                uncertain.1 += bytes;
                continue;
            }
            let e = by.entry(key).or_insert((0, 0, u64::MAX));
            e.0 += count;
            e.1 += bytes;
            e.2 = e.2.min(since);
        }
        // (frames, alive, allocator) -> (frames, count, bytes, oldest time)
        type Group = (Vec<Frame>, u64, u64, u64);
        let mut merged: BTreeMap<(FrameKey, bool, u32), Group> = BTreeMap::new();
        for ((stack, generation), (count, bytes, oldest)) in by {
            let alive = l
                .tables
                .generations
                .get(&generation)
                .is_some_and(|g| g.exit.is_none());
            let frames = l.frames(stack);
            let e = merged
                .entry((frame_key(&frames), alive, sink.live.allocator_of(stack)))
                .or_insert((frames, 0, 0, u64::MAX));
            e.1 += count;
            e.2 += bytes;
            e.3 = e.3.min(oldest);
        }
        let mut totals: BTreeMap<String, u64> = BTreeMap::new();
        type Shown = (Option<String>, bool, Vec<Frame>, u64, u64, u64, u32);
        let mut rows: Vec<Shown> = merged
            .into_iter()
            .map(|((_, alive, allocator), (frames, count, bytes, oldest))| {
                let held = rules.held_by(&frames);
                let (c, b) = if held.is_some() {
                    ("held_count", "held_bytes")
                } else {
                    ("count", "bytes")
                };
                *totals.entry(c.to_string()).or_default() += count;
                *totals.entry(b.to_string()).or_default() += bytes;
                (held, alive, frames, count, bytes, oldest, allocator)
            })
            .collect();
        if !rows.is_empty() {
            totals.entry("count".to_string()).or_default();
            totals.entry("bytes".to_string()).or_default();
        }
        // The leaks to act on first, then the held blocks; largest first; ties in a fixed
        // order. Only the rows shown are rendered.
        rows.sort_by(|a, b| {
            a.0.is_some()
                .cmp(&b.0.is_some())
                .then_with(|| b.4.cmp(&a.4))
                .then_with(|| a.2.cmp(&b.2))
                .then_with(|| a.1.cmp(&b.1))
                .then_with(|| a.0.cmp(&b.0))
        });
        let names = super::live::allocator_names(&l.header);
        let rows: Vec<Row> = rows
            .into_iter()
            .take(n)
            .map(
                |(held_by, alive, frames, count, bytes, oldest, allocator)| {
                    Row::Leak(LeakRow {
                        allocator: super::live::allocator_name(&names, allocator),
                        alive,
                        bytes,
                        count,
                        frames,
                        held_by,
                        oldest_ns: sink.last_ns.saturating_sub(oldest),
                    })
                },
            )
            .collect();
        if uncertain.0 > 0 {
            l.losses.damage.push(format!(
            "the allocator probes were paused {} time(s) by --max-cpu: {} blocks ({} bytes) allocated before a pause and not seen freed are left out, as their free may have come while paused",
            l.alloc_pauses.len(),
            uncertain.0,
            uncertain.1
        ));
        }
        if l.losses.recorded.keys().any(|k| k.starts_with("free/")) {
            l.losses.damage.push(
                "frees were lost while recording: some blocks shown may have been freed".into(),
            );
        }
        // --no-free: no free was seen, so every block would look leaked.
        let no_free = l
            .header
            .options
            .iter()
            .any(|o| o.key == "no-free" && o.value == "true");
        let (rows, totals) = if no_free {
            (Vec::new(), BTreeMap::new())
        } else {
            (rows, totals)
        };
        let note = if no_free {
            Some(format!(
            "no leak report: the recording did not track frees (--no-free); its {} allocations are in `ebsym top --kind alloc`",
            sink.allocs
        ))
        } else if sink.allocs == 0 {
            Some(empty_note("alloc", filter, &l.losses))
        } else if totals.is_empty() {
            Some(format!(
                "no leaks: all {} traced allocations{} were freed",
                sink.allocs,
                if filter.is_empty() {
                    ""
                } else {
                    " that match the filters"
                }
            ))
        } else {
            None
        };
        Report {
            kind: "leaks".into(),
            by: Measure::Bytes,
            totals,
            losses: l.losses.clone(),
            rows,
            histograms: Vec::new(),
            note,
        }
    }
}
