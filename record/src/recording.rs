//! One recording in progress: [`Recording`] holds the session writing the trace, the side
//! band, the ring buffers and what the loop keeps between passes (the pace, the budget, the
//! pacers). `recorder::run` drives it for `ebrec record`; `ebrec agent`'s [`Hooks`]
//! (crate::Hooks) get it at each pass to follow new targets and close windows.
//!
//! ```text
//! Recording::start ─▶ loop { wait · drain · reap · hooks.tick · size · stop? · steer }
//!                  ─▶ finish (the last window closed, the trailer) ─▶ Summary::print
//! ```
//!
//! A window ends in one place, [`Recording::end_window`]: the kernel's aggregates and
//! histograms are read into the file, then the file ends with its trailer and recording goes
//! on in a new one (`--rotate`'s shift, the agent's window) or stops (the trailer of
//! `finish`).
use crate::budget::Budget;
use crate::config::RecordConfig;
use crate::header::header;
use crate::pacer::Pacer;
use crate::perf::SideBandReader;
use crate::probes::{ProbeConfig, Probes};
use crate::session::{self, Session};
use crate::targets::Launched;
use crate::{procfs, rotate, summary};
use anyhow::{Context, Result};
use ebtrace_format::proto::{FamilyStats, ProgramStats, Trailer};
use ebtrace_format::writer::{Closed, Fault};
use ebtrace_format::{TraceWriter, WriterOptions};
use ebtrace_proto::v1::{EventFamily, ProbeChange, ProbeChangeKind};
use std::cell::{Cell, RefCell};
use std::io::IsTerminal;
use std::path::Path;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// The BPF objects' ring buffers, read into one pending buffer of length-prefixed events.
struct Rings<'p> {
    rb: libbpf_rs::RingBuffer<'p>,
    pending: Rc<RefCell<Vec<u8>>>,
    /// Each ring's bytes of one drain (for the agent's ebrec_ringbuf_fill_ratio{ringbuf}):
    /// one ring per BPF object, named as the object.
    bytes: Vec<(&'static str, Rc<Cell<usize>>)>,
}

impl<'p> Rings<'p> {
    fn open(probes: &'p Probes<'p>) -> Result<Self> {
        let pending = Rc::new(RefCell::new(Vec::<u8>::with_capacity(1 << 20)));
        let mut rbb = libbpf_rs::RingBufferBuilder::new();
        let mut bytes: Vec<(&'static str, Rc<Cell<usize>>)> = Vec::new();
        let mut push = |name: &'static str| {
            let p = pending.clone();
            let c = Rc::new(Cell::new(0usize));
            bytes.push((name, c.clone()));
            move |data: &[u8]| -> i32 {
                // a record's room in the ring: its 8-byte header and the data, 8-aligned
                c.set(c.get() + 8 + data.len().next_multiple_of(8));
                let mut b = p.borrow_mut();
                b.extend_from_slice(&(data.len() as u32).to_ne_bytes());
                b.extend_from_slice(data);
                0
            }
        };
        if let Some(al) = &probes.alloc {
            rbb.add(&al.maps.events, push("alloc"))?;
        }
        if let Some(lk) = &probes.lock {
            rbb.add(&lk.maps.events, push("lock"))?;
        }
        if let Some(pr) = &probes.profile {
            rbb.add(&pr.maps.events, push("profile"))?;
        }
        if let Some(sm) = &probes.sampler {
            rbb.add(&sm.maps.events, push("sampler"))?;
        }
        if let Some(sy) = &probes.system {
            rbb.add(&sy.maps.events, push("system"))?;
        }
        if let Some(h) = &probes.hub {
            rbb.add(&h.maps.events, push("hub"))?;
        }
        let rb = rbb.build()?;
        Ok(Rings { rb, pending, bytes })
    }
}

