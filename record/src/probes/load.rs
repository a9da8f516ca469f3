//! Opening and loading the skeletons (each object's settings and programs, into the
//! caller's `ProbeObjects`), and the load errors (the verifier's messages).
use super::*;
use crate::{features, procfs};
use alloc_skel::AllocSkelBuilder;
use anyhow::{Context, Result};
use hub_skel::HubSkelBuilder;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::OpenObject;
use lock_skel::LockSkelBuilder;
use profile_skel::ProfileSkelBuilder;
use sampler_skel::SamplerSkelBuilder;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use system_skel::SystemSkelBuilder;

/// The settings every object shares (they all include `common.bpf.h`), from `Shared`: stack
/// depth, stack copies, the rate cap, the ring buffer and the per-CPU copy buffers. A macro
/// because each skeleton has its own generated types.
macro_rules! common_setup {
    ($open:expr, $ro:expr, $sh:expr) => {{
        let sh: &Shared<'_> = $sh;
        $ro.max_frames = sh.depth;
        $ro.chain_timed = sh.cfg.bpf_stats;
        $open
            .maps
            .sys_enter_chain
            .reuse_fd(sh.chain.enter.as_fd())?;
        $open.maps.sys_exit_chain.reuse_fd(sh.chain.exit.as_fd())?;
        $open.maps.chain_state.reuse_fd(sh.chain.state.as_fd())?;
        $open.maps.chain_costs.reuse_fd(sh.chain.costs.as_fd())?;
        $open.maps.chain_wants.reuse_fd(sh.chain.wants.as_fd())?;
        $open.maps.chain_timing.reuse_fd(sh.chain.timing.as_fd())?;
        $open.maps.targets.reuse_fd(sh.chain.targets.map.as_fd())?;
        if let Some(fds) = sh.cfi {
            $ro.cfi_mode = sh.cfg.cfi_mode;
            $ro.cfi_wakers = true;
            $open.maps.cfi_rows.reuse_fd(fds.rows)?;
            $open.maps.cfi_pages.reuse_fd(fds.pages)?;
            $open.maps.cfi_files.reuse_fd(fds.files)?;
            $open.maps.cfi_procs.reuse_fd(fds.procs)?;
            $open.maps.cfi_inodes.reuse_fd(fds.inodes)?;
            $open.maps.cfi_early.reuse_fd(fds.early)?;
        }
        $ro.copy_bytes = sh.cfg.copy_bytes;
        $ro.rate_per_cpu = sh.cfg.rate_per_cpu;
        $ro.uw_memo_on = sh.cfg.aggregate_stacks == 0;
        $open.maps.events.set_max_entries(sh.cfg.ringbuf_bytes)?;
        $open.maps.copy_scratch.set_max_entries(sh.ncpu)?;
        $open
            .maps
            .uw_frames
            .set_max_entries(sh.ncpu * MAX_FRAMES as u32)?;
    }};
}

/// --aggregate's switch and map sizes, for the objects that aggregate (aggregate.bpf.h).
macro_rules! agg_setup {
    ($open:expr, $ro:expr, $cfg:expr) => {{
        $ro.aggregate = $cfg.aggregate_stacks > 0;
        let n = $cfg.aggregate_stacks.max(1);
        $open.maps.agg_counts.set_max_entries(n)?;
        $open.maps.agg_stacks.set_max_entries(n)?;
    }};
}

