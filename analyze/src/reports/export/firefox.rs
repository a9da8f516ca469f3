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
use super::collect::{Collected, ExportStats, Extra, Kind, StackNames};
use crate::reports::names::{
    bio_op_name, device_name, function_name, lock_source_name, syscall_name, task_state_name,
};
use crate::reports::places::{interrupt_wake, is_kernel, kernel_place, user_place};
use fxprof_processed_profile::{
    CategoryColor, CategoryHandle, CpuDelta, Frame as FxFrame, FrameFlags, FrameInfo, Marker,
    MarkerFieldFlags, MarkerFieldFormat, MarkerLocations, MarkerTiming, MarkerTypeHandle, Profile,
    ReferenceTimestamp, RuntimeSchemaMarkerField, RuntimeSchemaMarkerSchema, SamplingInterval,
    StackHandle, StringHandle, ThreadHandle, Timestamp,
};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;

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
    fn string_field_value(&self, i: u32) -> StringHandle {
        match self.fields.get(i as usize) {
            Some(V::S(s)) => *s,
            // The schemas and the values are made together: never reached.
            _ => panic!("marker field {i} is not a string"),
        }
    }
    fn number_field_value(&self, i: u32) -> f64 {
        match self.fields.get(i as usize) {
            Some(V::N(n)) => *n,
            _ => panic!("marker field {i} is not a number"),
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

/// The marker schema of each interval kind: (type name, description, fields).
fn schema(kind: Kind) -> RuntimeSchemaMarkerSchema {
    use MarkerFieldFormat as F;
    let (type_name, description, fields) = match kind {
        Kind::OffCpu => (
            "EbtraceOffCpu",
            "A block off the CPU (ebrec --offcpu): where it blocked, the kernel function, \
             the task state and the thread that woke it",
            vec![
                field("place", "In", F::String),
                field("blocked_in", "Blocked in", F::String),
                field("state", "State", F::String),
                field("woken_by", "Woken by", F::String),
                field("waker_tid", "Waker tid", F::Integer),
                field("waker_stack", "Waker stack", F::String),
            ],
        ),
        Kind::Lock => (
            "EbtraceLock",
            "A contended lock wait (ebrec --lock): the mutex, how long it was held after, \
             and the thread that released it",
            vec![
                field("place", "In", F::String),
                field("mutex", "Mutex", F::String),
                field("source", "Source", F::String),
                field("hold_ns", "Held", F::Nanoseconds),
                field("waker_tid", "Released by tid", F::Integer),
                field("waker_stack", "Releaser stack", F::String),
            ],
        ),
        Kind::Func => (
            "EbtraceFunc",
            "A call of a function probed with ebrec --func",
            vec![
                field("function", "Function", F::String),
                field("place", "Caller", F::String),
            ],
        ),
        Kind::Syscall => (
            "EbtraceSyscall",
            "A slow system call (ebrec --syscalls)",
            vec![
                field("syscall", "Syscall", F::String),
                field("ret", "Returned", F::Integer),
                field("place", "In", F::String),
            ],
        ),
        Kind::Bio => (
            "EbtraceBio",
            "A block I/O request (ebrec --bio)",
            vec![
                field("device", "Device", F::String),
                field("op", "Op", F::String),
                field("bytes", "Bytes", F::Bytes),
                field("error", "Error", F::Integer),
            ],
        ),
        _ => (
            "EbtraceRunq",
            "A wait in the run queue (ebrec --runq)",
            vec![
                field("preempted", "Preempted", F::String),
                field("cpu", "CPU", F::Integer),
            ],
        ),
    };
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
    categories: HashMap<Kind, CategoryHandle>,
    schemas: HashMap<Kind, MarkerTypeHandle>,
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
    let hz = h
        .options
        .iter()
        .find(|kv| kv.key == "cpu")
        .and_then(|kv| kv.value.parse::<f32>().ok())
        .filter(|hz| *hz > 0.0)
        .unwrap_or(99.0);
    let product = match tree.values().next() {
        Some((comm, _)) if tree.len() == 1 => format!("{comm} (ebtrace)"),
        _ => "ebtrace".to_string(),
    };
    let mut profile = Profile::new(
        &product,
        ReferenceTimestamp::from_millis_since_unix_epoch(h.start_realtime_ns as f64 / 1e6),
        SamplingInterval::from_hz(hz),
    );
    profile.set_os_name(&format!("Linux {} {}", h.kernel_release, h.arch));
    profile.set_symbolicated(true);
    let user = profile.add_category("User", CategoryColor::Yellow);
    let kernel = profile.add_category("Kernel", CategoryColor::Orange);
    let mut categories = HashMap::new();
    for (k, name, color) in [
        (Kind::OffCpu, "Off-CPU", CategoryColor::Blue),
        (Kind::Lock, "Lock", CategoryColor::Red),
        (Kind::Func, "Function", CategoryColor::Green),
        (Kind::Syscall, "Syscall", CategoryColor::Purple),
        (Kind::Bio, "Block I/O", CategoryColor::Brown),
        (Kind::Runq, "Run queue", CategoryColor::LightRed),
    ] {
        categories.insert(k, profile.add_category(name, color));
    }
    let mut b = Builder {
        profile,
        user,
        kernel,
        categories,
        schemas: HashMap::new(),
        names: StackNames::default(),
        stacks: HashMap::new(),
        joined: HashMap::new(),
    };
    let mut stats = ExportStats {
        kinds: c.kind_counts(),
        processes: tree.len(),
        threads: tree.values().map(|(_, t)| t.len()).sum(),
        ..Default::default()
    };
    // When each thread was first and last seen.
    let mut span: HashMap<u32, (u64, u64)> = HashMap::new();
    for r in c.kinds.values().flatten() {
        let e = span.entry(r.tid).or_insert((u64::MAX, 0));
        e.0 = e.0.min(r.time);
        e.1 = e.1.max(r.time + r.dur);
    }
    let mut threads: HashMap<u32, ThreadHandle> = HashMap::new();
    let mut first_thread: BTreeMap<u32, ThreadHandle> = BTreeMap::new();
    for (&pid, (comm, tids)) in &tree {
        let start = tids
            .iter()
            .filter_map(|t| span.get(t))
            .map(|s| s.0)
            .min()
            .unwrap_or(h.start_time_ns);
        let process = b.profile.add_process(comm, pid, ts(&c, start));
        for &tid in tids {
            let (t0, t1) = span.get(&tid).copied().unwrap_or((start, start));
            let t = b.profile.add_thread(process, tid, ts(&c, t0), tid == pid);
            b.profile.set_thread_name(
                t,
                &if tid == pid {
                    comm.clone()
                } else {
                    format!("{comm} {tid}")
                },
            );
            b.profile.set_thread_end_time(t, ts(&c, t1));
            b.profile.set_thread_show_markers_in_timeline(t, true);
            threads.insert(tid, t);
            first_thread.entry(pid).or_insert(t);
        }
    }
    let period = (1e9 / f64::from(hz)) as u64;
    let kinds = std::mem::take(&mut c.kinds);
    for (kind, recs) in &kinds {
        for r in recs {
            let Some(&thread) = threads.get(&r.tid) else {
                continue;
            };
            match r.extra {
                Extra::Cpu { .. } => {
                    let s = b.stack(&mut c, thread, r.stack);
                    b.profile.add_sample(
                        thread,
                        ts(&c, r.time),
                        s,
                        CpuDelta::from_nanos(period),
                        1,
                    );
                    continue;
                }
                Extra::Alloc { size, address } => {
                    let pid = c.process(r.generation).0;
                    let Some(&first) = first_thread.get(&pid) else {
                        continue;
                    };
                    // The crate keeps allocations on the process's first thread, with
                    // that thread's stack table: the stack is interned there.
                    let s = b.stack(&mut c, first, r.stack);
                    b.profile.add_allocation_sample(
                        first,
                        ts(&c, r.time),
                        s,
                        address,
                        i64::try_from(size).unwrap_or(i64::MAX),
                    );
                    continue;
                }
                // Memory growth has no marker here (the Perfetto export has it).
                Extra::MemGrowth { .. } => continue,
                _ => {}
            }
            let frames = b.names.frames(&mut c.loaded, r.stack);
            let place = user_place(&frames);
            let strings = |b: &mut Builder, s: &str| V::S(b.profile.intern_string(s));
            let (name, fields) = match r.extra {
                Extra::OffCpu {
                    waker_tid,
                    waker_stack,
                    state,
                } => {
                    let ws = b.joined(&mut c, waker_stack);
                    let wframes = b.names.frames(&mut c.loaded, waker_stack);
                    // An interrupt's wake names whichever thread it ran on: no waker.
                    let (by, tid) = if interrupt_wake(&wframes) {
                        ("interrupt", 0)
                    } else if waker_tid != 0 {
                        ("thread", waker_tid)
                    } else {
                        // The recorder keeps no waker for a wake from the idle task: an
                        // interrupt on an idle CPU.
                        ("interrupt", 0)
                    };
                    (
                        place.clone(),
                        vec![
                            strings(&mut b, &place),
                            strings(&mut b, &kernel_place(&frames).unwrap_or_default()),
                            strings(&mut b, &task_state_name(state)),
                            strings(&mut b, by),
                            V::N(f64::from(tid)),
                            V::S(ws),
                        ],
                    )
                }
                Extra::Lock {
                    mutex,
                    hold_ns,
                    waker_tid,
                    waker_stack,
                    source,
                    ..
                } => {
                    let ws = b.joined(&mut c, waker_stack);
                    (
                        format!("lock wait in {place}"),
                        vec![
                            strings(&mut b, &place),
                            strings(&mut b, &format!("{mutex:#x}")),
                            strings(&mut b, lock_source_name(source)),
                            V::N(hold_ns as f64),
                            V::N(f64::from(waker_tid)),
                            V::S(ws),
                        ],
                    )
                }
                Extra::Func { function } => {
                    let f = function_name(&c.loaded, function);
                    (
                        f.clone(),
                        vec![strings(&mut b, &f), strings(&mut b, &place)],
                    )
                }
                Extra::Syscall { nr, ret } => {
                    let s = syscall_name(&h.arch, u64::from(nr));
                    (
                        format!("syscall {s}"),
                        vec![
                            strings(&mut b, &s),
                            V::N(ret as f64),
                            strings(&mut b, &place),
                        ],
                    )
                }
                Extra::Bio {
                    dev,
                    op,
                    bytes,
                    error,
                } => {
                    let d = device_name(&c.loaded, dev);
                    let o = bio_op_name(op);
                    (
                        format!("bio {o} {d}"),
                        vec![
                            strings(&mut b, &d),
                            strings(&mut b, o),
                            V::N(bytes as f64),
                            V::N(f64::from(error)),
                        ],
                    )
                }
                Extra::Runq { preempted, cpu } => (
                    "runq wait".to_string(),
                    vec![
                        strings(&mut b, if preempted != 0 { "yes" } else { "no" }),
                        V::N(f64::from(cpu)),
                    ],
                ),
                Extra::Cpu { .. } | Extra::Alloc { .. } | Extra::MemGrowth { .. } => continue,
            };
            let ty = match b.schemas.get(kind) {
                Some(&t) => t,
                None => {
                    let t = b.profile.register_marker_type(schema(*kind));
                    b.schemas.insert(*kind, t);
                    t
                }
            };
            let m = M {
                ty,
                name: b.profile.intern_string(&name),
                category: b.categories[kind],
                fields,
            };
            let timing = MarkerTiming::Interval(ts(&c, r.time), ts(&c, r.time + r.dur));
            let handle = b.profile.add_marker(thread, timing, m);
            let s = b.stack(&mut c, thread, r.stack);
            b.profile.set_marker_stack(thread, handle, s);
        }
    }
    serde_json::to_writer(&mut *out, &b.profile)?;
    out.write_all(b"\n")?;
    stats.losses = c.loaded.losses.clone();
    Ok(stats)
}