/// What a recording starts with besides its configuration: the probes loaded and attached,
/// the first targets, the launched command.
#[derive(Debug)]
pub(crate) struct Start<'p, 's> {
    pub probes: &'p Probes<'p>,
    pub cfg: &'p ProbeConfig,
    pub kernel: crate::kallsyms::Needed,
    pub cfi: Option<crate::cfi::Tables>,
    /// The processes traced from the start (the side band is opened for each).
    pub pids: &'s [i32],
    /// Of those, the running ones to describe now (-p, and the agent's first scan).
    pub snapshot: Vec<u32>,
    pub launched: Option<&'s Launched>,
    pub shim: Option<&'s Path>,
    /// The --func functions matched, with their binaries' build-ids.
    pub probed: &'s [(crate::funcs::FuncMatch, Vec<u8>)],
}

/// A recording in progress (see the module's documentation).
/// What [`Recording::finish`] leaves: the exit summary, and after a write fault the one line
/// that says what happened and what the file holds.
pub(crate) struct Finished<'p> {
    pub summary: summary::Summary<'p>,
    pub fault_line: Option<String>,
}

pub struct Recording<'p> {
    a: &'p RecordConfig,
    cfg: &'p ProbeConfig,
    probes: &'p Probes<'p>,
    s: Session<'p>,
    side: SideBandReader,
    rings: Rings<'p>,
    started: Instant,
    pace: Pace,
    budget: Option<Budget>,
    budget_changes: u32,
    /// The time-weighted samples bounded in events a second (record/src/pacer.rs).
    pacers: Vec<Pacer>,
    rotations: u32,
    last_stats: Instant,
    last_sync: Instant,
    last_kept: u64,
    /// A progress line on a terminal.
    tty: bool,
    /// One uprobe trap, timed once uprobe programs ran (the budget's when it has one; None:
    /// not yet; Some(None): could not be timed).
    trap_ns: Option<Option<f64>>,
}

impl std::fmt::Debug for Recording<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recording")
            .field("output", &self.a.output)
            .field("rotations", &self.rotations)
            .finish_non_exhaustive()
    }
}

/// What a window's followers learn of a process that `Recording::follow` was asked to add.
#[derive(Debug)]
pub enum Followed {
    /// Traced already (a target, or a child followed from its fork).
    Known,
    /// Gone before it could be followed.
    Gone,
    /// Followed from now on; its allocator probes could not be attached, if that error is
    /// given (its other families are recorded).
    New { alloc_error: Option<anyhow::Error> },
}

/// The recording's health for the agent's metrics, read once a second.
#[derive(Debug)]
pub struct Health<'r> {
    /// Kept, lost and filtered per family, as of the last second.
    pub families: &'r [FamilyStats],
    /// What the kernel counted per BPF program.
    pub programs: Vec<ProgramStats>,
    /// With the BPF stats on: the cost they do not see, seconds so far.
    pub unseen: Option<Unseen>,
    /// Processes traced now.
    pub targets: usize,
}

/// The cost of the BPF programs that their run time leaves out, seconds.
#[derive(Debug, Clone, Copy)]
pub struct Unseen {
    /// Tracepoint and perf event dispatch around the programs' runs.
    pub tracepoint_dispatch: f64,
    /// The uprobe trap around each uprobe program's run (0 when it could not be timed).
    pub uprobe_traps: f64,
}

