//! One pass over a trace: events are folded into per-stack aggregates as they stream by
//! (memory grows with distinct stacks, not with events), then stacks are resolved with the
//! symbolizer's records, which come at the end of a symbolized trace.
use ebtrace_format::events::Family;
use ebtrace_format::proto::{record::Kind, Header, LossReason, ProcessEvent, Record};
use ebtrace_format::{Tables, TraceReader};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use crate::classes::StackClasses;
pub use crate::event::Event;
pub use crate::interned::Frame;
use crate::interned::{IFrame, Names, NO_FILE};

/// What to keep: the report's filters.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub pids: Vec<u32>,
    pub tids: Vec<u32>,
    pub comms: Vec<String>,
    /// Only threads whose name matches one of these globs (`*` any run, `?` one
    /// character): the name the trace gives the thread at the event's time (its Thread
    /// records), the process's comm for a thread it does not name. Events of no thread
    /// (the kernel's histograms, --aggregate's counts) do not pass.
    pub threads: Vec<String>,
    /// Seconds into the trace (from the header's start time).
    pub from: Option<f64>,
    pub to: Option<f64>,
}

impl Filter {
    /// Whether the filter keeps every event.
    pub fn is_empty(&self) -> bool {
        self.pids.is_empty()
            && self.tids.is_empty()
            && self.comms.is_empty()
            && self.threads.is_empty()
            && self.from.is_none()
            && self.to.is_none()
    }
}

/// The recorded mapping a frame is in (for pprof's mappings).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MappingInfo {
    pub start: u64,
    pub end: u64,
    pub file_offset: u64,
    pub path: String,
    /// Lowercase hex, "" when none.
    pub build_id: String,
}

/// Losses a report must state.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Losses {
    /// Events lost while recording, by "family/reason".
    pub recorded: BTreeMap<String, u64>,
    /// Frames that stayed unresolved, by reason.
    pub unresolved_frames: BTreeMap<String, u64>,
    /// Whether the recording ended without a trailer, and damage met while reading.
    pub cut: bool,
    pub damage: Vec<String>,
    /// Whether the trace had symbolization records at all.
    pub symbolized: bool,
    /// Stacks whose offline unwinding (`--stack-mode dwarf`) stopped before the outermost
    /// frame, by reason ("copy too small", "no CFI in libfoo.so", …); counted as frames
    /// are (once per call of [`Loaded::frames`]).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub stacks_cut: BTreeMap<String, u64>,
    /// Allocations sampled by bytes (`--sample-bytes`): the reports' alloc counts and bytes
    /// are estimates, each sampled allocation scaled by its inverse probability.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampled: Option<Sampling>,
    /// Off-CPU blocks kept by `--offcpu-sample`'s time-weighted sample (with probability
    /// length/unit, each standing for 1/p blocks): the off-CPU times and counts per stack
    /// are estimates. The events that were sampled (those that stand for more than
    /// themselves).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offcpu_sampled: Option<u64>,
    /// First-touch page faults kept by `--memgrowth-sample`'s byte-weighted sample (each
    /// standing for the unit's bytes and 1/p faults): memory growth per stack is an
    /// estimate. The events that were sampled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memgrowth_sampled: Option<u64>,
    /// What `--offcpu-rate`, `--syscalls-rate` or `--runq-rate` did to their sample's unit
    /// while recording (reports/budget.rs), one sentence each: the estimates stand on
    /// fewer events after a change.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub paced: Vec<String>,
    /// Families counted in the kernel (--aggregate), with the events counted: there is no
    /// per-event timeline for them (no times within an interval, no threads, no addresses).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub aggregated: BTreeMap<String, u64>,
}

/// What a trace's sampling by bytes was (see [`Estimator`]).
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Sampling {
    /// Allocation events sampled by bytes.
    pub sampled_allocs: u64,
    /// The smallest and largest bytes-per-sample period in effect (they differ when
    /// `--max-cpu` changed the rate during the recording).
    pub min_period: u64,
    pub max_period: u64,
}

/// What allocation events stand for, in whole (allocations, bytes). An allocation sampled
/// by bytes with period `period` (each byte had a 1/period chance of making its allocation
/// an event) was kept with probability p = 1 - exp(-size/period), so it stands for 1/p
/// allocations of `size` bytes (tcmalloc's heap profiler's estimate). Not sampled
/// (`period` 0): itself. The fractions are carried from event to event, so that rounding
/// does not bias the sums (1/p is 4.5 for 4 KiB at a 16 KiB period).
#[derive(Debug, Default, Clone)]
pub struct Estimator {
    carry_count: f64,
    carry_bytes: f64,
}

impl Estimator {
    pub fn add(&mut self, size: u64, period: u64) -> (u64, u64) {
        if period == 0 || size == 0 {
            return (1, size);
        }
        let p = -(-(size as f64) / period as f64).exp_m1();
        if p.is_nan() || p <= 0.0 {
            return (1, size);
        }
        self.carry_count += 1.0 / p;
        self.carry_bytes += size as f64 / p;
        let c = self.carry_count.floor();
        let b = self.carry_bytes.floor();
        self.carry_count -= c;
        self.carry_bytes -= b;
        (c as u64, b as u64)
    }
}

impl Losses {
    fn note_sampled(&mut self, period: u64) {
        let s = self.sampled.get_or_insert(Sampling {
            sampled_allocs: 0,
            min_period: period,
            max_period: period,
        });
        s.sampled_allocs += 1;
        s.min_period = s.min_period.min(period);
        s.max_period = s.max_period.max(period);
    }
}