thread_local! {
    static VERIFIER_LOG: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn libbpf_print(level: libbpf_rs::PrintLevel, msg: String) {
    if std::env::var_os("EBREC_DEBUG").is_some() {
        eprint!("libbpf: {msg}");
    }
    if level != libbpf_rs::PrintLevel::Debug {
        VERIFIER_LOG.with(|l| {
            let mut l = l.borrow_mut();
            l.extend(msg.lines().map(String::from));
            let n = l.len();
            if n > 40 {
                l.drain(..n - 40);
            }
        });
    }
}

fn load_error(what: &str, e: libbpf_rs::Error) -> anyhow::Error {
    let log = VERIFIER_LOG.with(|l| l.borrow().clone());
    let perm = matches!(e.kind(), libbpf_rs::ErrorKind::PermissionDenied)
        || e.to_string().contains("Operation not permitted");
    // The verifier refuses a program with EACCES too: then it wrote a log, and the log is
    // the message (as root, EACCES is never a missing privilege).
    // SAFETY: plain syscall.
    let root = unsafe { libc::geteuid() } == 0;
    // EPERM with no verifier log (libbpf's own lines may be there): a missing capability,
    // also for root in a reduced capability set (a container, a systemd unit).
    let eperm = e.to_string().contains("Operation not permitted");
    let verified = log.iter().any(|l| l.contains("BEGIN PROG LOAD LOG"));
    if perm && ((!root && log.is_empty()) || (eperm && !verified)) {
        return anyhow::anyhow!(
            "loading the {what} BPF programs was refused: run ebrec as root or with CAP_BPF and CAP_PERFMON ({e})"
        );
    }
    if let Some(v) = verifier_rejection(&log) {
        return anyhow::anyhow!(
            "loading the {what} BPF programs failed: the BPF verifier of this kernel (Linux {}) refused {v} (EBREC_DEBUG=1 prints the whole log)",
            procfs::uname().1
        );
    }
    let tail: Vec<&String> = log
        .iter()
        .rev()
        .take(8)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    anyhow::anyhow!(
        "loading the {what} BPF programs failed: {e}{}",
        if tail.is_empty() {
            String::new()
        } else {
            format!(
                " | last lines of the log: {}",
                tail.iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(" | ")
            )
        }
    )
}

/// A verifier rejection in libbpf's log (its last program load log, `-- BEGIN PROG LOAD
/// LOG --` .. `-- END PROG LOAD LOG --`): "program 'P' (function F): REASON | last lines
/// of the verifier's log: ...", or None when the log holds no program load log.
fn verifier_rejection(log: &[String]) -> Option<String> {
    let end = log
        .iter()
        .rposition(|l| l.contains("-- END PROG LOAD LOG --"))?;
    let begin = log[..end]
        .iter()
        .rposition(|l| l.contains("-- BEGIN PROG LOAD LOG --"));
    let body: Vec<&str> = log[begin.map_or(0, |b| b + 1)..end]
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty())
        .collect();
    // The program: "prog 'NAME': -- BEGIN PROG LOAD LOG --", or libbpf's "prog 'NAME':
    // failed to load" after the log.
    let quoted = |l: &str| {
        l.split_once("prog '")
            .and_then(|(_, r)| r.split_once('\''))
            .map(|(n, _)| n.to_string())
    };
    let prog = begin
        .and_then(|b| quoted(&log[b]))
        .or_else(|| log[end..].iter().find_map(|l| quoted(l)))
        .unwrap_or_else(|| "a program".into());
    // The global function being checked when it failed ("Validating F() func#N...").
    let func = body
        .iter()
        .rev()
        .find_map(|l| l.strip_prefix("Validating "))
        .and_then(|l| l.split_once("()"))
        .map(|(f, _)| format!(" (in {f})"))
        .unwrap_or_default();
    // The reason: the last line before the counters ("processed N insns ...").
    let last = body
        .iter()
        .rposition(|l| !l.starts_with("processed ") && !l.starts_with("verification time"))?;
    let tail = body[last.saturating_sub(4)..last].join(" | ");
    Some(format!(
        "program '{prog}'{func}: {} | last lines of the verifier's log: {tail}",
        body[last]
    ))
}

/// The storage of the BPF objects libbpf opens, one per skeleton. The caller makes it and
/// keeps it while the [`Probes`] loaded into it live: `Probes::load(cfg, &mut objects, cfi)`.
pub struct ProbeObjects {
    alloc: MaybeUninit<OpenObject>,
    lock: MaybeUninit<OpenObject>,
    profile: MaybeUninit<OpenObject>,
    sampler: MaybeUninit<OpenObject>,
    system: MaybeUninit<OpenObject>,
    hub: MaybeUninit<OpenObject>,
}