impl<'p> Recording<'p> {
    /// Opens the trace, describes the first targets, and opens the ring buffers and the side
    /// band: what is recorded from here on reaches the trace.
    pub(crate) fn start(a: &'p RecordConfig, st: Start<'p, '_>) -> Result<Self> {
        let mut side = SideBandReader::default();
        for &pid in st.pids {
            side.add(pid, 64).context("opening the perf side band")?;
        }
        let w = TraceWriter::create(&a.output, header(a), WriterOptions::default())
            .with_context(|| format!("cannot create {}", a.output.display()))?;
        let mut s = Session::new(w, st.probes, !a.all);
        s.kernel = st.kernel;
        s.copies = st.cfg.copy_bytes > 0;
        if let Some(secs) = a.aggregate {
            s.start_aggregating(!a.no_free, Duration::from_secs(secs));
        }
        s.cfi = st.cfi;
        if let (Some(t), Some(l)) = (s.cfi.as_mut(), st.launched) {
            // The launched command's executable and libraries get their rows before it runs.
            crate::cfi::preload(t, &l.exe);
            if let Some(shim) = st.shim {
                crate::cfi::preload_file(t, shim);
            }
        }
        s.unwind_info = st.cfg.copy_bytes > 0 && !a.no_unwind_info;
        if let (true, crate::config::RequestSlow::Tail(q)) = (st.cfg.request_split, a.request_slow)
        {
            s.slow_tail = Some(crate::reqslow::SlowTail::new(q));
        }
        s.clock_sync()?;
        for (i, (m, bid)) in st.probed.iter().enumerate() {
            s.probed_function(i as u64 + 1, m, bid)?;
        }
        for p in &st.probes.usdt {
            s.probed_usdt(p)?;
        }
        let now = procfs::clock_ns(libc::CLOCK_BOOTTIME);
        for &pid in &st.snapshot {
            s.snapshot(pid, now)?;
            s.live.insert(pid);
        }
        if let Some(l) = st.launched {
            s.live.insert(l.pid);
            s.launched = Some(l.pid);
        }
        let rings = Rings::open(st.probes)?;
        // The header and the targets reach the disk now: a recorder killed in its first
        // second still leaves a file that says what it was recording.
        s.w.flush()?;
        Ok(Recording {
            a,
            cfg: st.cfg,
            probes: st.probes,
            s,
            side,
            rings,
            started: Instant::now(),
            pace: Pace::new(st.cfg.ringbuf_bytes),
            budget: None,
            budget_changes: 0,
            pacers: pacers(a, st.cfg),
            rotations: 0,
            last_stats: Instant::now(),
            last_sync: Instant::now(),
            last_kept: 0,
            tty: std::io::stderr().is_terminal() && !a.quiet,
            trap_ns: None,
        })
    }

    /// `--max-cpu`: times a uprobe trap, then keeps ebrec's cost under the budget from the
    /// next pass on (the calibration is the trace's first ProbeChange).
    pub(crate) fn start_budget(&mut self) -> Result<()> {
        let Some(pct) = self.a.max_cpu else {
            return Ok(());
        };
        let trap = crate::budget::calibrate_trap().unwrap_or_else(|e| {
            eprintln!(
                "ebrec: --max-cpu: could not time a uprobe trap here ({e:#}); counting 1000 ns per trap"
            );
            1000.0
        });
        if !self.a.quiet {
            eprintln!(
                "ebrec: --max-cpu {pct}%: a uprobe trap costs {trap:.0} ns here (calibrated)"
            );
        }
        let b = Budget::new(pct, self.cfg, trap, self.probes, !self.a.bpf_stats);
        self.s.probe_change(ProbeChange {
            time_ns: procfs::clock_ns(libc::CLOCK_BOOTTIME),
            family: EventFamily::Unspecified as i32,
            kind: ProbeChangeKind::Rate as i32,
            setting: "trap-ns".into(),
            value: trap.round() as u64,
            reason: format!("--max-cpu {pct}%: one uprobe trap, calibrated at start"),
            ..Default::default()
        })?;
        self.budget = Some(b);
        Ok(())
    }

    /// Waits for the next pass: on the ring buffers when a child held at its fork must wake
    /// the loop at once (it waits stopped until its links are attached), else a sleep of
    /// the pace.
    pub(crate) fn wait(&self) {
        if self.probes.holds_children() {
            let _ = self.rings.rb.poll(self.pace.wait);
        } else {
            std::thread::sleep(self.pace.wait);
        }
    }

    /// Drains the ring buffers and the side band into the trace; the bytes read.
    pub fn drain(&mut self) -> Result<usize> {
        session::drain_once(
            &mut self.s,
            &self.rings.rb,
            &self.rings.pending,
            &mut self.side,
        )
    }

    /// The loop's drain: the next wait follows the rate just seen.
    pub(crate) fn drain_paced(&mut self) -> Result<()> {
        let bytes = self.drain()?;
        self.pace.drained(bytes);
        Ok(())
    }

