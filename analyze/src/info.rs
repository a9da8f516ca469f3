//! `ebsym info`: what a user asks first about a trace from a bug ticket.
//!
//! JSON schema (`ebsym info --json`), stable: every field below is always present, and
//! `schema_version` is [`crate::JSON_SCHEMA_VERSION`] (what keeps it and what bumps it is
//! said there). Families are spelled by their registry name (`ebtrace_format::family`).
//! ```text
//! { "schema_version",
//!   "file": {"path", "bytes", "format_version", "chunks", "records"},
//!   "header": {"recorder_version", "hostname", "kernel_release", "arch", "cpu_count",
//!              "page_size", "boot_id", "clock", "options": {k: v}, "argv": [..],
//!              "start_time": RFC 3339 or null},
//!   "span": {"first_event_ns", "last_event_ns", "duration_ns"},   // boottime ns; null if no event
//!   "processes": [{"generation", "pid", "ppid", "comm", "exe", "cmdline", "event",
//!                  "start_time_ns", "exit_time_ns", "exit_code", "parent_generation",
//!                  "pid_ns",      // inode of its pid namespace, 0 if unknown
//!                  "ns_pids",     // its pid in each pid namespace: the host's ("pid")
//!                                 // first, innermost last; [] if unknown
//!                  "ns_pid",      // the innermost of ns_pids (= pid when not nested), null if unknown
//!                  "cgroup",      // cgroup v2 path, "" if unknown
//!                  "container_id",   // 64 hex from the cgroup path, "" if none
//!                  "binaries": [{"path", "build_id"}]}],
//!   "events": {"alloc", "free", "lock", "func", "cpu", "offcpu", "memgrowth", "syscall",
//!              "bio", "runq", "tcp", "usdt", "histogram_rows"},
//!   "stacks", "stack_copies", "stack_copy_bytes",   // copies of the target's stack memory
//!   "uprobes_frames",   // stack frames in the kernel's uprobes page ([uprobes])
//!   "vdso": {"build_id", "bytes"} or null,   // the vDSO image the trace holds
//!   "probe_changes": [{"time_ns", "family", "kind", "setting", "value", "generation",
//!                      "since_ns", "reason"}],   // --max-cpu rates and pauses, late probes
//!   "aggregated": {family: {"records", "rows", "count", "sum"}},   // --aggregate counters
//!   "losses": [{"family", "reason", "count"}], "lost_total",
//!   "ended": "clean" | "cut", "stop_reason", "damage": ["…"],
//!   "symbolized": bool, "symbolized_addresses" }
//! ```
use crate::time;
use ebtrace_format::events::Family;
use ebtrace_format::proto::{
    record::Kind, Aggregate, Header, LossReason, ProbeChange, Record, Trailer,
};
use ebtrace_format::{Tables, TraceReader};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::io::Read;
use std::path::Path;

#[derive(Debug, Serialize)]
pub struct Info {
    pub file: FileInfo,
    pub header: HeaderInfo,
    pub span: Option<Span>,
    pub processes: Vec<ProcessInfo>,
    pub events: EventCounts,
    pub stacks: u64,
    /// Stacks that carry a raw copy of the target's user stack (`--stack-mode dwarf`):
    /// target memory (request data, keys, passwords), 0 when none.
    pub stack_copies: u64,
    /// The bytes of target stack those copies hold (their `data`).
    pub stack_copy_bytes: u64,
    /// Frames of the stacks that lie in the kernel's uprobes page (`[uprobes]`: the
    /// return-probe trampoline, a single-step slot), counted once per stack.
    pub uprobes_frames: u64,
    /// The vDSO image the trace holds (`VdsoImage`): `[vdso]` frames are named from it.
    pub vdso: Option<VdsoInfo>,
    /// What changed in the recording while it ran (`ProbeChange`): --max-cpu's sampling
    /// rates and pauses, children probed late.
    pub probe_changes: Vec<ProbeChangeInfo>,
    /// Families counted in the kernel (--aggregate): `Aggregate` records, their rows, and
    /// the events (count) and sum (alloc: bytes) they add up to. Empty when none.
    pub aggregated: BTreeMap<String, AggregatedInfo>,
    pub losses: Vec<LossInfo>,
    pub lost_total: u64,
    pub ended: &'static str,
    pub stop_reason: Option<String>,
    pub damage: Vec<String>,
    pub symbolized: bool,
    pub symbolized_addresses: u64,
}