impl ProbeObjects {
    pub fn new() -> Self {
        ProbeObjects {
            alloc: MaybeUninit::uninit(),
            lock: MaybeUninit::uninit(),
            profile: MaybeUninit::uninit(),
            sampler: MaybeUninit::uninit(),
            system: MaybeUninit::uninit(),
            hub: MaybeUninit::uninit(),
        }
    }
}

impl Default for ProbeObjects {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for ProbeObjects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeObjects").finish_non_exhaustive()
    }
}

/// What every object's loading shares (`common_setup!`): the config, the stack depth, the
/// CPUs, the CFI maps and the chain's maps.
struct Shared<'a> {
    cfg: &'a ProbeConfig,
    depth: u32,
    ncpu: u32,
    cfi: Option<crate::cfi::Fds<'a>>,
    chain: &'a ChainMaps,
}

/// The loaded skeletons (None: not needed for this recording).
struct Skels<'obj> {
    alloc: Option<AllocSkel<'obj>>,
    lock: Option<LockSkel<'obj>>,
    profile: Option<ProfileSkel<'obj>>,
    sampler: Option<SamplerSkel<'obj>>,
    system: Option<SystemSkel<'obj>>,
    hub: Option<HubSkel<'obj>>,
}

impl<'obj> Probes<'obj> {
    /// Opens and loads the objects `cfg` needs into `objects`, with the CFI maps `cfi` (for
    /// --stack-mode cfi|auto and the wakers' stacks), and attaches their tracepoints.
    pub fn load(
        cfg: &ProbeConfig,
        objects: &'obj mut ProbeObjects,
        cfi: Option<crate::cfi::Fds<'_>>,
    ) -> Result<Self> {
        libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Debug, libbpf_print)));
        let stats_fd = enable_bpf_stats(cfg.bpf_stats);
        let chain_maps = ChainMaps::create()?;
        let sh = Shared {
            cfg,
            depth: cfg.stack_depth.clamp(1, 127),
            ncpu: procfs::possible_cpus().unwrap_or(1).max(1) as u32,
            cfi,
            chain: &chain_maps,
        };
        let alloc = load_alloc(&sh, &mut objects.alloc)?;
        let lock = load_lock(&sh, &mut objects.lock)?;
        let profile = load_profile(&sh, &mut objects.profile)?;
        let sampler = load_sampler(&sh, &mut objects.sampler)?;
        // The system object's programs whose tracepoint this kernel lacks (not loaded).
        let (system, missing_tps) = load_system(&sh, &mut objects.system)?;
        let hub = Some(load_hub(&sh, &mut objects.hub)?);
        let skels = Skels {
            alloc,
            lock,
            profile,
            sampler,
            system,
            hub,
        };
        let mut p = Probes::new(cfg, skels, stats_fd, chain_maps);
        p.find_knobs(cfg);
        p.find_rseq_fallbacks(cfg);
        p.attach_alloc_tracepoints(cfg)?;
        p.attach_lock_tracepoints(cfg)?;
        p.attach_profile_tracepoints(cfg)?;
        p.attach_system_tracepoints(cfg, &missing_tps)?;
        if p.stats_ok {
            p.set_chain_timing(true);
        }
        p.start_chain(p.stats_ok)?;
        Ok(p)
    }

    /// The probes of the loaded `skels`, nothing attached yet.
    fn new(
        cfg: &ProbeConfig,
        skels: Skels<'obj>,
        stats_fd: Option<OwnedFd>,
        chain_maps: ChainMaps,
    ) -> Self {
        let Skels {
            alloc,
            lock,
            profile,
            sampler,
            system,
            hub,
        } = skels;
        Probes {
            alloc,
            lock,
            profile,
            sampler,
            system,
            chan: None,
            links: Vec::new(),
            filter_fds: Vec::new(),
            trace_probes: Vec::new(),
            attached: Vec::new(),
            usdt: Vec::new(),
            req_roles: Default::default(),
            stats_ok: stats_fd.is_some(),
            hub_shares: Default::default(),
            hub_every: Default::default(),
            stats_fd: std::cell::RefCell::new(stats_fd),
            session_plan: Default::default(),
            session_links: Default::default(),
            session_pids: Default::default(),
            sessions_paused: Default::default(),
            alloc_entry_only: cfg.alloc_entry_only,
            alloc_sessions_cfg: cfg.alloc_sessions,
            sample_bytes_ptr: None,
            offcpu_min_ptr: None,
            req_slow_ptr: None,
            offcpu_epoch_ptr: None,
            req_epoch_ptr: None,
            unit_ptrs: Vec::new(),
            rseq_fallbacks: Vec::new(),
            hub_links: Default::default(),
            chain_started: Default::default(),
            direct_links: Default::default(),
            hub_only: std::env::var_os("EBTRACE_SYSCALL_HUB_ONLY").is_some_and(|v| v == "1"),
            direct_failed: Default::default(),
            closing: Default::default(),
            sys_epoch_ptr: None,
            ending_ptrs: Vec::new(),
            cpu_fds: Vec::new(),
            pausable: Default::default(),
            tp_pausable: Default::default(),
            chain: Default::default(),
            chain_maps,
            hub,
            dispatch_ns: 0.0,
        }
    }

    /// Finds the words of the objects' mmapped .bss that the knobs write while recording
    /// (`set_offcpu_min_ns`, `set_sample_unit_ns`, `set_sample_bytes`, the epochs `resume`
    /// bumps, the `*_ending` flags of `end_pending`).
    fn find_knobs(&mut self, cfg: &ProbeConfig) {
        let p = self;
        p.offcpu_min_ptr = p
            .profile
            .as_mut()
            .and_then(|a| a.maps.bss_data.as_deref_mut())
            .map(|b| &mut b.offcpu_min_ns as *mut u64);
        {
            use ebtrace_proto::v1::EventFamily as F;
            if let Some(b) = p
                .profile
                .as_mut()
                .and_then(|a| a.maps.bss_data.as_deref_mut())
            {
                p.unit_ptrs
                    .push((F::Offcpu, &mut b.offcpu_unit_ns as *mut u64));
            }
            if let Some(b) = p
                .system
                .as_mut()
                .and_then(|a| a.maps.bss_data.as_deref_mut())
            {
                p.unit_ptrs
                    .push((F::Syscall, &mut b.syscall_unit_ns as *mut u64));
                p.unit_ptrs.push((F::Runq, &mut b.runq_unit_ns as *mut u64));
            }
        }
        p.offcpu_epoch_ptr = p
            .profile
            .as_mut()
            .and_then(|a| a.maps.bss_data.as_deref_mut())
            .map(|b| &mut b.offcpu_epoch as *mut u32);
        p.req_slow_ptr = p
            .profile
            .as_mut()
            .and_then(|a| a.maps.bss_data.as_deref_mut())
            .map(|b| &mut b.req_slow_ns as *mut u64);
        p.req_epoch_ptr = p
            .profile
            .as_mut()
            .and_then(|a| a.maps.bss_data.as_deref_mut())
            .map(|b| &mut b.req_epoch as *mut u32);
        p.sys_epoch_ptr = p
            .system
            .as_mut()
            .and_then(|a| a.maps.bss_data.as_deref_mut())
            .map(|b| &mut b.sys_epoch as *mut u32);
        // The families that hold kept waits for their thread's return to user space.
        let ending = [
            (
                cfg.offcpu_min_ns.is_some(),
                p.profile
                    .as_mut()
                    .and_then(|a| a.maps.bss_data.as_deref_mut())
                    .map(|b| &mut b.offcpu_ending as *mut u32),
                "offcpu_end",
            ),
            (
                cfg.runq_min_ns.is_some(),
                p.system
                    .as_mut()
                    .and_then(|a| a.maps.bss_data.as_deref_mut())
                    .map(|b| &mut b.runq_ending as *mut u32),
                "runq_end",
            ),
        ];
        p.ending_ptrs = ending
            .into_iter()
            .filter_map(|(on, ptr, name)| Some((ptr.filter(|_| on)?, name)))
            .collect();
        p.sample_bytes_ptr = p
            .alloc
            .as_mut()
            .and_then(|a| a.maps.bss_data.as_deref_mut())
            .map(|b| &mut b.sample_bytes as *mut u64);
    }

    /// The families on rseq_update (--offcpu, --runq with rseq), with their syscall-exit
    /// member and counters, for [`Probes::rseq_fallbacks`].
    fn find_rseq_fallbacks(&mut self, cfg: &ProbeConfig) {
        let p = self;
        if cfg.offcpu_rseq {
            if let Some(pr) = p.profile.as_mut() {
                let fd = pr.progs.offcpu_sys_exit.as_fd().as_raw_fd();
                if let Some(b) = pr.maps.bss_data.as_deref_mut() {
                    p.rseq_fallbacks.push(RseqFallback {
                        family: ebtrace_proto::v1::EventFamily::Offcpu,
                        what: "off-CPU",
                        name: "offcpu_sys_exit",
                        member: CM_OFFCPU_SYS_EXIT as u32,
                        fd,
                        norseq: &b.offcpu_norseq as *const u64,
                        missed: &b.offcpu_rseq_missed as *const u64,
                        added: Default::default(),
                    });
                }
            }
        }
        if cfg.runq_rseq && cfg.runq_min_ns.is_some() {
            if let Some(sy) = p.system.as_mut() {
                let fd = sy.progs.runq_sys_exit.as_fd().as_raw_fd();
                if let Some(b) = sy.maps.bss_data.as_deref_mut() {
                    p.rseq_fallbacks.push(RseqFallback {
                        family: ebtrace_proto::v1::EventFamily::Runq,
                        what: "run queue",
                        name: "runq_sys_exit",
                        member: CM_RUNQ_SYS_EXIT as u32,
                        fd,
                        norseq: &b.runq_norseq as *const u64,
                        missed: &b.runq_rseq_missed as *const u64,
                        added: Default::default(),
                    });
                }
            }
        }
    }
}