    /// What the last drain found unread in each ring, against its size (0..1).
    pub(crate) fn ring_fill(&self) -> impl Iterator<Item = (&'static str, f64)> + '_ {
        let size = f64::from(self.cfg.ringbuf_bytes.max(1));
        self.rings
            .bytes
            .iter()
            .map(move |(name, c)| (*name, c.take() as f64 / size))
    }

    /// The launched command's exit (its code into the trace) and the -p targets gone.
    pub(crate) fn reap(&mut self, launched: Option<&Launched>) -> Result<()> {
        if let Some(l) = launched {
            let mut st = 0;
            // SAFETY: st is a valid out pointer.
            let r = unsafe { libc::waitpid(l.pid as i32, &mut st, libc::WNOHANG) };
            if r == l.pid as i32 {
                let code = if libc::WIFEXITED(st) {
                    libc::WEXITSTATUS(st)
                } else {
                    128 + libc::WTERMSIG(st)
                };
                self.drain()?;
                self.s.launched_exited(l.pid, code)?;
            }
        }
        for &pid in &self.a.pid {
            // SAFETY: signal 0 only checks existence.
            if self.s.live.contains(&pid) && unsafe { libc::kill(pid as i32, 0) } != 0 {
                self.s.live.remove(&pid);
            }
        }
        Ok(self.s.w.flush_if_due()?)
    }

    /// When the recording started.
    pub(crate) fn started_at(&self) -> Instant {
        self.started
    }

    /// Processes traced now.
    pub fn targets(&self) -> usize {
        self.s.live.len()
    }

    /// Makes `pid` a target while recording: its BPF filter bit, its side band, its
    /// allocator sessions, its description in the trace.
    pub fn follow(&mut self, pid: u32) -> Result<Followed> {
        if self.s.knows(pid) {
            // A child of a target, followed from its fork already.
            return Ok(Followed::Known);
        }
        self.probes.add_target(pid)?;
        if self.side.add(pid as i32, 64).is_err() {
            return Ok(Followed::Gone);
        }
        let alloc_error = if self.probes.alloc_sessions() {
            self.probes.attach_sessions(pid as i32).err()
        } else {
            None
        };
        let now = procfs::clock_ns(libc::CLOCK_BOOTTIME);
        if self.s.snapshot(pid, now).is_err() {
            return Ok(Followed::Gone);
        }
        self.s.live.insert(pid);
        Ok(Followed::New { alloc_error })
    }

    /// Ends the current window: the trace file (OUTPUT) ends with its trailer and becomes
    /// `closed`; recording goes on in a new OUTPUT (`ebrec agent`'s windows).
    /// A write fault (a full disk) or a file that cannot be created or moved does not stop
    /// the recording: what became of the window is returned.
    pub fn close_window(&mut self, closed: &Path) -> Result<rotate::WindowClosed> {
        let mut done = None;
        self.end_window(WindowEnd::MoveTo(closed, &mut done))?;
        Ok(done.unwrap_or_default())
    }

    /// The one window close: the kernel's counts into the file, then its end.
    fn end_window(&mut self, end: WindowEnd<'_>) -> Result<()> {
        if self.s.aggregating {
            // The file gets the counts up to its end.
            self.s.aggregate()?;
        }
        self.s.histograms()?;
        match end {
            WindowEnd::Shift(keep) => {
                rotate::rotate(&mut self.s, self.a, keep)?;
                self.rotations += 1;
            }
            WindowEnd::MoveTo(closed, done) => {
                *done = Some(rotate::rotate_to(
                    &mut self.s,
                    header(self.a),
                    &self.a.output,
                    closed,
                )?);
            }
            WindowEnd::Last => {}
        }
        Ok(())
    }

    /// `--max-size`: past it, `--rotate` starts a new file, else the recording stops
    /// (Some: the stop's reason).
    pub(crate) fn check_size(&mut self) -> Result<Option<String>> {
        let Some(max) = self.a.max_size else {
            return Ok(None);
        };
        if self.s.w.stats().bytes_written < max {
            return Ok(None);
        }
        match self.a.rotate {
            None => Ok(Some("max size".to_string())),
            Some(keep) => self.end_window(WindowEnd::Shift(keep)).map(|()| None),
        }
    }

    /// The steering of each pass after the stop checks: the rseq fallbacks' notes, the
    /// budget, the pacers, the per-second counters and the clock.
    pub(crate) fn steer(&mut self) -> Result<()> {
        for line in self.probes.rseq_fallbacks()? {
            if !self.a.quiet {
                eprintln!("ebrec: {line}");
            }
        }
        self.keep_budget()?;
        self.pace_units()?;
        self.pace_request_slow()?;
        if self.last_stats.elapsed() >= Duration::from_secs(1) {
            self.last_stats = Instant::now();
            self.each_second()?;
        }
        if self.last_sync.elapsed() >= Duration::from_secs(10) {
            self.last_sync = Instant::now();
            self.s.clock_sync()?;
        }
        Ok(())
    }

    fn keep_budget(&mut self) -> Result<()> {
        let Some(b) = self.budget.as_mut() else {
            return Ok(());
        };
        for (change, why) in b.tick(self.probes) {
            self.budget_changes += 1;
            apply_budget(&mut self.s, self.probes, &change, why, self.a.quiet)?;
        }
        Ok(())
    }

    /// --request-slow's adaptive threshold, once a second: written to the kernel and to the
    /// trace (a ProbeChange, setting `request-slow-ns`) when it moves.
    fn pace_request_slow(&mut self) -> Result<()> {
        let Some((ns, why)) = self.s.slow_tail.as_mut().and_then(|t| t.tick()) else {
            return Ok(());
        };
        self.probes.set_request_slow_ns(ns);
        self.s.probe_change(ProbeChange {
            time_ns: procfs::clock_ns(libc::CLOCK_BOOTTIME),
            family: EventFamily::Offcpu as i32,
            kind: ProbeChangeKind::Rate as i32,
            setting: "request-slow-ns".into(),
            value: ns,
            reason: why,
            ..Default::default()
        })
    }

    fn pace_units(&mut self) -> Result<()> {
        let elapsed = self.started.elapsed().as_secs_f64();
        for p in self.pacers.iter_mut() {
            let kept = self.s.kept[p.family];
            if let Some((unit, why)) = p.tick(kept, elapsed) {
                self.probes.set_sample_unit_ns(p.family, unit);
                self.s.probe_change(ProbeChange {
                    time_ns: procfs::clock_ns(libc::CLOCK_BOOTTIME),
                    family: p.family as i32,
                    kind: ProbeChangeKind::Rate as i32,
                    setting: p.setting.into(),
                    value: unit,
                    reason: why,
                    ..Default::default()
                })?;
            }
        }
        Ok(())
    }

    /// The aggregates and histograms due, the families' counters into the trace, and the
    /// progress line on a terminal.
    fn each_second(&mut self) -> Result<()> {
        if self.s.aggregate_due() {
            self.s.aggregate()?;
        }
        if self.s.histograms_due() {
            self.s.histograms()?;
        }
        let fam = self.s.stats(procfs::clock_ns(libc::CLOCK_BOOTTIME))?;
        if self.tty {
            let kept: u64 = self.s.kept.0.iter().sum();
            let lost: u64 = fam.iter().map(|f| f.lost).sum();
            eprint!(
                "\rebrec: {:>6.1} s  {:>8} events  {:>7.0}/s  {:>7.2} MiB  lost {}   ",
                self.started.elapsed().as_secs_f64(),
                kept,
                (kept - self.last_kept) as f64,
                self.s.w.stats().bytes_written as f64 / (1 << 20) as f64,
                lost
            );
            self.last_kept = kept;
        }
        Ok(())
    }

    /// One uprobe trap's cost, ns: the budget's calibration, or timed now (once; `why` says
    /// what goes without it when it cannot be).
    fn trap_ns(&mut self, why: &str) -> Option<f64> {
        if let Some(b) = &self.budget {
            return Some(b.trap_ns);
        }
        *self
            .trap_ns
            .get_or_insert_with(|| crate::budget::calibrate_trap_or_warn(why))
    }

    /// The families' counters, the programs' stats and what they leave out, for the
    /// agent's metrics.
    pub fn health(&mut self) -> Health<'_> {
        let programs = self
            .probes
            .program_stats()
            .into_iter()
            .map(ProgramStats::from)
            .collect();
        let unseen = if self.probes.stats_on() {
            let (runs, ns, uprobe_runs) = self.probes.dispatch_cost();
            let trap = if uprobe_runs > 0 {
                self.trap_ns("ebrec_bpf_unseen_seconds_total leaves the traps out")
            } else {
                None
            };
            Some(Unseen {
                tracepoint_dispatch: runs as f64 * ns / 1e9,
                uprobe_traps: uprobe_runs as f64 * trap.unwrap_or(0.0) / 1e9,
            })
        } else {
            None
        };
        Health {
            families: &self.s.last_families,
            programs,
            unseen,
            targets: self.s.live.len(),
        }
    }

