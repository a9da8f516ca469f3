//! The Firefox Profiler's processed profile (profiler.firefox.com, "Load a profile from
//! file"), made with samply's `fxprof-processed-profile` crate and written as the JSON it
//! serializes.
//!
//! - One process per pid (named after the comm), one thread per tid ("comm" for the main
//!   thread, "comm TID" for the others).
//! - CPU samples are the threads' samples, with their stacks: one frame per function
//!   (inlined frames are frames of their own), category "User" or "Kernel" (kernel frames,
//!   named `function` or `function [kernel:module]`), unnamed frames as other reports show
//!   them (`lib.so+0x1a2b`). The crate's label frames carry no file or line (its 0.8
//!   func and frame tables write those columns empty): file:line are in the Perfetto
//!   export and the other reports.
//! - Off-CPU blocks, lock waits, `--func` calls, slow syscalls, block I/O and run-queue
//!   waits are interval markers on their thread, each kind with its schema (the fields
//!   below) and the event's stack as the marker's stack.
//! - Allocations are the process's native allocation samples (on its first thread, as
//!   the crate keeps them), without frees.
//! - Times: ms since the trace's start; `meta.startTime` is its wall clock.
use super::collect::{Collected, ExportStats, StackNames};
use crate::event::{EventView, Fields};
use crate::reports::describe::{describe, marker_type, Description, Value};
use crate::reports::places::is_kernel;
use crate::reports::EventKind;
use ebtrace_format::proto::Header;
use fxprof_processed_profile::{
    CategoryColor, CategoryHandle, CpuDelta, Frame as FxFrame, FrameFlags, FrameInfo, Marker,
    MarkerFieldFlags, MarkerFieldFormat, MarkerLocations, MarkerTiming, MarkerTypeHandle, Profile,
    ReferenceTimestamp, RuntimeSchemaMarkerField, RuntimeSchemaMarkerSchema, SamplingInterval,
    StackHandle, StringHandle, ThreadHandle, Timestamp,
};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::rc::Rc;

/// A marker field's value.
#[derive(Debug, Clone, Copy)]
enum V {
    S(StringHandle),
    N(f64),
}

/// A marker of one of the runtime schemas.
struct M {
    ty: MarkerTypeHandle,
    name: StringHandle,
    category: CategoryHandle,
    fields: Vec<V>,
    /// "": a string field the values lack.
    empty: StringHandle,
}

impl Marker for M {
    fn marker_type(&self, _: &mut Profile) -> MarkerTypeHandle {
        self.ty
    }
    fn name(&self, _: &mut Profile) -> StringHandle {
        self.name
    }
    fn category(&self, _: &mut Profile) -> CategoryHandle {
        self.category
    }
    // A kind's schema is made of its first event's fields, and every event of the kind has
    // the same (describe's test holds it): a field the schema has and the values lack
    // would be a bug, written as an empty field rather than a panic in a user's export.
    fn string_field_value(&self, i: u32) -> StringHandle {
        match self.fields.get(i as usize) {
            Some(V::S(s)) => *s,
            _ => {
                debug_assert!(false, "marker field {i} is not a string");
                self.empty
            }
        }
    }
    fn number_field_value(&self, i: u32) -> f64 {
        match self.fields.get(i as usize) {
            Some(V::N(n)) => *n,
            _ => {
                debug_assert!(false, "marker field {i} is not a number");
                0.0
            }
        }
    }
}

fn field(key: &str, label: &str, format: MarkerFieldFormat) -> RuntimeSchemaMarkerField {
    RuntimeSchemaMarkerField {
        key: key.into(),
        label: label.into(),
        format,
        flags: MarkerFieldFlags::SEARCHABLE,
    }
}

