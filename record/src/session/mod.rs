//! The recording loop: drains the BPF ring buffers and the perf side band, keeps process
//! generations and their mappings, and writes everything to the trace.
//!
//! [`Session`] is one struct; its work is in the submodules: `generations` (processes, their
//! mappings, build-ids, unwind tables, exits), `sideband` (the perf side band's records),
//! `stackcopy` (joining stack copies to their events), `decode` (BPF events and stacks to
//! records), `losses` (kept, lost and filtered per family) and `rotation` (starting a new
//! file that reads on its own).
mod aggregate;
mod decode;
mod generations;
mod histograms;
mod losses;
mod rotation;
mod sideband;
mod stackcopy;
mod threads;

use crate::perf::{SideBand, SideBandReader};
use crate::probes::{self, Probes};
use crate::procfs;
use anyhow::Result;
use ebtrace_format::events::{
    AllocEvent, BioEvent, CpuSample, FreeEvent, FuncEvent, LockEvent, MemGrowthEvent, OffCpuEvent,
    RequestSplit, RunqEvent, SyscallEvent, TcpEvent, UsdtEvent,
};
use ebtrace_format::family::PerFamily;
use ebtrace_format::proto::{
    record::Kind, AllocKind, BlockDevice, ClockSync, EventFamily, FamilyStats, KernelSymbols,
    LockSource, LossReason, Lost, Mapping, MappingSource, MemGrowthKind, ProbedFunction,
    ProbedUsdt, Process, ProcessEvent, ProgramStats, Record, Stack, StackFlag, Stats,
    TcpConnection, TcpEventKind, Trailer, UnwindTables, UserStackCopy, VdsoImage,
};
use ebtrace_format::TraceWriter;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::BufWriter;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// A stack copy between its arrival and its event's.
#[derive(Debug)]
struct PendingCopy {
    ip: u64,
    sp: u64,
    bp: u64,
    data: Vec<u8>,
}

/// Copies whose event never came (filtered at return, like a --func call shorter than its
/// MIN_US) are dropped oldest first beyond this many.
const MAX_PENDING_COPIES: usize = 4096;

/// A mapping as the recorder keeps it (to copy into a child's generation at fork).
#[derive(Debug, Clone)]
struct MapRec {
    start: u64,
    end: u64,
    offset: u64,
    path: u64,
    build_id: u64,
    inode: u64,
    dev: u64,
    perms: u32,
    /// The vDSO (`[vdso]` of a 64-bit process): written with the `VdsoImage`'s build-id,
    /// the record itself first if the file does not have it yet.
    vdso: bool,
}

#[derive(Debug)]
struct Gen {
    start_ns: u64,
    comm: u64,
    exe: u64,
    cmdline: Vec<u64>,
    /// Its process's pids, namespaces and cgroup (written again at a rotation).
    ident: generations::Ident,
    maps: Vec<MapRec>,
    /// The executable mappings' ranges, sorted by start: what `left_code` checks every
    /// frame of every event against, by binary search.
    exec: Vec<(u64, u64)>,
}

