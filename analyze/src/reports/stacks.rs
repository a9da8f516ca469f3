//! The per-stack aggregation every stack report shares: events of one kind folded into
//! stacks as they stream by, then stacks that symbolize alike merged ([`Stacks`], what
//! `top`, folded stacks, flame graphs, pprof and diffs are made of).
use super::kind::{EventKind, Measure};
use super::live::Outstanding;
use super::places::{condvar_op, mutex_op};
use super::text::empty_note;
use crate::event::Fields;
use crate::hash::{FastMap, IdMap};
use crate::histogram::Histogram;
use crate::interned::{IFrame, Names, SharedFrame, SharedFrames};
use crate::model::{Estimator, Event, Filter, Loaded, Losses, MappingInfo, Sink, Trace};
use ebtrace_format::events::AggregateRow;
use ebtrace_format::TraceReader;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// What was aggregated under one stack (and sub-key: mutex, probed function).
#[derive(Debug, Default, Clone)]
pub(crate) struct Agg {
    pub(crate) count: u64,
    pub(crate) a: u64,
    pub(crate) b: u64,
    /// lock and func: the histograms of a (wait, duration) and b (hold).
    pub(crate) hists: Option<Box<[Histogram; 2]>>,
    pub(crate) mutex: u64,
    pub(crate) futex_op: u32,
    pub(crate) wakers: HashMap<u64, u64>,
    /// Counted in the kernel (--aggregate): no per-event values, so no percentiles.
    pub(crate) aggregated: bool,
    /// alloc: blocks and bytes still outstanding at the end (pprof's inuse_*).
    pub(crate) inuse: (u64, u64),
    /// lock: recorded by the pthread_mutex_lock probes (--lock-mode uprobe).
    pub(crate) uprobe: bool,
    /// lock: some event said its futex op (all but --aggregate's counts).
    pub(crate) op_known: bool,
    /// lock: waits that were a mutex wait of a thread whose condvar wait had just ended
    /// (the condvar's mutex, reacquired while another thread held it).
    pub(crate) after_condvar: u64,
    /// lock: condvar waits whose thread then waited for the condvar's mutex.
    pub(crate) contended_reacquires: u64,
    /// Events per thread (generation, tid): what the row's `thread` is named from.
    pub(crate) threads: FastMap<(u32, u32), u64>,
}

impl Agg {
    pub(crate) fn hist(&self, i: usize) -> Histogram {
        self.hists
            .as_ref()
            .map(|h| h[i].clone())
            .unwrap_or_default()
    }
}

/// Whether the stacks of a report are split by thread: one row (or pprof sample) per
/// stack and thread name (`Name`), or per stack and thread group (`Group`: the names
/// with their digits folded, `worker-*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ThreadSplit {
    #[default]
    None,
    Name,
    Group,
}

/// The per-stack aggregation of one kind while the trace streams by ([`StackSink::merge`]
/// then merges stacks that symbolize alike).
pub(crate) struct StackSink {
    kind: EventKind,
    split: ThreadSplit,
    by_stack: Aggs,
    estimate: Estimator,
    /// alloc: the blocks not freed yet.
    outstanding: Option<Outstanding>,
    /// lock: each thread's last wait: its key, when it ended, whether it was a condvar's.
    last_lock: FastMap<(u32, u32), (StackKey, u64, bool)>,
    /// lock: (mutex wait's key, condvar wait's key) → times a thread's mutex wait began
    /// within [`REACQUIRE_NS`] of the end of its condvar wait. [`StackSink::merge`] counts
    /// those whose mutex wait is still inside the condvar wait (its frames say so) as the
    /// condvar's mutex reacquired while another thread held it.
    links: FastMap<(StackKey, StackKey), u64>,
}

/// A stack id, sub-key (lock: the futex address) and, when split by thread, the thread
/// (generation << 32 | tid; else 0): what [`StackSink`] aggregates under.
type StackKey = (u64, u64, u64);

/// The sums per stack key: those of a stack alone (no sub key, no thread: every
/// allocation's) by stack id in an [`IdMap`] (an index, not a hash: a compiler's trace
/// looks one up at each of its millions of allocations, among a hundred thousand stacks),
/// the rest hashed.
#[derive(Default)]
struct Aggs {
    by_id: IdMap<Agg>,
    other: FastMap<StackKey, Agg>,
}

impl Aggs {
    #[inline]
    fn entry(&mut self, key: StackKey) -> &mut Agg {
        if key.1 == 0 && key.2 == 0 {
            self.by_id.entry_or_default(key.0)
        } else {
            self.other.entry(key).or_default()
        }
    }