/// The marker schema of an interval kind, of the fields of one of its events'
/// [`Description`] (every event of a kind has the same marker fields).
fn schema(kind: EventKind, d: &Description) -> RuntimeSchemaMarkerSchema {
    use MarkerFieldFormat as F;
    let (type_name, _, description) = marker_type(kind).unwrap_or_default();
    let fields = d
        .fields
        .iter()
        .filter(|f| f.marker)
        .map(|f| {
            let format = match f.value {
                Value::Text(_) | Value::Stack(_) | Value::YesNo(_) => F::String,
                Value::Integer(_) => F::Integer,
                Value::Ns(_) => F::Nanoseconds,
                Value::Bytes(_) => F::Bytes,
            };
            field(f.key, f.label, format)
        })
        .collect();
    RuntimeSchemaMarkerSchema {
        type_name: type_name.into(),
        description: Some(description.into()),
        locations: MarkerLocations::MARKER_CHART
            | MarkerLocations::MARKER_TABLE
            | MarkerLocations::TIMELINE_OVERVIEW,
        chart_label: Some("{marker.name}".into()),
        tooltip_label: Some("{marker.name}".into()),
        table_label: Some("{marker.name}".into()),
        fields,
        graphs: Vec::new(),
    }
}

struct Builder {
    profile: Profile,
    user: CategoryHandle,
    kernel: CategoryHandle,
    categories: HashMap<EventKind, CategoryHandle>,
    schemas: HashMap<EventKind, MarkerTypeHandle>,
    names: StackNames,
    stacks: HashMap<(ThreadHandle, u64), Option<StackHandle>>,
    /// Waker stacks as one string: "leaf ← caller ← …".
    joined: HashMap<u64, StringHandle>,
}

impl Builder {
    fn stack(&mut self, c: &mut Collected, thread: ThreadHandle, id: u64) -> Option<StackHandle> {
        if let Some(s) = self.stacks.get(&(thread, id)) {
            return *s;
        }
        let frames = self.names.frames(&mut c.loaded, id);
        let infos: Vec<FrameInfo> = frames
            .iter()
            .rev()
            .map(|f| {
                let kernel = is_kernel(f);
                let label = if kernel && f.module != "[kernel]" {
                    format!("{} {}", f.function, f.module)
                } else {
                    f.function.clone()
                };
                FrameInfo {
                    frame: FxFrame::Label(self.profile.intern_string(&label)),
                    category_pair: if kernel { self.kernel } else { self.user }.into(),
                    flags: FrameFlags::empty(),
                }
            })
            .collect();
        let s = self.profile.intern_stack_frames(thread, infos.into_iter());
        self.stacks.insert((thread, id), s);
        s
    }

    fn joined(&mut self, c: &mut Collected, id: u64) -> StringHandle {
        if let Some(s) = self.joined.get(&id) {
            return *s;
        }
        let frames = self.names.frames(&mut c.loaded, id);
        let text: Vec<String> = frames.iter().map(|f| f.display()).collect();
        let s = self.profile.intern_string(&text.join(" ← "));
        self.joined.insert(id, s);
        s
    }
}

fn ts(c: &Collected, t: u64) -> Timestamp {
    Timestamp::from_nanos_since_reference(c.rel(t))
}

pub(super) fn write(mut c: Collected, out: &mut dyn Write) -> std::io::Result<ExportStats> {
    let tree = c.thread_tree();
    let h = c.loaded.header.clone();
    let hz = cpu_hz(&h);
    let product = match tree.values().next() {
        Some((comm, _)) if tree.len() == 1 => format!("{comm} (ebtrace)"),
        _ => "ebtrace".to_string(),
    };
    let mut b = Builder::new(&h, hz, &product);
    let mut stats = ExportStats {
        kinds: c.kind_counts(),
        processes: tree.len(),
        threads: tree.values().map(|(_, t)| t.len()).sum(),
        ..Default::default()
    };
    let span = thread_spans(&c);
    let threads = b.add_threads(&c, &tree, &span, h.start_time_ns);
    let period = (1e9 / f64::from(hz)) as u64;
    let kinds = std::mem::take(&mut c.kinds);
    for (kind, recs, _) in &kinds {
        for v in recs {
            let Some(&thread) = threads.by_tid.get(&v.tid) else {
                continue;
            };
            match v.fields {
                Fields::Cpu { .. } => b.cpu_sample(&mut c, thread, v, period),
                Fields::Alloc { .. } => b.allocation(&mut c, &threads, v),
                _ => b.marker(&mut c, thread, *kind, v),
            }
        }
    }
    serde_json::to_writer(&mut *out, &b.profile)?;
    out.write_all(b"\n")?;
    stats.losses = c.loaded.losses.clone();
    Ok(stats)
}