/// A loaded trace: the definitions, the symbols, and the caller's aggregates.
#[derive(Debug, Default)]
pub struct Loaded {
    pub tables: Tables,
    pub header: Header,
    /// (build-id id, file offset) -> frames, innermost first.
    symbols: HashMap<(u64, u64), (Vec<ebtrace_format::proto::SymbolFrame>, i32)>,
    pub losses: Losses,
    pub first_event_ns: Option<u64>,
    pub last_event_ns: Option<u64>,
    /// (path id, build-id id) -> (path, file name, build-id hex), computed once.
    modules: HashMap<(u64, u64), (String, String, String)>,
    /// Kernel symbols of every `KernelSymbols` record: (start address, name string id,
    /// module string id), sorted by address once the trace is read.
    kernel_symbols: Vec<(u64, u64, u64)>,
    /// Stack id -> (user ips unwound offline, stop reason string id) from `UnwoundStack`
    /// records: they replace the stack's frame-pointer user ips.
    unwound: HashMap<u64, (Vec<u64>, u64, Vec<u32>)>,
    /// --func functions by id: demangled name (string id).
    pub probed: HashMap<u64, u64>,
    /// --usdt probes by id (`ProbedUsdt` records).
    pub usdt_probes: HashMap<u64, ebtrace_format::proto::ProbedUsdt>,
    /// --request usdt: start hits the kernel still held at the last `Stats` (requests open
    /// at the end: their hits are in no event).
    pub requests_held: u64,
    /// Data addresses the symbolizer named (`DataSymbol`: a C++ exception's type_info), by
    /// (generation, address): (name, module) string ids.
    pub data_symbols: HashMap<(u32, u64), (u64, u64)>,
    /// Periods when the allocator probes were paused (--max-cpu): (start, end) boottime
    /// ns, end u64::MAX when they never resumed.
    pub alloc_pauses: Vec<(u64, u64)>,
    /// Every `ProbeChange` record (--max-cpu's rates and pauses of all families, late
    /// attachments), in order.
    pub probe_changes: Vec<ebtrace_format::proto::ProbeChange>,
    /// Block devices of the recording host by dev_t (`BlockDevice` records).
    pub block_devices: HashMap<u32, ebtrace_format::proto::BlockDevice>,
    /// TCP connections by id (`TcpConnection` records).
    pub tcp_connections: HashMap<u64, ebtrace_format::proto::TcpConnection>,
    /// The names of the frames resolved so far, each once ([`Loaded::interned_frames`]).
    pub names: Names,
    /// Each mapping's [`MappingInfo`] made once, by (start, end, file offset, path id,
    /// build-id id): a stack's frames share it.
    mapping_infos: HashMap<(u64, u64, u64, u64, u64), Arc<MappingInfo>>,
    /// Each user address resolved once, by (generation, ip, address looked up): its frames
    /// in `resolved_frames`. Stacks share most of their addresses (a compiler's tens of
    /// thousands of stacks, their outer frames); emptied when a record comes after.
    resolved: crate::hash::FastMap<(u32, u64, u64), Resolved>,
    resolved_frames: Vec<IFrame>,
    /// The key id of each of `resolved_frames` ([`StackClasses::frame_id`]).
    resolved_keys: Vec<u32>,
    /// Each stack id's merge class ([`Loaded::stack_class`]).
    classes: StackClasses,
}

/// A user address resolved ([`Loaded::user_frames`]).
#[derive(Debug)]
struct Resolved {
    start: u32,
    end: u32,
    map: Option<Arc<MappingInfo>>,
    /// The unresolved frames' reason, counted at each use.
    unresolved: Option<Box<str>>,
}

/// An open trace that a report reads once, front to back: a [`TraceReader`] (of a file,
/// or of bytes in memory: `TraceReader::new(&bytes[..])`), or the records themselves
/// ([`Records`]), e.g. a raw trace that ebsym symbolized into memory. Reports take one
/// (`reports::top_from`, `leaks_from`, `stacks_from`, `info::summarize_from`); their
/// path versions open the file and call them.
pub trait Trace {
    /// Calls `f` with every record in order, batches of events decoded ([`Item`]); returns
    /// the damage met while reading (as `Losses::damage` states it).
    fn each_record(self, f: impl FnMut(Item)) -> Vec<String>;
}

macro_rules! batches {
    ($($Kind:ident => $V:ident($Ev:ty)),* $(,)?) => {
        /// The events of one batch record, decoded from its columns.
        #[derive(Debug)]
        pub enum Events {
            $($V(Vec<$Ev>),)*
        }

        /// A record of a trace as a report takes it: a batch of events decoded (or why it
        /// could not be), any other record as it is.
        #[derive(Debug)]
        // Records went over the reading thread's channel as they are before: boxing them
        // would add an allocation a record.
        #[allow(clippy::large_enum_variant)]
        pub enum Item {
            Record(Record),
            Events(Result<Events, ebtrace_format::Error>),
        }

        impl Item {
            /// `record`, its events decoded when it is a batch: on the reading thread, which
            /// takes that work off the reports' (a third of `ebsym heap`'s).
            pub fn of(record: Record) -> Item {
                match record.kind {
                    $(Some(Kind::$Kind(b)) => {
                        Item::Events(b.decode().map(Events::$V))
                    })*
                    kind => Item::Record(Record { kind }),
                }
            }
        }
    };
}

batches! {
    Allocs => Alloc(ebtrace_format::events::AllocEvent),
    Frees => Free(ebtrace_format::events::FreeEvent),
    Locks => Lock(ebtrace_format::events::LockEvent),
    Funcs => Func(ebtrace_format::events::FuncEvent),
    CpuSamples => Cpu(ebtrace_format::events::CpuSample),
    Offcpu => OffCpu(ebtrace_format::events::OffCpuEvent),
    MemGrowth => MemGrowth(ebtrace_format::events::MemGrowthEvent),
    Syscalls => Syscall(ebtrace_format::events::SyscallEvent),
    Bios => Bio(ebtrace_format::events::BioEvent),
    Runq => Runq(ebtrace_format::events::RunqEvent),
    Tcp => Tcp(ebtrace_format::events::TcpEvent),
    Usdts => Usdt(ebtrace_format::events::UsdtEvent),
}

/// Sends read ahead by the reading thread, at most: a send is one batch of up to 8,192
/// events, or up to [`GROUP`] other records, so this bounds the memory to a few MiB.
const READ_AHEAD: usize = 16;
/// Records other than batches (stacks, symbols, tables) sent together: one send each made
/// the channel's wake-ups a tenth of a symbolized trace's reading.
const GROUP: usize = 256;

