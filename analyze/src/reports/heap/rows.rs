//! The heap report's rows and processes: stack ids merged by their frames (as `leaks` and
//! `top` merge them), each row's lifetimes, each allocator's share of the rows, and each
//! process generation's peak.
use super::leaked::Leaked;
use super::options::{HeapOptions, Known};
use super::report::{HeapAllocator, HeapMeasure, HeapProcess, HeapRow, Lifetime};
use super::sink::HeapSink;
use super::stats::StackStat;
use crate::hash::{FastMap, IdMap};
use crate::histogram::Log2Bin;
use crate::interned::IFrame;
use crate::model::Loaded;
use crate::reports::live::{allocator_name, allocator_names};

/// A row so far: the sums of the stack ids merged into it.
#[derive(Default)]
struct Acc {
    allocator: u32,
    /// The first stack id: its frames are the row's, resolved again for the rows kept
    /// (each row holding its frames was a third of the report's memory on a compiler).
    first: u64,
    allocations: u64,
    bytes: u64,
    temporary: u64,
    peak: u64,
    lifetimes: Vec<u64>,
    never_freed: u64,
}

impl HeapSink {
    /// The rows, sorted by `q.by`, the first `q.n`; and each allocator's share of all of
    /// them. Takes the leaked bytes of each row from `leaked`.
    pub(super) fn rows(
        &self,
        l: &mut Loaded,
        leaked: &mut Leaked,
        known: Known,
        q: &HeapOptions,
    ) -> (Vec<HeapRow>, Vec<HeapAllocator>) {
        let merged = self.merged(l, &leaked.never_freed);
        let names = allocator_names(&l.header);
        let mut allocators: Vec<HeapAllocator> = names
            .iter()
            .map(|n| HeapAllocator {
                name: n.clone(),
                temporary: known.temporary.then_some(0),
                ..Default::default()
            })
            .collect();
        // Frames are made for the rows kept only.
        let rows: Vec<(HeapRow, u64)> = merged
            .into_iter()
            .map(|(key, a)| {
                let (leaked_bytes, held_bytes, held_by) =
                    leaked.by_class.remove(&key).unwrap_or((0, 0, None));
                share(&mut allocators, &names, &a, leaked_bytes, known.temporary);
                let row = HeapRow {
                    allocator: allocator_name(&names, a.allocator),
                    allocations: a.allocations,
                    bytes: a.bytes,
                    held_bytes,
                    held_by: held_by.filter(|_| held_bytes > 0),
                    leaked_bytes,
                    lifetime: Lifetime {
                        buckets: lifetime_bins(&a.lifetimes),
                        never_freed: a.never_freed,
                    },
                    peak_bytes: known.peak.then_some(a.peak),
                    temporary: known.temporary.then_some(a.temporary),
                    frames: Vec::new(),
                };
                (row, a.first)
            })
            .collect();
        let mut shared = crate::interned::SharedFrames::default();
        let rows = sort_rows(rows, q.by, q.n, l)
            .into_iter()
            .map(|(mut r, f)| {
                r.frames = shared.frames(&l.names, &f);
                r
            })
            .collect();
        (rows, allocators)
    }

    /// Stack ids merged by their frames (by their classes), with their blocks never freed.
    fn merged(&self, l: &mut Loaded, never_freed: &IdMap<u64>) -> FastMap<u32, Acc> {
        let mut merged: FastMap<u32, Acc> = FastMap::default();
        let mut ids: Vec<(u64, &StackStat)> = self.stacks.iter().collect();
        ids.sort_unstable_by_key(|&(id, _)| id);
        for (id, s) in ids {
            let a = merged.entry(l.stack_class(id)).or_insert_with(|| Acc {
                first: id,
                ..Default::default()
            });
            a.allocator = a
                .allocator
                .max(self.allocators.get(&id).copied().unwrap_or(0));
            a.allocations += s.allocations;
            a.bytes += s.bytes;
            a.temporary += s.temporary;
            a.peak += s.at_peak;
            if a.lifetimes.len() < s.lifetimes.len() {
                a.lifetimes.resize(s.lifetimes.len(), 0);
            }
            for (i, c) in s.lifetimes.iter().enumerate() {
                a.lifetimes[i] += c;
            }
            a.never_freed += never_freed.get(id).copied().unwrap_or(0);
        }
        merged
    }