/// The CPU sampling rate the recording asked for (`--cpu HZ`; 99 if it does not say).
fn cpu_hz(h: &Header) -> f32 {
    h.options
        .iter()
        .find(|kv| kv.key == "cpu")
        .and_then(|kv| kv.value.parse::<f32>().ok())
        .filter(|hz| *hz > 0.0)
        .unwrap_or(99.0)
}

/// When each thread was first and last seen.
fn thread_spans(c: &Collected) -> HashMap<u32, (u64, u64)> {
    let mut span: HashMap<u32, (u64, u64)> = HashMap::new();
    for v in c.kinds.iter().flat_map(|k| &k.1) {
        let e = span.entry(v.tid).or_insert((u64::MAX, 0));
        e.0 = e.0.min(v.time_ns);
        e.1 = e.1.max(v.end_ns().unwrap_or(v.time_ns));
    }
    span
}

/// The profile's threads: by tid, and each process's first (where its allocations go).
struct Threads {
    by_tid: HashMap<u32, ThreadHandle>,
    first: BTreeMap<u32, ThreadHandle>,
}

impl Builder {
    /// An empty profile named `product`, with its categories: "User", "Kernel", and one
    /// per marker kind.
    fn new(h: &Header, hz: f32, product: &str) -> Builder {
        let mut profile = Profile::new(
            product,
            ReferenceTimestamp::from_millis_since_unix_epoch(h.start_realtime_ns as f64 / 1e6),
            SamplingInterval::from_hz(hz),
        );
        profile.set_os_name(&format!("Linux {} {}", h.kernel_release, h.arch));
        profile.set_symbolicated(true);
        let user = profile.add_category("User", CategoryColor::Yellow);
        let kernel = profile.add_category("Kernel", CategoryColor::Orange);
        let mut categories = HashMap::new();
        for (k, color) in [
            (EventKind::OffCpu, CategoryColor::Blue),
            (EventKind::Lock, CategoryColor::Red),
            (EventKind::Func, CategoryColor::Green),
            (EventKind::Syscall, CategoryColor::Purple),
            (EventKind::Bio, CategoryColor::Brown),
            (EventKind::Runq, CategoryColor::LightRed),
        ] {
            let (_, name, _) = marker_type(k).unwrap_or_default();
            categories.insert(k, profile.add_category(name, color));
        }
        Builder {
            profile,
            user,
            kernel,
            categories,
            schemas: HashMap::new(),
            names: StackNames::default(),
            stacks: HashMap::new(),
            joined: HashMap::new(),
        }
    }

    /// A process per pid of `tree` and a thread per tid, each from when it was first seen
    /// (`span`; a process not seen from `start_ns`) to when it was last.
    fn add_threads(
        &mut self,
        c: &Collected,
        tree: &BTreeMap<u32, (String, Vec<u32>)>,
        span: &HashMap<u32, (u64, u64)>,
        start_ns: u64,
    ) -> Threads {
        let mut threads = Threads {
            by_tid: HashMap::new(),
            first: BTreeMap::new(),
        };
        for (&pid, (comm, tids)) in tree {
            let start = tids
                .iter()
                .filter_map(|t| span.get(t))
                .map(|s| s.0)
                .min()
                .unwrap_or(start_ns);
            let process = self.profile.add_process(comm, pid, ts(c, start));
            for &tid in tids {
                let (t0, t1) = span.get(&tid).copied().unwrap_or((start, start));
                let t = self.profile.add_thread(process, tid, ts(c, t0), tid == pid);
                self.profile
                    .set_thread_name(t, &c.thread_display(pid, tid, comm));
                self.profile.set_thread_end_time(t, ts(c, t1));
                self.profile.set_thread_show_markers_in_timeline(t, true);
                threads.by_tid.insert(tid, t);
                threads.first.entry(pid).or_insert(t);
            }
        }
        threads
    }