impl<R: Read + Send> Trace for &mut TraceReader<R> {
    /// The file is read, decompressed and decoded into records on a thread of its own while
    /// `f` takes them on this one: zstd and protobuf decoding were half of a report's time.
    fn each_record(self, mut f: impl FnMut(Item)) -> Vec<String> {
        std::thread::scope(|scope| {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Item>>(READ_AHEAD);
            let reader = &mut *self;
            let reading = scope.spawn(move || {
                let mut group = Vec::new();
                for record in reader.by_ref() {
                    let item = Item::of(record);
                    let events = matches!(item, Item::Events(_));
                    group.push(item);
                    if (events || group.len() >= GROUP)
                        && tx.send(std::mem::take(&mut group)).is_err()
                    {
                        return;
                    }
                }
                let _ = tx.send(group);
            });
            for group in rx {
                group.into_iter().for_each(&mut f);
            }
            // The reader's panic is this thread's.
            if let Err(p) = reading.join() {
                std::panic::resume_unwind(p);
            }
        });
        self.damage().iter().map(|d| d.to_string()).collect()
    }
}

impl<R: Read + Send> Trace for TraceReader<R> {
    fn each_record(mut self, f: impl FnMut(Item)) -> Vec<String> {
        (&mut self).each_record(f)
    }
}

/// Records already decoded (any iterator of them), as a [`Trace`]: no damage to report;
/// cut when no `Trailer` record comes.
#[derive(Debug, Clone)]
pub struct Records<I>(pub I);

impl<I: IntoIterator<Item = Record>> Trace for Records<I> {
    fn each_record(self, mut f: impl FnMut(Item)) -> Vec<String> {
        self.0.into_iter().for_each(|r| f(Item::of(r)));
        Vec::new()
    }
}

/// Largest offset into a kernel symbol that names a kernel frame (kernel functions are a
/// few KiB at most).
pub const MAX_KERNEL_SYMBOL_SIZE: u64 = 1 << 20;

/// Called for every event that passes the filter.
pub trait Sink {
    fn event(&mut self, ev: &Event<'_>);
    /// The trace's header, before its events (the options they were recorded with).
    fn header(&mut self, _header: &ebtrace_format::proto::Header) {}
    /// A batch of allocations, in the file's order, every one passing the filter: by
    /// default each to [`Sink::event`]. A sink that keeps events for later takes the batch
    /// as it is instead of copying it.
    fn allocs(&mut self, batch: Vec<ebtrace_format::events::AllocEvent>) {
        for e in &batch {
            self.event(&Event::Alloc(e));
        }
    }
    /// A batch of frees, as [`Sink::allocs`].
    fn frees(&mut self, batch: Vec<ebtrace_format::events::FreeEvent>) {
        for e in &batch {
            self.event(&Event::Free(e));
        }
    }
    /// A process generation ended at `time_ns` (boottime): it exited, or its image was
    /// replaced by execve (the pre-exec generation). Its blocks are gone from then on. As
    /// the `Process` record comes, which may be before the generation's last events are read.
    fn generation_end(&mut self, _generation: u32, _time_ns: u64) {}
}

fn family_name(v: i32) -> String {
    ebtrace_format::family::by_number(v)
        .map(|f| f.name.to_string())
        .unwrap_or_else(|| v.to_string())
}

/// A stack's addresses, leaf first: its kernel frames innermost, then the user frames of
/// the system call or fault that entered it.
struct StackIps {
    generation: u32,
    /// How many of `ips` are the kernel's.
    n_kernel: usize,
    ips: Vec<u64>,
    /// The user ips (by index among them) that are exact addresses: an instruction a
    /// signal interrupted.
    exact: Vec<u32>,
}

/// The path, file name and build-id (hex) of mapping `m`'s file, computed once in
/// `modules`.
fn module_names(
    modules: &mut HashMap<(u64, u64), (String, String, String)>,
    tables: &Tables,
    m: &ebtrace_format::proto::Mapping,
) -> (String, String, String) {
    modules
        .entry((m.path, m.build_id))
        .or_insert_with(|| {
            let module = tables.string(m.path).into_owned();
            let short = module.rsplit('/').next().unwrap_or(&module).to_string();
            (module, short, tables.build_id_hex(m.build_id))
        })
        .clone()
}

impl Loaded {
    fn passes(&self, f: &Filter, ev: &Event<'_>) -> bool {
        let (time, generation, tid) = ev.time_generation_tid();
        if !f.tids.is_empty() && !f.tids.contains(&tid) {
            return false;
        }
        if f.from.is_some() || f.to.is_some() {
            let t = time.saturating_sub(self.header.start_time_ns) as f64 / 1e9;
            if f.from.is_some_and(|from| t < from) || f.to.is_some_and(|to| t >= to) {
                return false;
            }
        }
        if !f.threads.is_empty() {
            if tid == 0 {
                return false;
            }
            let name = self.thread_name_at(generation, tid, time);
            if !f.threads.iter().any(|p| crate::glob::glob(p, &name)) {
                return false;
            }
        }
        if !f.pids.is_empty() || !f.comms.is_empty() {
            let Some(g) = self.tables.generations.get(&generation) else {
                return false;
            };
            if !f.pids.is_empty() && !f.pids.contains(&g.process.pid) {
                return false;
            }
            if !f.comms.is_empty() {
                let comm = self.tables.string(g.process.comm);
                if !f.comms.iter().any(|c| *c == comm) {
                    return false;
                }
            }
        }
        true
    }

    /// Reads the trace at `path`, feeding every event that passes `filter` to `sink`:
    /// [`Loaded::from_trace`] of the opened file.
    pub fn read(
        path: &Path,
        filter: &Filter,
        sink: &mut dyn Sink,
    ) -> Result<Loaded, ebtrace_format::Error> {
        Ok(Loaded::from_trace(TraceReader::open(path)?, filter, sink))
    }

    /// Reads `trace` to its end, feeding every event that passes `filter` to `sink`.
    pub fn from_trace(trace: impl Trace, filter: &Filter, sink: &mut dyn Sink) -> Loaded {
        let mut l = Loaded::default();
        let mut trailer = false;
        let damage = trace.each_record(|record| l.record(record, filter, sink, &mut trailer));
        l.sort_kernel_symbols();
        l.losses.cut = !trailer;
        l.losses.damage = damage;
        l
    }

    /// Widens the events' span by a row that stands for the interval (since, time]
    /// (--aggregate's counts, the kernel's histograms), from the trace's start at most.
    fn interval_seen(&mut self, since: u64, time: u64) {
        let lo = since.max(self.header.start_time_ns);
        self.first_event_ns = Some(self.first_event_ns.map_or(lo, |f| f.min(lo)));
        self.last_event_ns = Some(self.last_event_ns.map_or(time, |f| f.max(time)));
    }