/// Everything the loop keeps between iterations.
pub struct Session<'a> {
    pub w: TraceWriter<BufWriter<File>>,
    gens: Vec<Gen>,
    by_pid: ebtrace_format::hash::FastMap<u32, Vec<u32>>,
    build_ids: HashMap<(u64, u64, Vec<u8>), u64>,
    /// Processes whose end stops the recording when they are all gone.
    pub live: HashSet<u32>,
    /// Exit codes from waitpid, for the Process EXIT record of the launched command.
    pub exit_codes: HashMap<u32, i32>,
    exited: HashMap<u32, u64>,
    /// Events written, by EventFamily.
    pub kept: PerFamily<u64>,
    pub malformed: u64,
    last_counters: BTreeMap<(usize, u32), u64>,
    sideband_lost: u64,
    pub probes: &'a Probes<'a>,
    pub follow: bool,
    frames: Vec<u64>,
    /// kallsyms entries the kernel frames need.
    pub kernel: crate::kallsyms::Needed,
    /// --stack-mode dwarf|auto: events may carry stack copies.
    pub copies: bool,
    /// --stack-mode cfi|auto: the unwind rows in the kernel and the processes' mappings.
    pub cfi: Option<crate::cfi::Tables>,
    /// The family of the event being decoded.
    family: usize,
    /// User stacks per family: how many, and how many stopped early, by reason.
    pub stack_quality: StackQuality,
    /// Write each binary's unwind tables once (not with --no-unwind-info).
    pub unwind_info: bool,
    unwind_written: HashSet<u64>,
    /// The build-id id of the `VdsoImage` record in the current file (0: not written yet).
    vdso_written: u64,
    /// Stack copies waiting for their event, by id (the copy is sent first).
    pending_copies: BTreeMap<u64, PendingCopy>,
    /// The --func functions, to describe again in a new file (--rotate).
    probed: Vec<(u64, crate::funcs::FuncMatch, Vec<u8>)>,
    /// The --usdt probes, to describe again in a new file (--rotate).
    probed_usdt: Vec<crate::funcs::usdt::UsdtProbe>,
    /// Events whose stack copy never came (lost in the ring buffer, or dropped from
    /// `pending_copies`): they keep the frame-pointer stack. Shown in the exit summary.
    pub copies_missing: u64,
    /// Child processes whose allocator session links came after their fork.
    pub late_attachments: u64,
    /// ... of which the process was gone (or refused) before they could be attached.
    pub never_attached: u64,
    /// Children attached by `attach_child`: pid -> start time (clock ticks).
    children_attached: HashMap<u32, u64>,
    /// Off-CPU wakers in untraced processes whose user frames were dropped (their addresses
    /// mean nothing in the target's maps). Shown in the exit summary.
    pub waker_frames_dropped: u64,
    /// Thread names (threads.rs).
    threads: threads::Threads,
    /// The launched command, whose EXIT record waits for its code from waitpid.
    pub launched: Option<u32>,
    /// --aggregate: the counters written so far (None: not aggregating).
    pub agg: aggregate::AggState,
    pub aggregating: bool,
    /// --syscalls, --bio, --runq: the kernel's histograms written so far.
    hist: histograms::HistState,
    /// When the session started (boottime ns): the first histogram interval's start.
    start_ns: u64,
    /// Block devices and TCP connections described in the current file.
    devices_written: HashSet<u32>,
    tcp_written: HashSet<u64>,
    /// The families' stats of the last `stats` call (for the agent's metrics).
    pub last_families: Vec<FamilyStats>,
    /// --request-slow's adaptive threshold: fed each request the kernel split.
    pub slow_tail: Option<crate::reqslow::SlowTail>,
    /// Off-CPU blocks of a system call that blocked again before it returned, by thread,
    /// waiting for the call's user stack (decode.rs `decode_offcpu`).
    same_call: ebtrace_format::hash::FastMap<u32, Vec<(probes::event_header, u32, Vec<u8>)>>,
    /// ... how many got it. Shown in the exit summary.
    pub same_call_filled: u64,
}

impl std::fmt::Debug for Session<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("gens", &self.gens.len())
            .finish_non_exhaustive()
    }
}

fn boot_of_ticks(ticks: u64) -> u64 {
    ticks * (1_000_000_000 / procfs::clock_ticks().max(1))
}

impl<'a> Session<'a> {
    pub fn new(w: TraceWriter<BufWriter<File>>, probes: &'a Probes<'a>, follow: bool) -> Self {
        Session {
            w,
            gens: Vec::new(),
            by_pid: Default::default(),
            build_ids: HashMap::new(),
            live: HashSet::new(),
            exit_codes: HashMap::new(),
            exited: HashMap::new(),
            kept: PerFamily::default(),
            kernel: crate::kallsyms::Needed::default(),
            copies: false,
            cfi: None,
            family: 0,
            stack_quality: StackQuality::default(),
            unwind_info: false,
            unwind_written: HashSet::new(),
            vdso_written: 0,
            pending_copies: BTreeMap::new(),
            copies_missing: 0,
            late_attachments: 0,
            never_attached: 0,
            children_attached: HashMap::new(),
            waker_frames_dropped: 0,
            threads: Default::default(),
            probed: Vec::new(),
            probed_usdt: Vec::new(),
            malformed: 0,
            last_counters: BTreeMap::new(),
            sideband_lost: 0,
            probes,
            follow,
            frames: Vec::with_capacity(probes::MAX_FRAMES),
            launched: None,
            slow_tail: None,
            same_call: Default::default(),
            same_call_filled: 0,
            agg: Default::default(),
            aggregating: false,
            hist: Default::default(),
            start_ns: procfs::clock_ns(libc::CLOCK_BOOTTIME),
            devices_written: HashSet::new(),
            tcp_written: HashSet::new(),
            last_families: Vec::new(),
        }
    }

