//! `ebsym leaks`: allocations never freed, grouped by stack (the live blocks are kept by
//! `live.rs` while the trace streams by).
use super::kind::Measure;
use super::live::Outstanding;
use super::suppress::{FrameMasks, Suppressions};
use super::text::empty_note;
use super::threads::{fold_digits, label_of};
use super::top::{Group, LeakRow, Report, Row};
use super::wrappers::{Site, WrapperRules};
use crate::hash::FastMap;
use crate::interned::{FrameIds, FrameView, IFrame, Named, Names};
use crate::model::{Estimator, Event, Filter, Loaded, Sink, Trace};
use ebtrace_format::TraceReader;
use std::collections::{BTreeMap, HashMap};
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
    leaks_grouped(
        trace,
        &LeakOptions {
            filter,
            n,
            rules,
            group: Group::Stack,
            wrappers: &WrapperRules::default(),
        },
    )
}

/// What a leak report is asked for ([`leaks_grouped`]).
#[derive(Debug, Clone, Copy)]
pub struct LeakOptions<'a> {
    /// The filter the trace is read with.
    pub filter: &'a Filter,
    /// The rows kept.
    pub n: usize,
    /// Which blocks never freed are held by design.
    pub rules: &'a Suppressions,
    /// A row per stack, per stack and thread group, or per allocation site.
    pub group: Group,
    /// The allocator wrappers `Group::Site` looks past.
    pub wrappers: &'a WrapperRules,
}

/// [`leaks_with`] with rows grouped as `opts.group` says: per stack and thread group
/// (`Group::Thread`), or per allocation site and whether the process was alive
/// (`Group::Site`: the stacks merged by the first frame that is no allocator wrapper of
/// `opts.wrappers`, and of those it learns from the leaked stacks).
pub fn leaks_grouped(trace: impl Trace, opts: &LeakOptions) -> Report {
    let mut sink = LeakSink::default();
    let mut l = Loaded::from_trace(trace, opts.filter, &mut sink);
    sink.report_grouped(&mut l, opts)
}

/// The blocks never freed per (stack, generation, tid or 0): (count, bytes, oldest time).
type Sums = FastMap<(u64, u32, u32), (u64, u64, u64)>;

/// What [`LeakSink::report_seeing`] calls with each row: its stack's class
/// ([`Loaded::stack_class`]; by site, the class of the row's first stack), bytes and what
/// holds it.
pub(crate) type RowSeen<'a> = dyn FnMut(u32, u64, Option<&String>) + 'a;

/// A row's key before sites are merged: (frames' class, alive, thread group, allocator).
type RowKey = (u32, bool, String, u32);

/// A row so far: its frames (interned: a `Frame` is made only for a row shown), count,
/// bytes, oldest time, blocks per thread.
struct Acc {
    /// The class of its frames (of the first stack merged in).
    class: u32,
    frames: Vec<IFrame>,
    count: u64,
    bytes: u64,
    oldest: u64,
    threads: HashMap<(u32, u32), u64>,
    site: Option<Site>,
    /// What keeps the blocks by design (decided on the whole stack).
    held: Option<String>,
    /// The allocator (0: malloc's family; else an --alloc-fn's index + 1).
    allocator: u32,
}