    /// Widens the events' span to `t`.
    #[inline]
    fn seen(&mut self, t: u64) {
        self.first_event_ns = Some(self.first_event_ns.map_or(t, |f| f.min(t)));
        self.last_event_ns = Some(self.last_event_ns.map_or(t, |f| f.max(t)));
    }

    /// The decoded events of one batch, each that passes `filter` to `sink`.
    fn events(&mut self, evs: Events, filter: &Filter, sink: &mut dyn Sink) {
        let all = filter.is_empty();
        macro_rules! events {
            ($b:expr, $v:ident) => {
                for e in &$b {
                    let ev = Event::$v(e);
                    if all || self.passes(filter, &ev) {
                        if let Event::Alloc(a) = &ev {
                            if a.sample_period > 0 {
                                self.losses.note_sampled(a.sample_period);
                            }
                        }
                        if let Event::OffCpu(o) = &ev {
                            if o.weight_ns != 0 {
                                *self.losses.offcpu_sampled.get_or_insert(0) += 1;
                            }
                        }
                        if let Event::MemGrowth(m) = &ev {
                            if m.weight != 0 {
                                *self.losses.memgrowth_sampled.get_or_insert(0) += 1;
                            }
                        }
                        let t = ev.time_generation_tid().0;
                        self.first_event_ns = Some(self.first_event_ns.map_or(t, |f| f.min(t)));
                        self.last_event_ns = Some(self.last_event_ns.map_or(t, |f| f.max(t)));
                        sink.event(&ev);
                    }
                }
            };
        }
        match evs {
            // Without a filter a batch of allocations or frees goes to the sink whole, its
            // bookkeeping done here first (none of it depends on the sink).
            Events::Alloc(b) if all => {
                for a in &b {
                    if a.sample_period > 0 {
                        self.losses.note_sampled(a.sample_period);
                    }
                    self.seen(a.time_ns);
                }
                sink.allocs(b)
            }
            Events::Free(b) if all => {
                for f in &b {
                    self.seen(f.time_ns);
                }
                sink.frees(b)
            }
            Events::Alloc(b) => events!(b, Alloc),
            Events::Free(b) => events!(b, Free),
            Events::Lock(b) => events!(b, Lock),
            Events::Func(b) => events!(b, Func),
            Events::Cpu(b) => events!(b, Cpu),
            Events::OffCpu(b) => events!(b, OffCpu),
            Events::MemGrowth(b) => events!(b, MemGrowth),
            Events::Syscall(b) => events!(b, Syscall),
            Events::Bio(b) => events!(b, Bio),
            Events::Runq(b) => events!(b, Runq),
            Events::Tcp(b) => events!(b, Tcp),
            Events::Usdt(b) => events!(b, Usdt),
        }
    }

    fn record(&mut self, item: Item, filter: &Filter, sink: &mut dyn Sink, trailer: &mut bool) {
        let record = match item {
            Item::Record(r) => r,
            Item::Events(Ok(evs)) => return self.events(evs, filter, sink),
            Item::Events(Err(e)) => return self.losses.damage.push(e.to_string()),
        };
        // A record may add symbols or mappings: what was resolved before is resolved again.
        if !self.resolved.is_empty() {
            self.resolved.clear();
            self.resolved_frames.clear();
            self.resolved_keys.clear();
        }
        if !self.classes.is_empty() {
            self.classes.forget_stacks();
        }
        if let Some(Kind::Process(p)) = &record.kind {
            match p.event() {
                ProcessEvent::Exit => sink.generation_end(p.generation, p.time_ns),
                ProcessEvent::Exec if p.parent_generation != 0 => {
                    sink.generation_end(p.parent_generation, p.time_ns)
                }
                _ => {}
            }
        }
        let mut record = record;
        // A raw stack copy is for the symbolizer, which unwinds it: not kept here.
        if let Some(Kind::Stack(s)) = &mut record.kind {
            s.copy = None;
        }
        let Some(record) = self.tables.take(record) else {
            return;
        };
        match record.kind {
            Some(Kind::Header(h)) => {
                sink.header(&h);
                self.header = h;
            }
            Some(Kind::Trailer(_)) => *trailer = true,
            Some(Kind::Lost(lost)) => {
                let reason = LossReason::try_from(lost.reason)
                    .map(|r| crate::info::enum_name(r.as_str_name(), "LOSS_REASON_"))
                    .unwrap_or_default();
                *self
                    .losses
                    .recorded
                    .entry(format!("{}/{reason}", family_name(lost.family)))
                    .or_default() += lost.count;
            }
            Some(Kind::Stats(st)) => {
                // Cumulative counts: the last Stats record says them all.
                self.requests_held = st.requests_held;
                for p in st.programs.iter().filter(|p| p.recursion_misses > 0) {
                    self.losses.recorded.insert(
                        format!("bpf program {}/skipped runs", p.name),
                        p.recursion_misses,
                    );
                }
            }
            Some(Kind::ProbedFunction(p)) => {
                self.probed.insert(p.id, p.name);
            }
            Some(Kind::ProbedUsdt(p)) => {
                self.usdt_probes.insert(p.id, p);
            }
            Some(Kind::DataSymbol(d)) => {
                self.data_symbols
                    .insert((d.generation, d.address), (d.name, d.module));
            }
            Some(Kind::KernelSymbols(k)) => self.add_kernel_symbols(k),
            Some(Kind::ProbeChange(p)) => self.probe_change(p),
            Some(Kind::SymbolizerInfo(_)) => self.losses.symbolized = true,
            Some(Kind::UnwoundStack(u)) => {
                self.unwound
                    .insert(u.stack, (u.user_ips, u.stop_reason, u.exact_frames));
            }
            Some(Kind::SymbolizedAddress(a)) => {
                self.symbols
                    .insert((a.build_id, a.address), (a.frames, a.reason));
            }
            Some(Kind::BlockDevice(d)) => {
                self.block_devices.insert(d.dev, d);
            }
            Some(Kind::TcpConnection(c)) => {
                self.tcp_connections.insert(c.id, c);
            }
            Some(Kind::Histogram(h)) => self.histogram(h, filter, sink),
            Some(Kind::Aggregate(a)) => self.aggregate(a, filter, sink),
            _ => {}
        }
    }

