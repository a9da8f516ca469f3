//! pprof output (`ebsym pprof`): the merged stacks of one kind as a gzip-compressed
//! `profile.proto` (Google's schema, `proto/profile.proto`), for `go tool pprof`, Pyroscope,
//! Parca and Grafana.
//!
//! Sample types per kind: alloc `alloc_objects`/count, `alloc_space`/bytes and, as Go's heap
//! profiles have them, `inuse_objects`/count, `inuse_space`/bytes (the blocks still
//! outstanding at the end; left out when the recording tracked no frees); lock
//! `contentions`/count, `delay`/nanoseconds (and `hold`/nanoseconds where holds were
//! recorded); cpu `samples`/count; offcpu `time`/nanoseconds; func `calls`/count,
//! `latency`/nanoseconds; memgrowth `growth_events`/count, `growth_space`/bytes. `--by`
//! picks the default sample type. One Location per (mapping, address), its Lines the inline
//! chain innermost first; Functions deduplicated by (name, file); Mappings with their
//! build-ids and file names, the first (id 1) a traced process's main executable, as pprof
//! and the backends that symbolize by mapping expect.
//!
//! Each sample carries a `thread` label: the name of the thread its events are of (a
//! stack of several threads is one sample per thread name, `ebsym pprof`), for pprof's
//! `-tagfocus thread=worker` and the backends' label filters.
//!
//! [`profile_of_parts`] is the same profile made of several parts (say one per process,
//! their samples labelled `pid`, `comm`), with [`Options`] for a backend that symbolizes
//! by build-id (user frames as addresses in their mappings): what `ebrec push` sends.
use crate::hash::FastMap;
use crate::model::{Frame, MappingInfo};
use crate::reports::{EventKind, HeapMeasure, Measure, StackValues, Stacks};
use ebtrace_proto::pprof::{Function, Label, Line, Location, Mapping, Profile, Sample, ValueType};
use std::borrow::Borrow;
use std::collections::HashMap;

/// Sample types (type, unit) of `kind`, in the order of each sample's values.
pub fn sample_types(kind: EventKind, has_hold: bool) -> Vec<(&'static str, &'static str)> {
    match kind {
        EventKind::Alloc => vec![
            ("alloc_objects", "count"),
            ("alloc_space", "bytes"),
            ("inuse_objects", "count"),
            ("inuse_space", "bytes"),
        ],
        EventKind::MemGrowth => vec![("growth_events", "count"), ("growth_space", "bytes")],
        EventKind::Lock if has_hold => vec![
            ("contentions", "count"),
            ("delay", "nanoseconds"),
            ("hold", "nanoseconds"),
        ],
        EventKind::Lock => vec![("contentions", "count"), ("delay", "nanoseconds")],
        EventKind::Cpu => vec![("samples", "count")],
        EventKind::OffCpu => vec![("time", "nanoseconds")],
        EventKind::Func => vec![("calls", "count"), ("latency", "nanoseconds")],
        EventKind::Syscall => vec![("calls", "count"), ("latency", "nanoseconds")],
        EventKind::Bio => vec![
            ("requests", "count"),
            ("latency", "nanoseconds"),
            ("bytes", "bytes"),
        ],
        EventKind::Runq => vec![("waits", "count"), ("delay", "nanoseconds")],
        EventKind::Tcp => vec![("connections", "count")],
        EventKind::Usdt => vec![("hits", "count")],
    }
}