    pub fn clock_sync(&mut self) -> Result<()> {
        let r = Record {
            kind: Some(Kind::ClockSync(ClockSync {
                boottime_ns: procfs::clock_ns(libc::CLOCK_BOOTTIME),
                monotonic_ns: procfs::clock_ns(libc::CLOCK_MONOTONIC),
                realtime_ns: procfs::clock_ns(libc::CLOCK_REALTIME),
            })),
        };
        self.w.write_record(&r)?;
        Ok(())
    }

    /// Describes a --func function (ProbedFunction), before any of its calls.
    pub fn probed_function(
        &mut self,
        id: u64,
        m: &crate::funcs::FuncMatch,
        build_id: &[u8],
    ) -> Result<()> {
        self.probed.push((id, m.clone(), build_id.to_vec()));
        let name = self.w.intern_string(m.demangled.as_bytes())?;
        let symbol = self.w.intern_string(m.symbol.as_bytes())?;
        let path = self.w.intern_string(m.binary.as_bytes())?;
        let build_id = if build_id.is_empty() {
            0
        } else {
            self.w.intern_build_id(build_id)?
        };
        self.w.write_record(&Record {
            kind: Some(Kind::ProbedFunction(ProbedFunction {
                id,
                name,
                symbol,
                path,
                build_id,
                address: m.vaddr,
                min_duration_ns: m.min_ns,
            })),
        })?;
        Ok(())
    }

    /// Describes a --usdt probe (ProbedUsdt), before any of its hits.
    pub fn probed_usdt(&mut self, p: &crate::funcs::usdt::UsdtProbe) -> Result<()> {
        self.probed_usdt.push(p.clone());
        let mut s = |b: &str| self.w.intern_string(b.as_bytes());
        let r = ProbedUsdt {
            id: p.id,
            path: s(&p.binary)?,
            build_id: 0,
            provider: s(&p.provider)?,
            name: s(&p.name)?,
            args_spec: s(&p.args_spec)?,
            arg_count: p.arg_count,
            arg_signed: p.arg_signed,
            offset: p.offset,
            semaphore: p.semaphore,
            done: p.done,
        };
        let build_id = if p.build_id.is_empty() {
            0
        } else {
            self.w.intern_build_id(&p.build_id)?
        };
        self.w.write_record(&Record {
            kind: Some(Kind::ProbedUsdt(ProbedUsdt { build_id, ..r })),
        })?;
        Ok(())
    }

    /// Writes the kallsyms entries that new kernel frames need (once each).
    pub fn flush_kernel_symbols(&mut self) -> Result<()> {
        if let Some(ks) = self.kernel.take_pending() {
            let mut address = Vec::with_capacity(ks.len());
            let mut name = Vec::with_capacity(ks.len());
            let mut module = Vec::with_capacity(ks.len());
            for (a, n, m) in ks {
                address.push(a);
                name.push(self.w.intern_string(n.as_bytes())?);
                module.push(if m.is_empty() {
                    0
                } else {
                    self.w.intern_string(m.as_bytes())?
                });
            }
            self.w.write_record(&Record {
                kind: Some(Kind::KernelSymbols(KernelSymbols {
                    address,
                    name,
                    module,
                })),
            })?;
        }
        Ok(())
    }

    pub fn processes(&self) -> usize {
        self.by_pid.len()
    }

    /// Whether `pid` is described in the trace already (a target, or a child followed).
    pub fn knows(&self, pid: u32) -> bool {
        self.by_pid.contains_key(&pid)
    }
}