    /// Whether the recording has nothing left to trace (every target gone, not --all).
    pub(crate) fn targets_gone(&self) -> bool {
        !self.a.all && self.s.live.is_empty()
    }

    /// Ends the recording: what threads still hold, the last events, the last window's
    /// counts and the trailer; the exit summary's numbers.
    pub(crate) fn finish(mut self, stop_reason: String) -> Result<Finished<'p>> {
        if self.tty {
            eprintln!();
        }
        // What threads still hold (kept waits before their return to user space), the last
        // events, then the final counters and the trailer.
        if let Err(e) = self.probes.end_pending() {
            eprintln!("ebrec: note: {e:#}: kept off-CPU blocks and run-queue waits whose threads were still in the kernel at the end are missing");
        }
        std::thread::sleep(Duration::from_millis(20));
        self.drain()?;
        self.end_window(WindowEnd::Last)?;
        let end = procfs::clock_ns(libc::CLOCK_BOOTTIME);
        self.s.clock_sync()?;
        let families = self.s.stats(end)?;
        let summary = self.summary(stop_reason.clone(), families.clone());
        // After a write fault (the last events' too), the trailer says it and what the file
        // holds.
        self.s.w.flush()?;
        let fault_reason = self.s.w.fault().map(crate::faults::fault_reason);
        let (closed, fault) = self.s.w.close_faulted(Some(Trailer {
            end_time_ns: end,
            end_realtime_ns: procfs::clock_ns(libc::CLOCK_REALTIME),
            stop_reason: fault_reason.unwrap_or(stop_reason),
            families,
            ..Default::default()
        }))?;
        let trailer = !matches!(closed, Closed::Cut { trailer: false });
        let fault_line = fault.map(|f| crate::faults::fault_line(&f, &self.a.output, trailer));
        Ok(Finished {
            summary: summary::Summary {
                bytes: std::fs::metadata(&self.a.output).map_or(0, |m| m.len()),
                ..summary
            },
            fault_line,
        })
    }

    /// The write error that stopped the trace's writer, if one did: `ebrec record` stops,
    /// the agent drops windows until a new one can be written.
    pub fn write_fault(&self) -> Option<&Fault> {
        self.s.w.fault()
    }

    /// The exit summary's numbers (the file's size is known once it is closed).
    fn summary(&mut self, stop_reason: String, families: Vec<FamilyStats>) -> summary::Summary<'p> {
        let (tp_runs, dispatch_ns, uprobe_runs) = self.probes.dispatch_cost();
        // What the stats do not see of a uprobe program's run: the trap (or the return's
        // trampoline) around it, timed on a probe of ebrec's own (the budget's, or now).
        let traps = if uprobe_runs == 0 {
            None
        } else {
            self.trap_ns("the cost below leaves the traps out")
                .map(|ns| (uprobe_runs, ns))
        };
        let elapsed = self.started.elapsed().as_secs_f64();
        let s = &self.s;
        summary::Summary {
            output: &self.a.output,
            stop_reason,
            preload: self.preload_line(),
            elapsed,
            processes: s.processes(),
            bytes: 0,
            offcpu_sample: self.offcpu_sample_line(&families),
            families,
            programs: self.probes.program_stats(),
            dispatch: (tp_runs, dispatch_ns),
            traps,
            own_cpu_s: crate::budget::own_cpu_ns() as f64 / 1e9,
            own_switches: crate::sched::own_switches(),
            sched: crate::sched::name(self.a.sched),
            sampled: self.budget.as_ref().and_then(|b| b.sampling()),
            evictions: s.w.stats().stack_evictions,
            rotations: self.rotations,
            no_kallsyms: s.kernel.unavailable(),
            malformed: s.malformed,
            sideband_lost: s.sideband_lost(),
            copies_missing: s.copies_missing,
            waker_frames_dropped: s.waker_frames_dropped,
            same_call_filled: s.same_call_filled,
            late_attachments: (s.late_attachments, s.never_attached),
            budget_line: self.budget_line(elapsed),
            stacks: s.stack_quality.lines(),
            cfi: self.cfi_line(),
            paced: self
                .pacers
                .iter()
                .filter_map(|p| p.summary())
                .chain(self.s.slow_tail.as_ref().map(|t| t.summary()))
                .collect(),
        }
    }

    fn budget_line(&self, elapsed: f64) -> Option<String> {
        let b = self.budget.as_ref()?;
        let (mean, max) = b.summary();
        Some(format!(
            "--max-cpu {}%: ebrec cost {:.2}% of a CPU on average, {:.2}% in its worst second (trap {:.0} ns); {} changes; at the end: {}; paused {:.0} s{}",
            b.limit * 100.0,
            mean * 100.0,
            max * 100.0,
            b.trap_ns,
            self.budget_changes,
            b.rates(),
            b.paused_s(),
            paused_families(&b.paused_by(), elapsed)
        ) + &b
            .sampling()
            .map(|on| format!("; measured {on:.1} s of {elapsed:.1} s (the stats off between measures within the budget)"))
            .unwrap_or_default())
    }

    fn cfi_line(&self) -> Option<String> {
        let t = self.s.cfi.as_ref()?;
        let (walks, hits) = self.probes.unwind_memo();
        let memo = if walks > 0 {
            format!("; {hits} of {walks} user stacks from their thread's memo (the walk's start and every stack word it read as before)")
        } else {
            String::new()
        };
        Some(t.summary() + &memo)
    }

    fn offcpu_sample_line(&self, families: &[FamilyStats]) -> Option<String> {
        let a = self.a;
        match (a.offcpu, self.probes.offcpu_seen()) {
            (Some(_), Some((n, ns))) if a.offcpu_sample > 0 => {
                let kept = families
                    .iter()
                    .find(|f| f.family == EventFamily::Offcpu as i32)
                    .map_or(0, |f| f.kept);
                Some(format!(
                    "offcpu: {n} blocks past the threshold, {:.2} s off the CPU; {kept} kept with their stacks by the time-weighted sample (--offcpu-sample={} us: a shorter block kept with probability length/unit, standing for 1/p blocks)",
                    ns as f64 / 1e9,
                    a.offcpu_sample
                ))
            }
            _ => None,
        }
    }

    fn preload_line(&self) -> Option<String> {
        let c = self.probes.chan.as_ref()?;
        if !c.active() {
            return Some("alloc: the preloaded shim wrote nothing to its channel (it did not load, or could not map it: a static or setuid command?)".to_string());
        }
        let corrupt = match c.corrupt() {
            0 => String::new(),
            n => format!(
                "; {n} times its records did not parse (the command wrote over the channel): skipped, lost"
            ),
        };
        Some(format!(
            "alloc: the preloaded shim walked the stacks in the process (unwind rows of .eh_frame, cached per pc) and wrote the events to a {} KiB channel{corrupt}",
            c.size() >> 10
        ))
    }
}