/// Turns the kernel's BPF stats on when `on` (--max-cpu, --bpf-stats): the fd that keeps
/// them on, or None (said in a warning when the kernel refused).
fn enable_bpf_stats(on: bool) -> Option<OwnedFd> {
    // Kernel BPF stats (run time per program) stay on while this fd is open. They cost
    // every BPF program run on the machine two clock reads (about 30 ns a run here: a
    // getppid loop under --syscalls went from 350 to 415 ns a call), so only --max-cpu
    // (which measures with them) and --bpf-stats turn them on.
    // SAFETY: plain syscall wrapper.
    let stats_fd = if on {
        unsafe {
            libbpf_rs::libbpf_sys::bpf_enable_stats(libbpf_rs::libbpf_sys::BPF_STATS_RUN_TIME)
        }
    } else {
        -1
    };
    if on && stats_fd < 0 {
        // Say why BPF time will not be measured (BPF_ENABLE_STATS needs CAP_SYS_ADMIN).
        eprintln!(
            "ebrec: warning: BPF run time is not measured: the kernel refused to turn its BPF stats on ({}; it needs CAP_SYS_ADMIN)",
            std::io::Error::from_raw_os_error(-stats_fd)
        );
    }
    (stats_fd >= 0).then(|| {
        // SAFETY: a fresh fd we own.
        unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(stats_fd) }
    })
}

