//! The recording loop: drains the BPF ring buffers and the perf side band, keeps process
//! generations and their mappings, and writes everything to the trace.
use crate::perf::{SideBand, SideBandReader};
use crate::probes::{self, Probes};
use crate::procfs;
use anyhow::Result;
use ebtrace_format::events::{
    AllocEvent, CpuSample, FreeEvent, FuncEvent, LockEvent, MemGrowthEvent, OffCpuEvent,
};
use ebtrace_format::proto::{
    record::Kind, AllocKind, ClockSync, EventFamily, FamilyStats, KernelSymbols, LockSource,
    LossReason, Lost, Mapping, MappingSource, MemGrowthKind, ProbedFunction, Process, ProcessEvent,
    ProgramStats, Record, Stack, StackFlag, Stats, Trailer, UnwindTables, UserStackCopy,
};
use ebtrace_format::family::PerFamily;
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
}

#[derive(Debug)]
struct Gen {
    start_ns: u64,
    comm: u64,
    exe: u64,
    cmdline: Vec<u64>,
    maps: Vec<MapRec>,
    /// The executable mappings' ranges, sorted by start: what `left_code` checks every
    /// frame of every event against, by binary search.
    exec: Vec<(u64, u64)>,
}

/// Everything the loop keeps between iterations.
pub struct Session<'a> {
    pub w: TraceWriter<BufWriter<File>>,
    gens: Vec<Gen>,
    by_pid: HashMap<u32, Vec<u32>>,
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
    /// --stack-mode auto: copies only for processes without frame pointers (judged at exec).
    pub auto_copies: bool,
    /// Write each binary's unwind tables once (not with --no-unwind-info).
    pub unwind_info: bool,
    unwind_written: HashSet<u64>,
    /// Stack copies waiting for their event, by id (the copy is sent first).
    pending_copies: BTreeMap<u64, PendingCopy>,
    /// The --func functions, to describe again in a new file (--rotate).
    probed: Vec<(u64, crate::funcs::FuncMatch, Vec<u8>)>,
    /// Events whose stack copy never came (lost in the ring buffer, or dropped from
    /// `pending_copies`): they keep the frame-pointer stack. Shown in the exit summary.
    pub copies_missing: u64,
    /// Off-CPU wakers in untraced processes whose user frames were dropped (their addresses
    /// mean nothing in the target's maps). Shown in the exit summary.
    pub waker_frames_dropped: u64,
    /// The launched command, whose EXIT record waits for its code from waitpid.
    pub launched: Option<u32>,
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
            by_pid: HashMap::new(),
            build_ids: HashMap::new(),
            live: HashSet::new(),
            exit_codes: HashMap::new(),
            exited: HashMap::new(),
            kept: PerFamily::default(),
            kernel: crate::kallsyms::Needed::default(),
            copies: false,
            auto_copies: false,
            unwind_info: false,
            unwind_written: HashSet::new(),
            pending_copies: BTreeMap::new(),
            copies_missing: 0,
            waker_frames_dropped: 0,
            probed: Vec::new(),
            malformed: 0,
            last_counters: BTreeMap::new(),
            sideband_lost: 0,
            probes,
            follow,
            frames: Vec::with_capacity(probes::MAX_FRAMES),
            launched: None,
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

    fn new_gen(&mut self, pid: u32, start_ns: u64, comm: u64, exe: u64, cmdline: Vec<u64>) -> u32 {
        self.gens.push(Gen {
            start_ns,
            comm,
            exe,
            cmdline,
            maps: Vec::new(),
            exec: Vec::new(),
        });
        let id = self.gens.len() as u32;
        self.by_pid.entry(pid).or_default().push(id);
        id
    }

    /// The generation of `pid` at `time`.
    fn gen_at(&self, pid: u32, time: u64) -> Option<u32> {
        let ids = self.by_pid.get(&pid)?;
        let mut best = ids[0];
        for &id in ids {
            if self.gens[id as usize - 1].start_ns <= time {
                best = id;
            }
        }
        Some(best)
    }

    /// The generation of `pid` at `time`, recording the process from /proc if it is new
    /// (already running when tracing began, or seen first through an event).
    fn gen_or_snapshot(&mut self, pid: u32, time: u64) -> Result<u32> {
        if let Some(g) = self.gen_at(pid, time) {
            return Ok(g);
        }
        self.snapshot(pid, time)
    }

    /// Records a running process as an EXISTING generation with its current maps.
    pub fn snapshot(&mut self, pid: u32, now: u64) -> Result<u32> {
        let info = procfs::proc_info(pid).unwrap_or_default();
        let comm = self.w.intern_string(&info.comm)?;
        let exe = self.w.intern_string(&info.exe)?;
        let cmdline = info
            .cmdline
            .iter()
            .map(|a| self.w.intern_string(a))
            .collect::<Result<Vec<_>, _>>()?;
        let start_ns = boot_of_ticks(info.start_ticks);
        let g = self.new_gen(pid, start_ns, comm, exe, cmdline.clone());
        self.w.write_record(&Record {
            kind: Some(Kind::Process(Process {
                generation: g,
                pid,
                start_time_ns: start_ns,
                ppid: info.ppid,
                comm,
                exe,
                cmdline,
                pid_ns: info.pid_ns,
                event: ProcessEvent::Existing as i32,
                time_ns: now,
                parent_generation: 0,
                exit_code: 0,
                ns_pid: info.ns_pid,
            })),
        })?;
        for m in procfs::maps(pid).unwrap_or_default() {
            if m.perms & 4 == 0 || m.path.is_empty() {
                continue;
            }
            let bid = if m.path.starts_with(b"/") {
                let mf = PathBuf::from(format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end));
                let file = if mf.exists() {
                    mf
                } else {
                    procfs::path_in(pid, &m.path)
                };
                let bid =
                    self.build_id_of(m.dev, m.inode, &m.path, || crate::elf::build_id(&file))?;
                self.unwind_tables(bid, &file)?;
                bid
            } else {
                0
            };
            let path = self.w.intern_string(&m.path)?;
            self.add_mapping(
                g,
                MapRec {
                    start: m.start,
                    end: m.end,
                    offset: m.offset,
                    path,
                    build_id: bid,
                    inode: m.inode,
                    dev: m.dev,
                    perms: m.perms,
                },
                now,
                MappingSource::Snapshot,
            )?;
        }
        Ok(g)
    }

    fn build_id_of(
        &mut self,
        dev: u64,
        inode: u64,
        path: &[u8],
        read: impl FnOnce() -> Option<Vec<u8>>,
    ) -> Result<u64> {
        let key = (dev, inode, path.to_vec());
        if let Some(&id) = self.build_ids.get(&key) {
            return Ok(id);
        }
        let id = match read() {
            Some(b) if !b.is_empty() => self.w.intern_build_id(&b)?,
            _ => 0,
        };
        self.build_ids.insert(key, id);
        Ok(id)
    }

    fn add_mapping(&mut self, g: u32, m: MapRec, time: u64, source: MappingSource) -> Result<()> {
        self.write_mapping(g, &m, time, source)?;
        let gen = &mut self.gens[g as usize - 1];
        if m.perms & 4 != 0 {
            let i = gen.exec.partition_point(|r| r.0 <= m.start);
            gen.exec.insert(i, (m.start, m.end));
        }
        gen.maps.push(m);
        Ok(())
    }

    /// The Mapping record of `m` in generation `g`.
    fn write_mapping(
        &mut self,
        g: u32,
        m: &MapRec,
        time: u64,
        source: MappingSource,
    ) -> Result<()> {
        self.w.write_record(&Record {
            kind: Some(Kind::Mapping(Mapping {
                generation: g,
                start: m.start,
                end: m.end,
                file_offset: m.offset,
                path: m.path,
                build_id: m.build_id,
                inode: m.inode,
                dev: m.dev,
                perms: m.perms,
                time_ns: time,
                source: source as i32,
            })),
        })?;
        Ok(())
    }

    /// Applies side-band records (in time order).
    pub fn side_band(&mut self, mut recs: Vec<SideBand>) -> Result<()> {
        let time = |r: &SideBand| match r {
            SideBand::Mmap { time, .. }
            | SideBand::Fork { time, .. }
            | SideBand::Exit { time, .. }
            | SideBand::Exec { time, .. } => *time,
            SideBand::Lost { .. } => 0,
        };
        recs.sort_by_key(time);
        for r in recs {
            match r {
                SideBand::Fork {
                    pid,
                    ppid,
                    tid,
                    time,
                    ..
                } if pid == tid && pid != ppid => {
                    let parent = self.gen_at(ppid, time);
                    let (comm, exe, cmdline, maps) = match parent {
                        Some(p) => {
                            let p = &self.gens[p as usize - 1];
                            (p.comm, p.exe, p.cmdline.clone(), p.maps.clone())
                        }
                        None => (0, 0, Vec::new(), Vec::new()),
                    };
                    let g = self.new_gen(pid, time, comm, exe, cmdline.clone());
                    self.w.write_record(&Record {
                        kind: Some(Kind::Process(Process {
                            generation: g,
                            pid,
                            start_time_ns: time,
                            ppid,
                            comm,
                            exe,
                            cmdline,
                            event: ProcessEvent::Fork as i32,
                            time_ns: time,
                            parent_generation: parent.unwrap_or(0),
                            ..Default::default()
                        })),
                    })?;
                    for m in maps {
                        self.add_mapping(g, m, time, MappingSource::Fork)?;
                    }
                    if self.auto_copies && self.probes.copies_for(ppid) {
                        let _ = self.probes.set_copy_pid(pid);
                    }
                    if self.follow {
                        self.live.insert(pid);
                    }
                }
                SideBand::Fork { .. } => {}
                SideBand::Exec {
                    pid, time, comm, ..
                } => {
                    let parent = self.gen_at(pid, time);
                    let info = procfs::proc_info(pid).unwrap_or_default();
                    let comm = self.w.intern_string(&comm)?;
                    let exe = self.w.intern_string(&info.exe)?;
                    let cmdline = info
                        .cmdline
                        .iter()
                        .map(|a| self.w.intern_string(a))
                        .collect::<Result<Vec<_>, _>>()?;
                    if !info.exe.is_empty() {
                        self.judge_frame_pointers(pid, &procfs::path_in(pid, &info.exe));
                    }
                    let g = self.new_gen(pid, time, comm, exe, cmdline.clone());
                    self.w.write_record(&Record {
                        kind: Some(Kind::Process(Process {
                            generation: g,
                            pid,
                            start_time_ns: time,
                            ppid: info.ppid,
                            comm,
                            exe,
                            cmdline,
                            pid_ns: info.pid_ns,
                            event: ProcessEvent::Exec as i32,
                            time_ns: time,
                            parent_generation: parent.unwrap_or(0),
                            ns_pid: info.ns_pid,
                            ..Default::default()
                        })),
                    })?;
                }
                SideBand::Mmap {
                    pid,
                    time,
                    start,
                    len,
                    pgoff,
                    inode,
                    build_id,
                    prot,
                    flags,
                    path,
                    ..
                } => {
                    let g = self.gen_or_snapshot(pid, time)?;
                    let (dev, ino) = inode
                        .map(|(ma, mi, ino)| ((u64::from(ma) << 20) | u64::from(mi), ino))
                        .unwrap_or((0, 0));
                    let file = path.starts_with(b"/").then(|| procfs::path_in(pid, &path));
                    let kernel_bid = build_id.clone();
                    let bid = match (build_id, &file) {
                        (Some(b), _) => self.build_id_of(0, 0, &b, || Some(b.clone()))?,
                        (None, Some(file)) => {
                            self.build_id_of(dev, ino, &path, || crate::elf::build_id(file))?
                        }
                        (None, None) => 0,
                    };
                    if let (Some(file), true) = (&file, prot & libc::PROT_EXEC as u32 != 0) {
                        // A process that has already exited has no /proc/PID/root: the
                        // file at the same path here will do if it has the same build-id.
                        let here = std::path::PathBuf::from(std::ffi::OsStr::from_bytes(&path));
                        if file.exists() {
                            self.unwind_tables(bid, file)?;
                        } else if self.unwind_info
                            && kernel_bid.is_some()
                            && crate::elf::build_id(&here) == kernel_bid
                        {
                            self.unwind_tables(bid, &here)?;
                        }
                    }
                    let mut perms = 0;
                    if prot & libc::PROT_READ as u32 != 0 {
                        perms |= 1;
                    }
                    if prot & libc::PROT_WRITE as u32 != 0 {
                        perms |= 2;
                    }
                    if prot & libc::PROT_EXEC as u32 != 0 {
                        perms |= 4;
                    }
                    if flags & libc::MAP_SHARED as u32 != 0 {
                        perms |= 8;
                    }
                    let path = self.w.intern_string(&path)?;
                    self.add_mapping(
                        g,
                        MapRec {
                            start,
                            end: start + len,
                            offset: pgoff,
                            path,
                            build_id: bid,
                            inode: ino,
                            dev,
                            perms,
                        },
                        time,
                        MappingSource::Mmap,
                    )?;
                }
                SideBand::Exit { pid, tid, time, .. } if pid == tid => {
                    self.exited.insert(pid, time);
                    // The launched command stays "live" until waitpid has its exit code,
                    // so that its EXIT record is written before the recording stops.
                    if !self.awaiting_code(pid) {
                        self.live.remove(&pid);
                    }
                    if !self.exit_codes.contains_key(&pid) {
                        // the launched command's exit is written once waitpid gives its code
                        if !self.awaiting_code(pid) {
                            self.write_exit(pid, time, 0)?;
                        }
                    }
                }
                SideBand::Exit { .. } => {}
                SideBand::Lost { count, cpu } => {
                    self.sideband_lost += count;
                    self.w.write_record(&Record {
                        kind: Some(Kind::Lost(Lost {
                            time_ns: procfs::clock_ns(libc::CLOCK_BOOTTIME),
                            family: EventFamily::Process as i32,
                            reason: LossReason::RingbufFull as i32,
                            count,
                            cpu,
                        })),
                    })?;
                }
            }
        }
        Ok(())
    }

    fn awaiting_code(&self, pid: u32) -> bool {
        self.launched == Some(pid)
    }

    /// Writes the EXIT record of `pid` (the launched command's, once waitpid has its code).
    pub fn write_exit(&mut self, pid: u32, time: u64, code: i32) -> Result<()> {
        let Some(g) = self.gen_at(pid, time) else {
            return Ok(());
        };
        self.w.write_record(&Record {
            kind: Some(Kind::Process(Process {
                generation: g,
                pid,
                event: ProcessEvent::Exit as i32,
                time_ns: time,
                exit_code: code,
                ..Default::default()
            })),
        })?;
        Ok(())
    }

    /// The launched command exited with `code` (from waitpid).
    pub fn launched_exited(&mut self, pid: u32, code: i32) -> Result<()> {
        self.exit_codes.insert(pid, code);
        self.live.remove(&pid);
        let time = self
            .exited
            .get(&pid)
            .copied()
            .unwrap_or_else(|| procfs::clock_ns(libc::CLOCK_BOOTTIME));
        self.write_exit(pid, time, code)
    }

    /// The id of a stack: `user[..n]` and `kernel` frames, leaf first. Kernel frames of a
    /// new stack queue their kallsyms entries for the next KernelSymbols record.
    fn stack(
        &mut self,
        g: u32,
        user: &[u64],
        n: u32,
        kernel: &[u64],
        flags: u32,
        copy_id: u64,
    ) -> Result<u64> {
        let n = (n as usize).min(user.len());
        let kernel = if kernel.is_empty() {
            kernel
        } else {
            self.kernel.strip_tracer(kernel)
        };
        if n == 0 && kernel.is_empty() {
            return Ok(0);
        }
        let mut frames = std::mem::take(&mut self.frames);
        frames.clear();
        frames.extend_from_slice(&user[..n]);
        // At an entry probe frame 1 is the caller read from [sp]; if the kernel had added
        // it too (functions starting with push %rbp), frame 2 repeats it.
        if flags & StackFlag::CallerFromSp as u32 != 0
            && frames.len() >= 3
            && frames[1] == frames[2]
        {
            frames.remove(2);
        }
        let mut flags = flags;
        if let Some(cut) = self.left_code(g, &frames) {
            frames.truncate(cut);
            flags |= StackFlag::UserLeftCode as u32;
        }
        let copy = if copy_id != 0 {
            let c = self.pending_copies.remove(&copy_id);
            if c.is_none() {
                self.copies_missing += 1;
            }
            c
        } else {
            None
        };
        let before = self.w.stats().stacks;
        let id = match copy {
            // A stack with a copy is its own record: two copies are rarely equal.
            Some(c) => {
                self.kept[EventFamily::StackCopy] += 1;
                self.w.write_stack_copy(Stack {
                    id: 0,
                    generation: g,
                    user_ips: frames.clone(),
                    kernel_ips: kernel.to_vec(),
                    flags,
                    copy: Some(UserStackCopy {
                        // DWARF x86_64 numbering: rbp 6, rsp 7, return address (rip) 16.
                        regs: vec![c.bp, c.sp, c.ip],
                        reg_mask: (1 << 6) | (1 << 7) | (1 << 16),
                        sp: c.sp,
                        data: c.data,
                    }),
                })
            }
            None => self.w.intern_stack(g, &frames, kernel, flags),
        };
        self.frames = frames;
        if !kernel.is_empty() && self.w.stats().stacks != before {
            self.kernel.note(kernel);
        }
        Ok(id?)
    }

    /// Where a frame-pointer walk went astray: the first return address (frame 1 on) that
    /// is in no executable mapping of generation `g`. None when all are, or when the
    /// generation's mappings are unknown (nothing to judge by).
    fn left_code(&self, g: u32, frames: &[u64]) -> Option<usize> {
        let gen = self.gens.get(g as usize - 1)?;
        if gen.maps.is_empty() {
            return None;
        }
        let exec = &gen.exec;
        frames.iter().enumerate().skip(1).find_map(|(i, &ip)| {
            // The range starting last at or before ip; ranges may overlap (a remapped
            // file), so a miss there is checked against all before saying "outside".
            let near = exec.partition_point(|r| r.0 <= ip);
            let inside = near.checked_sub(1).is_some_and(|j| ip < exec[j].1)
                || exec.iter().any(|r| r.0 <= ip && ip < r.1);
            (!inside).then_some(i)
        })
    }

    /// Goes on in `next` (--rotate): finishes the current file with `trailer`, then defines
    /// again in the new one what its events will refer to — the processes (alive, or ended
    /// in the last 10 s: late events may still come) with their maps, the --func functions —
    /// so that each file reads on its own. Generation ids stay the same across files.
    pub fn rotate(
        &mut self,
        next: TraceWriter<BufWriter<File>>,
        trailer: Trailer,
        now: u64,
    ) -> Result<()> {
        let strings: HashMap<u64, Vec<u8>> = self
            .w
            .interned_strings()
            .map(|(id, b)| (id, b.to_vec()))
            .collect();
        let bids: HashMap<u64, Vec<u8>> = self
            .w
            .interned_build_ids()
            .map(|(id, b)| (id, b.to_vec()))
            .collect();
        let old = std::mem::replace(&mut self.w, next);
        old.finish(Some(trailer))?;
        let w = &mut self.w;
        let mut s = |id: u64| -> Result<u64> {
            Ok(match strings.get(&id) {
                Some(b) if id != 0 => w.intern_string(b)?,
                _ => 0,
            })
        };
        let mut pid_of = HashMap::new();
        for (&pid, ids) in &self.by_pid {
            for &g in ids {
                pid_of.insert(g, pid);
            }
        }
        let mut keep = Vec::new();
        for (i, g) in self.gens.iter_mut().enumerate() {
            let id = i as u32 + 1;
            let pid = pid_of.get(&id).copied().unwrap_or(0);
            g.comm = s(g.comm)?;
            g.exe = s(g.exe)?;
            for a in g.cmdline.iter_mut() {
                *a = s(*a)?;
            }
            for m in g.maps.iter_mut() {
                m.path = s(m.path)?;
            }
            let ended = self.exited.get(&pid).copied();
            let latest = self.by_pid.get(&pid).and_then(|v| v.last()) == Some(&id);
            if !latest || ended.is_some_and(|t| now.saturating_sub(t) > 10_000_000_000) {
                continue;
            }
            keep.push((id, pid, ended));
        }
        for m in self.gens.iter_mut().flat_map(|g| g.maps.iter_mut()) {
            m.build_id = match bids.get(&m.build_id) {
                Some(b) if m.build_id != 0 => self.w.intern_build_id(b)?,
                _ => 0,
            };
        }
        for v in self.build_ids.values_mut() {
            *v = match bids.get(v) {
                Some(b) if *v != 0 => self.w.intern_build_id(b)?,
                _ => 0,
            };
        }
        self.unwind_written.clear();
        self.kernel.forget_written();
        self.clock_sync()?;
        for (id, pid, ended) in keep {
            let g = &self.gens[id as usize - 1];
            self.w.write_record(&Record {
                kind: Some(Kind::Process(Process {
                    generation: id,
                    pid,
                    start_time_ns: g.start_ns,
                    comm: g.comm,
                    exe: g.exe,
                    cmdline: g.cmdline.clone(),
                    event: ProcessEvent::Existing as i32,
                    time_ns: now,
                    ..Default::default()
                })),
            })?;
            for m in g.maps.clone() {
                self.write_mapping(id, &m, now, MappingSource::Snapshot)?;
            }
            if let Some(t) = ended {
                self.write_exit(pid, t, 0)?;
            }
        }
        for (id, m, bid) in std::mem::take(&mut self.probed) {
            self.probed_function(id, &m, &bid)?;
        }
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

    /// Keeps a stack copy (`copy_event`, sent up to its last byte) for the event after it.
    fn keep_copy(&mut self, data: &[u8]) {
        use std::mem::offset_of;
        type C = probes::copy_event;
        let at = |off: usize| -> Option<u64> {
            Some(u64::from_ne_bytes(data.get(off..off + 8)?.try_into().ok()?))
        };
        let (Some(id), Some(ip), Some(sp), Some(bp)) = (
            at(offset_of!(C, id)),
            at(offset_of!(C, ip)),
            at(offset_of!(C, sp)),
            at(offset_of!(C, bp)),
        ) else {
            self.malformed += 1;
            return;
        };
        let start = offset_of!(C, data);
        let len = data
            .get(offset_of!(C, len)..offset_of!(C, len) + 4)
            .map(|b| u32::from_ne_bytes(b.try_into().unwrap()) as usize)
            .unwrap_or(0);
        let Some(bytes) = data.get(start..start + len) else {
            self.malformed += 1;
            return;
        };
        self.pending_copies.insert(
            id,
            PendingCopy {
                ip,
                sp,
                bp,
                data: bytes.to_vec(),
            },
        );
        while self.pending_copies.len() > MAX_PENDING_COPIES {
            self.pending_copies.pop_first();
        }
    }

    /// Writes the unwind tables of the binary `file` (build-id id `bid`) once.
    fn unwind_tables(&mut self, bid: u64, file: &std::path::Path) -> Result<()> {
        if !self.unwind_info || bid == 0 || !self.unwind_written.insert(bid) {
            return Ok(());
        }
        if let Some(t) = crate::elf::unwind_tables(file) {
            self.w.write_record(&Record {
                kind: Some(Kind::UnwindTables(UnwindTables {
                    build_id: bid,
                    eh_frame: t.eh_frame,
                    eh_frame_address: t.eh_frame_address,
                    eh_frame_hdr: t.eh_frame_hdr,
                    eh_frame_hdr_address: t.eh_frame_hdr_address,
                    load_segments: t
                        .load_segments
                        .iter()
                        .flat_map(|&(v, o, n)| [v, o, n])
                        .collect(),
                })),
            })?;
        }
        Ok(())
    }

    /// --stack-mode auto: copies for `pid` if its executable `exe` lacks frame pointers.
    fn judge_frame_pointers(&mut self, pid: u32, exe: &std::path::Path) {
        if self.auto_copies && crate::elf::has_frame_pointers(exe) == Some(false) {
            let _ = self.probes.set_copy_pid(pid);
        }
    }

    /// Decodes and writes one BPF event.
    pub fn event(&mut self, data: &[u8]) -> Result<()> {
        if data.len() < std::mem::size_of::<probes::event_header>() {
            self.malformed += 1;
            return Ok(());
        }
        let h: probes::event_header = probes::read_event(data);
        if h.r#type == EventFamily::StackCopy as u32 {
            self.keep_copy(data);
            return Ok(());
        }
        let g = self.gen_or_snapshot(h.pid, h.time_ns)?;
        match h.r#type {
            t if t == EventFamily::Alloc as u32 => {
                let e: probes::alloc_event = probes::read_event(data);
                let stack = self.stack(g, &e.ips, e.nframes, &[], e.flags, e.copy_id)?;
                self.w.alloc(&AllocEvent {
                    time_ns: h.time_ns,
                    generation: g,
                    tid: h.tid,
                    stack,
                    size: e.size,
                    address: e.addr,
                    kind: AllocKind::try_from(e.kind as i32).unwrap_or_default(),
                })?;
                self.kept[EventFamily::Alloc] += 1;
            }
            t if t == EventFamily::Free as u32 => {
                let e: probes::free_event = probes::read_event(data);
                self.w.free(&FreeEvent {
                    time_ns: h.time_ns,
                    generation: g,
                    tid: h.tid,
                    address: e.addr,
                })?;
                self.kept[EventFamily::Free] += 1;
            }
            t if t == EventFamily::Lock as u32 => {
                let e: probes::lock_event = probes::read_event(data);
                let stack = self.stack(
                    g,
                    &e.ips[..probes::MAX_FRAMES],
                    e.nframes,
                    &[],
                    e.flags,
                    e.copy_id,
                )?;
                let waker_stack = self.stack(
                    g,
                    &e.ips[probes::MAX_FRAMES..],
                    e.waker_nframes,
                    &[],
                    e.waker_flags,
                    0,
                )?;
                self.w.lock(&LockEvent {
                    time_ns: h.time_ns,
                    generation: g,
                    tid: h.tid,
                    stack,
                    mutex: e.uaddr,
                    wait_ns: e.wait_ns,
                    hold_ns: e.hold_ns,
                    waker_tid: e.waker_tid,
                    waker_stack,
                    futex_op: e.op,
                    source: LockSource::try_from(e.source as i32).unwrap_or_default(),
                    result: e.ret,
                })?;
                self.kept[EventFamily::Lock] += 1;
            }
            t if t == EventFamily::Cpu as u32 => {
                let e: probes::sample_event = probes::read_event(data);
                let (user, kernel) = split_frames(&e.ips, e.nframes, e.kframes);
                let stack = self.stack(g, user, user.len() as u32, kernel, e.flags, e.copy_id)?;
                self.w.cpu_sample(&CpuSample {
                    time_ns: h.time_ns,
                    generation: g,
                    tid: h.tid,
                    stack,
                    cpu: h.cpu,
                })?;
                self.kept[EventFamily::Cpu] += 1;
            }
            t if t == EventFamily::Offcpu as u32 => {
                let e: probes::offcpu_event = probes::read_event(data);
                let (user, kernel) = split_frames(&e.ips, e.nframes, e.kframes);
                let stack = self.stack(g, user, user.len() as u32, kernel, e.flags, e.copy_id)?;
                let used = (e.nframes + e.kframes) as usize;
                let rest = e.ips.get(used.min(e.ips.len())..).unwrap_or(&[]);
                let (wuser, wkernel) = split_frames(rest, e.waker_nframes, e.waker_kframes);
                // The waker's user frames are addresses in *its* process: kept only when
                // that process is known (a target), under its own generation. A wake from
                // an interrupt names whoever was running: the kernel frames tell.
                let (wg, wuser) = if e.waker_pid == h.pid {
                    (g, wuser)
                } else {
                    match self.gen_at(e.waker_pid, h.time_ns) {
                        Some(wg) => (wg, wuser),
                        None => {
                            if !wuser.is_empty() {
                                self.waker_frames_dropped += 1;
                            }
                            (g, &[][..])
                        }
                    }
                };
                let waker_stack = if e.waker_tid != 0 {
                    self.stack(wg, wuser, wuser.len() as u32, wkernel, e.waker_flags, 0)?
                } else {
                    0
                };
                self.w.offcpu(&OffCpuEvent {
                    time_ns: h.time_ns,
                    generation: g,
                    tid: h.tid,
                    stack,
                    duration_ns: e.duration_ns,
                    waker_tid: e.waker_tid,
                    waker_stack,
                    state: e.state,
                })?;
                self.kept[EventFamily::Offcpu] += 1;
            }
            t if t == EventFamily::Func as u32 => {
                let e: probes::func_event = probes::read_event(data);
                let stack = self.stack(g, &e.ips, e.nframes, &[], e.flags, e.copy_id)?;
                let nargs = (e.nargs as usize).min(e.args.len());
                self.w.func(&FuncEvent {
                    time_ns: h.time_ns,
                    generation: g,
                    tid: h.tid,
                    stack,
                    function: e.function,
                    duration_ns: e.duration_ns,
                    args: e.args[..nargs].to_vec(),
                    ret: e.ret,
                })?;
                self.kept[EventFamily::Func] += 1;
            }
            t if t == EventFamily::MemGrowth as u32 => {
                let e: probes::mem_event = probes::read_event(data);
                let stack = self.stack(g, &e.ips, e.nframes, &[], e.flags, e.copy_id)?;
                self.w.mem_growth(&MemGrowthEvent {
                    time_ns: h.time_ns,
                    generation: g,
                    tid: h.tid,
                    stack,
                    kind: MemGrowthKind::try_from(e.kind as i32).unwrap_or_default(),
                    size: e.size,
                    address: e.addr,
                })?;
                self.kept[EventFamily::MemGrowth] += 1;
            }
            _ => self.malformed += 1,
        }
        Ok(())
    }

    /// Cumulative stats, and Lost records for what was lost since the last call.
    pub fn stats(&mut self, now: u64) -> Result<Vec<FamilyStats>> {
        let c = self.probes.counters();
        for (&(key, cpu), &v) in &c.values {
            let family = key / probes::CTR_STRIDE;
            let reason = match key % probes::CTR_STRIDE {
                probes::CTR_LOST_RINGBUF => LossReason::RingbufFull,
                probes::CTR_LOST_MAP_FULL => LossReason::MapFull,
                probes::CTR_LOST_RATE => LossReason::RateLimit,
                _ => continue,
            };
            let before = self.last_counters.insert((key, cpu), v).unwrap_or(0);
            if v > before {
                self.w.write_record(&Record {
                    kind: Some(Kind::Lost(Lost {
                        time_ns: now,
                        family: family as i32,
                        reason: reason as i32,
                        count: v - before,
                        cpu,
                    })),
                })?;
            }
        }
        self.flush_kernel_symbols()?;
        let families: Vec<FamilyStats> = ebtrace_format::family::FAMILIES
            .iter()
            .map(|f| {
            let i = f.number();
            FamilyStats {
                family: f.id as i32,
                kept: self.kept[f.id],
                lost: c.total(i, probes::CTR_LOST_RINGBUF)
                    + c.total(i, probes::CTR_LOST_MAP_FULL)
                    + c.total(i, probes::CTR_LOST_RATE),
                filtered: c.total(i, probes::CTR_FILTERED),
                hits: c.total(i, probes::CTR_HITS),
            }
        })
        .filter(|f| f.hits > 0 || f.kept > 0 || f.lost > 0)
        .collect();
        let programs = self
            .probes
            .program_stats()
            .into_iter()
            .map(|(name, run_time_ns, run_count)| ProgramStats {
                name,
                run_time_ns,
                run_count,
            })
            .collect();
        self.w.write_record(&Record {
            kind: Some(Kind::Stats(Stats {
                time_ns: now,
                families: families.clone(),
                bytes_written: self.w.stats().bytes_written,
                programs,
            })),
        })?;
        Ok(families)
    }

    pub fn sideband_lost(&self) -> u64 {
        self.sideband_lost
    }

    pub fn processes(&self) -> usize {
        self.by_pid.len()
    }
}

