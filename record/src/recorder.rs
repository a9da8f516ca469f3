//! `ebrec record`: checks the flags, loads and attaches the probes, then the loop that
//! drains the ring buffers and the side band into the trace until a stop, with rotation and
//! the exit summary.
use crate::config::{AllocSampler, LockModeArg, RecordConfig, StackMode};
use crate::header::header;
use crate::perf::SideBandReader;
use crate::probes::{LockMode, ProbeConfig, Probes};
use crate::session::Session;
use crate::targets::{self, Launched};
use crate::{funcs, perf, procfs, rotate, session, summary};
use anyhow::{bail, Context, Result};
use ebtrace_format::proto::Trailer;
use ebtrace_format::{TraceWriter, WriterOptions};
use std::io::IsTerminal;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

static SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNAL.store(sig, Ordering::SeqCst);
}

/// The checks of `--alloc-sampler` and `--sample-bytes`.
fn check_sampler(a: &RecordConfig) -> Result<()> {
    if a.sample_bytes == Some(0) {
        bail!("--sample-bytes must be at least 1");
    }
    if a.alloc_sampler == AllocSampler::Uprobe {
        return Ok(());
    }
    if a.command.is_empty() {
        bail!("--alloc-sampler preload starts the command with its shim preloaded: use -- CMD ARGS (restart the service under ebrec), not -p or --all; --alloc-sampler uprobe traces running processes");
    }
    if a.alloc.is_none() {
        bail!("--alloc-sampler preload samples allocations: add --alloc");
    }
    if a.sample != 1 {
        bail!("--alloc-sampler preload samples by bytes: use --sample-bytes N, not --sample");
    }
    if !a.alloc_lib.is_empty() {
        bail!("--alloc-sampler preload forwards to glibc's malloc: --alloc-lib is for --alloc-sampler uprobe");
    }
    Ok(())
}