/// The allocation object (--alloc with uprobes; not with the preload sampler).
fn load_alloc<'obj>(
    sh: &Shared<'_>,
    obj: &'obj mut MaybeUninit<OpenObject>,
) -> Result<Option<AllocSkel<'obj>>> {
    let cfg = sh.cfg;
    let min = match cfg.alloc_min {
        _ if cfg.preload_period.is_some() => return Ok(None),
        None => return Ok(None),
        Some(min) => min,
    };
    let mut open = AllocSkelBuilder::default()
        .open(obj)
        .map_err(|e| load_error("allocation", e))?;
    let ro = open.maps.rodata_data.as_deref_mut().context("no rodata")?;
    ro.min_size = min;
    ro.sample_every = cfg.sample_every.max(1);
    ro.hold_children = cfg.alloc_sessions && !cfg.all;
    ro.entry_only = cfg.alloc_entry_only;
    common_setup!(open, ro, sh);
    agg_setup!(open, ro, cfg);
    open.maps.live.set_max_entries(cfg.live_blocks)?;
    if let Some(d) = open.maps.bss_data.as_deref_mut() {
        d.sample_bytes = cfg.sample_bytes;
    }
    // Either the session program or the entry/return programs (the session
    // program type does not load before 6.13).
    for mut p in open.open_object_mut().progs_mut() {
        let name = p.name().to_string_lossy().into_owned();
        // --alloc-fn's programs are classic uprobes in both modes.
        let uprobe =
            (name.ends_with("_enter") || name == "alloc_return") && !name.starts_with("custom_");
        if name == "alloc_session" || name == "alloc_fork" || name == "free_multi" {
            p.set_autoload(cfg.alloc_sessions);
        } else if uprobe {
            p.set_autoload(!cfg.alloc_sessions);
        }
    }
    let skel = open.load().map_err(|e| load_error("allocation", e))?;
    Ok(Some(skel))
}