/// Drains the side band and the ring buffers once, in the order that keeps attribution
/// right: ring buffers first into `pending` (those events happened before the side-band
/// drain started), then the side band, then the pending events.
pub fn drain_once(
    s: &mut Session<'_>,
    rb: &libbpf_rs::RingBuffer<'_>,
    pending: &std::rc::Rc<std::cell::RefCell<Vec<u8>>>,
    side: &mut SideBandReader,
) -> Result<usize> {
    // Returns the bytes of events drained (for the loop's pace).
    let _ = rb.consume();
    let mut recs = Vec::new();
    side.drain(&mut recs);
    // The side band's per-CPU rings are 256 KiB against the ring buffers' 8 MiB: each of
    // its records counts as 1 KiB of the pace's room (record::Pace).
    let side_weight = recs.len() * 1024;
    s.side_band(recs)?;
    if let Some(c) = &s.probes.chan {
        // the preload shim's events (after the rings': its probe sites are not called
        // while it writes here)
        c.drain(&mut pending.borrow_mut());
    }
    let buf = std::mem::take(&mut *pending.borrow_mut());
    let bytes = buf.len();
    let mut off = 0;
    while off + 4 <= buf.len() {
        let n = u32::from_ne_bytes(buf[off..off + 4].try_into().unwrap()) as usize;
        off += 4;
        let data = &buf[off..(off + n).min(buf.len())];
        off += n;
        s.event(data)?;
    }
    s.flush_same_call()?;
    let mut buf = buf;
    buf.clear();
    let mut p = pending.borrow_mut();
    if p.is_empty() {
        *p = buf; // keep the capacity
    }
    Ok(bytes + side_weight)
}

/// User stacks per family and the reasons some stopped before the outermost frame (the
/// stack flags every Stack record carries), for the exit summary.
#[derive(Debug, Default)]
pub struct StackQuality {
    /// family -> (user stacks, reason -> count)
    pub per_family: BTreeMap<usize, (u64, BTreeMap<&'static str, u64>)>,
}

/// The flags that say a user stack stopped early, and their names.
pub const CUT_REASONS: &[(StackFlag, &str)] = &[
    (StackFlag::UserTruncated, "longer than --stack-depth"),
    (StackFlag::UserError, "no user stack (read failed)"),
    (StackFlag::UserLeftCode, "frame pointer left the code"),
    (StackFlag::UserNoRows, "pc without unwind rows"),
    (StackFlag::UserNoTable, "binary without rows loaded"),
    (
        StackFlag::UserUnknownMapping,
        "pc in a mapping not known yet",
    ),
    (StackFlag::UserBadFrame, "bad stack read or frame"),
    (StackFlag::UserFpSteps, "frame-pointer steps (auto)"),
    (
        StackFlag::UserNotAtExit,
        "off-CPU block not ended at its syscall exit (kernel stack only)",
    ),
    (
        StackFlag::UserLeafOnly,
        "preempted after a short run (the preempted instruction only)",
    ),
    (
        StackFlag::KernelSwitchUnseen,
        "off-CPU block whose switch-in the kernel did not report (ended at its return to user space, no kernel stack)",
    ),
];

impl StackQuality {
    fn note(&mut self, family: usize, user: bool, flags: u32) {
        if !user {
            return;
        }
        let e = self.per_family.entry(family).or_default();
        e.0 += 1;
        for (f, name) in CUT_REASONS {
            if flags & *f as u32 != 0 {
                *e.1.entry(name).or_default() += 1;
            }
        }
    }

    /// One line per family with user stacks: "alloc 1,204 stacks: 3 pc without rows, …".
    pub fn lines(&self) -> Vec<String> {
        self.per_family
            .iter()
            .map(|(&fam, (n, reasons))| {
                let name =
                    ebtrace_format::family::by_number(fam as i32).map_or("other", |f| f.name);
                if reasons.is_empty() {
                    format!("{name}: {n} user stacks, all whole")
                } else {
                    let r: Vec<String> = reasons.iter().map(|(k, v)| format!("{k} {v}")).collect();
                    format!("{name}: {n} user stacks; {}", r.join(", "))
                }
            })
            .collect()
    }
}