    fn get_mut(&mut self, key: StackKey) -> Option<&mut Agg> {
        if key.1 == 0 && key.2 == 0 {
            self.by_id.get_mut(key.0)
        } else {
            self.other.get_mut(&key)
        }
    }

    /// Every (key, sums), in key order (each part sorted in place, then merged: no
    /// second copy of a hundred thousand sums).
    fn into_sorted(self) -> impl Iterator<Item = (StackKey, Agg)> {
        let mut alone = self.by_id.into_vec();
        alone.sort_unstable_by_key(|&(id, _)| id);
        let mut other: Vec<(StackKey, Agg)> = self.other.into_iter().collect();
        other.sort_unstable_by_key(|&(k, _)| k);
        let mut alone = alone.into_iter().map(|(id, a)| ((id, 0, 0), a)).peekable();
        let mut other = other.into_iter().peekable();
        std::iter::from_fn(move || match (alone.peek(), other.peek()) {
            (Some(a), Some(o)) if o.0 < a.0 => other.next(),
            (Some(_), _) => alone.next(),
            (None, _) => other.next(),
        })
    }
}

/// How soon after a condvar wait ends a mutex wait of the same thread must begin to be
/// its mutex reacquired: glibc's `pthread_cond_wait` locks the mutex right after the
/// futex wait returns (microseconds, more only when preempted).
pub(crate) const REACQUIRE_NS: u64 = 1_000_000;

impl StackSink {
    /// Events of `kind`; with `inuse` (alloc), also the blocks each stack still has
    /// outstanding at the end (pprof's inuse_*: a live-block store the other reports need
    /// not pay for).
    pub(crate) fn new(kind: EventKind, inuse: bool) -> Self {
        Self::split(kind, inuse, ThreadSplit::None)
    }

    /// [`StackSink::new`], the stacks split by thread as `split` says.
    pub(crate) fn split(kind: EventKind, inuse: bool, split: ThreadSplit) -> Self {
        StackSink {
            kind,
            split,
            by_stack: Aggs::default(),
            estimate: Estimator::default(),
            outstanding: (inuse && kind == EventKind::Alloc).then(Default::default),
            last_lock: FastMap::default(),
            links: FastMap::default(),
        }
    }

    /// What the kernel counted under one stack in an interval (--aggregate).
    fn aggregated(&mut self, r: &AggregateRow) {
        if r.count == 0 && r.sum == 0 && r.sum2 == 0 {
            return; // a row for its live gauges only
        }
        let g = self.by_stack.entry((r.stack, r.mutex, 0));
        g.aggregated = true;
        g.count += r.count;
        g.a += if self.kind == EventKind::Cpu {
            r.count
        } else {
            r.sum
        };
        g.b += r.sum2;
        g.mutex = r.mutex;
    }
}

