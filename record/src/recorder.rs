//! `ebrec record`: checks the flags, loads and attaches the probes, then the loop that
//! drains the ring buffers and the side band into the trace until a stop, with rotation and
//! the exit summary.
use crate::config::{AllocSampler, LockModeArg, RecordConfig, StackMode};
use crate::probes::{LockMode, ProbeConfig, Probes};
use crate::recording::{Recording, Start};
use crate::targets::{self, Launched};
use crate::{funcs, perf, procfs};
use anyhow::{bail, Result};
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

static SIGNAL: AtomicI32 = AtomicI32::new(0);
/// SIGHUPs received and not yet taken.
static HANGUPS: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNAL.store(sig, Ordering::SeqCst);
}

extern "C" fn on_hangup(_: libc::c_int) {
    HANGUPS.fetch_add(1, Ordering::SeqCst);
}

/// Whether a SIGHUP came since the last call: `ebrec agent` closes its window early.
/// (`ebrec record` notes it and goes on: a closed terminal or ssh session sends it, and a
/// recording must not die with the session.)
pub fn take_hangup() -> bool {
    HANGUPS.swap(0, Ordering::SeqCst) > 0
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
    /// The trace is open and the probes attached.
    fn started(&mut self, r: &mut Recording<'_>) -> Result<()>;
    /// One drain found `fill` (0..1) of the ring buffer of BPF object `ring` unread.
    fn ring_drained(&mut self, ring: &'static str, fill: f64);
    /// After each drain: follow new targets (`Recording::follow`), close a window
    /// (`Recording::close_window`), read the health (`Recording::health`).
    fn tick(&mut self, r: &mut Recording<'_>) -> Result<()>;
    /// The trace is closed.
    fn finished(&mut self) -> Result<()>;
}

/// `ebrec record`: records until a stop, then prints the exit summary.
pub fn record(a: RecordConfig) -> Result<()> {
    run(a, None)
}

/// `ebrec record`, or with `hooks` the recording loop of `ebrec agent`.
pub fn run(a: RecordConfig, hooks: Option<&mut dyn Hooks>) -> Result<()> {
    let mut a = with_request(a)?;
    let found_later = hooks.as_ref().is_some_and(|h| h.selects());
    let func_specs = check(&a, found_later)?;
    let mut cfg = probe_config(&a, !func_specs.is_empty());
    fit_memory(&mut a, &mut cfg);
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
        (Some(s), Some(period)) => crate::preload::child_env(&crate::preload::PreloadEnv {
            shim: &s.path,
            period,
            min: a.alloc.unwrap_or(0),
            no_free: a.no_free,
            ring_bytes: cfg.ringbuf_bytes,
            chan_bytes: chan.as_ref().map(|c| c.size()),
            stack_depth: a.stack_depth,
        })?,
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
        Attach {
            func_specs: &func_specs,
            shim: shim.as_ref().map(|s| s.path.as_path()),
            chan,
        },
        &mut launched,
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
    // A write fault stops the recording as a signal does (a launched command goes on, as
    // after Ctrl-C), then fails the command with its line.
    match result? {
        Some(line) => bail!("{line}"),
        None => Ok(()),
    }
}

/// --offcpu-sample's default unit, us, and its default with --request.
const DEFAULT_OFFCPU_SAMPLE_US: u64 = 10_000;
const REQUEST_OFFCPU_SAMPLE_US: u64 = 1_000;

/// `--request` as the `--usdt` pair (with `--usdt-pair`) or the `--func` it stands for.
fn with_request(mut a: RecordConfig) -> Result<RecordConfig> {
    let Some(spec) = a.request.clone() else {
        return Ok(a);
    };
    let bad = || {
        anyhow::anyhow!(
            "--request '{spec}': give usdt:[BINARY_OR_LIB:]PROVIDER:START,DONE or func:SPEC"
        )
    };
    if spec.contains(['*', '?']) {
        bail!("--request '{spec}': one probe pair or one function, no globs");
    }
    if let Some(rest) = spec.strip_prefix("usdt:") {
        let (start, done) = rest.rsplit_once(',').ok_or_else(bad)?;
        let (prefix, start_name) = start.rsplit_once(':').ok_or_else(bad)?;
        let provider = prefix.rsplit(':').next().unwrap_or(prefix);
        let done_name = done.rsplit(':').next().unwrap_or(done);
        if provider.is_empty() || start_name.is_empty() || done_name.is_empty() {
            return Err(bad());
        }
        a.usdt.push(format!("{prefix}:{start_name}"));
        a.usdt.push(format!("{prefix}:{done_name}"));
        a.usdt_pair
            .push(format!("{provider}:{start_name},{provider}:{done_name}"));
    } else if let Some(f) = spec.strip_prefix("func:").filter(|f| !f.is_empty()) {
        a.func.push(f.to_string());
    } else {
        return Err(bad());
    }
    // The kernel splits each request's time exactly (with --offcpu), and the time-weighted
    // sample of its blocks names that time's causes (requests.rs composes a set's
    // estimates), at a fraction of the exact sample's cost. Its unit is 1 ms, not 10: a
    // block of a millisecond or more (what makes a request slow) is always kept, so that
    // each slow request's own causes are named too.
    if a.offcpu_sample == DEFAULT_OFFCPU_SAMPLE_US {
        a.offcpu_sample = REQUEST_OFFCPU_SAMPLE_US;
    }
    Ok(a)
}

/// The checks of --usdt and its companions.
fn check_usdt(a: &RecordConfig) -> Result<()> {
    for s in &a.usdt {
        s.parse::<funcs::usdt::UsdtSpec>()?;
    }
    if a.usdt.is_empty() && (a.usdt_stack || !a.usdt_pair.is_empty() || !a.usdt_string.is_empty()) {
        bail!("--usdt-stack, --usdt-pair and --usdt-string apply to USDT probes: add --usdt SPEC");
    }
    if !a.usdt.is_empty() && a.all {
        bail!("--usdt needs targets to find its probes in: use -p PID or -- CMD, not --all");
    }
    if a.exceptions && a.all {
        bail!("--exceptions needs targets to find their C++ runtime in: use -p PID or -- CMD, not --all");
    }
    Ok(())
}

/// The checks of the flags before anything is loaded; the --func specs parsed.
fn check(a: &RecordConfig, found_later: bool) -> Result<Vec<funcs::FuncSpec>> {
    let targets =
        usize::from(!a.pid.is_empty()) + usize::from(a.all) + usize::from(!a.command.is_empty());
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
        && a.usdt.is_empty()
        && !a.exceptions
    {
        bail!("say what to record: --alloc[=MIN_BYTES], --lock[=MIN_US], --cpu[=HZ], --offcpu[=MIN_US], --memgrowth, --func SPEC, --syscalls[=MIN_US], --bio[=MIN_US], --runq[=MIN_US], --tcp, --usdt SPEC, --exceptions");
    }
    check_usdt(a)?;
    check_sampler(a)?;
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
    let rb = crate::config::ringbuf_bytes(a);
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
        check_aggregate(a, secs)?;
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
    Ok(func_specs)
}

/// The checks of `--aggregate=SECS`.
fn check_aggregate(a: &RecordConfig, secs: u64) -> Result<()> {
    if a.alloc.is_none() && a.cpu.is_none() && a.offcpu.is_none() && a.lock.is_none() {
        bail!(
            "--aggregate counts --alloc, --cpu, --offcpu and --lock in the kernel: add one of them"
        );
    }
    if secs == 0 {
        bail!("--aggregate=SECS: the interval must be at least 1 s");
    }
    if a.alloc_sampler != AllocSampler::Uprobe {
        bail!("--aggregate works with the uprobe allocation probes, not --alloc-sampler preload");
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
    Ok(())
}

/// What the probes load, from the flags.
fn probe_config(a: &RecordConfig, func: bool) -> ProbeConfig {
    let lock_mode = match a.lock_mode {
        LockModeArg::Futex => LockMode::Futex,
        LockModeArg::Uprobe => LockMode::Uprobe,
    };
    ProbeConfig {
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
        ringbuf_bytes: crate::config::ringbuf_bytes(a),
        live_blocks: crate::memlimit::LIVE_BLOCKS,
        held_locks: crate::memlimit::HELD_LOCKS,
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
        usdt: !a.usdt.is_empty() || a.exceptions,
        usdt_stack: a.usdt_stack || a.exceptions,
        usdt_string_bytes: if a.usdt_string.is_empty() {
            0
        } else {
            a.usdt_string_bytes
        },
        request_split: a.request.is_some() && a.offcpu.is_some(),
        request_hold: a.request.as_deref().is_some_and(|r| r.starts_with("usdt:"))
            && !(a.usdt_stack || a.exceptions)
            && a.usdt_string.is_empty(),
        offcpu_wakers: a.offcpu_wakers.unwrap_or(true)
            || (a.request.is_some() && a.offcpu.is_some()),
        request_slow_ns: match a.request_slow {
            crate::config::RequestSlow::Fixed(ns) => ns,
            _ => 0,
        },
        bpf_stats: a.bpf_stats || a.max_cpu.is_some(),
        func_args: a.args,
        func,
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
    }
}

/// What is attached beside the families' own probes.
struct Attach<'a> {
    func_specs: &'a [funcs::FuncSpec],
    /// `--alloc-sampler preload`: the shim's file (its probe sites get the sampler).
    shim: Option<&'a Path>,
    /// The shim's channel, when it walks the stacks itself.
    chan: Option<crate::preload::Chan>,
}

/// Loads and attaches the probes, then records until a stop and prints the exit summary.
/// Some: a write fault stopped it (the line that says so).
fn record_with(
    a: &RecordConfig,
    cfg: &ProbeConfig,
    at: Attach<'_>,
    launched: &mut Option<Launched>,
    mut hooks: Option<&mut dyn Hooks>,
) -> Result<Option<String>> {
    let mut objects = crate::probes::ProbeObjects::new();
    // Before the loading and attaching (a second or more with many families on a busy
    // machine): a SIGINT or SIGTERM then stops the recording as soon as it starts. Installed
    // after, one sent early was lost, or ignored altogether by a recorder started in the
    // background of a script (which starts with SIGINT ignored): it went on recording.
    // SAFETY: installing a handler that only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGHUP, on_hangup as *const () as libc::sighandler_t);
    }
    perf::remove_stale_probes();
    // The rows also serve the lock holders' and wakers' stacks in fp and dwarf mode.
    let cfi = if a.uses_cfi_tables() {
        Some(crate::cfi::Tables::new(a.cfi_memory)?)
    } else {
        None
    };
    let mut probes = Probes::load(cfg, &mut objects, cfi.as_ref().map(|t| t.fds()))?;
    probes.chan = at.chan;
    let kernel = kernel_symbols(a);
    let mut pids = targets::pids(a, launched.as_ref());
    let mut first_found = Vec::new();
    if let Some(h) = hooks.as_deref_mut() {
        // The processes that match --comm or --cgroup now: targets from the start.
        first_found = h.scan();
        pids.extend(first_found.iter().map(|&p| p as i32));
    }
    let probed = targets::attach(
        targets::AttachTo {
            a,
            cfg,
            func_specs: at.func_specs,
            launched: launched.as_ref(),
            pids: &pids,
            shim: at.shim,
        },
        &mut probes,
    )?;
    if !a.quiet {
        attach_notes(cfg, &probes);
    }
    let probes = &probes;
    let mut rec = Recording::start(
        a,
        Start {
            probes,
            cfg,
            kernel,
            cfi,
            pids: &pids,
            snapshot: a.pid.iter().chain(&first_found).copied().collect(),
            launched: launched.as_ref(),
            shim: at.shim,
            probed: &probed,
        },
    )?;
    // Tests and scripts wait for this line before starting the workload of a -p target.
    eprintln!(
        "ebrec: recording to {} ({}Ctrl-C to stop)",
        a.output.display(),
        alloc_mode(a, cfg, probes)
    );
    if let Some(l) = launched.as_mut() {
        // The preload shim gets the sampler's ring buffer, to wait while it is half full
        // (back-pressure) instead of losing events.
        // (or, when it walks the stacks itself, the channel it writes to)
        l.release_with(
            probes
                .chan
                .as_ref()
                .map(|c| c.fd())
                .or(probes.sampler_ring()),
        );
    }
    rec.start_budget()?;
    if let Some(h) = hooks.as_deref_mut() {
        h.started(&mut rec)?;
    }
    // After the launch (the command keeps its policy) and the start-up work.
    if let Some(why) = crate::sched::apply(a.sched) {
        eprintln!(
            "ebrec: warning: --sched {:?}: {why}; ebrec's threads keep the normal policy",
            a.sched
        );
    }
    let stop_reason = record_loop(&mut rec, a, launched.as_ref(), &mut hooks)?;
    let finished = rec.finish(stop_reason)?;
    let agent = hooks.is_some();
    if let Some(h) = hooks {
        h.finished()?;
    }
    finished.summary.print();
    // The agent counts the windows a fault cost, and has said so.
    Ok(finished.fault_line.filter(|_| !agent))
}

/// Read while the programs attach: the loop's first kernel frame needs it. Not before the
/// loading: the programs' own symbols (bpf_prog_…) name the tracer frames stripped from
/// each kernel stack. Only for the families whose events carry kernel frames (CPU samples,
/// off-CPU blocks and wakers, block I/O, run-queue waits, lock waits' aggregated stacks);
/// the others read it at a first need, if any.
fn kernel_symbols(a: &RecordConfig) -> crate::kallsyms::Needed {
    let kernel_frames = a.cpu.is_some()
        || a.offcpu.is_some()
        || a.bio.is_some()
        || a.runq.is_some()
        || a.lock.is_some();
    if kernel_frames {
        crate::kallsyms::Needed::prefetch()
    } else {
        crate::kallsyms::Needed::default()
    }
}

/// The lines that say what was attached and what the probes cost the targets.
fn attach_notes(cfg: &ProbeConfig, probes: &Probes<'_>) {
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

/// The "recording to" line's word on the allocator probes.
fn alloc_mode(a: &RecordConfig, cfg: &ProbeConfig, probes: &Probes<'_>) -> String {
    match (cfg.preload_period, a.alloc) {
        (Some(n), _) => format!("alloc: preload sampler, 1 per {n} bytes; "),
        (None, Some(_)) if probes.alloc_sessions() => "alloc: uprobe sessions; ".to_string(),
        (None, Some(_)) => "alloc: uprobes, entry and return; ".to_string(),
        (None, None) => String::new(),
    }
}

/// The ring buffers, unwind rows and tables sized to ebrec's memory limit, if it has one
/// (memlimit.rs): `cfg`'s sizes and `a`'s ring size and unwind memory (the header's) set
/// to them, the line said.
fn fit_memory(a: &mut RecordConfig, cfg: &mut ProbeConfig) {
    use crate::memlimit::Sizes;
    let alloc = cfg.alloc_min.is_some() && cfg.preload_period.is_none();
    let lock = cfg.lock_min_ns.is_some();
    let wants = Sizes {
        ringbuf: cfg.ringbuf_bytes,
        rings: cfg.rings().max(1),
        cfi: if a.uses_cfi_tables() { a.cfi_memory } else { 0 },
        live: if alloc { cfg.live_blocks } else { 0 },
        held: if lock { cfg.held_locks } else { 0 },
    };
    let limit = crate::memlimit::own();
    let (s, line) = crate::memlimit::fit(limit.as_ref(), wants, a.ringbuf_size.is_some());
    let Some(line) = line else {
        return;
    };
    eprintln!("ebrec: {line}");
    if s.ringbuf != wants.ringbuf {
        a.ringbuf_size = Some(s.ringbuf);
        cfg.ringbuf_bytes = s.ringbuf;
    }
    a.cfi_memory = if wants.cfi > 0 { s.cfi } else { a.cfi_memory };
    if alloc {
        cfg.live_blocks = s.live;
    }
    if lock {
        cfg.held_locks = s.held;
    }
}

/// Drains and steers the recording until a stop; the stop's reason.
fn record_loop(
    rec: &mut Recording<'_>,
    a: &RecordConfig,
    launched: Option<&Launched>,
    hooks: &mut Option<&mut dyn Hooks>,
) -> Result<String> {
    let deadline = a
        .duration
        .map(|d| rec.started_at() + Duration::from_secs_f64(d));
    loop {
        rec.wait();
        rec.drain_paced()?;
        if let Some(h) = hooks {
            // What one pass found unread in each ring, against its size (the largest of
            // the second, for the metrics).
            for (name, fill) in rec.ring_fill() {
                h.ring_drained(name, fill);
            }
        }
        rec.reap(launched)?;
        if let Some(h) = hooks.as_deref_mut() {
            h.tick(rec)?;
        }
        if hooks.is_none() && take_hangup() {
            // Not eprintln!: with the terminal gone, stderr may fail, and that must not
            // panic the recorder.
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "ebrec: SIGHUP ignored: the recording goes on (SIGINT or SIGTERM stops it)"
            );
        }
        if hooks.is_none() {
            if let Some(f) = rec.write_fault() {
                // The agent drops windows until space returns; `ebrec record` stops.
                return Ok(crate::faults::fault_word(f).to_string());
            }
        }
        if let Some(reason) = rec.check_size()? {
            return Ok(reason);
        }
        let sig = SIGNAL.load(Ordering::SeqCst);
        if sig != 0 {
            let name = if sig == libc::SIGINT {
                "SIGINT"
            } else {
                "SIGTERM"
            };
            return Ok(format!("signal {name}"));
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok("duration".to_string());
        }
        if rec.targets_gone() && !hooks.as_ref().is_some_and(|h| h.selects()) {
            return Ok("targets exited".to_string());
        }
        rec.steer()?;
    }
}