/// The lock object (--lock), with the programs of its mode (futex or uprobe).
fn load_lock<'obj>(
    sh: &Shared<'_>,
    obj: &'obj mut MaybeUninit<OpenObject>,
) -> Result<Option<LockSkel<'obj>>> {
    let cfg = sh.cfg;
    let Some(min) = cfg.lock_min_ns else {
        return Ok(None);
    };
    let mut open = LockSkelBuilder::default()
        .open(obj)
        .map_err(|e| load_error("lock", e))?;
    let ro = open.maps.rodata_data.as_deref_mut().context("no rodata")?;
    ro.min_wait_ns = min;
    ro.min_hold_ns = min;
    ro.all_processes = cfg.all;
    common_setup!(open, ro, sh);
    agg_setup!(open, ro, cfg);
    open.maps.held.set_max_entries(cfg.held_locks)?;
    // Only the programs of the chosen mode get loaded.
    let futex = cfg.lock_mode == LockMode::Futex;
    for mut p in open.open_object_mut().progs_mut() {
        let name = p.name().to_string_lossy().into_owned();
        let is_futex = name.starts_with("futex_") || name.starts_with("lock_");
        p.set_autoload(is_futex == futex);
    }
    Ok(Some(open.load().map_err(|e| load_error("lock", e))?))
}

/// The profile object (--cpu, --offcpu, --memgrowth, --func, --usdt), with the programs of the
/// families on.
fn load_profile<'obj>(
    sh: &Shared<'_>,
    obj: &'obj mut MaybeUninit<OpenObject>,
) -> Result<Option<ProfileSkel<'obj>>> {
    let cfg = sh.cfg;
    if !cfg.profile() {
        return Ok(None);
    }
    let mut open = ProfileSkelBuilder::default()
        .open(obj)
        .map_err(|e| load_error("profiling", e))?;
    let ro = open.maps.rodata_data.as_deref_mut().context("no rodata")?;
    ro.all_processes = cfg.all;
    ro.func_args = cfg.func_args.min(6);
    ro.usdt_stack = cfg.usdt_stack;
    ro.usdt_string_bytes = cfg.usdt_string_bytes;
    ro.request_mode = cfg.request_split;
    ro.req_hold = cfg.request_hold;
    ro.page_size = procfs::page_size() as u64;
    ro.mem_fault_unit = cfg.mem_fault_unit.min(1 << 30);
    ro.offcpu_rseq_mode = cfg.offcpu_rseq;
    common_setup!(open, ro, sh);
    agg_setup!(open, ro, cfg);
    if let Some(d) = open.maps.bss_data.as_deref_mut() {
        d.offcpu_min_ns = cfg.offcpu_min_ns.unwrap_or(0);
        d.offcpu_unit_ns = cfg.offcpu_unit_ns.min(1_000_000_000);
        d.req_slow_ns = if cfg.request_split {
            cfg.request_slow_ns
        } else {
            0
        };
    }
    for mut p in open.open_object_mut().progs_mut() {
        let name = p.name().to_string_lossy().into_owned();
        let on = if name.starts_with("cpu_") {
            cfg.cpu_hz.is_some()
        } else if name == "offcpu_waking" {
            cfg.offcpu_min_ns.is_some() && cfg.offcpu_wakers
        } else if name == "offcpu_rseq" {
            cfg.offcpu_min_ns.is_some() && cfg.offcpu_rseq
        } else if name.starts_with("offcpu_") {
            cfg.offcpu_min_ns.is_some()
        } else if name.starts_with("mem_") {
            cfg.memgrowth
        } else if name.starts_with("func_") {
            cfg.func
        } else if name.starts_with("usdt_") {
            cfg.usdt
        } else {
            true // prof_fork, prof_exit
        };
        p.set_autoload(on);
    }
    Ok(Some(open.load().map_err(|e| load_error("profiling", e))?))
}