    /// A `KernelSymbols` record's symbols, kept to be sorted once the trace is read.
    fn add_kernel_symbols(&mut self, k: ebtrace_format::proto::KernelSymbols) {
        let n = k.address.len();
        if k.name.len() != n || k.module.len() != n {
            self.losses.damage.push(format!(
                "KernelSymbols: {n} addresses, {} names, {} modules (kept the first {})",
                k.name.len(),
                k.module.len(),
                n.min(k.name.len()).min(k.module.len())
            ));
        }
        self.kernel_symbols.extend(
            k.address
                .iter()
                .zip(&k.name)
                .zip(&k.module)
                .map(|((&a, &name), &module)| (a, name, module)),
        );
    }

    /// A probe change: the allocator probes' pauses (--max-cpu) kept apart.
    fn probe_change(&mut self, p: ebtrace_format::proto::ProbeChange) {
        use ebtrace_format::proto::ProbeChangeKind as K;
        if p.family == ebtrace_format::proto::EventFamily::Alloc as i32 {
            match K::try_from(p.kind) {
                Ok(K::Paused) => self.alloc_pauses.push((p.time_ns, u64::MAX)),
                Ok(K::Resumed) => {
                    if let Some(last) = self.alloc_pauses.last_mut() {
                        if last.1 == u64::MAX {
                            last.1 = p.time_ns;
                        }
                    }
                }
                _ => {}
            }
        }
        self.probe_changes.push(p);
    }

    /// A kernel histogram's rows, as events, those that pass `filter` to `sink`.
    fn histogram(
        &mut self,
        h: ebtrace_format::proto::LatencyHistogram,
        filter: &Filter,
        sink: &mut dyn Sink,
    ) {
        let all = filter.is_empty();
        let family = ebtrace_format::proto::EventFamily::try_from(h.family).unwrap_or_default();
        match ebtrace_format::events::histogram_rows(&h) {
            Ok(rows) => {
                for r in &rows {
                    let ev = Event::Histogram(family, r);
                    if all || self.passes(filter, &ev) {
                        self.interval_seen(r.since_ns, r.time_ns);
                        sink.event(&ev);
                    }
                }
            }
            Err(e) => self.losses.damage.push(e.to_string()),
        }
    }

    /// An --aggregate record's rows, as events, those that pass `filter` to `sink` (and
    /// counted in the losses' `aggregated`).
    fn aggregate(
        &mut self,
        a: ebtrace_format::proto::Aggregate,
        filter: &Filter,
        sink: &mut dyn Sink,
    ) {
        let all = filter.is_empty();
        let family = ebtrace_format::proto::EventFamily::try_from(a.family).unwrap_or_default();
        // The family is named even when no row passes the filter: the report
        // still says how it was recorded.
        let name = family_name(a.family);
        self.losses.aggregated.entry(name.clone()).or_default();
        match ebtrace_format::events::aggregate_rows(&a) {
            Ok(rows) => {
                for r in &rows {
                    let ev = Event::Aggregated(family, r);
                    if all || self.passes(filter, &ev) {
                        *self.losses.aggregated.get_mut(&name).unwrap() += r.count;
                        self.interval_seen(r.since_ns, r.time_ns);
                        sink.event(&ev);
                    }
                }
            }
            Err(e) => self.losses.damage.push(e.to_string()),
        }
    }

    /// The name of thread `tid` of `generation` at `time_ns` (the last one given then), else
    /// its process's comm ("" when the trace names neither).
    pub fn thread_name_at(&self, generation: u32, tid: u32, time_ns: u64) -> String {
        match self.tables.thread_name(generation, tid, time_ns) {
            Some(n) => String::from_utf8_lossy(n).into_owned(),
            None => self.comm(generation),
        }
    }

    /// The name of thread `tid` of `generation`: the last one the trace gives it, else its
    /// process's comm (what `ebsym threads` groups by and the rows' `thread` say).
    pub fn thread_name(&self, generation: u32, tid: u32) -> String {
        self.thread_name_at(generation, tid, u64::MAX)
    }

    /// The comm of process generation `generation` ("" when the trace does not say).
    pub fn comm(&self, generation: u32) -> String {
        self.tables
            .generations
            .get(&generation)
            .map(|g| self.tables.string(g.process.comm).into_owned())
            .unwrap_or_default()
    }

    /// The pid of process generation `generation` (0 when the trace does not say).
    pub fn pid(&self, generation: u32) -> u32 {
        self.tables
            .generations
            .get(&generation)
            .map_or(0, |g| g.process.pid)
    }

    /// The frames of stack `id`, leaf first, inlined frames expanded (innermost first).
    /// Counts unresolved frames in `losses` (once per call: call it once per stack).
    pub fn frames(&mut self, id: u64) -> Vec<Frame> {
        let f = self.resolve(id, None, None);
        self.names.frames(&f)
    }

    /// [`Loaded::frames`] with their names interned in [`Loaded::names`]: what reports
    /// group and compare stacks by, making [`Frame`]s only for the rows they print.
    pub fn interned_frames(&mut self, id: u64) -> Vec<IFrame> {
        self.resolve(id, None, None)
    }

    /// [`Loaded::interned_frames`] of a stack resolved before: what stays unresolved is
    /// not counted again. A report that keeps a stack's id rather than its frames.
    pub fn interned_frames_again(&mut self, id: u64) -> Vec<IFrame> {
        self.again(|l| l.resolve(id, None, None))
    }

    /// [`Loaded::interned_frames_and_mappings`] of a stack resolved before (nothing counted
    /// again).
    pub fn interned_frames_and_mappings_again(
        &mut self,
        id: u64,
    ) -> (Vec<IFrame>, Vec<Option<Arc<MappingInfo>>>) {
        self.again(|l| l.interned_frames_and_mappings(id))
    }

    /// The merge class of stack `id` (stack ids with the same class symbolize alike:
    /// [`StackClasses`]), its unresolved frames and cut counted in `losses` as
    /// [`Loaded::interned_frames`] counts them (once per call: call it once per stack).
    /// Resolved the first time only.
    pub fn stack_class(&mut self, id: u64) -> u32 {
        self.classify(id, false).0
    }