impl Sink for StackSink {
    fn event(&mut self, ev: &Event<'_>) {
        if let Some(o) = &mut self.outstanding {
            o.event(ev);
        }
        if ev.kind().is_some_and(|k| k != self.kind) {
            return;
        }
        let Some(v) = ev.view() else {
            if let Event::Aggregated(family, r) = ev {
                if self.kind.family() == *family {
                    self.aggregated(r);
                }
            }
            return;
        };
        // memgrowth: growth only (an munmap, a shrinking brk, releases memory); tcp: the
        // connects and accepts, the events with the caller's stack.
        if v.kind != self.kind || v.is_release() || (v.kind == EventKind::Tcp && v.stack == 0) {
            return;
        }
        let (mut a, b) = v.values();
        let mut n = 1;
        if let Fields::Alloc {
            size,
            sample_period,
            ..
        } = v.fields
        {
            (n, a) = self.estimate.add(size, sample_period);
        }
        // an event kept by a time-weighted sample stands for n of its length
        let mut lat = a;
        match v.fields {
            Fields::OffCpu { blocks, .. } => n = blocks,
            Fields::MemGrowth { count, .. } => n = count,
            Fields::Syscall { calls, .. } => {
                n = calls;
                lat = v.duration_ns.unwrap_or(0);
            }
            Fields::Runq { waits, .. } => {
                n = waits;
                lat = v.duration_ns.unwrap_or(0);
            }
            _ => {}
        }
        let thread = match self.split {
            ThreadSplit::None => 0,
            _ => (u64::from(v.generation) << 32) | u64::from(v.tid),
        };
        let g = self.by_stack.entry((v.stack, v.sub_key(), thread));
        if v.tid != 0 {
            *g.threads.entry((v.generation, v.tid)).or_default() += n;
        }
        g.count += n;
        g.a += a;
        g.b += b;
        if matches!(
            self.kind,
            EventKind::Lock
                | EventKind::Func
                | EventKind::Syscall
                | EventKind::Bio
                | EventKind::Runq
        ) {
            let h = g.hists.get_or_insert_default();
            h[0].record_n(lat, n);
            if let Fields::Lock { hold_ns, .. } = v.fields {
                h[1].record(hold_ns);
            }
        }
        if let Fields::Lock {
            mutex,
            futex_op,
            source,
            ..
        } = v.fields
        {
            g.mutex = mutex;
            g.futex_op = futex_op;
            g.op_known = true;
            g.uprobe |= source == ebtrace_format::proto::LockSource::Uprobe;
        }
        if let Some(w) = v.waker.filter(|w| w.stack != 0) {
            *g.wakers.entry(w.stack).or_default() += 1;
        }
        if let Fields::Lock { futex_op, .. } = v.fields {
            // A condvar's mutex reacquired: a mutex wait of the thread whose condvar wait
            // ended just before (events of a thread come in the order they ended).
            let key = (v.stack, v.sub_key(), thread);
            let end = v.time_ns + a;
            let prev = self
                .last_lock
                .insert((v.generation, v.tid), (key, end, condvar_op(futex_op)));
            if let Some((pkey, pend, true)) = prev {
                if mutex_op(futex_op)
                    && v.time_ns >= pend
                    && v.time_ns - pend <= REACQUIRE_NS
                    && pkey != key
                {
                    *self.links.entry((key, pkey)).or_default() += 1;
                }
            }
        }
    }
}

/// One stack after merging (stack ids that symbolize alike, across processes), with what
/// was aggregated under it.
#[derive(Clone)]
pub(crate) struct Merged {
    pub(crate) sub: u64,
    /// The threads whose events these are ([`super::threads::thread_label`]); None when
    /// no event says (--aggregate's counts).
    pub(crate) thread: Option<String>,
    /// `--by site`: the allocation site the stacks were merged under.
    pub(crate) site: Option<super::wrappers::Site>,
    /// The first stack id merged: its frames (past the first `skip`, `--by site`) are the
    /// stack's, resolved again where needed ([`Merged::frames`]); holding every merged
    /// stack's frames was most of `top`'s memory on a compiler's trace.
    pub(crate) stack: u64,
    pub(crate) skip: usize,
    pub(crate) agg: Agg,
}

impl Merged {
    /// Its frames, resolved again from its stack id (nothing counted twice).
    pub(crate) fn frames(&self, l: &mut Loaded) -> Vec<IFrame> {
        let mut f = l.interned_frames_again(self.stack);
        f.drain(..self.skip.min(f.len()));
        f
    }

    /// [`Merged::frames`] with the mapping of each.
    pub(crate) fn frames_and_mappings(
        &self,
        l: &mut Loaded,
    ) -> (Vec<IFrame>, Vec<Option<Arc<MappingInfo>>>) {
        let (mut f, mut m) = l.interned_frames_and_mappings_again(self.stack);
        f.drain(..self.skip.min(f.len()));
        m.drain(..self.skip.min(m.len()));
        (f, m)
    }
}

/// Reads the trace and folds events of `kind` into merged stacks, in a fixed order; with
/// `inuse` (alloc), also the blocks each stack still has outstanding at the end.
pub(crate) fn merge(
    trace: impl Trace,
    kind: EventKind,
    filter: &Filter,
    inuse: bool,
) -> (Loaded, Vec<Merged>) {
    merge_split(trace, kind, filter, inuse, ThreadSplit::None)
}

/// [`merge`], the stacks split by thread as `split` says.
pub(crate) fn merge_split(
    trace: impl Trace,
    kind: EventKind,
    filter: &Filter,
    inuse: bool,
    split: ThreadSplit,
) -> (Loaded, Vec<Merged>) {
    let mut sink = StackSink::split(kind, inuse, split);
    let mut l = Loaded::from_trace(trace, filter, &mut sink);
    let merged = sink.merge(&mut l);
    (l, merged)
}