/// The preload sampler's object (--alloc-sampler preload, unless the shim writes into its
/// channel itself).
fn load_sampler<'obj>(
    sh: &Shared<'_>,
    obj: &'obj mut MaybeUninit<OpenObject>,
) -> Result<Option<SamplerSkel<'obj>>> {
    let cfg = sh.cfg;
    let period = match cfg.preload_period {
        None => return Ok(None),
        Some(_) if cfg.preload_chan => return Ok(None),
        Some(period) => period,
    };
    let mut open = SamplerSkelBuilder::default()
        .open(obj)
        .map_err(|e| load_error("allocation sampler", e))?;
    let ro = open.maps.rodata_data.as_deref_mut().context("no rodata")?;
    // --sample-bytes 1 keeps every allocation (the shim samples none away):
    // the events say they are not sampled, so reports count them exactly.
    ro.sample_period = if period == 1 { 0 } else { period };
    common_setup!(open, ro, sh);
    Ok(Some(
        open.load()
            .map_err(|e| load_error("allocation sampler", e))?,
    ))
}

/// The system object (--syscalls, --bio, --runq, --tcp), with the programs of the families
/// on, and the names of those whose tracepoint this kernel lacks (said in one line each,
/// not loaded).
fn load_system<'obj>(
    sh: &Shared<'_>,
    obj: &'obj mut MaybeUninit<OpenObject>,
) -> Result<(Option<SystemSkel<'obj>>, Vec<String>)> {
    let cfg = sh.cfg;
    let mut missing_tps: Vec<String> = Vec::new();
    if !cfg.system() {
        return Ok((None, missing_tps));
    }
    let mut open = SystemSkelBuilder::default()
        .open(obj)
        .map_err(|e| load_error("system", e))?;
    let ro = open.maps.rodata_data.as_deref_mut().context("no rodata")?;
    ro.all_processes = cfg.all;
    ro.self_pid = std::process::id();
    ro.syscall_min_ns = cfg.syscall_min_ns.unwrap_or(0);
    ro.bio_min_ns = cfg.bio_min_ns.unwrap_or(0);
    ro.runq_min_ns = cfg.runq_min_ns.unwrap_or(0);
    ro.runq_rseq_mode = cfg.runq_rseq;
    common_setup!(open, ro, sh);
    if let Some(d) = open.maps.bss_data.as_deref_mut() {
        d.syscall_unit_ns = cfg.syscall_unit_ns.min(1_000_000_000);
        d.runq_unit_ns = cfg.runq_unit_ns.min(1_000_000_000);
    }
    // The histograms (one value for all CPUs): HIST_KEYS keys at the most, 33.4 MiB
    // (`hist_tests`; a full map is a counted loss).
    let new_bio = features::has_btf_type("btf_trace_block_io_start");
    for mut p in open.open_object_mut().progs_mut() {
        let name = p.name().to_string_lossy().into_owned();
        let on = system_prog_on(cfg, &name, new_bio);
        // A tracepoint this kernel does not have: one line, and the rest loads.
        let section = p.section().to_string_lossy().into_owned();
        let tp = section.strip_prefix("tp_btf/").map(str::to_string);
        let missing = on
            && tp
                .as_ref()
                .is_some_and(|tp| !features::has_btf_type(&format!("btf_trace_{tp}")));
        let tp = tp.unwrap_or(section);
        if missing && !(name.starts_with("bio_io_") || name.starts_with("bio_rq_")) {
            eprintln!("ebrec: note: this kernel has no tracepoint {tp}: {name} is not attached, and what it records is missing from the trace");
            missing_tps.push(name.clone());
        }
        p.set_autoload(on && !missing);
    }
    let skel = open.load().map_err(|e| load_error("system", e))?;
    Ok((Some(skel), missing_tps))
}