    /// [`Loaded::stack_class`], and the stack's frames when it was resolved now (a caller
    /// that wants the frames of a class new to it need not resolve them again).
    pub fn stack_class_frames(&mut self, id: u64) -> (u32, Option<Vec<IFrame>>) {
        self.classify(id, true)
    }

    /// [`Loaded::stack_class`], with the frames (`frames`) of a stack resolved now.
    fn classify(&mut self, id: u64, frames: bool) -> (u32, Option<Vec<IFrame>>) {
        if let Some((class, counts)) = self.classes.of(id) {
            self.count_again(counts);
            return (class, None);
        }
        let ((key, frames), counted) = self.counted(|l| {
            if frames {
                let mut key = Vec::new();
                let f = l.resolve(id, None, Some(&mut key));
                (key, Some(f))
            } else {
                (l.resolve_keys(id), None)
            }
        });
        let (class, counts) = self.classes.insert(id, key.into_boxed_slice(), counted);
        self.count_again(counts);
        (class, frames)
    }

    /// Forgets the classes handed out (their memory back to a report done merging: the
    /// stacks get new ones if asked again).
    pub fn forget_classes(&mut self) {
        self.classes.forget();
    }

    /// The classes handed out so far ([`Loaded::stack_class`]).
    pub fn classes(&self) -> &StackClasses {
        &self.classes
    }

    /// Counts again what a stack's resolution counted.
    fn count_again(&mut self, counted: crate::classes::Counted) {
        if counted.0 == counted.1 {
            return;
        }
        for (cut, reason, n) in self.classes.counted(counted) {
            let into = if cut {
                &mut self.losses.stacks_cut
            } else {
                &mut self.losses.unresolved_frames
            };
            match into.get_mut(reason) {
                Some(v) => *v += n,
                None => {
                    into.insert(reason.to_string(), n);
                }
            }
        }
    }

    /// `f` with what resolving counts (unresolved frames, stacks cut) left as it was.
    fn again<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> T {
        self.counted(f).0
    }

    /// `f`, and what resolving counted while it ran (unresolved frames, stacks cut), taken
    /// out: `losses` left as it was.
    fn counted<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> (T, crate::classes::Counts) {
        let unresolved = std::mem::take(&mut self.losses.unresolved_frames);
        let cut = std::mem::take(&mut self.losses.stacks_cut);
        let r = f(self);
        let new_unresolved = std::mem::replace(&mut self.losses.unresolved_frames, unresolved);
        let new_cut = std::mem::replace(&mut self.losses.stacks_cut, cut);
        (r, (new_unresolved, new_cut))
    }

    /// [`Loaded::interned_frames`], with the mapping of each frame.
    pub fn interned_frames_and_mappings(
        &mut self,
        id: u64,
    ) -> (Vec<IFrame>, Vec<Option<Arc<MappingInfo>>>) {
        let mut maps = Vec::new();
        let f = self.resolve(id, Some(&mut maps), None);
        (f, maps)
    }

    /// The interned frames of stack `id`; with `maps` each frame's mapping, with `keys`
    /// each frame's key id ([`StackClasses::frame_id`]).
    fn resolve(
        &mut self,
        id: u64,
        mut maps: Option<&mut Vec<Option<Arc<MappingInfo>>>>,
        mut keys: Option<&mut Vec<u32>>,
    ) -> Vec<IFrame> {
        let Some(StackIps {
            generation,
            n_kernel,
            ips,
            exact,
        }) = self.stack_ips(id)
        else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(ips.len());
        for (i, &ip) in ips.iter().enumerate() {
            if let Some(m) = maps.as_deref_mut() {
                m.resize(out.len(), None);
            }
            let lookup = lookup_address(i, ip, n_kernel, &exact);
            if i < n_kernel {
                let f = self.kernel_frame(lookup);
                if let Some(k) = keys.as_deref_mut() {
                    k.push(self.classes.frame_id(&f));
                }
                out.push(f);
                continue;
            }
            let first = out.len();
            let map = self.user_frames(generation, ip, lookup, &mut out, keys.as_deref_mut());
            if let Some(maps) = maps.as_deref_mut() {
                maps.resize(first, None);
                maps.resize(out.len(), map);
            }
        }
        if let Some(m) = maps {
            m.resize(out.len(), None);
        }
        out
    }

    /// The key ids of stack `id`'s frames ([`StackClasses::frame_id`]), counted as
    /// [`Loaded::resolve`] counts them: an address resolved before gives its ids alone
    /// (no frame copied, no mapping), one new to the cache is resolved as `resolve` does.
    fn resolve_keys(&mut self, id: u64) -> Vec<u32> {
        let Some(st) = self.stack_ips(id) else {
            return Vec::new();
        };
        let (generation, n_kernel) = (st.generation, st.n_kernel);
        let mut keys = Vec::with_capacity(st.ips.len());
        let mut scratch = Vec::new();
        for (i, &ip) in st.ips.iter().enumerate() {
            let lookup = lookup_address(i, ip, n_kernel, &st.exact);
            if i < n_kernel {
                let f = self.kernel_frame(lookup);
                keys.push(self.classes.frame_id(&f));
                continue;
            }
            if let Some(r) = self.resolved.get(&(generation, ip, lookup)) {
                keys.extend_from_slice(&self.resolved_keys[r.start as usize..r.end as usize]);
                if let Some(reason) = &r.unresolved {
                    count_one(&mut self.losses.unresolved_frames, reason);
                }
                continue;
            }
            scratch.clear();
            self.user_frames(generation, ip, lookup, &mut scratch, Some(&mut keys));
        }
        keys
    }