impl StackSink {
    /// Each stack's blocks still outstanding at the end (`o`), unless frees were not
    /// tracked (--no-free).
    fn add_inuse(&mut self, l: &Loaded, o: Outstanding) {
        let no_free = l
            .header
            .options
            .iter()
            .any(|o| o.key == "no-free" && o.value == "true");
        if no_free {
            return;
        }
        for ((stack, thread), inuse) in o.by_stack_thread(&l.alloc_pauses) {
            let thread = match self.split {
                ThreadSplit::None => 0,
                _ => thread,
            };
            // Only stacks the filter let through have allocations here.
            if let Some(g) = self.by_stack.get_mut((stack, 0, thread)) {
                g.inuse.0 += inuse.0;
                g.inuse.1 += inuse.1;
            }
        }
    }

    /// The thread label of stack key `key` as the split says: none, the thread's name, or
    /// its group's (digits folded).
    fn thread_of(&self, l: &Loaded, key: StackKey) -> String {
        match self.split {
            ThreadSplit::None => String::new(),
            _ if key.2 == 0 => String::new(),
            split => {
                let name = l.thread_name((key.2 >> 32) as u32, key.2 as u32);
                if split == ThreadSplit::Group {
                    super::threads::fold_digits(&name)
                } else {
                    name
                }
            }
        }
    }

    /// The stacks of the trace `l` was read into, merged (stack ids that symbolize alike,
    /// across processes), in a fixed order; the notes of the kind (pauses, --max-cpu's
    /// changes) added to `l`'s losses, and its unresolved frames counted there.
    pub(crate) fn merge(self, l: &mut Loaded) -> Vec<Merged> {
        self.merge_seeing(l, None)
    }

    /// [`StackSink::merge`], `see` shown the frames of each merged stack as it is made
    /// (with the trace's names): what learns from every merged stack without a pass of
    /// its own.
    pub(crate) fn merge_seeing(
        mut self,
        l: &mut Loaded,
        mut see: Option<&mut SeeFrames>,
    ) -> Vec<Merged> {
        let kind = self.kind;
        if let Some(o) = self.outstanding.take() {
            self.add_inuse(l, o);
        }
        budget_notes(l, kind);
        // Merged by (sub key, thread, frames' class): hashed, no name compared.
        type Key = (u64, String, u32);
        let mut index: FastMap<Key, usize> = FastMap::default();
        let mut merged: Vec<(Key, Merged)> = Vec::new();
        let aggs = std::mem::take(&mut self.by_stack).into_sorted();
        // Each stack key's merged index, for the links of lock waits.
        let mut merged_at: HashMap<StackKey, usize> = HashMap::new();
        // Keys are sorted by stack id: each stack's class looked up once (as the losses
        // count its frames), keeping only the last one.
        let mut last: Option<(u64, u32)> = None;
        for (key, agg) in aggs {
            let (class, mut fresh) = match last {
                Some((id, class)) if id == key.0 => (class, None),
                _ => {
                    let (class, fresh) = l.stack_class_frames(key.0);
                    last = Some((key.0, class));
                    (class, fresh)
                }
            };
            let thread = self.thread_of(l, key);
            let mk = (key.1, thread, class);
            let i = match index.get(&mk) {
                Some(&i) => i,
                None => {
                    if let Some(see) = see.as_deref_mut() {
                        let frames = fresh
                            .take()
                            .unwrap_or_else(|| l.interned_frames_again(key.0));
                        see(&l.names, key.0, &frames);
                    }
                    merged.push((
                        mk.clone(),
                        Merged {
                            sub: key.1,
                            thread: None,
                            site: None,
                            stack: key.0,
                            skip: 0,
                            agg: Agg::default(),
                        },
                    ));
                    index.insert(mk, merged.len() - 1);
                    merged.len() - 1
                }
            };
            if !self.links.is_empty() {
                merged_at.insert(key, i);
            }
            merged[i].1.agg.add(agg);
        }
        drop(index);
        for ((m, c), n) in std::mem::take(&mut self.links) {
            let (Some(&mi), Some(&ci)) = (merged_at.get(&m), merged_at.get(&c)) else {
                continue;
            };
            let frames = merged[mi].1.frames(l);
            if !frames
                .iter()
                .any(|f| in_condvar_wait(l.names.get(f.function)))
            {
                continue;
            }
            merged[mi].1.agg.after_condvar += n;
            merged[ci].1.agg.contended_reacquires += n;
        }
        // The fixed order: sub key, thread, then the frames as their names sort. Sorted as
        // small keys (each class's and each thread's place in that order), then the merged
        // stacks put in it: moving them in the sort was a tenth of the merge.
        let rank = l.names.ranks();
        let classes: Vec<u32> = merged.iter().map(|((_, _, c), _)| *c).collect();
        let place = l.classes().name_places(&rank, &classes);
        let mut thread_place: std::collections::BTreeMap<&str, u32> = merged
            .iter()
            .map(|((_, t, _), _)| (t.as_str(), 0))
            .collect();
        for (i, p) in thread_place.values_mut().enumerate() {
            *p = i as u32;
        }
        let mut order: Vec<(u64, u32, u32, u32)> = merged
            .iter()
            .enumerate()
            .map(|(i, ((sub, t, c), _))| {
                (*sub, thread_place[t.as_str()], place[*c as usize], i as u32)
            })
            .collect();
        order.sort_unstable();
        let mut slots: Vec<Option<Merged>> = merged.into_iter().map(|(_, m)| Some(m)).collect();
        order
            .into_iter()
            .filter_map(|(.., i)| slots[i as usize].take())
            .map(|mut m| {
                m.thread = super::threads::label_of(l, &m.agg.threads);
                m
            })
            .collect()
    }
}