/// The sample type `--by` stands for.
fn default_type(kind: EventKind, by: Measure) -> &'static str {
    match (kind, by) {
        (EventKind::Alloc, Measure::Count) => "alloc_objects",
        (EventKind::Alloc, _) => "alloc_space",
        (EventKind::MemGrowth, Measure::Count) => "growth_events",
        (EventKind::MemGrowth, _) => "growth_space",
        (EventKind::Lock, Measure::Count) => "contentions",
        (EventKind::Lock, Measure::Hold) => "hold",
        (EventKind::Lock, _) => "delay",
        (EventKind::Cpu, _) => "samples",
        (EventKind::OffCpu, _) => "time",
        (EventKind::Func, Measure::Count) => "calls",
        (EventKind::Func, _) => "latency",
        (EventKind::Syscall, Measure::Count) => "calls",
        (EventKind::Syscall, _) => "latency",
        (EventKind::Bio, Measure::Count) => "requests",
        (EventKind::Bio, Measure::Bytes) => "bytes",
        (EventKind::Bio, _) => "latency",
        (EventKind::Runq, Measure::Count) => "waits",
        (EventKind::Runq, _) => "delay",
        (EventKind::Tcp, _) => "connections",
        (EventKind::Usdt, _) => "hits",
    }
}

/// A location's identity: (mapping id, address, its lines as (function id, line)).
type LocationKey = (u64, u64, Vec<(u64, i64)>);

#[derive(Default)]
struct Builder {
    strings: Vec<String>,
    string_ids: FastMap<String, i64>,
    mappings: Vec<Mapping>,
    mapping_ids: FastMap<MappingInfo, u64>,
    functions: Vec<Function>,
    /// By the ids of its name and file.
    function_ids: FastMap<(i64, i64), u64>,
    locations: Vec<Location>,
    location_ids: FastMap<LocationKey, u64>,
}

impl Builder {
    fn string(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.string_ids.get(s) {
            return i;
        }
        let i = self.strings.len() as i64;
        self.strings.push(s.to_string());
        self.string_ids.insert(s.to_string(), i);
        i
    }

    fn mapping(&mut self, m: &MappingInfo) -> u64 {
        if let Some(&id) = self.mapping_ids.get(m) {
            return id;
        }
        let id = self.mappings.len() as u64 + 1;
        let filename = self.string(&m.path);
        let build_id = self.string(&m.build_id);
        self.mappings.push(Mapping {
            id,
            memory_start: m.start,
            memory_limit: m.end,
            file_offset: m.file_offset,
            filename,
            build_id,
            ..Default::default()
        });
        self.mapping_ids.insert(m.clone(), id);
        id
    }

    fn function(&mut self, f: &Frame) -> u64 {
        let name = self.string(&f.function);
        let filename = self.string(f.file.as_deref().unwrap_or_default());
        if let Some(&id) = self.function_ids.get(&(name, filename)) {
            return id;
        }
        let id = self.functions.len() as u64 + 1;
        self.functions.push(Function {
            id,
            name,
            system_name: name,
            filename,
            start_line: 0,
        });
        self.function_ids.insert((name, filename), id);
        id
    }

    /// The location of one inline chain (innermost first, the containing function last).
    /// With [`Options::addresses_only`] (or an unresolved frame and
    /// [`Options::unresolved_as_addresses`]), a chain in a mapping is its address alone.
    fn location<F: Borrow<Frame>>(
        &mut self,
        chain: &[F],
        mapping: Option<&MappingInfo>,
        options: &Options,
    ) -> u64 {
        let frames = || chain.iter().map(Borrow::borrow);
        let mapping_id = mapping.map_or(0, |m| self.mapping(m));
        let address = frames()
            .next()
            .and_then(|f| u64::from_str_radix(f.address.trim_start_matches("0x"), 16).ok())
            .unwrap_or(0);
        let lone_unresolved = chain.len() == 1 && unresolved(chain[0].borrow());
        let addresses_only =
            options.addresses_only || (options.unresolved_as_addresses && lone_unresolved);
        let lines: Vec<(u64, i64)> = if addresses_only && mapping_id != 0 {
            Vec::new()
        } else {
            frames()
                .map(|f| (self.function(f), i64::from(f.line.unwrap_or(0))))
                .collect()
        };
        // Named from DWARF: functions, files, lines and inline frames; from a symbol table
        // only (the agent's Pyroscope pushes): functions.
        let named = !(lines.is_empty() || lone_unresolved);
        let symbolized = !lines.is_empty() && frames().any(|f| f.file.is_some());
        if named && mapping_id != 0 {
            let m = &mut self.mappings[mapping_id as usize - 1];
            m.has_functions = true;
            if symbolized {
                m.has_filenames = true;
                m.has_line_numbers = true;
                m.has_inline_frames = true;
            }
        }
        let key = (mapping_id, address, lines);
        if let Some(&id) = self.location_ids.get(&key) {
            return id;
        }
        let id = self.locations.len() as u64 + 1;
        self.locations.push(Location {
            id,
            mapping_id,
            address,
            line: key
                .2
                .iter()
                .map(|&(function_id, line)| Line { function_id, line })
                .collect(),
            is_folded: false,
        });
        self.location_ids.insert(key, id);
        id
    }
}

