//! Opening and loading the skeletons (each object's settings and programs), the
//! attaching done at load, and the load errors (the verifier's messages).
use super::attach::{attach_present, attach_tps};
use super::*;
use crate::{perf, procfs};
use alloc_skel::AllocSkelBuilder;
use anyhow::{Context, Result};
use hub_skel::HubSkelBuilder;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use lock_skel::LockSkelBuilder;
use profile_skel::ProfileSkelBuilder;
use sampler_skel::SamplerSkelBuilder;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, IntoRawFd, OwnedFd};
use system_skel::SystemSkelBuilder;

/// The settings every object shares (they all include `common.bpf.h`): stack depth, stack
/// copies, the rate cap, the ring buffer and the per-CPU copy buffers. A macro because each
/// skeleton has its own generated types.
macro_rules! common_setup {
    ($open:expr, $ro:expr, $cfg:expr, $depth:expr, $ncpu:expr, $cfi:expr, $chain:expr) => {{
        $ro.max_frames = $depth;
        $ro.chain_timed = $cfg.bpf_stats;
        $open.maps.sys_enter_chain.reuse_fd($chain.enter.as_fd())?;
        $open.maps.sys_exit_chain.reuse_fd($chain.exit.as_fd())?;
        $open.maps.chain_state.reuse_fd($chain.state.as_fd())?;
        $open.maps.chain_costs.reuse_fd($chain.costs.as_fd())?;
        $open.maps.chain_wants.reuse_fd($chain.wants.as_fd())?;
        $open.maps.chain_timing.reuse_fd($chain.timing.as_fd())?;
        $open.maps.targets.reuse_fd($chain.targets.map.as_fd())?;
        if let Some(fds) = $cfi {
            $ro.cfi_mode = $cfg.cfi_mode;
            $ro.cfi_wakers = true;
            $open.maps.cfi_rows.reuse_fd(fds.rows)?;
            $open.maps.cfi_pages.reuse_fd(fds.pages)?;
            $open.maps.cfi_files.reuse_fd(fds.files)?;
            $open.maps.cfi_procs.reuse_fd(fds.procs)?;
            $open.maps.cfi_inodes.reuse_fd(fds.inodes)?;
            $open.maps.cfi_early.reuse_fd(fds.early)?;
        }
        $ro.copy_bytes = $cfg.copy_bytes;
        $ro.rate_per_cpu = $cfg.rate_per_cpu;
        $ro.uw_memo_on = $cfg.aggregate_stacks == 0;
        $open.maps.events.set_max_entries($cfg.ringbuf_bytes)?;
        $open.maps.copy_scratch.set_max_entries($ncpu)?;
        $open
            .maps
            .uw_frames
            .set_max_entries($ncpu * MAX_FRAMES as u32)?;
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

impl<'obj> Probes<'obj> {
    pub fn load(
        cfg: &ProbeConfig,
        alloc_obj: &'obj mut MaybeUninit<libbpf_rs::OpenObject>,
        lock_obj: &'obj mut MaybeUninit<libbpf_rs::OpenObject>,
        profile_obj: &'obj mut MaybeUninit<libbpf_rs::OpenObject>,
        sampler_obj: &'obj mut MaybeUninit<libbpf_rs::OpenObject>,
        system_obj: &'obj mut MaybeUninit<libbpf_rs::OpenObject>,
        hub_obj: &'obj mut MaybeUninit<libbpf_rs::OpenObject>,
        cfi: Option<crate::cfi::Fds<'_>>,
    ) -> Result<Self> {
        libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Debug, libbpf_print)));
        // Kernel BPF stats (run time per program) stay on while this fd is open. They cost
        // every BPF program run on the machine two clock reads (about 30 ns a run here: a
        // getppid loop under --syscalls went from 350 to 415 ns a call), so only --max-cpu
        // (which measures with them) and --bpf-stats turn them on.
        // SAFETY: plain syscall wrapper.
        let stats_fd = if cfg.bpf_stats {
            unsafe {
                libbpf_rs::libbpf_sys::bpf_enable_stats(libbpf_rs::libbpf_sys::BPF_STATS_RUN_TIME)
            }
        } else {
            -1
        };
        if cfg.bpf_stats && stats_fd < 0 {
            // Say why BPF time will not be measured (BPF_ENABLE_STATS needs CAP_SYS_ADMIN).
            eprintln!(
                "ebrec: warning: BPF run time is not measured: the kernel refused to turn its BPF stats on ({}; it needs CAP_SYS_ADMIN)",
                std::io::Error::from_raw_os_error(-stats_fd)
            );
        }
        let stats_fd = (stats_fd >= 0).then(|| {
            // SAFETY: a fresh fd we own.
            unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(stats_fd) }
        });
        let depth = cfg.stack_depth.clamp(1, 127);
        let ncpu = procfs::possible_cpus().unwrap_or(1).max(1) as u32;
        let chain_maps = ChainMaps::create()?;
        let alloc = match cfg.alloc_min {
            _ if cfg.preload_period.is_some() => None,
            None => None,
            Some(min) => {
                let mut open = AllocSkelBuilder::default()
                    .open(alloc_obj)
                    .map_err(|e| load_error("allocation", e))?;
                let ro = open.maps.rodata_data.as_deref_mut().context("no rodata")?;
                ro.min_size = min;
                ro.sample_every = cfg.sample_every.max(1);
                ro.hold_children = cfg.alloc_sessions && !cfg.all;
                ro.entry_only = cfg.alloc_entry_only;
                common_setup!(open, ro, cfg, depth, ncpu, cfi, chain_maps);
                agg_setup!(open, ro, cfg);
                if let Some(d) = open.maps.bss_data.as_deref_mut() {
                    d.sample_bytes = cfg.sample_bytes;
                }
                // Either the session program or the entry/return programs (the session
                // program type does not load before 6.13).
                for mut p in open.open_object_mut().progs_mut() {
                    let name = p.name().to_string_lossy().into_owned();
                    // --alloc-fn's programs are classic uprobes in both modes.
                    let uprobe = (name.ends_with("_enter") || name == "alloc_return")
                        && !name.starts_with("custom_");
                    if name == "alloc_session" || name == "alloc_fork" || name == "free_multi" {
                        p.set_autoload(cfg.alloc_sessions);
                    } else if uprobe {
                        p.set_autoload(!cfg.alloc_sessions);
                    }
                }
                let skel = open.load().map_err(|e| load_error("allocation", e))?;
                Some(skel)
            }
        };
        let lock = match cfg.lock_min_ns {
            None => None,
            Some(min) => {
                let mut open = LockSkelBuilder::default()
                    .open(lock_obj)
                    .map_err(|e| load_error("lock", e))?;
                let ro = open.maps.rodata_data.as_deref_mut().context("no rodata")?;
                ro.min_wait_ns = min;
                ro.min_hold_ns = min;
                ro.all_processes = cfg.all;
                common_setup!(open, ro, cfg, depth, ncpu, cfi, chain_maps);
                agg_setup!(open, ro, cfg);
                // Only the programs of the chosen mode get loaded.
                let futex = cfg.lock_mode == LockMode::Futex;
                for mut p in open.open_object_mut().progs_mut() {
                    let name = p.name().to_string_lossy().into_owned();
                    let is_futex = name.starts_with("futex_") || name.starts_with("lock_");
                    p.set_autoload(is_futex == futex);
                }
                Some(open.load().map_err(|e| load_error("lock", e))?)
            }
        };
        let profile = if cfg.profile() {
            let mut open = ProfileSkelBuilder::default()
                .open(profile_obj)
                .map_err(|e| load_error("profiling", e))?;
            let ro = open.maps.rodata_data.as_deref_mut().context("no rodata")?;
            ro.all_processes = cfg.all;
            ro.func_args = cfg.func_args.min(6);
            ro.page_size = procfs::page_size() as u64;
            ro.mem_fault_unit = cfg.mem_fault_unit.min(1 << 30);
            ro.offcpu_rseq_mode = cfg.offcpu_rseq;
            common_setup!(open, ro, cfg, depth, ncpu, cfi, chain_maps);
            agg_setup!(open, ro, cfg);
            if let Some(d) = open.maps.bss_data.as_deref_mut() {
                d.offcpu_min_ns = cfg.offcpu_min_ns.unwrap_or(0);
                d.offcpu_unit_ns = cfg.offcpu_unit_ns.min(1_000_000_000);
            }
            for mut p in open.open_object_mut().progs_mut() {
                let name = p.name().to_string_lossy().into_owned();
                let on = if name.starts_with("cpu_") {
                    cfg.cpu_hz.is_some()
                } else if name == "offcpu_rseq" {
                    cfg.offcpu_min_ns.is_some() && cfg.offcpu_rseq
                } else if name.starts_with("offcpu_") {
                    cfg.offcpu_min_ns.is_some()
                } else if name.starts_with("mem_") {
                    cfg.memgrowth
                } else if name.starts_with("func_") {
                    cfg.func
                } else {
                    true // prof_fork, prof_exit
                };
                p.set_autoload(on);
            }
            Some(open.load().map_err(|e| load_error("profiling", e))?)
        } else {
            None
        };
        let sampler = match cfg.preload_period {
            None => None,
            Some(_) if cfg.preload_chan => None,
            Some(period) => {
                let mut open = SamplerSkelBuilder::default()
                    .open(sampler_obj)
                    .map_err(|e| load_error("allocation sampler", e))?;
                let ro = open.maps.rodata_data.as_deref_mut().context("no rodata")?;
                // --sample-bytes 1 keeps every allocation (the shim samples none away):
                // the events say they are not sampled, so reports count them exactly.
                ro.sample_period = if period == 1 { 0 } else { period };
                common_setup!(open, ro, cfg, depth, ncpu, cfi, chain_maps);
                Some(
                    open.load()
                        .map_err(|e| load_error("allocation sampler", e))?,
                )
            }
        };
        // The system object's programs whose tracepoint this kernel lacks (not loaded).
        let mut missing_tps: Vec<String> = Vec::new();
        let system = if cfg.system() {
            let mut open = SystemSkelBuilder::default()
                .open(system_obj)
                .map_err(|e| load_error("system", e))?;
            let ro = open.maps.rodata_data.as_deref_mut().context("no rodata")?;
            ro.all_processes = cfg.all;
            ro.self_pid = std::process::id();
            ro.syscall_min_ns = cfg.syscall_min_ns.unwrap_or(0);
            ro.bio_min_ns = cfg.bio_min_ns.unwrap_or(0);
            ro.runq_min_ns = cfg.runq_min_ns.unwrap_or(0);
            ro.runq_rseq_mode = cfg.runq_rseq;
            common_setup!(open, ro, cfg, depth, ncpu, cfi, chain_maps);
            if let Some(d) = open.maps.bss_data.as_deref_mut() {
                d.syscall_unit_ns = cfg.syscall_unit_ns.min(1_000_000_000);
                d.runq_unit_ns = cfg.runq_unit_ns.min(1_000_000_000);
            }
            // The histograms (one value for all CPUs): HIST_KEYS keys at the most, 33.4 MiB
            // (`hist_tests`; a full map is a counted loss).
            let new_bio = features::has_btf_type("btf_trace_block_io_start");
            for mut p in open.open_object_mut().progs_mut() {
                let name = p.name().to_string_lossy().into_owned();
                let on = if name.starts_with("sys_") {
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
                };
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
            Some(open.load().map_err(|e| load_error("system", e))?)
        } else {
            None
        };
        // The hub: the system call chain when a family has a program on raw sys_enter or
        // sys_exit, and always the targets' thread renames (task_rename).
        let hub = {
            let mut open = HubSkelBuilder::default()
                .open(hub_obj)
                .map_err(|e| load_error("system call hub", e))?;
            let ro = open.maps.rodata_data.as_deref_mut().context("no rodata")?;
            ro.all_processes = cfg.all;
            common_setup!(open, ro, cfg, depth, ncpu, cfi, chain_maps);
            // It sends only thread renames: a small ring.
            open.maps.events.set_max_entries(64 * 1024)?;
            Some(open.load().map_err(|e| load_error("system call hub", e))?)
        };
        let mut p = Probes {
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
            offcpu_epoch_ptr: None,
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
        };
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
        if let Some(a) = &p.alloc {
            // Only the targets' exits matter, but the tracepoint sees all: the programs
            // return at once for a pid with no blocks (an empty map walk).
            if cfg.alloc_sessions {
                p.links.push(
                    a.progs
                        .alloc_fork
                        .attach()
                        .context("attaching the fork tracepoint (uprobe sessions)")?,
                );
            }
            for prog in [&a.progs.alloc_exit, &a.progs.alloc_exec] {
                p.links.push(
                    prog.attach()
                        .context("attaching the process exit/exec tracepoints")?,
                );
            }
        }
        if let Some(l) = &p.lock {
            if cfg.lock_mode == LockMode::Futex {
                for prog in [&l.progs.lock_fork, &l.progs.lock_exit] {
                    let link = prog.attach().context("attaching the futex tracepoints")?;
                    p.links.push(link);
                }
                // The exit first: a resume attaches them in this order.
                attach_tps(
                    p.tp_pausable.get_mut(),
                    p.chain.get_mut(),
                    ebtrace_proto::v1::EventFamily::Lock,
                    &[
                        (&l.progs.futex_exit, "futex_exit"),
                        (&l.progs.futex_enter, "futex_enter"),
                    ],
                )?;
                p.attached
                    .push("futex's syscalls:sys_enter/exit (raw sys_enter/exit with --syscalls), tp_btf/sched_process_fork/exit".into());
            }
        }
        if let Some(pr) = &p.profile {
            let g = &pr.progs;
            let tps = vec![
                (&g.prof_fork, "sched_process_fork"),
                (&g.prof_exit, "sched_process_exit"),
            ];
            if cfg.offcpu_min_ns.is_some() {
                // The one that takes the user stacks first: a resume attaches them in
                // this order.
                let first = if cfg.offcpu_rseq {
                    (&g.offcpu_rseq, "offcpu_rseq")
                } else {
                    (&g.offcpu_sys_exit, "offcpu_sys_exit")
                };
                attach_tps(
                    p.tp_pausable.get_mut(),
                    p.chain.get_mut(),
                    ebtrace_proto::v1::EventFamily::Offcpu,
                    &[
                        first,
                        (&g.offcpu_waking, "offcpu_waking"),
                        (&g.offcpu_switch, "offcpu_switch"),
                    ],
                )?;
                p.attached.push(if cfg.offcpu_rseq {
                    "tp_btf/sched_switch, sched_waking, rseq_update (off-CPU)".into()
                } else {
                    "tp_btf/sched_switch, sched_waking, sys_exit (off-CPU)".into()
                });
            }
            if cfg.memgrowth {
                attach_tps(
                    p.tp_pausable.get_mut(),
                    p.chain.get_mut(),
                    ebtrace_proto::v1::EventFamily::MemGrowth,
                    &[
                        (&g.mem_exit, "mem_exit"),
                        (&g.mem_enter, "mem_enter"),
                        (&g.mem_fault, "mem_fault"),
                    ],
                )?;
                p.attached.push(
                    "brk, mmap and munmap's syscalls:sys_enter/exit (raw with --syscalls), tp_btf/page_fault_user (memory growth)"
                        .into(),
                );
            }
            for (prog, what) in tps {
                p.links.push(
                    prog.attach()
                        .with_context(|| format!("attaching tp_btf/{what}"))?,
                );
            }
            if let Some(hz) = cfg.cpu_hz {
                let cpus = procfs::online_cpus().context("reading the online CPUs")?;
                for &cpu in &cpus {
                    let fd = perf::open_cpu_clock(cpu as i32, hz)
                        .with_context(|| format!("cpu-clock perf event on CPU {cpu}"))?;
                    p.cpu_fds.push(fd.as_raw_fd());
                    p.links.push(
                        g.cpu_sample
                            .attach_perf_event(fd.into_raw_fd())
                            .with_context(|| format!("attaching the sampler on CPU {cpu}"))?,
                    );
                }
                p.attached.push(format!(
                    "cpu-clock sampling at {hz} Hz on {} CPUs",
                    cpus.len()
                ));
            }
        }
        if let Some(sy) = &p.system {
            let mut what = Vec::new();
            let g = &sy.progs;
            for (prog, tp) in [
                (&g.proc_fork, "sched_process_fork"),
                (&g.proc_exit, "sched_process_exit"),
            ] {
                p.links.push(
                    prog.attach()
                        .with_context(|| format!("attaching tp_btf/{tp}"))?,
                );
            }
            use ebtrace_proto::v1::EventFamily as F;
            // Exits before entries: a resume attaches them in this order.
            if cfg.syscall_min_ns.is_some() {
                attach_present(
                    &missing_tps,
                    p.tp_pausable.get_mut(),
                    p.chain.get_mut(),
                    F::Syscall,
                    &[(&g.sys_exit, "sys_exit"), (&g.sys_enter, "sys_enter")],
                )?;
                what.push("sys_enter, sys_exit (syscalls)");
            }
            if cfg.runq_min_ns.is_some() {
                attach_present(
                    &missing_tps,
                    p.tp_pausable.get_mut(),
                    p.chain.get_mut(),
                    F::Runq,
                    &[
                        if cfg.runq_rseq {
                            (&g.runq_rseq, "runq_rseq")
                        } else {
                            (&g.runq_sys_exit, "runq_sys_exit")
                        },
                        (&g.runq_switch, "runq_switch"),
                        (&g.runq_wakeup, "runq_wakeup"),
                        (&g.runq_wakeup_new, "runq_wakeup_new"),
                    ],
                )?;
                what.push(if cfg.runq_rseq {
                    "sched_wakeup, sched_wakeup_new, sched_switch, rseq_update (run queue)"
                } else {
                    "sched_wakeup, sched_wakeup_new, sched_switch, sys_exit (run queue)"
                });
            }
            if cfg.bio_min_ns.is_some() {
                if features::has_btf_type("btf_trace_block_io_start") {
                    attach_present(
                        &missing_tps,
                        p.tp_pausable.get_mut(),
                        p.chain.get_mut(),
                        F::Bio,
                        &[
                            (&g.bio_io_done, "bio_io_done"),
                            (&g.bio_io_start, "bio_io_start"),
                        ],
                    )?;
                    what.push("block_io_start, block_io_done (block I/O)");
                } else {
                    eprintln!("ebrec: note: this kernel has no block:block_io_start (6.5): block I/O is timed from block_rq_issue (the driver's queue), and attributed to the task that issued it to the driver, which is not always the one that made the request");
                    attach_present(
                        &missing_tps,
                        p.tp_pausable.get_mut(),
                        p.chain.get_mut(),
                        F::Bio,
                        &[
                            (&g.bio_rq_complete, "bio_rq_complete"),
                            (&g.bio_rq_issue, "bio_rq_issue"),
                        ],
                    )?;
                    what.push("block_rq_issue, block_rq_complete (block I/O)");
                }
            }
            if cfg.tcp {
                attach_present(
                    &missing_tps,
                    p.tp_pausable.get_mut(),
                    p.chain.get_mut(),
                    F::Tcp,
                    &[
                        (&g.tcp_set_state, "tcp_set_state"),
                        (&g.tcp_sys_exit, "tcp_sys_exit"),
                        (&g.tcp_retransmit, "tcp_retransmit"),
                        (&g.tcp_send_reset, "tcp_send_reset"),
                        (&g.tcp_receive_reset, "tcp_receive_reset"),
                    ],
                )?;
                what.push("inet_sock_set_state, tcp_retransmit_skb, tcp_send_reset, tcp_receive_reset, syscalls:sys_exit_accept/accept4 (TCP)");
            }
            for w in what {
                p.attached.push(format!("tp_btf/{w}"));
            }
        }
        if p.stats_ok {
            p.set_chain_timing(true);
        }
        p.start_chain(p.stats_ok)?;
        Ok(p)
    }
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