/// What a caller adds to the recording loop (`ebrec agent`: its windows, its targets found
/// while it runs, its metrics). Every method runs on the recording thread.
pub trait Hooks {
    /// Whether targets are found while the loop runs (the loop then goes on with none).
    fn selects(&self) -> bool;
    /// The processes to start tracing now (called once before the loop).
    fn scan(&mut self) -> Vec<u32>;
    /// The session is open and the probes attached.
    fn started(&mut self, s: &mut Session<'_>) -> Result<()>;
    /// One drain found `fill` (0..1) of the ring buffer of BPF object `ring` unread.
    fn ring_drained(&mut self, ring: &'static str, fill: f64);
    /// After each drain.
    fn tick(&mut self, s: &mut Session<'_>, side: &mut SideBandReader) -> Result<()>;
    /// The trace is closed.
    fn finished(&mut self) -> Result<()>;
}

/// `ebrec record`: records until a stop, then prints the exit summary.
pub fn record(a: RecordConfig) -> Result<()> {
    run(a, None)
}

/// `ebrec record`, or with `hooks` the recording loop of `ebrec agent`.
pub fn run(a: RecordConfig, hooks: Option<&mut dyn Hooks>) -> Result<()> {
    let targets =
        usize::from(!a.pid.is_empty()) + usize::from(a.all) + usize::from(!a.command.is_empty());
    let found_later = hooks.as_ref().is_some_and(|h| h.selects());
    if !(targets == 1 || (found_later && targets == 0 && a.pid.is_empty())) {
        bail!("say what to trace: -p PID (repeatable), --all, or -- CMD ARGS...");
    }
    if a.alloc.is_none()
        && a.lock.is_none()
        && a.cpu.is_none()
        && a.offcpu.is_none()
        && !a.memgrowth
        && a.func.is_empty()
        && a.syscalls.is_none()
        && a.bio.is_none()
        && a.runq.is_none()
        && !a.tcp
    {
        bail!("say what to record: --alloc[=MIN_BYTES], --lock[=MIN_US], --cpu[=HZ], --offcpu[=MIN_US], --memgrowth, --func SPEC, --syscalls[=MIN_US], --bio[=MIN_US], --runq[=MIN_US], --tcp");
    }
    check_sampler(&a)?;
    let func_specs: Vec<funcs::FuncSpec> =
        a.func.iter().map(|s| s.parse()).collect::<Result<_>>()?;
    if !func_specs.is_empty() && a.all {
        bail!("--func needs targets to resolve its names in: use -p PID or -- CMD, not --all");
    }
    let alloc_fns: Vec<funcs::AllocFnSpec> = a
        .alloc_fn
        .iter()
        .map(|s| s.parse())
        .collect::<Result<_>>()?;
    if !alloc_fns.is_empty() {
        if a.alloc.is_none() {
            bail!("--alloc-fn profiles a custom allocator beside malloc: add --alloc");
        }
        if a.alloc_sampler != AllocSampler::Uprobe {
            bail!("--alloc-fn works with --alloc-sampler uprobe: the preloaded shim samples only malloc's family");
        }
        if a.all {
            bail!(
                "--alloc-fn needs targets to resolve its names in: use -p PID or -- CMD, not --all"
            );
        }
        if alloc_fns.len() > 255 {
            bail!("--alloc-fn: at most 255 custom allocators");
        }
    }
    if a.args > 0 && func_specs.is_empty() {
        bail!("--args applies to --func calls: add --func SPEC");
    }
    if let Some(hz) = a.cpu {
        if hz == 0 || hz > 100_000 {
            bail!("--cpu=HZ must be between 1 and 100000 (got {hz})");
        }
    }
    let rb = crate::config::ringbuf_bytes(&a);
    if !rb.is_power_of_two() || (rb as usize) < procfs::page_size() {
        bail!(
            "--ringbuf-size must be a power of two of at least one page ({} bytes)",
            procfs::page_size()
        );
    }
    for &pid in &a.pid {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            bail!("no process with pid {pid}");
        }
    }
    if let Some(secs) = a.aggregate {
        if a.alloc.is_none() && a.cpu.is_none() && a.offcpu.is_none() && a.lock.is_none() {
            bail!("--aggregate counts --alloc, --cpu, --offcpu and --lock in the kernel: add one of them");
        }
        if secs == 0 {
            bail!("--aggregate=SECS: the interval must be at least 1 s");
        }
        if a.alloc_sampler != AllocSampler::Uprobe {
            bail!(
                "--aggregate works with the uprobe allocation probes, not --alloc-sampler preload"
            );
        }
        if a.sample_bytes.is_some() {
            bail!("--aggregate with --sample-bytes is not supported yet: the estimate needs each allocation's size");
        }
        if matches!(a.stack_mode, StackMode::Dwarf(_)) {
            bail!("--aggregate needs stacks unwound in the kernel: --stack-mode dwarf copies every stack for ebsym, use auto, cfi or fp");
        }
        if !(1..=1 << 24).contains(&a.aggregate_stacks) {
            bail!("--aggregate-stacks must be between 1 and 16777216");
        }
    }
    if a.sample_bytes.is_some() && a.alloc.is_none() {
        bail!("--sample-bytes samples allocations: add --alloc");
    }
    if let Some(p) = a.max_cpu {
        if !(p > 0.0 && p <= 100.0) {
            bail!(
                "--max-cpu PCT is a percentage of one CPU, more than 0 and at most 100 (got {p})"
            );
        }
    }
    if a.alloc_probes == crate::config::AllocProbesArg::Session
        && !crate::features::uprobe_sessions()
    {
        bail!(
            "--alloc-probes session needs uprobe sessions (kernel 6.13 or later; this is {})",
            procfs::uname().1
        );
    }
    let lock_mode = match a.lock_mode {
        LockModeArg::Futex => LockMode::Futex,
        LockModeArg::Uprobe => LockMode::Uprobe,
    };
    let cfg = ProbeConfig {
        alloc_min: a.alloc,
        preload_period: a.preload_period(),
        // The shim walks the stacks itself and writes into a channel (see preload::Chan)
        // in the walk modes that use unwind rows; dwarf copies and fp walks stay with the
        // probes. EBTRACE_PRELOAD_PROBES=1 keeps the probes (to measure one against the
        // other).
        preload_chan: a.preload_period().is_some()
            && matches!(a.stack_mode, StackMode::Auto | StackMode::Cfi)
            && std::env::var_os("EBTRACE_PRELOAD_PROBES").is_none_or(|v| v != "1"),
        sample_every: a.sample.max(1),
        sample_bytes: a.sample_bytes.unwrap_or(0),
        alloc_sessions: a.alloc_sampler == AllocSampler::Uprobe
            && crate::config::use_sessions(a.alloc_probes),
        alloc_entry_only: a.no_free,
        aggregate_stacks: if a.aggregate.is_some() {
            a.aggregate_stacks
        } else {
            0
        },
        lock_min_ns: a.lock.map(|us| us * 1000),
        lock_mode,
        stack_depth: a.stack_depth,
        ringbuf_bytes: rb,
        all: a.all,
        cpu_hz: a.cpu,
        offcpu_min_ns: a.offcpu.map(|us| us * 1000),
        offcpu_unit_ns: a.offcpu_sample * 1000,
        offcpu_rseq: a.offcpu.is_some() && crate::features::rseq_update(),
        runq_rseq: a.runq.is_some() && crate::features::rseq_update(),
        memgrowth: a.memgrowth,
        mem_fault_unit: a.memgrowth_sample,
        syscall_min_ns: a.syscalls.map(|us| us * 1000),
        syscall_unit_ns: a.syscalls_sample * 1000,
        runq_unit_ns: a.runq_sample * 1000,
        bio_min_ns: a.bio.map(|us| us * 1000),
        runq_min_ns: a.runq.map(|us| us * 1000),
        tcp: a.tcp,
        bpf_stats: a.bpf_stats || a.max_cpu.is_some(),
        func_args: a.args,
        func: !func_specs.is_empty(),
        copy_bytes: match a.stack_mode {
            StackMode::Dwarf(b) => b,
            _ => 0,
        },
        cfi_mode: match a.stack_mode {
            StackMode::Cfi => crate::probes::CFI_MODE_CFI as u32,
            StackMode::Auto => crate::probes::CFI_MODE_AUTO as u32,
            _ => 0,
        },
        rate_per_cpu: a.max_events_per_sec.map_or(0, |n| {
            let cpus = procfs::online_cpus().map_or(1, |c| c.len().max(1)) as u64;
            n.div_ceil(cpus).max(1)
        }),
    };

    // Removed when ebrec returns (the guard outlives the command's recording).
    let shim = match cfg.preload_period {
        Some(_) => Some(crate::preload::Shim::write()?),
        None => None,
    };
    let chan = if cfg.preload_chan {
        Some(crate::preload::Chan::new(
            a.ringbuf_size.map_or(32 << 20, u64::from),
        )?)
    } else {
        None
    };
    let env = match (&shim, cfg.preload_period) {
        (Some(s), Some(period)) => crate::preload::child_env(
            &s.path,
            period,
            a.alloc.unwrap_or(0),
            a.no_free,
            cfg.ringbuf_bytes,
            chan.as_ref().map(|c| c.size()),
            a.stack_depth,
        )?,
        _ => Vec::new(),
    };
    let mut launched = if a.command.is_empty() {
        None
    } else {
        Some(targets::launch(&a.command, &env)?)
    };
    let result = record_with(
        &a,
        &cfg,
        &func_specs,
        &mut launched,
        shim.as_ref().map(|s| s.path.as_path()),
        chan,
        hooks,
    );
    if let Some(l) = &mut launched {
        // Never leave the command blocked: release it even when setting up failed.
        if result.is_err() {
            // SAFETY: kill has no memory preconditions.
            unsafe { libc::kill(l.pid as i32, libc::SIGKILL) };
            l.release.take();
            let mut st = 0;
            unsafe { libc::waitpid(l.pid as i32, &mut st, 0) };
        }
    }
    result
}

fn record_with(
    a: &RecordConfig,
    cfg: &ProbeConfig,
    func_specs: &[funcs::FuncSpec],
    launched: &mut Option<Launched>,
    shim: Option<&Path>,
    chan: Option<crate::preload::Chan>,
    mut hooks: Option<&mut dyn Hooks>,
) -> Result<()> {
    let mut objects = crate::probes::ProbeObjects::new();
    // Before the loading and attaching (a second or more with many families on a busy
    // machine): a SIGINT or SIGTERM then stops the recording as soon as it starts. Installed
    // after, one sent early was lost, or ignored altogether by a recorder started in the
    // background of a script (which starts with SIGINT ignored): it went on recording.
    // SAFETY: installing a handler that only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    perf::remove_stale_probes();
    // The rows also serve the lock holders' and wakers' stacks in fp and dwarf mode.
    let cfi = if a.stack_mode.in_kernel_cfi() || a.lock.is_some() || a.offcpu.is_some() {
        Some(crate::cfi::Tables::new(a.cfi_memory)?)
    } else {
        None
    };
    let mut probes = Probes::load(cfg, &mut objects, cfi.as_ref().map(|t| t.fds()))?;
    probes.chan = chan;
    // Read while the programs attach: the loop's first kernel frame needs it. Not before
    // the loading: the programs' own symbols (bpf_prog_…) name the tracer frames stripped
    // from each kernel stack. Only for the families whose events carry kernel frames (CPU
    // samples, off-CPU blocks and wakers, block I/O, run-queue waits, lock waits'
    // aggregated stacks); the others read it at a first need, if any.
    let kernel_frames = a.cpu.is_some()
        || a.offcpu.is_some()
        || a.bio.is_some()
        || a.runq.is_some()
        || a.lock.is_some();
    let kernel = if kernel_frames {
        crate::kallsyms::Needed::prefetch()
    } else {
        crate::kallsyms::Needed::default()
    };

    let mut pids = targets::pids(a, launched.as_ref());
    let mut first_found = Vec::new();
    if let Some(h) = hooks.as_deref_mut() {
        // The processes that match --comm or --cgroup now: targets from the start.
        first_found = h.scan();
        pids.extend(first_found.iter().map(|&p| p as i32));
    }
    let probed = targets::attach(
        a,
        cfg,
        func_specs,
        launched.as_ref(),
        &pids,
        shim,
        &mut probes,
    )?;
    if !a.quiet {
        for s in &probes.attached {
            eprintln!("ebrec: attached {s}");
        }
        if let Some(period) = cfg.preload_period {
            if probes.chan.is_some() {
                eprintln!("ebrec: note: allocations are sampled inside the command by a preloaded shim, about one per {period} bytes allocated; the shim walks the sampled ones' stacks itself and writes them and their frees to ebrec's channel (no trap)");
            } else {
                eprintln!("ebrec: note: allocations are sampled inside the command by a preloaded shim, about one per {period} bytes allocated; only the sampled ones and their frees reach the probes");
            }
        } else if cfg.alloc_min.is_some() && probes.alloc_sessions() {
            eprintln!("ebrec: note: allocator probes run as uprobe sessions: every allocator call of the targets pays one uprobe trap, and only the calls kept pay the return probe; child processes are probed when their fork is seen");
        } else if cfg.alloc_min.is_some() {
            eprintln!("ebrec: note: every allocator call of the targets now pays a uprobe trap, whatever --alloc's threshold, and its return probe a second one (--alloc-probes classic{})", if crate::features::uprobe_sessions() { "" } else { ": the kernel has no uprobe sessions (6.13)" });
        }
        if cfg.lock_min_ns.is_some() && cfg.lock_mode == LockMode::Uprobe {
            eprintln!("ebrec: note: --lock-mode uprobe costs a trap at every pthread_mutex lock and unlock, contended or not");
        }
    }

    // Side band: maps, forks, execs, exits, as they happen.
    let mut side = perf::SideBandReader::default();
    for &pid in &pids {
        side.add(pid, 64).context("opening the perf side band")?;
    }

    let mut w = TraceWriter::create(&a.output, header(a), WriterOptions::default())
        .with_context(|| format!("cannot create {}", a.output.display()))?;
    let _ = &mut w;
    let probes_ref = &probes;
    let mut s = session::Session::new(w, probes_ref, !a.all);
    s.kernel = kernel;
    s.copies = cfg.copy_bytes > 0;
    if let Some(secs) = a.aggregate {
        s.start_aggregating(!a.no_free, Duration::from_secs(secs));
    }
    s.cfi = cfi;
    if let (Some(t), Some(l)) = (s.cfi.as_mut(), launched.as_ref()) {
        // The launched command's executable and libraries get their rows before it runs.
        crate::cfi::preload(t, &l.exe);
        if let Some(shim) = shim {
            crate::cfi::preload_file(t, shim);
        }
    }
    s.unwind_info = cfg.copy_bytes > 0 && !a.no_unwind_info;
    s.clock_sync()?;
    for (i, (m, bid)) in probed.iter().enumerate() {
        s.probed_function(i as u64 + 1, m, bid)?;
    }
    let now = procfs::clock_ns(libc::CLOCK_BOOTTIME);
    for &pid in a.pid.iter().chain(&first_found) {
        s.snapshot(pid, now)?;
        s.live.insert(pid);
    }
    if let Some(l) = launched.as_ref() {
        s.live.insert(l.pid);
        s.launched = Some(l.pid);
    }

    let pending = std::rc::Rc::new(std::cell::RefCell::new(Vec::<u8>::with_capacity(1 << 20)));
    let mut rbb = libbpf_rs::RingBufferBuilder::new();
    // Each ring's bytes of one drain (for the agent's ebrec_ringbuf_fill_ratio{ringbuf}):
    // one ring per BPF object, named as the object.
    let mut ring_bytes: Vec<(&'static str, std::rc::Rc<std::cell::Cell<usize>>)> = Vec::new();
    let mut push = |name: &'static str| {
        let p = pending.clone();
        let c = std::rc::Rc::new(std::cell::Cell::new(0usize));
        ring_bytes.push((name, c.clone()));
        move |data: &[u8]| -> i32 {
            // a record's room in the ring: its 8-byte header and the data, 8-aligned
            c.set(c.get() + 8 + data.len().next_multiple_of(8));
            let mut b = p.borrow_mut();
            b.extend_from_slice(&(data.len() as u32).to_ne_bytes());
            b.extend_from_slice(data);
            0
        }
    };
    if let Some(al) = &probes_ref.alloc {
        rbb.add(&al.maps.events, push("alloc"))?;
    }
    if let Some(lk) = &probes_ref.lock {
        rbb.add(&lk.maps.events, push("lock"))?;
    }
    if let Some(pr) = &probes_ref.profile {
        rbb.add(&pr.maps.events, push("profile"))?;
    }
    if let Some(sm) = &probes_ref.sampler {
        rbb.add(&sm.maps.events, push("sampler"))?;
    }
    if let Some(sy) = &probes_ref.system {
        rbb.add(&sy.maps.events, push("system"))?;
    }
    if let Some(h) = &probes_ref.hub {
        rbb.add(&h.maps.events, push("hub"))?;
    }
    let rb = rbb.build()?;

    // The header and the targets reach the disk now: a recorder killed in its first second
    // still leaves a file that says what it was recording.
    s.w.flush()?;
    // Tests and scripts wait for this line before starting the workload of a -p target.
    let alloc_mode = match (cfg.preload_period, a.alloc) {
        (Some(n), _) => format!("alloc: preload sampler, 1 per {n} bytes; "),
        (None, Some(_)) if probes_ref.alloc_sessions() => "alloc: uprobe sessions; ".to_string(),
        (None, Some(_)) => "alloc: uprobes, entry and return; ".to_string(),
        (None, None) => String::new(),
    };
    eprintln!(
        "ebrec: recording to {} ({alloc_mode}Ctrl-C to stop)",
        a.output.display()
    );
    if let Some(l) = launched.as_mut() {
        // The preload shim gets the sampler's ring buffer, to wait while it is half full
        // (back-pressure) instead of losing events.
        // (or, when it walks the stacks itself, the channel it writes to)
        l.release_with(
            probes_ref
                .chan
                .as_ref()
                .map(|c| c.fd())
                .or(probes_ref.sampler_ring()),
        );
    }

    let started = Instant::now();
    let deadline = a.duration.map(|d| started + Duration::from_secs_f64(d));
    let tty = std::io::stderr().is_terminal() && !a.quiet;
    let mut last_stats = Instant::now();
    let mut last_sync = Instant::now();
    let mut last_kept = 0u64;
    let mut rotations = 0u32;
    let stop_reason;
    let holds = probes_ref.holds_children();
    let mut budget = match a.max_cpu {
        None => None,
        Some(pct) => {
            let trap = crate::budget::calibrate_trap().unwrap_or_else(|e| {
                eprintln!("ebrec: --max-cpu: could not time a uprobe trap here ({e:#}); counting 1000 ns per trap");
                1000.0
            });
            if !a.quiet {
                eprintln!(
                    "ebrec: --max-cpu {pct}%: a uprobe trap costs {trap:.0} ns here (calibrated)"
                );
            }
            let b = crate::budget::Budget::new(pct, cfg, trap, probes_ref, !a.bpf_stats);
            s.probe_change(ebtrace_proto::v1::ProbeChange {
                time_ns: procfs::clock_ns(libc::CLOCK_BOOTTIME),
                family: ebtrace_proto::v1::EventFamily::Unspecified as i32,
                kind: ebtrace_proto::v1::ProbeChangeKind::Rate as i32,
                setting: "trap-ns".into(),
                value: trap.round() as u64,
                reason: format!("--max-cpu {pct}%: one uprobe trap, calibrated at start"),
                ..Default::default()
            })?;
            Some(b)
        }
    };
    let mut budget_changes = 0u32;
    // The time-weighted samples bounded in events a second (record/src/pacer.rs).
    let mut pacers: Vec<crate::pacer::Pacer> = {
        use ebtrace_proto::v1::EventFamily as F;
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
        .filter_map(|(_, family, rate, unit)| crate::pacer::Pacer::new(family, rate, unit))
        .collect()
    };
    let mut pace = Pace::new(cfg.ringbuf_bytes);
    if let Some(h) = hooks.as_deref_mut() {
        h.started(&mut s)?;
    }
    loop {
        if holds {
            // A child held at its fork wakes the loop at once (alloc_fork): it waits
            // stopped until its links are attached.
            let _ = rb.poll(pace.wait);
        } else {
            std::thread::sleep(pace.wait);
        }
        let bytes = session::drain_once(&mut s, &rb, &pending, &mut side)?;
        pace.drained(bytes);
        if let Some(h) = hooks.as_deref_mut() {
            // What one pass found unread in each ring, against its size (the largest of
            // the second, for the metrics).
            for (name, c) in &ring_bytes {
                let fill = c.take() as f64 / f64::from(cfg.ringbuf_bytes.max(1));
                h.ring_drained(name, fill);
            }
        }
        if let Some(l) = launched.as_ref() {
            let mut st = 0;
            // SAFETY: st is a valid out pointer.
            let r = unsafe { libc::waitpid(l.pid as i32, &mut st, libc::WNOHANG) };
            if r == l.pid as i32 {
                let code = if libc::WIFEXITED(st) {
                    libc::WEXITSTATUS(st)
                } else {
                    128 + libc::WTERMSIG(st)
                };
                session::drain_once(&mut s, &rb, &pending, &mut side)?;
                s.launched_exited(l.pid, code)?;
            }
        }
        for &pid in &a.pid {
            // SAFETY: signal 0 only checks existence.
            if s.live.contains(&pid) && unsafe { libc::kill(pid as i32, 0) } != 0 {
                s.live.remove(&pid);
            }
        }
        s.w.flush_if_due()?;
        if let Some(h) = hooks.as_deref_mut() {
            h.tick(&mut s, &mut side)?;
        }
        if let Some(max) = a.max_size {
            if s.w.stats().bytes_written >= max {
                let Some(keep) = a.rotate else {
                    stop_reason = "max size".to_string();
                    break;
                };
                if s.aggregating {
                    // The old file gets the counts up to its end.
                    s.aggregate()?;
                }
                s.histograms()?;
                rotate::rotate(&mut s, a, keep)?;
                rotations += 1;
            }
        }
        let sig = SIGNAL.load(Ordering::SeqCst);
        if sig != 0 {
            stop_reason = format!(
                "signal {}",
                if sig == libc::SIGINT {
                    "SIGINT"
                } else {
                    "SIGTERM"
                }
            );
            break;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            stop_reason = "duration".to_string();
            break;
        }
        if !a.all && s.live.is_empty() && !hooks.as_ref().is_some_and(|h| h.selects()) {
            stop_reason = "targets exited".to_string();
            break;
        }
        for line in probes_ref.rseq_fallbacks()? {
            if !a.quiet {
                eprintln!("ebrec: {line}");
            }
        }
        if let Some(b) = budget.as_mut() {
            for (change, why) in b.tick(probes_ref) {
                budget_changes += 1;
                apply_budget(&mut s, probes_ref, &change, why, a.quiet)?;
            }
        }
        for p in pacers.iter_mut() {
            let kept = s.kept[p.family];
            if let Some((unit, why)) = p.tick(kept, started.elapsed().as_secs_f64()) {
                probes_ref.set_sample_unit_ns(p.family, unit);
                s.probe_change(ebtrace_proto::v1::ProbeChange {
                    time_ns: procfs::clock_ns(libc::CLOCK_BOOTTIME),
                    family: p.family as i32,
                    kind: ebtrace_proto::v1::ProbeChangeKind::Rate as i32,
                    setting: p.setting.into(),
                    value: unit,
                    reason: why,
                    ..Default::default()
                })?;
            }
        }
        if last_stats.elapsed() >= Duration::from_secs(1) {
            last_stats = Instant::now();
            if s.aggregate_due() {
                s.aggregate()?;
            }
            if s.histograms_due() {
                s.histograms()?;
            }
            let fam = s.stats(procfs::clock_ns(libc::CLOCK_BOOTTIME))?;
            if tty {
                let kept: u64 = s.kept.0.iter().sum();
                let lost: u64 = fam.iter().map(|f| f.lost).sum();
                eprint!(
                    "\rebrec: {:>6.1} s  {:>8} events  {:>7.0}/s  {:>7.2} MiB  lost {}   ",
                    started.elapsed().as_secs_f64(),
                    kept,
                    (kept - last_kept) as f64,
                    s.w.stats().bytes_written as f64 / (1 << 20) as f64,
                    lost
                );
                last_kept = kept;
            }
        }
        if last_sync.elapsed() >= Duration::from_secs(10) {
            last_sync = Instant::now();
            s.clock_sync()?;
        }
    }
    if tty {
        eprintln!();
    }
    // What threads still hold (kept waits before their return to user space), the last
    // events, then the final counters and the trailer.
    if let Err(e) = probes_ref.end_pending() {
        eprintln!("ebrec: note: {e:#}: kept off-CPU blocks and run-queue waits whose threads were still in the kernel at the end are missing");
    }
    std::thread::sleep(Duration::from_millis(20));
    session::drain_once(&mut s, &rb, &pending, &mut side)?;
    if s.aggregating {
        s.aggregate()?;
    }
    s.histograms()?;
    let end = procfs::clock_ns(libc::CLOCK_BOOTTIME);
    s.clock_sync()?;
    let families = s.stats(end)?;
    let programs = probes_ref.program_stats();
    let (tp_runs, dispatch_ns, uprobe_runs) = probes_ref.dispatch_cost();
    let dispatch = (tp_runs, dispatch_ns);
    // What the stats do not see of a uprobe program's run: the trap (or the return's
    // trampoline) around it, timed on a probe of ebrec's own (the budget's, or now).
    let traps = if uprobe_runs == 0 {
        None
    } else {
        budget
            .as_ref()
            .map(|b| b.trap_ns)
            .or_else(|| {
                crate::budget::calibrate_trap_or_warn("the cost below leaves the traps out")
            })
            .map(|ns| (uprobe_runs, ns))
    };
    let own_cpu_s = crate::budget::own_cpu_ns() as f64 / 1e9;
    let elapsed = started.elapsed().as_secs_f64();
    let processes = s.processes();
    let malformed = s.malformed;
    let sideband_lost = s.sideband_lost();
    let (copies_missing, waker_frames_dropped) = (s.copies_missing, s.waker_frames_dropped);
    let late_attachments = (s.late_attachments, s.never_attached);
    let budget_line = budget.as_ref().map(|b| {
        let (mean, max) = b.summary();
        format!(
            "--max-cpu {}%: ebrec cost {:.2}% of a CPU on average, {:.2}% in its worst second (trap {:.0} ns); {budget_changes} changes; at the end: {}; paused {:.0} s",
            b.limit * 100.0,
            mean * 100.0,
            max * 100.0,
            b.trap_ns,
            b.rates(),
            b.paused_s()
        ) + &b
            .sampling()
            .map(|on| format!("; measured {on:.1} s of {elapsed:.1} s (the stats off between measures within the budget)"))
            .unwrap_or_default()
    });
    let no_kallsyms = s.kernel.unavailable();
    let evictions = s.w.stats().stack_evictions;
    let stacks = s.stack_quality.lines();
    let cfi = s.cfi.as_ref().map(|t| {
        let (walks, hits) = probes_ref.unwind_memo();
        let memo = if walks > 0 {
            format!("; {hits} of {walks} user stacks from their thread's memo (the walk's start and every stack word it read as before)")
        } else {
            String::new()
        };
        t.summary() + &memo
    });
    let offcpu_sample = match (a.offcpu, probes_ref.offcpu_seen()) {
        (Some(_), Some((n, ns))) if a.offcpu_sample > 0 => {
            let kept = families
                .iter()
                .find(|f| f.family == ebtrace_format::proto::EventFamily::Offcpu as i32)
                .map_or(0, |f| f.kept);
            Some(format!(
                "offcpu: {n} blocks past the threshold, {:.2} s off the CPU; {kept} kept with their stacks by the time-weighted sample (--offcpu-sample={} us: a shorter block kept with probability length/unit, standing for 1/p blocks)",
                ns as f64 / 1e9,
                a.offcpu_sample
            ))
        }
        _ => None,
    };
    let preload = probes_ref.chan.as_ref().map(|c| {
        if c.active() {
            let corrupt = match c.corrupt() {
                0 => String::new(),
                n => format!("; {n} times its records did not parse (the command wrote over the channel): skipped, lost"),
            };
            format!(
                "alloc: the preloaded shim walked the stacks in the process (unwind rows of .eh_frame, cached per pc) and wrote the events to a {} KiB channel{corrupt}",
                c.size() >> 10
            )
        } else {
            "alloc: the preloaded shim wrote nothing to its channel (it did not load, or could not map it: a static or setuid command?)".to_string()
        }
    });
    let out = s.w.finish(Some(Trailer {
        end_time_ns: end,
        end_realtime_ns: procfs::clock_ns(libc::CLOCK_REALTIME),
        stop_reason: stop_reason.clone(),
        families: families.clone(),
        ..Default::default()
    }))?;
    drop(out);
    let bytes = std::fs::metadata(&a.output).map(|m| m.len()).unwrap_or(0);
    if let Some(h) = hooks.as_deref_mut() {
        h.finished()?;
    }

    summary::Summary {
        output: &a.output,
        stop_reason,
        preload,
        elapsed,
        processes,
        bytes,
        families,
        programs,
        dispatch,
        traps,
        own_cpu_s,
        sampled: budget.as_ref().and_then(|b| b.sampling()),
        evictions,
        rotations,
        no_kallsyms,
        malformed,
        sideband_lost,
        copies_missing,
        waker_frames_dropped,
        late_attachments,
        budget_line,
        stacks,
        cfi,
        offcpu_sample,
        paced: pacers.iter().filter_map(|p| p.summary()).collect(),
    }
    .print();
    Ok(())
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
    s: &mut session::Session<'_>,
    probes: &Probes<'_>,
    change: &crate::budget::Change,
    why: String,
    quiet: bool,
) -> Result<()> {
    use crate::budget::Change;
    use ebtrace_proto::v1::{EventFamily, ProbeChange, ProbeChangeKind};
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
