//! `ebsym latency --kind usdt`: the exact latency of each USDT start/done pair (the
//! recording's `ProbedUsdt.done`: X__start/X__done, X_start/X_end, or `--usdt-pair`), a
//! start paired with the next done of its pair on the same thread of the same process.
//!
//! Never paired wrongly: a start while the thread already has one of that pair open makes
//! the whole nest unpaired (counted as `nested`, every start and done in it), a done with
//! no start open is counted as `unmatched_done`, and a start still open at the end as
//! `open_at_end`.
use super::names::usdt_name;
use super::text::{empty_note, log2_text, losses_text};
use crate::histogram::{rank, Histogram};
use crate::model::{Event, Filter, Loaded, Losses, Sink, Trace};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// The report: one row per pair, by total time.
#[derive(Debug, Serialize)]
pub struct UsdtLatencyReport {
    pub kind: String,
    pub rows: Vec<UsdtPairRow>,
    pub losses: Losses,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One start/done pair's operations.
#[derive(Debug, Clone, Serialize)]
pub struct UsdtPairRow {
    /// `provider:start -> done`.
    pub name: String,
    /// The start and done probes' ids.
    pub start: u64,
    pub done: u64,
    /// Paired operations, and their exact percentiles.
    pub count: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    pub total_ns: u64,
    pub histogram: Vec<crate::histogram::Log2Bin>,
    /// Starts and dones left unpaired because a start came while one was open.
    pub nested: u64,
    /// Dones with no start open on their thread.
    pub unmatched_done: u64,
    /// Starts still open when the trace ends.
    pub open_at_end: u64,
}

/// Keeps every hit's (probe, generation, tid, time): the pairs are known once the trace's
/// `ProbedUsdt` records are read.
#[derive(Default)]
struct HitSink {
    hits: Vec<(u64, u32, u32, u64)>,
}

impl Sink for HitSink {
    fn event(&mut self, ev: &Event<'_>) {
        if let Event::Usdt(e) = ev {
            self.hits.push((e.probe, e.generation, e.tid, e.time_ns));
        }
    }
}

/// One thread's state for one pair.
#[derive(Default, Clone, Copy)]
struct Open {
    depth: u64,
    since: u64,
    /// Hits in the current nest (more than one start: unpaired).
    hits: u64,
    nested: bool,
}

/// A pair's tallies.
#[derive(Default)]
struct Tally {
    durations: Vec<u64>,
    hist: Histogram,
    nested: u64,
    unmatched_done: u64,
    open_at_end: u64,
}

/// `ebsym latency --kind usdt` of an open trace: the `n` pairs with the most time.
pub fn usdt_latency_from(trace: impl Trace, filter: &Filter, n: usize) -> UsdtLatencyReport {
    let mut sink = HitSink::default();
    let l = Loaded::from_trace(trace, filter, &mut sink);
    let tallies = pair_hits(&l, &sink.hits);
    let mut rows: Vec<UsdtPairRow> = tallies
        .into_iter()
        .map(|((start, done), t)| row(&l, start, done, t))
        .collect();
    rows.sort_by(|a, b| {
        b.total_ns
            .cmp(&a.total_ns)
            .then_with(|| a.name.cmp(&b.name))
    });
    rows.truncate(n);
    let note = if l.usdt_probes.values().all(|p| p.done == 0) {
        Some("no start/done pair among the recorded USDT probes (X__start with X__done, X_start with X_end, or ebrec record --usdt-pair START,DONE); their hits are in ebsym top --kind usdt".to_string())
    } else {
        rows.is_empty()
            .then(|| empty_note("usdt", filter, &l.losses))
    };
    UsdtLatencyReport {
        kind: "usdt".into(),
        rows,
        losses: l.losses.clone(),
        note,
    }
}

/// Pairs `hits` (in the trace's order, which is each thread's) by the trace's pairs.
fn pair_hits(l: &Loaded, hits: &[(u64, u32, u32, u64)]) -> BTreeMap<(u64, u64), Tally> {
    // probe id -> (pair, is start)
    let mut role: HashMap<u64, ((u64, u64), bool)> = HashMap::new();
    let mut tallies: BTreeMap<(u64, u64), Tally> = BTreeMap::new();
    for p in l.usdt_probes.values().filter(|p| p.done != 0) {
        role.insert(p.id, ((p.id, p.done), true));
        role.insert(p.done, ((p.id, p.done), false));
        tallies.entry((p.id, p.done)).or_default();
    }
    let mut open: HashMap<((u64, u64), u32, u32), Open> = HashMap::new();
    for &(probe, generation, tid, time) in hits {
        let Some(&(pair, start)) = role.get(&probe) else {
            continue;
        };
        let t = tallies.entry(pair).or_default();
        let o = open.entry((pair, generation, tid)).or_default();
        if start {
            if o.depth == 0 {
                o.since = time;
                o.nested = false;
                o.hits = 0;
            } else {
                o.nested = true;
            }
            o.depth += 1;
            o.hits += 1;
            continue;
        }
        if o.depth == 0 {
            t.unmatched_done += 1;
            continue;
        }
        o.depth -= 1;
        o.hits += 1;
        if o.depth > 0 {
            continue;
        }
        if o.nested {
            t.nested += o.hits;
        } else {
            let d = time.saturating_sub(o.since);
            t.durations.push(d);
            t.hist.record(d);
        }
    }
    for ((pair, ..), o) in open {
        if o.depth > 0 {
            tallies.entry(pair).or_default().open_at_end += o.depth;
        }
    }
    if let Some(pair) = held_pair(l, &tallies) {
        tallies.entry(pair).or_default().open_at_end += l.requests_held;
    }
    tallies
}

/// The pair whose starts the kernel held (`--request usdt:…,…`, `Loaded::requests_held`):
/// the first whose start probe is the request's.
fn held_pair(l: &Loaded, tallies: &BTreeMap<(u64, u64), Tally>) -> Option<(u64, u64)> {
    if l.requests_held == 0 {
        return None;
    }
    let spec = l.header.options.iter().find(|o| o.key == "request")?;
    let start = spec.value.strip_prefix("usdt:")?.rsplit_once(',')?.0;
    let start = start.rsplit(':').next()?;
    tallies
        .keys()
        .find(|(s, _)| l.usdt_probes.get(s).map(|p| l.tables.string(p.name)) == Some(start.into()))
        .copied()
}

fn row(l: &Loaded, start: u64, done: u64, mut t: Tally) -> UsdtPairRow {
    t.durations.sort_unstable();
    let q = |q: f64| {
        let v = &t.durations;
        if v.is_empty() {
            0
        } else {
            v[rank(v.len() as u64, q) as usize - 1]
        }
    };
    let done_name = usdt_name(l, done);
    let done_short = done_name.rsplit(':').next().unwrap_or(&done_name);
    UsdtPairRow {
        name: format!("{} -> {done_short}", usdt_name(l, start)),
        start,
        done,
        count: t.durations.len() as u64,
        p50_ns: q(0.5),
        p90_ns: q(0.9),
        p99_ns: q(0.99),
        max_ns: t.durations.last().copied().unwrap_or(0),
        total_ns: t.durations.iter().sum(),
        histogram: t.hist.log2_bins(),
        nested: t.nested,
        unmatched_done: t.unmatched_done,
        open_at_end: t.open_at_end,
    }
}

impl UsdtLatencyReport {
    /// The report for people: a row per pair with its log2 histogram and what was left
    /// unpaired.
    pub fn to_text(&self) -> String {
        use super::text::human_ns;
        use std::fmt::Write;
        let mut s = String::new();
        let n: u64 = self.rows.iter().map(|r| r.count).sum();
        let _ = writeln!(
            s,
            "USDT start/done pairs (exact, start to done on one thread): {n} operations"
        );
        if let Some(note) = &self.note {
            let _ = writeln!(s, "{note}");
        }
        for (i, r) in self.rows.iter().enumerate() {
            let _ = writeln!(
                s,
                "\n#{} {}  count {}  p50 {}  p90 {}  p99 {}  max {}  total {}",
                i + 1,
                r.name,
                r.count,
                human_ns(r.p50_ns),
                human_ns(r.p90_ns),
                human_ns(r.p99_ns),
                human_ns(r.max_ns),
                human_ns(r.total_ns),
            );
            if r.nested + r.unmatched_done + r.open_at_end > 0 {
                let _ = writeln!(
                    s,
                    "    unpaired: {} in nested starts, {} dones without a start, {} starts open at the end",
                    r.nested, r.unmatched_done, r.open_at_end
                );
            }
            if r.count > 0 {
                s.push_str(&log2_text(&r.histogram));
            }
        }
        s.push_str(&losses_text(&self.losses));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ebtrace_format::proto::ProbedUsdt;

    fn loaded() -> Loaded {
        let mut l = Loaded::default();
        l.usdt_probes.insert(
            1,
            ProbedUsdt {
                id: 1,
                done: 2,
                ..Default::default()
            },
        );
        l.usdt_probes.insert(
            2,
            ProbedUsdt {
                id: 2,
                ..Default::default()
            },
        );
        l
    }

    #[test]
    fn pairs_on_one_thread_and_never_across_nests() {
        let l = loaded();
        let hits = [
            (1, 1, 10, 100),
            (1, 1, 11, 105), // another thread
            (2, 1, 10, 130), // 30 ns
            (2, 1, 10, 140), // no start open
            (2, 1, 11, 205), // 100 ns
            (1, 1, 10, 300), // nested: 4 hits unpaired
            (1, 1, 10, 310),
            (2, 1, 10, 320),
            (2, 1, 10, 330),
            (1, 1, 12, 400), // open at the end
        ];
        let t = &pair_hits(&l, &hits)[&(1, 2)];
        assert_eq!(t.durations, [30, 100]);
        assert_eq!((t.nested, t.unmatched_done, t.open_at_end), (4, 1, 1));
    }
}