    /// A CPU sample of `thread`, standing for `period` ns of CPU.
    fn cpu_sample(&mut self, c: &mut Collected, thread: ThreadHandle, v: &EventView, period: u64) {
        let s = self.stack(c, thread, v.stack);
        self.profile
            .add_sample(thread, ts(c, v.time_ns), s, CpuDelta::from_nanos(period), 1);
    }

    /// An allocation, a native allocation sample of its process.
    fn allocation(&mut self, c: &mut Collected, threads: &Threads, v: &EventView) {
        let Fields::Alloc { size, address, .. } = v.fields else {
            return;
        };
        let pid = c.process(v.generation).0;
        let Some(&first) = threads.first.get(&pid) else {
            return;
        };
        // The crate keeps allocations on the process's first thread, with
        // that thread's stack table: the stack is interned there.
        let s = self.stack(c, first, v.stack);
        self.profile.add_allocation_sample(
            first,
            ts(c, v.time_ns),
            s,
            address,
            i64::try_from(size).unwrap_or(i64::MAX),
        );
    }

    /// An interval event as a marker of its kind's schema on `thread`, with its stack.
    fn marker(&mut self, c: &mut Collected, thread: ThreadHandle, kind: EventKind, v: &EventView) {
        // Memory growth has no marker here (the Perfetto export has it).
        let (Some(end), Some(_)) = (v.end_ns(), marker_type(kind)) else {
            return;
        };
        let frames = self.names.frames(&mut c.loaded, v.stack);
        let waker_frames = match v.waker {
            Some(w) => self.names.frames(&mut c.loaded, w.stack),
            None => Rc::default(),
        };
        let d = describe(v, &frames, &waker_frames, &c.loaded);
        let fields = self.marker_fields(c, &d);
        let ty = match self.schemas.get(&kind) {
            Some(&t) => t,
            None => {
                let t = self.profile.register_marker_type(schema(kind, &d));
                self.schemas.insert(kind, t);
                t
            }
        };
        let m = M {
            ty,
            name: self.profile.intern_string(&d.title),
            category: self.categories[&kind],
            fields,
            empty: self.profile.intern_string(""),
        };
        let timing = MarkerTiming::Interval(ts(c, v.time_ns), ts(c, end));
        let handle = self.profile.add_marker(thread, timing, m);
        let s = self.stack(c, thread, v.stack);
        self.profile.set_marker_stack(thread, handle, s);
    }

    /// The values of a description's marker fields: the stacks' strings interned first,
    /// then the others, in the fields' order.
    fn marker_fields(&mut self, c: &mut Collected, d: &Description) -> Vec<V> {
        let marker_fields = || d.fields.iter().filter(|f| f.marker);
        let mut stacks = HashMap::new();
        for f in marker_fields() {
            if let Value::Stack(id) = f.value {
                stacks.insert(id, self.joined(c, id));
            }
        }
        marker_fields()
            .map(|f| match &f.value {
                Value::Text(s) => V::S(self.profile.intern_string(s)),
                Value::YesNo(y) => V::S(self.profile.intern_string(if *y { "yes" } else { "no" })),
                Value::Stack(id) => V::S(stacks[id]),
                Value::Integer(n) => V::N(*n as f64),
                Value::Ns(n) | Value::Bytes(n) => V::N(*n as f64),
            })
            .collect()
    }
}