#[derive(Debug, Serialize)]
pub struct ProbeChangeInfo {
    pub time_ns: u64,
    pub family: String,
    /// "rate", "paused", "resumed", "attached_late".
    pub kind: String,
    pub setting: String,
    pub value: u64,
    pub generation: u32,
    pub since_ns: u64,
    pub reason: String,
}

#[derive(Debug, Default, Serialize)]
pub struct AggregatedInfo {
    pub records: u64,
    pub rows: u64,
    pub count: u64,
    pub sum: u64,
}

#[derive(Debug, Serialize)]
pub struct VdsoInfo {
    pub build_id: String,
    pub bytes: u64,
}

#[derive(Debug, Serialize)]
pub struct FileInfo {
    pub path: String,
    pub bytes: u64,
    pub format_version: u32,
    pub chunks: u64,
    pub records: u64,
}

#[derive(Debug, Serialize, Default)]
pub struct HeaderInfo {
    pub recorder_version: String,
    pub hostname: String,
    pub kernel_release: String,
    pub arch: String,
    pub cpu_count: u32,
    pub page_size: u32,
    pub boot_id: String,
    pub clock: String,
    pub options: BTreeMap<String, String>,
    pub argv: Vec<String>,
    pub start_time: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Span {
    pub first_event_ns: u64,
    pub last_event_ns: u64,
    pub duration_ns: u64,
}

#[derive(Debug, Serialize)]
pub struct ProcessInfo {
    pub generation: u32,
    pub pid: u32,
    pub ppid: u32,
    pub comm: String,
    pub exe: String,
    pub cmdline: Vec<String>,
    pub event: String,
    pub start_time_ns: u64,
    pub exit_time_ns: Option<u64>,
    pub exit_code: Option<i32>,
    pub parent_generation: u32,
    pub pid_ns: u64,
    pub ns_pids: Vec<u32>,
    pub ns_pid: Option<u32>,
    pub cgroup: String,
    pub container_id: String,
    pub binaries: Vec<BinaryInfo>,
}

#[derive(Debug, Serialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct BinaryInfo {
    pub path: String,
    pub build_id: String,
}

#[derive(Debug, Serialize, Default)]
pub struct EventCounts {
    pub alloc: u64,
    pub free: u64,
    pub lock: u64,
    pub func: u64,
    pub cpu: u64,
    pub offcpu: u64,
    pub memgrowth: u64,
    pub syscall: u64,
    pub bio: u64,
    pub runq: u64,
    pub tcp: u64,
    pub usdt: u64,
    /// Rows of the kernel's latency histograms (--syscalls, --bio, --runq).
    pub histogram_rows: u64,
}

#[derive(Debug, Serialize)]
pub struct LossInfo {
    pub family: String,
    pub reason: String,
    pub count: u64,
}

/// `n` with a comma every three digits: 1234567 → "1,234,567".
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut s = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        // `is_multiple_of` is Rust 1.87; the workspace says 1.85.
        #[allow(clippy::manual_is_multiple_of)]
        if i > 0 && (digits.len() - i) % 3 == 0 {
            s.push(',');
        }
        s.push(c);
    }
    s
}