/// Splits leaf-first `frames` into inline chains: each ends at the first frame that is not
/// inlined (the function the preceding ones were inlined into).
fn chains<F: Borrow<Frame>>(frames: &[F]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, f) in frames.iter().enumerate() {
        if !f.borrow().inlined {
            out.push(start..i + 1);
            start = i + 1;
        }
    }
    if start < frames.len() {
        out.push(start..frames.len());
    }
    out
}

/// [`profile_by`] with `by` a measure's name (the kind's default if it names none).
pub fn profile(st: &Stacks, by: &str) -> Profile {
    profile_by(st, st.kind.measure_or_default(by))
}

/// The pprof profile of `st`, with `by` as the default sample type.
pub fn profile_by(st: &Stacks, by: Measure) -> Profile {
    profile_of_parts(
        &[Part {
            stacks: st,
            labels: Vec::new(),
        }],
        by,
        &Options::default(),
    )
}

/// How [`profile_of_parts`] writes locations.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// User frames (those in a recorded mapping) as their address and mapping alone: a
    /// Location without Lines or Functions, for a backend that symbolizes by the mapping's
    /// build-id (Parca, Pyroscope, OTLP receivers). Kernel frames keep their names.
    pub addresses_only: bool,
    /// User frames the symbolizer could not name (`libfoo.so+0x1234`, a binary without
    /// debug info or symbols here) as addresses too, for the backend to try by build-id.
    pub unresolved_as_addresses: bool,
}