/// `ips[..nframes]` (user) and the `kframes` after them (kernel), clamped to `ips`.
fn split_frames(ips: &[u64], nframes: u32, kframes: u32) -> (&[u64], &[u64]) {
    let n = (nframes as usize).min(ips.len());
    let k = (kframes as usize).min(ips.len() - n);
    (&ips[..n], &ips[n..n + k])
}

/// Drains the side band and the ring buffers once, in the order that keeps attribution
/// right: ring buffers first into `pending` (those events happened before the side-band
/// drain started), then the side band, then the pending events.
pub fn drain_once(
    s: &mut Session<'_>,
    rb: &libbpf_rs::RingBuffer<'_>,
    pending: &std::rc::Rc<std::cell::RefCell<Vec<u8>>>,
    side: &mut SideBandReader,
) -> Result<()> {
    let _ = rb.consume();
    let mut recs = Vec::new();
    side.drain(&mut recs);
    s.side_band(recs)?;
    let buf = std::mem::take(&mut *pending.borrow_mut());
    let mut off = 0;
    while off + 4 <= buf.len() {
        let n = u32::from_ne_bytes(buf[off..off + 4].try_into().unwrap()) as usize;
        off += 4;
        let data = &buf[off..(off + n).min(buf.len())];
        off += n;
        s.event(data)?;
    }
    let mut buf = buf;
    buf.clear();
    let mut p = pending.borrow_mut();
    if p.is_empty() {
        *p = buf; // keep the capacity
    }
    Ok(())
}