/// A size for people: "512 B", "16.0 KiB", "5.6 MiB", "1.2 GiB".
pub fn size_text(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// Lowercase name of an enum value without its prefix, e.g. `ALLOC_KIND_MALLOC` → "malloc".
pub fn enum_name(full: &str, prefix: &str) -> String {
    full.strip_prefix(prefix)
        .unwrap_or(full)
        .to_ascii_lowercase()
}

fn family_name(v: i32) -> String {
    ebtrace_format::family::by_number(v)
        .map(|f| f.name.to_string())
        .unwrap_or_else(|| format!("family {v}"))
}

fn reason_name(v: i32) -> String {
    LossReason::try_from(v)
        .map(|f| enum_name(f.as_str_name(), "LOSS_REASON_"))
        .unwrap_or_else(|_| format!("reason {v}"))
}

/// Reads the whole trace at `path` and summarizes it: [`summarize_from`] of the opened
/// file, with the file's size.
pub fn summarize(path: &Path) -> Result<Info, ebtrace_format::Error> {
    let mut info = summarize_from(TraceReader::open(path)?, &path.display().to_string());
    info.file.bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    Ok(info)
}

/// Reads an open trace to its end and summarizes it; `name` is what `file.path` says
/// (the reader does not know), `file.bytes` the bytes the reader consumed.
pub fn summarize_from<R: Read>(mut reader: TraceReader<R>, name: &str) -> Info {
    let mut tally = Tally::default();
    for record in reader.by_ref() {
        tally.record(record);
    }
    tally.info(&reader, name)
}

/// What the summary counts as the trace streams by.
#[derive(Default)]
struct Tally {
    tables: Tables,
    header: Option<Header>,
    trailer: Option<Trailer>,
    events: EventCounts,
    span: Option<(u64, u64)>,
    losses: BTreeMap<(String, String), u64>,
    symbolized: bool,
    symbolized_addresses: u64,
    bad_batches: u64,
    stack_copies: u64,
    stack_copy_bytes: u64,
    vdso: Option<(u64, u64)>,
    probe_changes: Vec<ProbeChangeInfo>,
    aggregated: BTreeMap<String, AggregatedInfo>,
}

/// The earliest and latest time of a batch's events, and how many: None if the batch
/// does not decode.
fn times<B: Family>(b: &B, t: impl Fn(&B::Event) -> u64) -> Option<(u64, u64, u64)> {
    let evs = b.decode().ok()?;
    let lo = evs.iter().map(&t).min()?;
    let hi = evs.iter().map(&t).max()?;
    Some((lo, hi, evs.len() as u64))
}

/// Widens the span of event times to take in `t0`..`t1`.
fn widen(span: &mut Option<(u64, u64)>, t0: u64, t1: u64) {
    *span = Some(match *span {
        None => (t0, t1),
        Some((a, b)) => (a.min(t0), b.max(t1)),
    })
}

impl Tally {
    /// One record: the tables', an event batch (its events counted, their times in the
    /// span), or another record the summary counts.
    fn record(&mut self, mut record: Record) {
        self.stack_copy(&mut record);
        let Some(record) = self.tables.take(record) else {
            return;
        };
        let Some(kind) = record.kind else { return };
        let ev = &mut self.events;
        let counted = match &kind {
            Kind::Allocs(b) => times(b, |e| e.time_ns).map(|s| (s, &mut ev.alloc)),
            Kind::Frees(b) => times(b, |e| e.time_ns).map(|s| (s, &mut ev.free)),
            Kind::Locks(b) => times(b, |e| e.time_ns).map(|s| (s, &mut ev.lock)),
            Kind::Funcs(b) => times(b, |e| e.time_ns).map(|s| (s, &mut ev.func)),
            Kind::CpuSamples(b) => times(b, |e| e.time_ns).map(|s| (s, &mut ev.cpu)),
            Kind::Offcpu(b) => times(b, |e| e.time_ns).map(|s| (s, &mut ev.offcpu)),
            Kind::MemGrowth(b) => times(b, |e| e.time_ns).map(|s| (s, &mut ev.memgrowth)),
            Kind::Syscalls(b) => times(b, |e| e.time_ns).map(|s| (s, &mut ev.syscall)),
            Kind::Bios(b) => times(b, |e| e.time_ns).map(|s| (s, &mut ev.bio)),
            Kind::Runq(b) => times(b, |e| e.time_ns).map(|s| (s, &mut ev.runq)),
            Kind::Tcp(b) => times(b, |e| e.time_ns).map(|s| (s, &mut ev.tcp)),
            Kind::Usdts(b) => times(b, |e| e.time_ns).map(|s| (s, &mut ev.usdt)),
            _ => {
                self.other(&kind);
                return;
            }
        };
        match counted {
            Some(((lo, hi, n), counter)) => {
                *counter += n;
                widen(&mut self.span, lo, hi);
            }
            None => self.bad_batches += 1,
        }
    }

    /// A stack's copy of the target's stack memory: counted as it streams by, and not
    /// kept (a dwarf trace's copies can be gigabytes).
    fn stack_copy(&mut self, record: &mut Record) {
        if let Some(Kind::Stack(s)) = &mut record.kind {
            if let Some(c) = s.copy.take() {
                self.stack_copies += 1;
                self.stack_copy_bytes += c.data.len() as u64;
            }
        }
    }

    /// A record that is neither the tables' nor an event batch.
    fn other(&mut self, kind: &Kind) {
        match kind {
            Kind::Histogram(h) => self.events.histogram_rows += h.generation.len() as u64,
            Kind::Header(h) => {
                self.header.get_or_insert_with(|| h.clone());
            }
            Kind::Trailer(t) => self.trailer = Some(t.clone()),
            Kind::Lost(l) => {
                *self
                    .losses
                    .entry((family_name(l.family), reason_name(l.reason)))
                    .or_default() += l.count;
            }
            Kind::SymbolizerInfo(_) => self.symbolized = true,
            Kind::SymbolizedAddress(_) => self.symbolized_addresses += 1,
            Kind::VdsoImage(v) => {
                self.vdso.get_or_insert((v.build_id, v.image.len() as u64));
            }
            Kind::Aggregate(a) => self.aggregate(a),
            Kind::ProbeChange(p) => self.probe_changes.push(probe_change_info(p)),
            _ => {}
        }
    }

    /// An --aggregate record: its family's counters, and its interval in the span.
    fn aggregate(&mut self, a: &Aggregate) {
        let e = self.aggregated.entry(family_name(a.family)).or_default();
        e.records += 1;
        e.rows += a.generation.len() as u64;
        e.count += a.count.iter().sum::<u64>();
        e.sum += a.sum.iter().sum::<u64>();
        if !a.generation.is_empty() {
            let lo = if a.since_ns > 0 {
                a.since_ns
            } else {
                a.time_ns
            };
            widen(&mut self.span, lo, a.time_ns);
        }
    }

    /// The summary of what was counted from `reader`, read to its end; `name` is what
    /// `file.path` says.
    fn info<R: Read>(self, reader: &TraceReader<R>, name: &str) -> Info {
        let damage = damage(reader, self.bad_batches, &self.tables);
        let processes = processes(&self.tables);
        let uprobes_frames = uprobes_frames(&self.tables);
        let lost_total = self.losses.values().sum();
        let tables = self.tables;
        Info {
            file: FileInfo {
                path: name.to_string(),
                bytes: reader.offset(),
                format_version: reader.version(),
                chunks: reader.chunks(),
                records: reader.records(),
            },
            header: header_info(self.header.unwrap_or_default()),
            span: self.span.map(|(a, b)| Span {
                first_event_ns: a,
                last_event_ns: b,
                duration_ns: b - a,
            }),
            processes,
            events: self.events,
            stacks: tables.stacks.len() as u64,
            stack_copies: self.stack_copies,
            stack_copy_bytes: self.stack_copy_bytes,
            uprobes_frames,
            vdso: self.vdso.map(|(id, bytes)| VdsoInfo {
                build_id: tables.build_id_hex(id),
                bytes,
            }),
            probe_changes: self.probe_changes,
            aggregated: self.aggregated,
            losses: self
                .losses
                .into_iter()
                .map(|((family, reason), count)| LossInfo {
                    family,
                    reason,
                    count,
                })
                .collect(),
            lost_total,
            ended: if self.trailer.is_some() {
                "clean"
            } else {
                "cut"
            },
            stop_reason: self.trailer.map(|t| t.stop_reason),
            damage,
            symbolized: self.symbolized,
            symbolized_addresses: self.symbolized_addresses,
        }
    }
}

/// A --max-cpu change or a late probe, as `probe_changes` lists it.
fn probe_change_info(p: &ProbeChange) -> ProbeChangeInfo {
    ProbeChangeInfo {
        time_ns: p.time_ns,
        family: if p.family == 0 {
            "budget".into()
        } else {
            family_name(p.family)
        },
        kind: ebtrace_format::proto::ProbeChangeKind::try_from(p.kind)
            .map(|k| enum_name(k.as_str_name(), "PROBE_CHANGE_KIND_"))
            .unwrap_or_default(),
        setting: p.setting.clone(),
        value: p.value,
        generation: p.generation,
        since_ns: p.since_ns,
        reason: p.reason.clone(),
    }
}

/// What the reader found damaged, batches that did not decode, and records that refer to
/// undefined processes.
fn damage<R: Read>(reader: &TraceReader<R>, bad_batches: u64, tables: &Tables) -> Vec<String> {
    let mut damage: Vec<String> = reader.damage().iter().map(|d| d.to_string()).collect();
    if bad_batches > 0 {
        damage.push(format!(
            "{bad_batches} event batches with inconsistent columns skipped"
        ));
    }
    if tables.dangling > 0 {
        damage.push(format!(
            "{} records refer to undefined processes",
            tables.dangling
        ));
    }
    damage
}

/// The header as `info` shows it (a default one if the trace has none).
fn header_info(h: Header) -> HeaderInfo {
    HeaderInfo {
        start_time: (h.start_realtime_ns != 0).then(|| time::rfc3339(h.start_realtime_ns)),
        recorder_version: h.recorder_version,
        hostname: h.hostname,
        kernel_release: h.kernel_release,
        arch: h.arch,
        cpu_count: h.cpu_count,
        page_size: h.page_size,
        boot_id: h.boot_id,
        clock: h.clock,
        options: h.options.into_iter().map(|kv| (kv.key, kv.value)).collect(),
        argv: h.argv,
    }
}

/// Every process generation, in order of start.
fn processes(tables: &Tables) -> Vec<ProcessInfo> {
    let mut processes: Vec<ProcessInfo> = tables
        .generations
        .iter()
        .map(|(&generation, g)| {
            let p = &g.process;
            let binaries: BTreeSet<BinaryInfo> = g
                .mappings
                .iter()
                .filter(|m| m.perms & 4 != 0 && m.path != 0)
                .map(|m| BinaryInfo {
                    path: tables.string(m.path).into_owned(),
                    build_id: tables.build_id_hex(m.build_id),
                })
                .filter(|b| !b.path.starts_with('['))
                .collect();
            ProcessInfo {
                generation,
                pid: p.pid,
                ppid: p.ppid,
                comm: tables.string(p.comm).into_owned(),
                exe: tables.string(p.exe).into_owned(),
                cmdline: p
                    .cmdline
                    .iter()
                    .map(|&s| tables.string(s).into_owned())
                    .collect(),
                event: enum_name(p.event().as_str_name(), "PROCESS_EVENT_"),
                start_time_ns: p.start_time_ns,
                exit_time_ns: g.exit.map(|e| e.0),
                exit_code: g.exit.map(|e| e.1),
                parent_generation: p.parent_generation,
                pid_ns: p.pid_ns,
                ns_pids: p.ns_pids.clone(),
                // older traces have only ns_pid (0: unknown or not nested)
                ns_pid: p
                    .ns_pids
                    .last()
                    .copied()
                    .or((p.ns_pid != 0).then_some(p.ns_pid)),
                cgroup: tables.string(p.cgroup).into_owned(),
                container_id: p.container_id.clone(),
                binaries: binaries.into_iter().collect(),
            }
        })
        .collect();
    processes.sort_by_key(|p| (p.start_time_ns, p.generation));
    processes
}

/// The user frames of all stacks that lie in a `[uprobes]` mapping of their generation.
fn uprobes_frames(tables: &Tables) -> u64 {
    use ebtrace_format::tables::UPROBES_PATH;
    let paths: Vec<u64> = tables
        .strings
        .iter()
        .filter(|(_, v)| v.as_slice() == UPROBES_PATH)
        .map(|(&id, _)| id)
        .collect();
    if paths.is_empty() {
        return 0;
    }
    let ranges: BTreeMap<u32, Vec<(u64, u64)>> = tables
        .generations
        .iter()
        .map(|(&g, info)| {
            let r: Vec<(u64, u64)> = info
                .mappings
                .iter()
                .filter(|m| paths.contains(&m.path))
                .map(|m| (m.start, m.end))
                .collect();
            (g, r)
        })
        .filter(|(_, r)| !r.is_empty())
        .collect();
    tables
        .stacks
        .values()
        .filter_map(|s| Some((ranges.get(&s.generation)?, s)))
        .map(|(r, s)| {
            s.user_ips
                .iter()
                .filter(|&&ip| r.iter().any(|&(a, b)| a <= ip && ip < b))
                .count() as u64
        })
        .sum()
}

impl Info {
    /// Whether the trace holds the target's stack memory, and how much: `stack memory
    /// none`, or the count and size of the copies with the warning.
    pub fn stack_memory_line(&self) -> String {
        if self.stack_copies == 0 {
            return "stack memory none (no stack copies)".into();
        }
        format!(
            "stack memory {} stack copies, {} of the target's stack (--stack-mode dwarf): \
             share it only where that is acceptable; `ebsym strip` removes them",
            thousands(self.stack_copies),
            size_text(self.stack_copy_bytes)
        )
    }

    /// The report for people.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        self.trace_text(&mut s);
        self.state_text(&mut s);
        self.changes_text(&mut s);
        if self.uprobes_frames > 0 {
            let _ = writeln!(
                &mut s,
                "uprobes    {} stack frame{} in the kernel's uprobes page (a return probe's \
                 trampoline or a single-step slot), shown as \"[uprobes] …\"",
                thousands(self.uprobes_frames),
                if self.uprobes_frames == 1 { "" } else { "s" }
            );
        }
        self.events_text(&mut s);
        self.processes_text(&mut s);
        s
    }

    /// The file, the recorder, the host, the command and its options, when.
    fn trace_text(&self, s: &mut String) {
        let h = &self.header;
        let _ = writeln!(
            s,
            "trace      {} ({} bytes, format {}, {} chunks, {} records)",
            self.file.path,
            self.file.bytes,
            self.file.format_version,
            self.file.chunks,
            self.file.records
        );
        let _ = writeln!(s, "recorder   {}", h.recorder_version);
        let _ = writeln!(
            s,
            "host       {} ({} {}, {} CPUs, page {} B, boot {})",
            h.hostname, h.kernel_release, h.arch, h.cpu_count, h.page_size, h.boot_id
        );
        if !h.argv.is_empty() {
            let _ = writeln!(s, "command    {}", h.argv.join(" "));
        }
        if !h.options.is_empty() {
            let opts: Vec<String> = h.options.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let _ = writeln!(s, "options    {}", opts.join(" "));
        }
        if let Some(t) = &h.start_time {
            let _ = writeln!(s, "started    {t}");
        }
        match &self.span {
            Some(sp) => {
                let _ = writeln!(
                    s,
                    "events in  {} (boottime {} .. {} ns)",
                    time::duration(sp.duration_ns),
                    sp.first_event_ns,
                    sp.last_event_ns
                );
            }
            None => {
                let _ = writeln!(s, "events in  (no events)");
            }
        }
    }

    /// How the recording ended, its damage, whether symbolized, the stack memory, the vDSO,
    /// the --aggregate counters.
    fn state_text(&self, s: &mut String) {
        let state = match (&self.stop_reason, self.ended) {
            (Some(r), _) if r.starts_with("disk full") || r.starts_with("write error") => {
                format!("cut at its last whole chunk, with a trailer (stopped: {r})")
            }
            (Some(r), _) => format!("clean (stopped: {r})"),
            (None, _) if self.damage.is_empty() => {
                "CUT: no trailer, the file ends at a chunk boundary (the recorder was killed between chunks, or stopped on a full disk with no room left for its trailer)".into()
            }
            (None, _) => {
                "CUT: no trailer, the recorder did not finish (killed, crashed or still running)"
                    .into()
            }
        };
        let _ = writeln!(s, "ended      {state}");
        for d in &self.damage {
            let _ = writeln!(s, "DAMAGE     {d}");
        }
        let _ = writeln!(
            s,
            "symbolized {}",
            if self.symbolized {
                format!("yes ({} addresses)", self.symbolized_addresses)
            } else {
                "no".into()
            }
        );
        let _ = writeln!(s, "{}", self.stack_memory_line());
        if let Some(v) = &self.vdso {
            let _ = writeln!(
                s,
                "vdso       image stored ({}, build-id {}): [vdso] frames are named",
                size_text(v.bytes),
                v.build_id
            );
        }
        for (family, a) in &self.aggregated {
            let _ = writeln!(
                s,
                "aggregated {family}: {} events (sum {}) counted in the kernel, {} rows in {} records (--aggregate)",
                a.count, a.sum, a.rows, a.records
            );
        }
    }

    /// The probe changes while recording (the first 20).
    fn changes_text(&self, s: &mut String) {
        if !self.probe_changes.is_empty() {
            let _ = writeln!(
                s,
                "changes    {} while recording:",
                self.probe_changes.len()
            );
            let t0 = self.span.as_ref().map_or(0, |sp| sp.first_event_ns);
            for c in self.probe_changes.iter().take(20) {
                let what = match c.kind.as_str() {
                    "rate" => format!("{} {}={}", c.family, c.setting, c.value),
                    k => format!("{} {k}", c.family),
                };
                let _ = writeln!(
                    s,
                    "  +{:.3} s  {what}: {}",
                    c.time_ns.saturating_sub(t0) as f64 / 1e9,
                    c.reason
                );
            }
            if self.probe_changes.len() > 20 {
                let _ = writeln!(s, "  … {} more (--json)", self.probe_changes.len() - 20);
            }
        }
    }

    /// The events of each family, the stacks, the losses.
    fn events_text(&self, s: &mut String) {
        let e = &self.events;
        let _ = writeln!(s, "\nevents");
        for (name, n) in [
            ("alloc", e.alloc),
            ("free", e.free),
            ("lock", e.lock),
            ("func", e.func),
            ("cpu", e.cpu),
            ("offcpu", e.offcpu),
            ("memgrowth", e.memgrowth),
            ("syscall", e.syscall),
            ("bio", e.bio),
            ("runq", e.runq),
            ("tcp", e.tcp),
            ("usdt", e.usdt),
            ("histograms", e.histogram_rows),
        ] {
            if n > 0 {
                let _ = writeln!(s, "  {name:<11}{n:>12}");
            }
        }
        let _ = writeln!(s, "  {:<11}{:>12}", "stacks", self.stacks);
        if self.losses.is_empty() {
            let _ = writeln!(s, "\nlosses     none");
        } else {
            let _ = writeln!(s, "\nlosses     {} events in all", self.lost_total);
            for l in &self.losses {
                let _ = writeln!(s, "  {:<11}{:<16}{:>10}", l.family, l.reason, l.count);
            }
        }
    }

    /// Each process generation: its command, cgroup and binaries.
    fn processes_text(&self, s: &mut String) {
        let _ = writeln!(s, "\nprocesses  {}", self.processes.len());
        for p in &self.processes {
            let exit = match (p.exit_time_ns, p.exit_code) {
                (Some(_), Some(c)) => format!(", exited {c}"),
                _ => String::new(),
            };
            // the pid inside its namespace, when it is another
            let ns = match p.ns_pid {
                Some(n) if n != p.pid => format!(" (ns pid {n})"),
                _ => String::new(),
            };
            let _ = writeln!(
                s,
                "  pid {}{ns} gen {} ({}{}) {} [{}]",
                p.pid,
                p.generation,
                p.event,
                exit,
                p.comm,
                if p.cmdline.is_empty() {
                    p.exe.clone()
                } else {
                    p.cmdline.join(" ")
                }
            );
            if !p.cgroup.is_empty() || !p.container_id.is_empty() {
                let container = if p.container_id.is_empty() {
                    String::new()
                } else {
                    format!("  container {}", p.container_id)
                };
                let _ = writeln!(s, "    cgroup {}{container}", p.cgroup);
            }
            for b in &p.binaries {
                let id = if b.build_id.is_empty() {
                    "(no build-id)"
                } else {
                    &b.build_id
                };
                let _ = writeln!(s, "    {id}  {}", b.path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_sizes_for_people() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1234), "1,234");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(size_text(0), "0 B");
        assert_eq!(size_text(1023), "1023 B");
        assert_eq!(size_text(16384), "16.0 KiB");
        assert_eq!(size_text(5_872_026), "5.6 MiB");
        assert_eq!(size_text(3 << 30), "3.0 GiB");
    }
}