/// A row as sorted before it is shown: (held by, alive, frames, count, bytes, oldest
/// time, site, thread label, allocator, class).
type Shown = (
    Option<String>,
    bool,
    Vec<IFrame>,
    u64,
    u64,
    u64,
    Option<Site>,
    Option<String>,
    u32,
    u32,
);

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
        let opts = LeakOptions {
            filter,
            n,
            rules,
            group: Group::Stack,
            wrappers: &WrapperRules::default(),
        };
        self.report_grouped(l, &opts)
    }

    /// [`LeakSink::report`] with rows grouped as [`leaks_grouped`] says.
    pub(crate) fn report_grouped(self, l: &mut Loaded, opts: &LeakOptions) -> Report {
        self.report_seeing(l, opts, &mut |_, _, _| {})
    }

    /// [`LeakSink::report_grouped`], `every` called with each row before the first
    /// `opts.n` are kept: its frames, bytes and what holds it (`ebsym heap` takes the
    /// leaked bytes of every stack without a report of every row).
    pub(crate) fn report_seeing(
        self,
        l: &mut Loaded,
        opts: &LeakOptions,
        every: &mut RowSeen,
    ) -> Report {
        let (by, uncertain) = self.sums(l);
        let merged = self.merged(l, by, opts);
        let mut learnt = None;
        let merged: Vec<(bool, Acc)> = if opts.group == Group::Site {
            let mut w = opts.wrappers.clone();
            let views: Vec<_> = merged
                .iter()
                .map(|(_, a)| l.names.view(&a.frames))
                .collect();
            w.learn(views.iter().map(Vec::as_slice));
            drop(views);
            learnt = Some(w.learnt().map(String::from).collect::<Vec<_>>());
            by_site(merged, &w, &l.names)
        } else {
            merged
                .into_iter()
                .map(|((_, alive, _, _), a)| (alive, a))
                .collect()
        };
        let (rows, totals) = shown(l, merged);
        for r in &rows {
            every(r.9, r.4, r.0.as_ref());
        }
        let rows = self.leak_rows(l, rows, opts.n);
        damage(l, uncertain);
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
        let note = self.note(l, no_free, &totals, opts.filter);
        Report {
            kind: "leaks".into(),
            by: Measure::Bytes,
            group: opts.group.name(),
            wrappers_learnt: learnt,
            totals,
            losses: l.losses.clone(),
            rows,
            histograms: Vec::new(),
            note,
        }
    }

    /// The blocks never freed summed per (stack, generation, tid or 0), and the count and
    /// bytes of those set aside: a block allocated before a pause of the allocator probes
    /// (--max-cpu) may have been freed while they were off, so it is not called a leak.
    fn sums(&self, l: &Loaded) -> (Sums, (u64, u64)) {
        // Hashed, a lookup a live block (a B-tree's were a tenth of the report with a
        // million blocks), then sorted.
        let mut by: Sums = FastMap::default();
        let mut est = Estimator::default();
        let mut uncertain = (0u64, 0u64);
        for (generation, b) in self.live.blocks() {
            if l.alloc_pauses.iter().any(|&(start, _)| b.time < start) {
                let (c, bytes) = est.add(b.size, u64::from(b.period));
                uncertain.0 += c;
                uncertain.1 += bytes;
                continue;
            }
            let e = by
                .entry((b.stack, generation, b.tid))
                .or_insert((0, 0, u64::MAX));
            let (count, bytes) = est.add(b.size, u64::from(b.period));
            e.0 += count;
            e.1 += bytes;
            e.2 = e.2.min(b.time);
        }
        for (&key, &(count, bytes, since)) in self.live.gauges() {
            if count == 0 {
                continue;
            }
            // Blocks counted before a pause may have been freed while it lasted.
            if l.alloc_pauses.iter().any(|&(start, _)| since < start) {
                uncertain.0 += count;
                uncertain.1 += bytes;
                continue;
            }
            let e = by.entry((key.0, key.1, 0)).or_insert((0, 0, u64::MAX));
            e.0 += count;
            e.1 += bytes;
            e.2 = e.2.min(since);
        }
        (by, uncertain)
    }

    /// The sums merged into rows by frames, whether the process is alive, thread group
    /// (`Group::Thread`) and allocator; in the order of their frames' keys.
    fn merged(&self, l: &mut Loaded, by: Sums, opts: &LeakOptions) -> Vec<(RowKey, Acc)> {
        let mut merged: FastMap<RowKey, Acc> = FastMap::default();
        let mut by: Vec<_> = by.into_iter().collect();
        by.sort_unstable_by_key(|&(key, _)| key);
        // Each (stack, generation)'s class, looked up once (as the losses count them): the
        // keys are sorted, so only the last one is kept.
        let mut last: Option<((u64, u32), u32)> = None;
        let mut masks = FrameMasks::default();
        for ((stack, generation, tid), (count, bytes, oldest)) in by {
            let alive = l
                .tables
                .generations
                .get(&generation)
                .is_some_and(|g| g.exit.is_none());
            let (class, mut fresh) = match last {
                Some((k, class)) if k == (stack, generation) => (class, None),
                _ => {
                    let (class, fresh) = l.stack_class_frames(stack);
                    last = Some(((stack, generation), class));
                    (class, fresh)
                }
            };
            let thread = if opts.group == Group::Thread && tid != 0 {
                fold_digits(&l.thread_name(generation, tid))
            } else {
                String::new()
            };
            let allocator = self.live.allocator_of(stack);
            // Frames are made for each row once, from its first stack.
            let e = merged
                .entry((class, alive, thread, allocator))
                .or_insert_with(|| {
                    let frames = fresh
                        .take()
                        .unwrap_or_else(|| l.interned_frames_again(stack));
                    Acc {
                        class,
                        allocator,
                        held: opts.rules.held_by_with(&l.names.view(&frames), &mut masks),
                        frames,
                        count: 0,
                        bytes: 0,
                        oldest: u64::MAX,
                        threads: HashMap::new(),
                        site: None,
                    }
                });
            e.count += count;
            e.bytes += bytes;
            e.oldest = e.oldest.min(oldest);
            if tid != 0 {
                *e.threads.entry((generation, tid)).or_default() += count;
            }
        }
        // The order of the frames' keys, then the rest of the key (as a B-tree on them had
        // it: the sites below merge in it).
        let mut merged: Vec<(RowKey, Acc)> = merged.into_iter().collect();
        let classes = l.classes();
        merged.sort_unstable_by(|(a, _), (b, _)| {
            classes
                .cmp(a.0, b.0)
                .then_with(|| (a.1, &a.2, a.3).cmp(&(b.1, &b.2, b.3)))
        });
        merged
    }

    /// The first `n` rows as the report's rows.
    fn leak_rows(&self, l: &Loaded, rows: Vec<Shown>, n: usize) -> Vec<Row> {
        let names = super::live::allocator_names(&l.header);
        rows.into_iter()
            .take(n)
            .map(
                |(held_by, alive, frames, count, bytes, oldest, site, thread, allocator, _)| {
                    Row::Leak(LeakRow {
                        allocator: super::live::allocator_name(&names, allocator),
                        alive,
                        bytes,
                        count,
                        frames: l.names.frames(&frames),
                        held_by,
                        oldest_ns: self.last_ns.saturating_sub(oldest),
                        site,
                        thread,
                    })
                },
            )
            .collect()
    }

    /// The report's note: no frees tracked, no allocations, or none left; `None` when
    /// there are leaks.
    fn note(
        &self,
        l: &Loaded,
        no_free: bool,
        totals: &BTreeMap<String, u64>,
        filter: &Filter,
    ) -> Option<String> {
        if no_free {
            Some(format!(
            "no leak report: the recording did not track frees (--no-free); its {} allocations are in `ebsym top --kind alloc`",
            self.allocs
        ))
        } else if self.allocs == 0 {
            Some(empty_note("alloc", filter, &l.losses))
        } else if totals.is_empty() {
            Some(format!(
                "no leaks: all {} traced allocations{} were freed",
                self.allocs,
                if filter.is_empty() {
                    ""
                } else {
                    " that match the filters"
                }
            ))
        } else {
            None
        }
    }
}