/// Whether `f` is a user frame analyze could not name: `FILE_NAME+0xOFFSET` of its module.
fn unresolved(f: &Frame) -> bool {
    let short = f.module.rsplit('/').next().unwrap_or(&f.module);
    f.file.is_none()
        && !short.is_empty()
        && f.function
            .strip_prefix(short)
            .and_then(|r| r.strip_prefix("+0x"))
            .is_some_and(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// One part of a profile: stacks of one kind (say of one process) and the labels their
/// samples carry (`pid`, `comm`, …).
#[derive(Debug)]
pub struct Part<'a> {
    pub stacks: &'a Stacks,
    pub labels: Vec<(String, String)>,
}

/// One profile of the stacks of several parts of one kind (the header, times and losses
/// are the first part's, widened to all parts' events), each part's samples carrying its
/// labels. Without parts, an empty profile of no kind's sample types.
pub fn profile_of_parts(parts: &[Part<'_>], by: Measure, options: &Options) -> Profile {
    let Some(first) = parts.first() else {
        return Profile {
            string_table: vec![String::new()],
            ..Default::default()
        };
    };
    let st = first.stacks;
    let all = || parts.iter().flat_map(|p| p.stacks.stacks.iter());
    let mut b = Builder::default();
    b.string("");
    let has_hold = st.kind == EventKind::Lock && all().any(|s| s.hold > 0);
    let mut types = sample_types(st.kind, has_hold);
    let no_free = st
        .header
        .options
        .iter()
        .any(|o| o.key == "no-free" && o.value == "true");
    if no_free {
        types.retain(|(t, _)| !t.starts_with("inuse_"));
    }
    let sample_type: Vec<ValueType> = types
        .iter()
        .map(|(t, u)| ValueType {
            r#type: b.string(t),
            unit: b.string(u),
        })
        .collect();
    let mutex_key = b.string("mutex");
    main_mapping(&mut b, parts);
    let mut samples = Vec::with_capacity(all().count());
    for (s, part_labels) in parts
        .iter()
        .flat_map(|p| p.stacks.stacks.iter().map(move |s| (s, &p.labels)))
    {
        let location_id = chains(&s.frames)
            .into_iter()
            .map(|r| {
                let mapping = s.mappings.get(r.start).and_then(|m| m.as_deref());
                b.location(&s.frames[r], mapping, options)
            })
            .collect();
        let value = sample_values(&types, s);
        let mutex = (st.kind == EventKind::Lock).then_some(mutex_key);
        let label = sample_labels(&mut b, s, mutex, part_labels);
        samples.push(Sample {
            location_id,
            value,
            label,
        });
    }
    let default = default_type(st.kind, by);
    let default_sample_type = if types.iter().any(|(t, _)| *t == default) {
        b.string(default)
    } else {
        0
    };
    let comment = comments(&mut b, st);
    let period_type = sample_type.first().copied();
    Profile {
        sample_type,
        sample: samples,
        mapping: b.mappings,
        location: b.locations,
        function: b.functions,
        string_table: b.strings,
        time_nanos: st.header.start_realtime_ns as i64,
        duration_nanos: match (
            parts.iter().filter_map(|p| p.stacks.first_event_ns).min(),
            parts.iter().filter_map(|p| p.stacks.last_event_ns).max(),
        ) {
            (Some(a), Some(z)) => z.saturating_sub(a) as i64,
            _ => 0,
        },
        period_type,
        period: 1,
        comment,
        default_sample_type,
        ..Default::default()
    }
}

/// Mapping 1: the main executable (of the process with the most stacks in it).
fn main_mapping(b: &mut Builder, parts: &[Part<'_>]) {
    let mut exe_uses: HashMap<&MappingInfo, usize> = HashMap::new();
    for p in parts {
        for s in &p.stacks.stacks {
            for m in s.mappings.iter().flatten() {
                if p.stacks.executables.contains(&m.path) {
                    *exe_uses.entry(m).or_default() += 1;
                }
            }
        }
    }
    if let Some((m, _)) = exe_uses
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(a.0)))
    {
        b.mapping(m);
    }
}

/// A stack's sample values, one per sample type of `types`.
fn sample_values(types: &[(&str, &str)], s: &StackValues) -> Vec<i64> {
    types
        .iter()
        .map(|(t, _)| match *t {
            "alloc_objects" | "growth_events" | "contentions" | "samples" | "calls"
            | "requests" | "waits" | "connections" => s.count,
            "inuse_objects" => s.inuse_count,
            "inuse_space" => s.inuse_bytes,
            // bio: the bytes are the stack's second value (as a lock's hold time).
            "hold" | "bytes" => s.hold,
            _ => s.total,
        } as i64)
        .collect()
}

/// A stack's sample labels: its mutex (lock: `mutex` the key's string), its thread, its
/// part's labels.
fn sample_labels(
    b: &mut Builder,
    s: &StackValues,
    mutex: Option<i64>,
    part_labels: &[(String, String)],
) -> Vec<Label> {
    let mut label = match mutex {
        Some(mutex_key) => vec![Label {
            key: mutex_key,
            str: b.string(&format!("{:#x}", s.sub)),
            ..Default::default()
        }],
        None => Vec::new(),
    };
    // The stack's thread (split by thread name: `stacks_by_thread_from`), else the
    // threads it mixes, as `top` names them.
    if let Some(t) = &s.thread {
        label.push(Label {
            key: b.string("thread"),
            str: b.string(t),
            ..Default::default()
        });
    }
    for (k, v) in part_labels {
        label.push(Label {
            key: b.string(k),
            str: b.string(v),
            ..Default::default()
        });
    }
    label
}

/// The profile's comments: what made it, and the events lost while recording.
fn comments(b: &mut Builder, st: &Stacks) -> Vec<i64> {
    let mut comment = vec![b.string(&format!(
        "ebtrace {} profile ({})",
        st.kind.name(),
        st.header.recorder_version
    ))];
    if !st.losses.recorded.is_empty() {
        let v: Vec<String> = st
            .losses
            .recorded
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        comment.push(b.string(&format!("events lost while recording: {}", v.join(", "))));
    }
    comment
}

/// The sample types of a heap profile ([`heap_profile`]), each the measure of `ebsym heap`
/// (and of `ebsym folded --kind alloc --by`) it holds: allocations, bytes, temporary, peak,
/// leaked.
pub const HEAP_SAMPLE_TYPES: [(&str, &str, HeapMeasure); 5] = [
    ("alloc_objects", "count", HeapMeasure::Allocations),
    ("alloc_space", "bytes", HeapMeasure::Bytes),
    ("temporary_objects", "count", HeapMeasure::Temporary),
    ("peak_space", "bytes", HeapMeasure::Peak),
    ("leaked_space", "bytes", HeapMeasure::Leaked),
];

/// `ebsym pprof --kind alloc --by temporary|peak|leaked`: a profile of `ebsym heap`'s rows
/// (every stack: make the report with `n` unbounded), one sample per row with the five
/// values of [`HEAP_SAMPLE_TYPES`] (a measure the trace cannot say, such as temporary of a
/// sampled trace, is 0 and left out of the types), `by`'s the default. Its samples carry the
/// label `allocator` ("malloc" or an `--alloc-fn` NAME). Frames are names only (no mappings:
/// the report merged stacks by their frames).
pub fn heap_profile(r: &crate::reports::HeapReport, by: HeapMeasure) -> Profile {
    let mut b = Builder::default();
    b.string("");
    let has_temporary = r.totals.temporary.is_some();
    let has_peak = r.totals.peak_bytes.is_some();
    let types: Vec<&(&str, &str, HeapMeasure)> = HEAP_SAMPLE_TYPES
        .iter()
        .filter(|(_, _, m)| match m {
            HeapMeasure::Temporary => has_temporary,
            HeapMeasure::Peak => has_peak,
            HeapMeasure::Leaked => r.totals.leaked_bytes.is_some(),
            _ => true,
        })
        .collect();
    let sample_type: Vec<ValueType> = types
        .iter()
        .map(|(t, u, _)| ValueType {
            r#type: b.string(t),
            unit: b.string(u),
        })
        .collect();
    let allocator_key = b.string("allocator");
    let options = Options::default();
    let mut samples = Vec::with_capacity(r.rows.len());
    for row in &r.rows {
        let location_id = chains(&row.frames)
            .into_iter()
            .map(|c| b.location(&row.frames[c], None, &options))
            .collect();
        let value = types
            .iter()
            .map(|(_, _, m)| match m {
                HeapMeasure::Allocations => row.allocations,
                HeapMeasure::Bytes => row.bytes,
                HeapMeasure::Temporary => row.temporary.unwrap_or(0),
                HeapMeasure::Peak => row.peak_bytes.unwrap_or(0),
                HeapMeasure::Leaked => row.leaked_bytes,
            } as i64)
            .collect();
        let label = vec![Label {
            key: allocator_key,
            str: b.string(&row.allocator),
            ..Default::default()
        }];
        samples.push(Sample {
            location_id,
            value,
            label,
        });
    }
    let default_sample_type = types
        .iter()
        .find(|(_, _, m)| *m == by)
        .map_or(0, |(t, _, _)| b.string(t));
    let mut comment = vec![b.string(&format!("ebtrace heap profile (by {})", by.name()))];
    for why in r.inexact.iter().chain(&r.notes) {
        comment.push(b.string(why));
    }
    let period_type = sample_type.first().copied();
    Profile {
        sample_type,
        sample: samples,
        mapping: b.mappings,
        location: b.locations,
        function: b.functions,
        string_table: b.strings,
        period_type,
        period: 1,
        comment,
        default_sample_type,
        ..Default::default()
    }
}

/// Writes `p` gzip-compressed, as pprof reads it.
pub fn write_gz(p: &Profile, out: impl std::io::Write) -> std::io::Result<()> {
    use prost::Message;
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    gz.write_all(&p.encode_to_vec())?;
    gz.finish()?;
    Ok(())
}