/// What [`StackSink::merge_seeing`] shows each merged stack's frames to, with its stack id
/// (the merged stack's [`Merged::stack`]).
pub(crate) type SeeFrames<'a> = dyn FnMut(&Names, u64, &[IFrame]) + 'a;

/// Whether a frame is a condition variable's wait (glibc's `pthread_cond_*wait`,
/// libstdc++'s `condition_variable::wait*`): a mutex wait under it is the condvar's mutex
/// reacquired.
fn in_condvar_wait(function: &str) -> bool {
    function.contains("pthread_cond_") || function.contains("condition_variable")
}

/// What the trace's --max-cpu budget did to `kind`: the allocator probes' pauses, the
/// budget's notes and pacing, in `l`'s losses.
fn budget_notes(l: &mut Loaded, kind: EventKind) {
    if kind == EventKind::Alloc && !l.alloc_pauses.is_empty() {
        let open = l.alloc_pauses.iter().any(|p| p.1 == u64::MAX);
        l.losses.damage.push(format!(
            "the allocator probes were paused {} time(s) by --max-cpu{}: allocations made while paused are not counted (ebsym info lists the changes)",
            l.alloc_pauses.len(),
            if open { ", the last until the end" } else { "" }
        ));
    }
    let notes = super::budget::notes(l, kind);
    l.losses.damage.extend(notes);
    l.losses.paced = super::budget::paced(l, kind);
}

impl Agg {
    /// Adds `agg`, another stack key's, into this merged stack's (the mutex and futex op
    /// are the last one's).
    fn add(&mut self, agg: Agg) {
        let m = self;
        m.count += agg.count;
        m.a += agg.a;
        m.b += agg.b;
        if let Some(h) = agg.hists {
            match &mut m.hists {
                Some(mh) => {
                    mh[0].merge(&h[0]);
                    mh[1].merge(&h[1]);
                }
                None => m.hists = Some(h),
            }
        }
        m.mutex = agg.mutex;
        m.futex_op = agg.futex_op;
        m.uprobe |= agg.uprobe;
        m.op_known |= agg.op_known;
        m.after_condvar += agg.after_condvar;
        m.contended_reacquires += agg.contended_reacquires;
        m.aggregated |= agg.aggregated;
        m.inuse.0 += agg.inuse.0;
        m.inuse.1 += agg.inuse.1;
        for (w, c) in agg.wakers {
            *m.wakers.entry(w).or_default() += c;
        }
        for (t, c) in agg.threads {
            *m.threads.entry(t).or_default() += c;
        }
    }
}

/// One merged stack and its values, for pprof, folded stacks and diffs.
#[derive(Debug, Clone)]
pub struct StackValues {
    /// Leaf first, inlined frames expanded (innermost first); shared with the other
    /// stacks that show them.
    pub frames: Vec<SharedFrame>,
    /// The mapping of each frame (None for kernel frames and frames outside any mapping).
    pub mappings: Vec<Option<Arc<MappingInfo>>>,
    /// lock: the mutex; func: the probed function id; else 0.
    pub sub: u64,
    /// The threads whose events these are: one name, a group (`worker-*`) or a list
    /// ([`super::threads::thread_label`]); None when no event says.
    pub thread: Option<String>,
    /// Events.
    pub count: u64,
    /// alloc and memgrowth: bytes; lock: wait ns; func and offcpu: total ns; cpu: samples.
    pub total: u64,
    /// lock: hold ns (0 when not recorded).
    pub hold: u64,
    /// alloc: blocks and bytes still outstanding at the end of the recording or of their
    /// process (pprof's inuse_objects, inuse_space); 0 unless read by
    /// [`stacks_with_inuse_from`].
    pub inuse_count: u64,
    pub inuse_bytes: u64,
}