/// Rows merged by allocation site (the first frame that is no wrapper of `w`) and whether
/// the process was alive: each site's row has the sum of its stacks and the heaviest
/// stack's frames from the site out.
fn by_site(merged: Vec<(RowKey, Acc)>, w: &WrapperRules, names: &Names) -> Vec<(bool, Acc)> {
    type SiteKey = (FrameIds, bool, Option<String>, u32);
    let mut sites: BTreeMap<SiteKey, (Acc, u64)> = BTreeMap::new();
    for ((_, alive, _, _), mut a) in merged {
        let (i, ws) = w.site(&names.view(&a.frames)).unwrap_or((0, Vec::new()));
        a.frames.drain(..i.min(a.frames.len()));
        let key = (
            Names::ids(&a.frames[..a.frames.len().min(1)]),
            alive,
            a.held.clone(),
            a.allocator,
        );
        let Some((s, best)) = sites.get_mut(&key) else {
            let f = a.frames.first().map(|&frame| Named { names, frame });
            a.site = Some(Site {
                file: f.and_then(|f| f.file().map(String::from)),
                function: f.map_or_else(|| "(no stack)".into(), |f| f.function().to_string()),
                line: f.and_then(|f| f.line()),
                module: f.map(|f| f.module().to_string()).unwrap_or_default(),
                stacks: 1,
                wrappers: ws,
            });
            let best = a.bytes;
            sites.insert(key, (a, best));
            continue;
        };
        let site = s.site.as_mut().expect("set at insertion");
        site.stacks += 1;
        for w in ws {
            if !site.wrappers.contains(&w) {
                site.wrappers.push(w);
            }
        }
        s.count += a.count;
        s.bytes += a.bytes;
        s.oldest = s.oldest.min(a.oldest);
        for (t, c) in a.threads {
            *s.threads.entry(t).or_default() += c;
        }
        // Ties to the stack first in text order (as the rows are sorted).
        if a.bytes > *best || (a.bytes == *best && names.cmp(&a.frames, &s.frames).is_lt()) {
            *best = a.bytes;
            s.frames = a.frames;
        }
    }
    sites
        .into_iter()
        .map(|((_, alive, _, _), (a, _))| (alive, a))
        .collect()
}