    /// The frames of user address `ip` of `generation` (looked up at `lookup`) pushed on
    /// `out` (and their key ids on `keys`), and the mapping they are in. Each address is
    /// resolved once ([`Loaded::resolved`]); a frame left unresolved is counted each time.
    fn user_frames(
        &mut self,
        generation: u32,
        ip: u64,
        lookup: u64,
        out: &mut Vec<IFrame>,
        keys: Option<&mut Vec<u32>>,
    ) -> Option<Arc<MappingInfo>> {
        let key = (generation, ip, lookup);
        if let Some(r) = self.resolved.get(&key) {
            let range = r.start as usize..r.end as usize;
            out.extend_from_slice(&self.resolved_frames[range.clone()]);
            if let Some(k) = keys {
                k.extend_from_slice(&self.resolved_keys[range]);
            }
            if let Some(reason) = &r.unresolved {
                count_one(&mut self.losses.unresolved_frames, reason);
            }
            return r.map.clone();
        }
        let first = out.len();
        let (map, unresolved) = match self.tables.mapping_at(generation, ip, u64::MAX).cloned() {
            None => {
                out.push(self.unmapped_frame(lookup));
                (None, Some("outside any mapping".into()))
            }
            Some(m) => {
                let map = self.mapping_info(&m);
                (Some(map), self.mapped_frames(m, lookup, ip, out))
            }
        };
        let start = self.resolved_frames.len() as u32;
        self.resolved_frames.extend_from_slice(&out[first..]);
        for f in &out[first..] {
            let id = self.classes.frame_id(f);
            self.resolved_keys.push(id);
        }
        if let Some(k) = keys {
            k.extend_from_slice(&self.resolved_keys[start as usize..]);
        }
        self.resolved.insert(
            key,
            Resolved {
                start,
                end: self.resolved_frames.len() as u32,
                map: map.clone(),
                unresolved,
            },
        );
        map
    }

    /// Mapping `m` as a report's [`MappingInfo`], made once.
    fn mapping_info(&mut self, m: &ebtrace_format::proto::Mapping) -> Arc<MappingInfo> {
        let key = (m.start, m.end, m.file_offset, m.path, m.build_id);
        if let Some(i) = self.mapping_infos.get(&key) {
            return i.clone();
        }
        let (path, _, build_id) = module_names(&mut self.modules, &self.tables, m);
        let i = Arc::new(MappingInfo {
            start: m.start,
            end: m.end,
            file_offset: m.file_offset,
            path,
            build_id,
        });
        self.mapping_infos.insert(key, i.clone());
        i
    }

    /// The frames of address `lookup` (`ip` as recorded) in mapping `m`: the uprobes page's
    /// name, the symbolizer's frames, or the module and offset counted unresolved (the
    /// reason counted returned).
    fn mapped_frames(
        &mut self,
        m: ebtrace_format::proto::Mapping,
        lookup: u64,
        ip: u64,
        out: &mut Vec<IFrame>,
    ) -> Option<Box<str>> {
        let module = self.names.of_table(&self.tables, m.path);
        let frame = |function, module| IFrame {
            function,
            file: NO_FILE,
            line: None,
            inlined: false,
            module,
            address: lookup,
        };
        // The kernel's uprobes page (a return probe's trampoline, a single-step slot):
        // named for what it is, never as a function of the program.
        if self.names.get(module).as_bytes() == ebtrace_format::tables::UPROBES_PATH {
            if let Some(u) = self.tables.uprobes_frame(&m, ip) {
                out.push(frame(self.names.intern(u.name()), module));
                return None;
            }
        }
        let offset = lookup.wrapping_sub(m.start).wrapping_add(m.file_offset);
        match self.symbols.get(&(m.build_id, offset)) {
            Some((frames, _)) if !frames.is_empty() => {
                for f in frames {
                    out.push(IFrame {
                        function: self.names.of_table(&self.tables, f.function),
                        file: if f.file != 0 {
                            self.names.of_table(&self.tables, f.file)
                        } else {
                            NO_FILE
                        },
                        line: (f.line != 0).then_some(f.line),
                        inlined: f.inlined,
                        module,
                        address: lookup,
                    });
                }
            }
            other => {
                let reason = match other {
                    Some((_, r)) => ebtrace_format::proto::UnresolvedReason::try_from(*r)
                        .map(|r| crate::info::enum_name(r.as_str_name(), "UNRESOLVED_REASON_"))
                        .unwrap_or_default(),
                    None if m.build_id == 0 => "no build-id".into(),
                    None if !self.losses.symbolized => "not symbolized".into(),
                    None => "not in the symbolization".into(),
                };
                let (_, short, _) = module_names(&mut self.modules, &self.tables, &m);
                let key = format!("{short}: {reason}");
                *self
                    .losses
                    .unresolved_frames
                    .entry(key.clone())
                    .or_default() += 1;
                out.push(frame(
                    self.names.intern(&format!("{short}+{offset:#x}")),
                    module,
                ));
                return Some(key.into());
            }
        }
        None
    }

    /// Stack `id`'s addresses, the user ips of its offline unwinding when it has them;
    /// counts an unknown id among the unresolved frames, and why the stack was cut.
    fn stack_ips(&mut self, id: u64) -> Option<StackIps> {
        if id == 0 {
            // No stack recorded (a USDT hit without --usdt-stack): nothing unresolved.
            return None;
        }
        let Some(stack) = self.tables.stacks.get(&id) else {
            *self
                .losses
                .unresolved_frames
                .entry("unknown stack id".into())
                .or_default() += 1;
            return None;
        };
        let generation = stack.generation;
        // Leaf first: a sample taken in the kernel has its kernel frames innermost, then
        // the user frames of the system call or fault that entered it.
        let n_kernel = stack.kernel_ips.len();
        // A stack unwound offline: its user ips instead of the frame-pointer walk's.
        let (user_ips, stop, exact): (&Vec<u64>, u64, Vec<u32>) = match self.unwound.get(&id) {
            Some((ips, stop, exact)) if !ips.is_empty() => (ips, *stop, exact.clone()),
            Some((_, stop, _)) => (&stack.user_ips, *stop, Vec::new()),
            None => (&stack.user_ips, 0, Vec::new()),
        };
        let ips: Vec<u64> = stack
            .kernel_ips
            .iter()
            .chain(user_ips.iter())
            .copied()
            .collect();
        if stop != 0 {
            let reason = self.tables.string(stop).into_owned();
            *self.losses.stacks_cut.entry(reason).or_default() += 1;
        } else if let Some(reason) = cut_reason(stack.flags) {
            *self.losses.stacks_cut.entry(reason.into()).or_default() += 1;
        }
        Some(StackIps {
            generation,
            n_kernel,
            ips,
            exact,
        })
    }

    /// The frame of an address outside any mapping, counted unresolved.
    fn unmapped_frame(&mut self, lookup: u64) -> IFrame {
        *self
            .losses
            .unresolved_frames
            .entry("outside any mapping".into())
            .or_default() += 1;
        IFrame {
            function: self.names.intern(&format!("[unknown] {lookup:#x}")),
            file: NO_FILE,
            line: None,
            inlined: false,
            module: self.names.intern(""),
            address: lookup,
        }
    }