impl StackValues {
    /// The value `by` measures (as `top` sorts and `folded` prints).
    pub fn value(&self, kind: EventKind, by: Measure) -> u64 {
        by.pick(kind, self.count, self.total, self.hold)
    }

    /// [`StackValues::value`] of the measure named `by` (the kind's default if it names
    /// none).
    pub fn measure(&self, kind: EventKind, by: &str) -> u64 {
        self.value(kind, kind.measure_or_default(by))
    }
}

/// The merged stacks of one kind with their values: what `top` sorts and prints.
#[derive(Debug)]
pub struct Stacks {
    pub kind: EventKind,
    pub stacks: Vec<StackValues>,
    pub losses: Losses,
    pub header: ebtrace_format::proto::Header,
    /// Boottime ns of the first and last event that passed the filter.
    pub first_event_ns: Option<u64>,
    pub last_event_ns: Option<u64>,
    /// Set when no event passed: the message to give instead of an empty report.
    pub note: Option<String>,
    /// The traced processes' executables (paths), for pprof's first mapping.
    pub executables: std::collections::BTreeSet<String>,
}

/// [`stacks_from`] of the trace at `path`.
pub fn stacks(
    path: &Path,
    kind: EventKind,
    filter: &Filter,
) -> Result<Stacks, ebtrace_format::Error> {
    Ok(stacks_from(TraceReader::open(path)?, kind, filter))
}

/// The merged stacks of `kind` in an open trace, with their values (the aggregation of
/// `top`, with the mapping of every frame), in a fixed order.
pub fn stacks_from(trace: impl Trace, kind: EventKind, filter: &Filter) -> Stacks {
    stacks_with(trace, kind, filter, false)
}

/// [`stacks_from`] with, for alloc, the blocks still outstanding per stack
/// ([`StackValues::inuse_count`], `inuse_bytes`): what a pprof heap profile needs.
pub fn stacks_with_inuse_from(trace: impl Trace, kind: EventKind, filter: &Filter) -> Stacks {
    stacks_with(trace, kind, filter, true)
}

/// [`stacks_with_inuse_from`] split by thread name: one [`StackValues`] per stack and
/// thread name, its `thread` that name (what pprof labels its samples with).
pub fn stacks_by_thread_from(trace: impl Trace, kind: EventKind, filter: &Filter) -> Stacks {
    let (mut l, merged) = merge_split(trace, kind, filter, true, ThreadSplit::Name);
    l.forget_classes();
    stacks_of(&mut l, kind, filter, merged)
}

fn stacks_with(trace: impl Trace, kind: EventKind, filter: &Filter, inuse: bool) -> Stacks {
    let (mut l, merged) = merge(trace, kind, filter, inuse);
    l.forget_classes();
    stacks_of(&mut l, kind, filter, merged)
}

/// The [`Stacks`] of `merged`, the stacks of `kind` merged from the trace `l` was read
/// into.
pub(crate) fn stacks_of(
    l: &mut Loaded,
    kind: EventKind,
    filter: &Filter,
    merged: Vec<Merged>,
) -> Stacks {
    let note = merged
        .is_empty()
        .then(|| empty_note(kind.name(), filter, &l.losses));
    let executables = l
        .tables
        .generations
        .values()
        .map(|g| l.tables.string(g.process.exe).to_string())
        .filter(|p| !p.is_empty())
        .collect();
    let mut shared = SharedFrames::default();
    Stacks {
        kind,
        executables,
        stacks: merged
            .into_iter()
            .map(|m| {
                let (frames, mappings) = m.frames_and_mappings(l);
                (m, shared.frames(&l.names, &frames), mappings)
            })
            .map(|(m, frames, mappings)| StackValues {
                frames,
                mappings,
                sub: m.sub,
                thread: m.thread,
                count: m.agg.count,
                total: m.agg.a,
                hold: m.agg.b,
                inuse_count: m.agg.inuse.0,
                inuse_bytes: m.agg.inuse.1,
            })
            .collect(),
        losses: l.losses.clone(),
        header: l.header.clone(),
        first_event_ns: l.first_event_ns,
        last_event_ns: l.last_event_ns,
        note,
    }
}