/// The rows with their thread labels, sorted: the leaks to act on first, then the held
/// blocks; largest first; ties in a fixed order (only the rows shown are rendered). And
/// the totals: `count` and `bytes` of the leaks, `held_count` and `held_bytes` of the held.
fn shown(l: &Loaded, merged: Vec<(bool, Acc)>) -> (Vec<Shown>, BTreeMap<String, u64>) {
    let mut totals: BTreeMap<String, u64> = BTreeMap::new();
    let mut rows: Vec<Shown> = merged
        .into_iter()
        .map(|(alive, a)| {
            let Acc {
                class,
                frames,
                count,
                bytes,
                oldest,
                threads,
                site,
                held,
                allocator,
            } = a;
            let thread = label_of(l, &threads);
            let (c, b) = if held.is_some() {
                ("held_count", "held_bytes")
            } else {
                ("count", "bytes")
            };
            *totals.entry(c.to_string()).or_default() += count;
            *totals.entry(b.to_string()).or_default() += bytes;
            (
                held, alive, frames, count, bytes, oldest, site, thread, allocator, class,
            )
        })
        .collect();
    if !rows.is_empty() {
        totals.entry("count".to_string()).or_default();
        totals.entry("bytes".to_string()).or_default();
    }
    rows.sort_by(|a, b| {
        a.0.is_some()
            .cmp(&b.0.is_some())
            .then_with(|| b.4.cmp(&a.4))
            .then_with(|| l.names.cmp(&a.2, &b.2))
            .then_with(|| a.1.cmp(&b.1))
            .then_with(|| a.0.cmp(&b.0))
            .then_with(|| a.7.cmp(&b.7))
    });
    (rows, totals)
}

/// What the report says about its blocks in `l`'s losses: those set aside for a pause
/// (`uncertain`: count, bytes), and frees lost while recording.
fn damage(l: &mut Loaded, uncertain: (u64, u64)) {
    if uncertain.0 > 0 {
        l.losses.damage.push(format!(
            "the allocator probes were paused {} time(s) by --max-cpu: {} blocks ({} bytes) allocated before a pause and not seen freed are left out, as their free may have come while paused",
            l.alloc_pauses.len(),
            uncertain.0,
            uncertain.1
        ));
    }
    if l.losses.recorded.keys().any(|k| k.starts_with("free/")) {
        l.losses
            .damage
            .push("frees were lost while recording: some blocks shown may have been freed".into());
    }
}