/// How a window ends (`Recording::end_window`).
enum WindowEnd<'c> {
    /// `--rotate N`: OUTPUT becomes OUTPUT.1, older ones shift, N kept.
    Shift(u32),
    /// The agent's window: OUTPUT becomes this file.
    MoveTo(&'c Path, &'c mut Option<rotate::WindowClosed>),
    /// The recording's end: the trailer follows.
    Last,
}

fn pacers(a: &RecordConfig, cfg: &ProbeConfig) -> Vec<Pacer> {
    use EventFamily as F;
    [
        (
            a.offcpu.is_some(),
            F::Offcpu,
            a.offcpu_rate,
            cfg.offcpu_unit_ns,
        ),
        (
            a.syscalls.is_some(),
            F::Syscall,
            a.syscalls_rate,
            cfg.syscall_unit_ns,
        ),
        (a.runq.is_some(), F::Runq, a.runq_rate, cfg.runq_unit_ns),
    ]
    .into_iter()
    .filter(|t| t.0)
    .filter_map(|(_, family, rate, unit)| Pacer::new(family, rate, unit))
    .collect()
}

/// How long the recording loop waits between two reads of the ring buffers: 10 ms while
/// events flow, longer (up to 100 ms) while they trickle, so that an idle recording costs
/// little (each wake-up is a few system calls and a pass over every ring buffer) while no
/// ring buffer fills between two reads: the wait lets at most a sixteenth of one fill at
/// the rate just seen.
struct Pace {
    wait: Duration,
    last: Instant,
    /// A sixteenth of one ring buffer, bytes.
    room: f64,
}