    /// Sorts the kernel symbols of all the records into one table (each record is sorted,
    /// the records need not be in order); of several symbols at one address, the first
    /// recorded.
    fn sort_kernel_symbols(&mut self) {
        self.kernel_symbols.sort_by_key(|s| s.0);
        self.kernel_symbols.dedup_by_key(|s| s.0);
    }

    /// The kernel symbol that covers `addr` and the offset of `addr` in it: the last one
    /// starting at or before it, if less than [`MAX_KERNEL_SYMBOL_SIZE`] before (kallsyms
    /// has no sizes, and a trace holds only the symbols its stacks need: an address past
    /// the last of them, say in a module none of whose symbols were recorded, is not in
    /// the symbol before it).
    pub fn kernel_symbol(&self, addr: u64) -> Option<(String, String, u64)> {
        let i = self.kernel_symbols.partition_point(|s| s.0 <= addr);
        let &(start, name, module) = self.kernel_symbols.get(i.checked_sub(1)?)?;
        if addr - start >= MAX_KERNEL_SYMBOL_SIZE {
            return None;
        }
        let module = match module {
            0 => "[kernel]".to_string(),
            m => format!("[kernel:{}]", self.tables.string(m)),
        };
        Some((self.tables.string(name).into_owned(), module, addr - start))
    }

    /// The frame of kernel address `ip` (`lookup`: the address to look up, `ip - 1` for
    /// return addresses): the function of the covering kernel symbol, or `[kernel] ADDR`
    /// counted as unresolved.
    fn kernel_frame(&mut self, lookup: u64) -> IFrame {
        let (function, module) = match self.kernel_symbol(lookup) {
            Some((function, module, _)) => (function, module),
            None => {
                *self
                    .losses
                    .unresolved_frames
                    .entry("[kernel]: no kernel symbol".into())
                    .or_default() += 1;
                (format!("[kernel] {lookup:#x}"), "[kernel]".to_string())
            }
        };
        IFrame {
            function: self.names.intern(&function),
            file: NO_FILE,
            line: None,
            inlined: false,
            module: self.names.intern(&module),
            address: lookup,
        }
    }
}

/// The address a stack's `i`th address `ip` is looked up and shown at (`n_kernel` of them
/// the kernel's; `exact`: the user ips, by index among them, that are exact). The leaf,
/// and the instruction a signal interrupted, are exact addresses; a caller's is its call
/// instruction (the return address - 1, as Go's runtime.Frame.PC and llvm-symbolizer take
/// it), so a leaf at an address that is also a return address elsewhere (a sample just
/// after a call came back) stays a different location in pprof.
fn lookup_address(i: usize, ip: u64, n_kernel: usize, exact: &[u32]) -> u64 {
    let leaf =
        i == 0 || i == n_kernel || (i > n_kernel && exact.contains(&((i - n_kernel) as u32)));
    if leaf {
        ip
    } else {
        ip.wrapping_sub(1)
    }
}

/// One more of `reason` in `counts`.
fn count_one(counts: &mut BTreeMap<String, u64>, reason: &str) {
    match counts.get_mut(reason) {
        Some(n) => *n += 1,
        None => {
            counts.insert(reason.to_string(), 1);
        }
    }
}

/// Why the recorder's user stack stopped before the outermost frame, from its flags (None:
/// whole, as far as the recorder knows).
pub fn cut_reason(flags: u32) -> Option<&'static str> {
    use ebtrace_format::proto::StackFlag as F;
    const REASONS: &[(F, &str)] = &[
        (F::UserTruncated, "longer than --stack-depth"),
        (F::UserNoRows, "unwind by rows: a pc without unwind rows"),
        (
            F::UserNoTable,
            "unwind by rows: a binary without rows loaded",
        ),
        (
            F::UserUnknownMapping,
            "unwind by rows: a pc in a mapping not known yet",
        ),
        (F::UserBadFrame, "unwind by rows: a bad stack read or frame"),
        (F::UserLeftCode, "frame-pointer walk left the code"),
        (F::UserError, "no user stack (read failed)"),
        (
            F::UserLeafOnly,
            "preempted after a short run: the preempted instruction only",
        ),
    ];
    REASONS
        .iter()
        .find(|(f, _)| flags & *f as u32 != 0)
        .map(|(_, r)| *r)
}

#[cfg(test)]
mod estimate_tests {
    use super::Estimator;

    /// Allocations of known sizes sampled as the BPF side and the preload sampler do (a
    /// byte counter drawn from an exponential distribution of mean `period`; an allocation
    /// that crosses it is sampled), then scaled back: the estimates land on the true
    /// totals, per size class, within a few percent.
    #[test]
    fn sampled_allocations_scale_back_to_the_true_totals() {
        let period = 16 * 1024;
        let sizes: [(u64, u64); 5] = [
            (16, 4_000_000),
            (4096, 40_000),
            (20_000, 5_000),
            (200_000, 2_000),
            (4 << 20, 50),
        ];
        let mut state = 0x9e3779b97f4a7c15u64;
        let mut rnd = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let next = |r: &mut dyn FnMut() -> f64| (-(1.0 - r()).ln() * period as f64) as u64;
        let mut left = next(&mut rnd);
        let mut est = Estimator::default();
        for (size, calls) in sizes {
            let (mut count, mut bytes) = (0u64, 0u64);
            for _ in 0..calls {
                if size < left {
                    left -= size;
                    continue;
                }
                left = next(&mut rnd);
                let (c, b) = est.add(size, period);
                count += c;
                bytes += b;
            }
            let true_bytes = size * calls;
            let err = (bytes as f64 - true_bytes as f64).abs() / true_bytes as f64;
            assert!(
                err < 0.05,
                "size {size}: estimated {bytes} B for {true_bytes} B ({err:.3})"
            );
            let cerr = (count as f64 - calls as f64).abs() / calls as f64;
            assert!(
                cerr < 0.05,
                "size {size}: estimated {count} calls for {calls} ({cerr:.3})"
            );
        }
        // Not sampled: itself; a block far larger than the period: about itself.
        assert_eq!(est.add(100, 0), (1, 100));
        let mut est = Estimator::default();
        assert_eq!(est.add(64 << 20, period).0, 1);
    }
}