    /// Each process generation with allocations, largest peak first.
    pub(super) fn processes(&self, l: &Loaded) -> Vec<HeapProcess> {
        let start = l.header.start_time_ns;
        let mut processes: Vec<HeapProcess> = self
            .gens
            .iter()
            .filter(|(_, g)| g.any)
            .map(|(generation, g)| (generation as u32, g))
            .map(|(generation, g)| HeapProcess {
                generation,
                pid: l
                    .tables
                    .generations
                    .get(&generation)
                    .map_or(0, |i| i.process.pid),
                peak_bytes: g.peak,
                peak_time_ns: g.peak_time.saturating_sub(start),
                at_trace_peak_bytes: g.at_trace_peak,
            })
            .collect();
        processes.sort_by(|a, b| {
            b.peak_bytes
                .cmp(&a.peak_bytes)
                .then(a.generation.cmp(&b.generation))
        });
        processes
    }
}

/// Adds row `a`'s calls, bytes, temporary allocations and `leaked_bytes` to its
/// allocator's share (the allocators past `names` added as they come, by number).
fn share(
    allocators: &mut Vec<HeapAllocator>,
    names: &[String],
    a: &Acc,
    leaked_bytes: u64,
    has_temporary: bool,
) {
    let i = a.allocator as usize;
    while i >= allocators.len() {
        allocators.push(HeapAllocator {
            name: allocator_name(names, allocators.len() as u32),
            temporary: has_temporary.then_some(0),
            ..Default::default()
        });
    }
    let t = &mut allocators[i];
    t.calls += a.allocations;
    t.bytes += a.bytes;
    t.temporary = t.temporary.map(|v| v + a.temporary);
    t.leaked_bytes += leaked_bytes;
}

/// Lifetime counts by log2 bucket as the report's bins (the empty ones left out).
fn lifetime_bins(lifetimes: &[u64]) -> Vec<Log2Bin> {
    lifetimes
        .iter()
        .enumerate()
        .filter(|(_, &c)| c > 0)
        .map(|(i, &c)| Log2Bin {
            low: if i == 0 { 0 } else { 1u64 << (i - 1) },
            high: if i == 0 {
                1
            } else if i >= 64 {
                u64::MAX
            } else {
                1u64 << i
            },
            count: c,
        })
        .collect()
}

/// The first `n` rows by `by` (then calls, then frames), with their frames: the rows
/// sorted by their numbers, and only those that can be among the first `n` (ties at the
/// last place included) resolved and ordered by their frames.
fn sort_rows(
    mut rows: Vec<(HeapRow, u64)>,
    by: HeapMeasure,
    n: usize,
    l: &mut Loaded,
) -> Vec<(HeapRow, Vec<IFrame>)> {
    let key = |r: &HeapRow| {
        (
            std::cmp::Reverse(by.pick(r)),
            std::cmp::Reverse(r.allocations),
        )
    };
    rows.sort_by_key(|(r, _)| key(r));
    if n == 0 {
        return Vec::new();
    }
    if n < rows.len() {
        let last = key(&rows[n - 1].0);
        let keep = rows.partition_point(|(r, _)| key(r) <= last);
        rows.truncate(keep);
    }
    let mut rows: Vec<(HeapRow, Vec<IFrame>)> = rows
        .into_iter()
        .map(|(r, id)| (r, l.interned_frames_again(id)))
        .collect();
    let names = &l.names;
    rows.sort_by(|(a, fa), (b, fb)| key(a).cmp(&key(b)).then_with(|| names.cmp(fa, fb)));
    rows.truncate(n);
    rows
}