impl Pace {
    const MIN: Duration = Duration::from_millis(10);
    const MAX: Duration = Duration::from_millis(100);

    fn new(ringbuf_bytes: u32) -> Pace {
        Pace {
            wait: Pace::MIN,
            last: Instant::now(),
            room: ringbuf_bytes as f64 / 16.0,
        }
    }

    fn drained(&mut self, bytes: usize) {
        let dt = self.last.elapsed().as_secs_f64().max(1e-3);
        self.last = Instant::now();
        let rate = bytes as f64 / dt;
        let want = if rate > 0.0 {
            Duration::from_secs_f64((self.room / rate).min(1.0))
        } else {
            Pace::MAX
        };
        // Longer by at most a half per read; shorter at once.
        let grown = self.wait.mul_f64(1.5);
        self.wait = want.min(grown).clamp(Pace::MIN, Pace::MAX);
    }
}

/// Applies a --max-cpu decision and writes it into the trace (its time taken once the
/// change is in force: what ends after it was judged by the new setting).
fn apply_budget(
    s: &mut Session<'_>,
    probes: &Probes<'_>,
    change: &crate::budget::Change,
    why: String,
    quiet: bool,
) -> Result<()> {
    use crate::budget::Change;
    let mut pc = ProbeChange {
        reason: why,
        ..Default::default()
    };
    // A resume is stamped when the probes start to come back (events may follow at once);
    // a pause and a rate change when they have taken effect.
    let before = procfs::clock_ns(libc::CLOCK_BOOTTIME);
    match *change {
        Change::Rate {
            family,
            setting,
            value,
        } => {
            match family {
                EventFamily::Alloc => probes.set_sample_bytes(value),
                EventFamily::Cpu => probes.set_cpu_hz(value)?,
                EventFamily::Offcpu => probes.set_offcpu_min_ns(value),
                _ => {}
            }
            pc.family = family as i32;
            pc.kind = ProbeChangeKind::Rate as i32;
            pc.setting = setting.into();
            pc.value = value;
        }
        Change::Paused(family) => {
            probes.pause(family);
            pc.family = family as i32;
            pc.kind = ProbeChangeKind::Paused as i32;
        }
        Change::Resumed(family) => {
            probes.resume(family)?;
            pc.family = family as i32;
            pc.kind = ProbeChangeKind::Resumed as i32;
        }
    }
    pc.time_ns = match change {
        Change::Resumed(_) => before,
        _ => procfs::clock_ns(libc::CLOCK_BOOTTIME),
    };
    if !quiet {
        eprintln!("ebrec: {:?}: {}", change, pc.reason);
    }
    s.probe_change(pc)
}

/// " (offcpu 3.0 s, 10% of the recording; ...)": how long each family the budget paused was
/// off, or nothing when none was.
fn paused_families(by: &[(EventFamily, f64)], elapsed: f64) -> String {
    if by.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = by
        .iter()
        .map(|(f, s)| {
            format!(
                "{} {s:.1} s, {:.0}% of the recording",
                ebtrace_format::family::family(*f).name,
                s / elapsed.max(1e-9) * 100.0
            )
        })
        .collect();
    format!(" ({})", parts.join("; "))
}