/// Whether the system object's program `name` is for a family that is on (`new_bio`: the
/// kernel has block_io_start, 6.5).
fn system_prog_on(cfg: &ProbeConfig, name: &str, new_bio: bool) -> bool {
    if name.starts_with("sys_") {
        cfg.syscall_min_ns.is_some()
    } else if name.starts_with("bio_io_") {
        cfg.bio_min_ns.is_some() && new_bio
    } else if name.starts_with("bio_rq_") {
        cfg.bio_min_ns.is_some() && !new_bio
    } else if name == "runq_rseq" {
        cfg.runq_min_ns.is_some() && cfg.runq_rseq
    } else if name.starts_with("runq_") {
        cfg.runq_min_ns.is_some()
    } else if name.starts_with("tcp_") {
        cfg.tcp
    } else {
        true // proc_fork, proc_exit
    }
}

/// The hub: the system call chain when a family has a program on raw sys_enter or
/// sys_exit, and always the targets' thread renames (task_rename).
fn load_hub<'obj>(
    sh: &Shared<'_>,
    obj: &'obj mut MaybeUninit<OpenObject>,
) -> Result<HubSkel<'obj>> {
    let mut open = HubSkelBuilder::default()
        .open(obj)
        .map_err(|e| load_error("system call hub", e))?;
    let ro = open.maps.rodata_data.as_deref_mut().context("no rodata")?;
    ro.all_processes = sh.cfg.all;
    common_setup!(open, ro, sh);
    // It sends only thread renames: a small ring.
    open.maps.events.set_max_entries(64 * 1024)?;
    open.load().map_err(|e| load_error("system call hub", e))
}

#[cfg(test)]
mod load_error_tests {
    /// Linux 6.1's log of a map key in a global function's argument (PTR_TO_MEM), as libbpf
    /// prints it: the rejection is named with its program, function and reason.
    #[test]
    fn a_verifier_rejection_is_named_as_one() {
        let log: Vec<String> = [
            "libbpf: prog 'cpu_sample': BPF program load failed: -EACCES",
            "libbpf: prog 'cpu_sample': -- BEGIN PROG LOAD LOG --",
            "Validating uw_frame() func#3...",
            "790: R1=mem_or_null(id=2,off=0,imm=0) R10=fp0",
            "827: (07) r7 += 72                    ; R7_w=mem(off=72,imm=0)",
            "831: (85) call bpf_map_lookup_elem#1",
            "R2 type=mem expected=fp, pkt, pkt_meta, map_key, map_value",
            "processed 40 insns (limit 1000000) max_states_per_insn 0 total_states 4",
            "-- END PROG LOAD LOG --",
            "libbpf: prog 'cpu_sample': failed to load: -EACCES",
            "libbpf: failed to load object 'profile_bpf'",
        ]
        .map(String::from)
        .to_vec();
        let v = super::verifier_rejection(&log).unwrap();
        assert!(
            v.starts_with(
                "program 'cpu_sample' (in uw_frame): R2 type=mem expected=fp, pkt, pkt_meta, map_key, map_value | last lines of the verifier's log: "
            ),
            "{v}"
        );
        assert!(v.contains("831: (85) call bpf_map_lookup_elem#1"), "{v}");
        assert!(super::verifier_rejection(&log[..2]).is_none());
    }
}
