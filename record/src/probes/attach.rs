//! Attaching: the classic uprobes (pausable or not), the allocator's uprobe sessions,
//! --func, --alloc-fn, the preload sampler's sites, and the tracepoint programs at load.
use super::chain::{chain_member, direct_program};
use super::*;
use crate::placement::Placement;
use crate::{features, perf, procfs};
use anyhow::{bail, Context, Result};
use ebtrace_elf::Symbols;
use libbpf_rs::{Link, MapCore, MapFlags};
use std::os::fd::{AsFd, AsRawFd, IntoRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Cookie bit of an exit probe on a tail jump: the call's return value is not in %rax yet.
const FUNC_EXIT_TAIL: u64 = 1 << 32;

/// A tracepoint link that --max-cpu may detach: (family, program name, link; None while
/// paused).
pub(super) type TpPausable = (ebtrace_proto::v1::EventFamily, &'static str, Option<Link>);

/// Attaches `progs` (tracepoint programs of `family`) as links --max-cpu may pause.
pub(super) fn attach_tps(
    into: &mut Vec<TpPausable>,
    chain: &mut Vec<ChainMember>,
    family: ebtrace_proto::v1::EventFamily,
    progs: &[(&libbpf_rs::ProgramMut<'_>, &'static str)],
) -> Result<()> {
    for &(prog, name) in progs {
        if let Some((member, exit)) = chain_member(name) {
            chain.push(ChainMember {
                family,
                name,
                member,
                exit,
                fd: prog.as_fd().as_raw_fd(),
                direct: direct_program(member).is_some(),
                active: true,
            });
            continue;
        }
        let link = prog
            .attach()
            .with_context(|| format!("attaching {name}'s tracepoint"))?;
        into.push((family, name, Some(link)));
    }
    Ok(())
}

/// [`attach_tps`] of the programs not in `missing` (the system object's programs whose
/// tracepoint the kernel lacks, said in one line at load and not loaded).
pub(super) fn attach_present(
    missing: &[String],
    into: &mut Vec<TpPausable>,
    chain: &mut Vec<ChainMember>,
    family: ebtrace_proto::v1::EventFamily,
    progs: &[(&libbpf_rs::ProgramMut<'_>, &'static str)],
) -> Result<()> {
    let present: Vec<_> = progs
        .iter()
        .copied()
        .filter(|(_, name)| !missing.iter().any(|m| m == name))
        .collect();
    attach_tps(into, chain, family, &present)
}

impl<'obj> Probes<'obj> {
    /// The allocation object's process tracepoints (fork with uprobe sessions, exit and
    /// exec).
    pub(super) fn attach_alloc_tracepoints(&mut self, cfg: &ProbeConfig) -> Result<()> {
        if let Some(a) = &self.alloc {
            // Only the targets' exits matter, but the tracepoint sees all: the programs
            // return at once for a pid with no blocks (an empty map walk).
            if cfg.alloc_sessions {
                self.links.push(
                    a.progs
                        .alloc_fork
                        .attach()
                        .context("attaching the fork tracepoint (uprobe sessions)")?,
                );
            }
            for prog in [&a.progs.alloc_exit, &a.progs.alloc_exec] {
                self.links.push(
                    prog.attach()
                        .context("attaching the process exit/exec tracepoints")?,
                );
            }
        }
        Ok(())
    }

    /// Futex mode's tracepoints (the fork and exit ones, and futex's system calls, pausable).
    pub(super) fn attach_lock_tracepoints(&mut self, cfg: &ProbeConfig) -> Result<()> {
        if let Some(l) = &self.lock {
            if cfg.lock_mode == LockMode::Futex {
                for prog in [&l.progs.lock_fork, &l.progs.lock_exit] {
                    let link = prog.attach().context("attaching the futex tracepoints")?;
                    self.links.push(link);
                }
                // The exit first: a resume attaches them in this order.
                attach_tps(
                    self.tp_pausable.get_mut(),
                    self.chain.get_mut(),
                    ebtrace_proto::v1::EventFamily::Lock,
                    &[
                        (&l.progs.futex_exit, "futex_exit"),
                        (&l.progs.futex_enter, "futex_enter"),
                    ],
                )?;
                self.attached
                    .push("futex's syscalls:sys_enter/exit (raw sys_enter/exit with --syscalls), tp_btf/sched_process_fork/exit".into());
            }
        }
        Ok(())
    }

    /// The profile object's tracepoints (fork and exit, off-CPU's, memory growth's, pausable)
    /// and --cpu's per-CPU cpu-clock events.
    pub(super) fn attach_profile_tracepoints(&mut self, cfg: &ProbeConfig) -> Result<()> {
        if let Some(pr) = &self.profile {
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
                let waking = (&g.offcpu_waking, "offcpu_waking");
                let switch = (&g.offcpu_switch, "offcpu_switch");
                let progs = if cfg.offcpu_wakers {
                    vec![first, waking, switch]
                } else {
                    vec![first, switch]
                };
                attach_tps(
                    self.tp_pausable.get_mut(),
                    self.chain.get_mut(),
                    ebtrace_proto::v1::EventFamily::Offcpu,
                    &progs,
                )?;
                self.attached.push(format!(
                    "tp_btf/sched_switch, {}{} (off-CPU)",
                    if cfg.offcpu_wakers {
                        "sched_waking, "
                    } else {
                        ""
                    },
                    if cfg.offcpu_rseq {
                        "rseq_update"
                    } else {
                        "sys_exit"
                    }
                ));
            }
            if cfg.memgrowth {
                attach_tps(
                    self.tp_pausable.get_mut(),
                    self.chain.get_mut(),
                    ebtrace_proto::v1::EventFamily::MemGrowth,
                    &[
                        (&g.mem_exit, "mem_exit"),
                        (&g.mem_enter, "mem_enter"),
                        (&g.mem_fault, "mem_fault"),
                    ],
                )?;
                self.attached.push(
                    "brk, mmap and munmap's syscalls:sys_enter/exit (raw with --syscalls), tp_btf/page_fault_user (memory growth)"
                        .into(),
                );
            }
            for (prog, what) in tps {
                self.links.push(
                    prog.attach()
                        .with_context(|| format!("attaching tp_btf/{what}"))?,
                );
            }
            if let Some(hz) = cfg.cpu_hz {
                let cpus = procfs::online_cpus().context("reading the online CPUs")?;
                for &cpu in &cpus {
                    let fd = perf::open_cpu_clock(cpu as i32, hz)
                        .with_context(|| format!("cpu-clock perf event on CPU {cpu}"))?;
                    self.cpu_fds.push(fd.as_raw_fd());
                    self.links.push(
                        g.cpu_sample
                            .attach_perf_event(fd.into_raw_fd())
                            .with_context(|| format!("attaching the sampler on CPU {cpu}"))?,
                    );
                }
                self.attached.push(format!(
                    "cpu-clock sampling at {hz} Hz on {} CPUs",
                    cpus.len()
                ));
            }
        }
        Ok(())
    }

    /// The system object's tracepoints, but those in `missing` (the kernel lacks them): fork
    /// and exit, and the families' (pausable).
    pub(super) fn attach_system_tracepoints(
        &mut self,
        cfg: &ProbeConfig,
        missing_tps: &[String],
    ) -> Result<()> {
        if let Some(sy) = &self.system {
            let mut what = Vec::new();
            let g = &sy.progs;
            for (prog, tp) in [
                (&g.proc_fork, "sched_process_fork"),
                (&g.proc_exit, "sched_process_exit"),
            ] {
                self.links.push(
                    prog.attach()
                        .with_context(|| format!("attaching tp_btf/{tp}"))?,
                );
            }
            use ebtrace_proto::v1::EventFamily as F;
            // Exits before entries: a resume attaches them in this order.
            if cfg.syscall_min_ns.is_some() {
                attach_present(
                    missing_tps,
                    self.tp_pausable.get_mut(),
                    self.chain.get_mut(),
                    F::Syscall,
                    &[(&g.sys_exit, "sys_exit"), (&g.sys_enter, "sys_enter")],
                )?;
                what.push("sys_enter, sys_exit (syscalls)");
            }
            if cfg.runq_min_ns.is_some() {
                attach_present(
                    missing_tps,
                    self.tp_pausable.get_mut(),
                    self.chain.get_mut(),
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
                        missing_tps,
                        self.tp_pausable.get_mut(),
                        self.chain.get_mut(),
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
                        missing_tps,
                        self.tp_pausable.get_mut(),
                        self.chain.get_mut(),
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
                    missing_tps,
                    self.tp_pausable.get_mut(),
                    self.chain.get_mut(),
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
                self.attached.push(format!("tp_btf/{w}"));
            }
        }
        Ok(())
    }
}

/// A classic uprobe link that can be detached and attached again (see `pause_classic`).
pub(super) struct PausableLink {
    pub(super) family: ebtrace_proto::v1::EventFamily,
    /// Index of its probe in `Probes::trace_probes`.
    pub(super) probe: usize,
    /// The program's name (see `Probes::pausable_prog`).
    pub(super) prog: String,
    pub(super) pid: i32,
    pub(super) cookie: u64,
    /// None while paused.
    pub(super) link: Option<Link>,
    /// The inherited event without a program (none for pid -1).
    pub(super) filter: Option<OwnedFd>,
}

/// A library's allocator functions for one session link: (path, file offsets, cookies).
pub(super) type SessionPlan = (PathBuf, Vec<u64>, Vec<u64>);

/// The session plan's cookie for free (AllocKind values are 1..10): its offset goes to the
/// free_multi link, not to the session program.
const AK_FREE: u64 = 100;

impl<'obj> Probes<'obj> {
    /// Attaches the --func probes (entry and return, the function's id as the BPF cookie)
    /// to `pid` (-1: all).
    pub fn attach_funcs(&mut self, funcs: &[FuncSite], pid: i32) -> Result<()> {
        let Some(pr) = &self.profile else {
            return Ok(());
        };
        for f in funcs {
            let key = u32::try_from(f.id)
                .ok()
                .filter(|&k| k < 4096)
                .context("too many --func functions (at most 4095)")?;
            pr.maps
                .func_min
                .update(&key.to_ne_bytes(), &f.min_ns.to_ne_bytes(), MapFlags::ANY)?;
            let func = ebtrace_proto::v1::EventFamily::Func;
            attach_pausable(
                &mut self.trace_probes,
                &self.pausable,
                func,
                Uprobe {
                    prog: &pr.progs.func_enter,
                    site: &f.site,
                    ret: false,
                    pid,
                    cookie: f.id,
                },
            )?;
            match &f.exit {
                FuncExit::Uretprobe => {
                    attach_pausable(
                        &mut self.trace_probes,
                        &self.pausable,
                        func,
                        Uprobe {
                            prog: &pr.progs.func_return,
                            site: &f.site,
                            ret: true,
                            pid,
                            cookie: f.id,
                        },
                    )?;
                    self.attached.push(format!("{} (uretprobe)", f.site));
                }
                FuncExit::Sites(offsets) => {
                    let mut rets = 0;
                    for &(off, tail) in offsets {
                        let is_ret = !tail;
                        rets += usize::from(is_ret);
                        let exit = Site {
                            offset: off,
                            placement: Placement {
                                skip: 0,
                                single_step: is_ret,
                            },
                            ..f.site.clone()
                        };
                        let cookie = f.id | if is_ret { 0 } else { FUNC_EXIT_TAIL };
                        attach_pausable(
                            &mut self.trace_probes,
                            &self.pausable,
                            func,
                            Uprobe {
                                prog: &pr.progs.func_exit,
                                site: &exit,
                                ret: false,
                                pid,
                                cookie,
                            },
                        )?;
                    }
                    self.attached.push(format!(
                        "{} (exits: {rets} ret, {} tail jump)",
                        f.site,
                        offsets.len() - rets
                    ));
                }
            }
        }
        Ok(())
    }

    /// Attaches the --usdt probes of `probes` not attached yet (those past `self.usdt`),
    /// with libbpf's USDT support: every site of each, system-wide on its binary (the
    /// program leaves other processes' hits alone: `is_target`), the probe's id as the
    /// cookie; the kernel's uprobe reference counter enables a guarded probe's semaphore
    /// in every process that maps the binary while the link lives.
    pub fn attach_usdt(&mut self, probes: &[crate::funcs::usdt::UsdtProbe]) -> Result<()> {
        let Some(pr) = &self.profile else {
            return Ok(());
        };
        for p in probes.iter().skip(self.usdt.len()) {
            let link = pr
                .progs
                .usdt_hit
                .attach_usdt_with_opts(
                    -1,
                    &p.path,
                    &p.provider,
                    &p.name,
                    libbpf_rs::UsdtOpts {
                        cookie: p.id
                            | self.req_roles.get(&p.id).copied().unwrap_or(0) << REQ_ROLE_SHIFT,
                        ..Default::default()
                    },
                )
                .with_context(|| format!("attaching USDT probe {p}"))?;
            self.links.push(link);
            self.attached.push(format!("usdt {p}"));
            self.usdt.push(p.clone());
        }
        Ok(())
    }

    /// `--request`'s USDT pair, in each binary that has it: (start probe id, done probe id),
    /// before they are attached: their cookies carry the role (REQ_START, REQ_DONE in the
    /// top bits, so the program needs no lookup). The kernel then holds each start for its
    /// done (`request_hold`) and splits each request's time on its thread (`request_split`).
    pub fn set_request_probes(&mut self, pairs: &[(u64, u64)]) {
        for &(start, done) in pairs {
            self.req_roles.insert(start, REQ_START as u64);
            self.req_roles.insert(done, REQ_DONE as u64);
        }
    }

    /// `--usdt-string`: (probe id, the index of its string argument).
    pub fn set_usdt_strings(&mut self, args: &[(u64, u32)]) -> Result<()> {
        let Some(pr) = &self.profile else {
            return Ok(());
        };
        for &(id, arg) in args {
            pr.maps
                .usdt_string_args
                .update(&id.to_ne_bytes(), &arg.to_ne_bytes(), MapFlags::ANY)
                .context("--usdt-string: the probe map")?;
        }
        Ok(())
    }

    /// `--request func:`'s functions (their ids): each call is a request the kernel splits.
    pub fn set_request_funcs(&mut self, ids: &[u64]) -> Result<()> {
        let Some(pr) = &self.profile else {
            return Ok(());
        };
        for &id in ids {
            pr.maps
                .req_probes
                .update(
                    &(id | 1 << 63).to_ne_bytes(),
                    &1u32.to_ne_bytes(),
                    MapFlags::ANY,
                )
                .context("--request: the probe map")?;
        }
        Ok(())
    }

    /// Attaches the sampler's programs to the probe sites of the preloaded shim at `shim`
    /// (`--alloc-sampler preload`) for `pid` and its descendants; without `frees`, only the
    /// allocation site (--no-free).
    pub fn attach_sampler(&mut self, shim: &Path, frees: bool, pid: i32) -> Result<()> {
        let Some(sm) = &self.sampler else {
            return Ok(());
        };
        let syms = Symbols::read(shim).map_err(|e| anyhow::anyhow!(e))?;
        // The *_forked sites are what a forked child calls (see the shim).
        let mut plan = vec![
            ("ebtrace_sampled_alloc", &sm.progs.sampled_alloc),
            ("ebtrace_sampled_alloc_rc", &sm.progs.sampled_alloc),
            ("ebtrace_sampled_alloc_forked", &sm.progs.sampled_alloc),
            ("ebtrace_sampled_alloc_rc_forked", &sm.progs.sampled_alloc),
        ];
        if frees {
            plan.push(("ebtrace_sampled_free", &sm.progs.sampled_free));
            plan.push(("ebtrace_sampled_free_forked", &sm.progs.sampled_free));
        }
        for (name, prog) in plan {
            let offset = syms
                .function(name)
                .and_then(|(addr, _)| syms.file_offset(addr))
                .with_context(|| format!("no {name} in the sampler shim {}", shim.display()))?;
            // At the nop the site starts with (5 bytes: the kernel can turn it into a call of
            // its uprobe trampoline, no trap); never moved past it.
            let site = Site {
                lib: shim.to_path_buf(),
                symbol: name.into(),
                offset,
                placement: Placement {
                    skip: 0,
                    single_step: false,
                },
            };
            let links = attach(
                &mut self.trace_probes,
                &mut self.filter_fds,
                Uprobe {
                    prog,
                    site: &site,
                    ret: false,
                    pid,
                    cookie: 0,
                },
            )?;
            self.links.extend(links);
            self.attached.push(site.to_string());
        }
        Ok(())
    }

    /// Attaches the uprobes of the allocation and lock families to `pid` (-1: all), for the
    /// sites found in `libs`.
    pub fn attach_uprobes(
        &mut self,
        alloc_sites: &[Site],
        lock_sites: &[Site],
        pid: i32,
    ) -> Result<()> {
        // (site, entry program, return program, an allocator probe: pausable)
        let mut plan: Vec<(
            &Site,
            &libbpf_rs::ProgramMut<'_>,
            Option<&libbpf_rs::ProgramMut<'_>>,
            bool,
        )> = Vec::new();
        if let (Some(_), true) = (&self.alloc, self.alloc_sessions_cfg) {
            self.plan_sessions(alloc_sites);
            self.attach_sessions(pid)?;
        } else if let Some(a) = &self.alloc {
            for s in alloc_sites {
                if let Some((entry, ret)) = alloc_progs(&a.progs, s, self.alloc_entry_only) {
                    plan.push((s, entry, ret, true));
                }
            }
        }
        if let Some(l) = &self.lock {
            for s in lock_sites {
                if let Some((entry, ret)) = lock_progs(&l.progs, s) {
                    plan.push((s, entry, ret, false));
                }
            }
        }
        let mut links = Vec::new();
        let mut attached = Vec::new();
        for (s, entry, ret, pausable) in plan {
            if pausable {
                let alloc = ebtrace_proto::v1::EventFamily::Alloc;
                attach_pausable(
                    &mut self.trace_probes,
                    &self.pausable,
                    alloc,
                    Uprobe {
                        prog: entry,
                        site: s,
                        ret: false,
                        pid,
                        cookie: 0,
                    },
                )?;
                if let Some(ret) = ret {
                    attach_pausable(
                        &mut self.trace_probes,
                        &self.pausable,
                        alloc,
                        Uprobe {
                            prog: ret,
                            site: s,
                            ret: true,
                            pid,
                            cookie: 0,
                        },
                    )?;
                }
                attached.push(s.to_string());
                continue;
            }
            links.extend(attach(
                &mut self.trace_probes,
                &mut self.filter_fds,
                Uprobe {
                    prog: entry,
                    site: s,
                    ret: false,
                    pid,
                    cookie: 0,
                },
            )?);
            if let Some(ret) = ret {
                links.extend(attach(
                    &mut self.trace_probes,
                    &mut self.filter_fds,
                    Uprobe {
                        prog: ret,
                        site: s,
                        ret: true,
                        pid,
                        cookie: 0,
                    },
                )?);
            }
            attached.push(s.to_string());
        }
        self.links.extend(links);
        self.attached.extend(attached);
        Ok(())
    }

    /// --alloc-probes session: the session plan of the allocator functions at `alloc_sites`
    /// (per library, their offsets and cookies), for `attach_sessions`.
    fn plan_sessions(&mut self, alloc_sites: &[Site]) {
        let mut plan: Vec<SessionPlan> = Vec::new();
        for s in alloc_sites {
            let Some(kind) = alloc_kind_cookie(&s.symbol) else {
                continue;
            };
            let i = match plan.iter().position(|p| p.0 == s.lib) {
                Some(i) => i,
                None => {
                    plan.push((s.lib.clone(), Vec::new(), Vec::new()));
                    plan.len() - 1
                }
            };
            plan[i].1.push(s.probe_offset());
            plan[i].2.push(kind);
            self.attached.push(if kind == AK_FREE {
                format!("{s} (uprobe_multi, no return probe)")
            } else {
                format!("{s} (uprobe session)")
            });
        }
        *self.session_plan.borrow_mut() = plan;
    }

    /// `--alloc-fn`: attaches a custom allocator's functions to `pid` (-1: every process),
    /// as classic uprobes whatever `--alloc-probes` says (pausable like the allocator's). Its
    /// allocation function gets the entry and (unless `--no-free`) the return program, the
    /// free function the free program; the cookie is the allocator's number << 8 and the
    /// index of the argument read.
    pub fn attach_custom_alloc(&mut self, sites: &[CustomSite], pid: i32) -> Result<()> {
        let Some(a) = &self.alloc else {
            bail!("--alloc-fn needs --alloc");
        };
        let pr = &a.progs;
        let alloc = ebtrace_proto::v1::EventFamily::Alloc;
        for c in sites {
            let cookie = (u64::from(c.allocator) << 8) | u64::from(c.arg);
            let progs: Vec<(&libbpf_rs::ProgramMut<'_>, bool)> = if c.free {
                vec![(&pr.custom_free_enter, false)]
            } else if self.alloc_entry_only {
                vec![(&pr.custom_alloc_enter, false)]
            } else {
                vec![
                    (&pr.custom_alloc_enter, false),
                    (&pr.custom_alloc_return, true),
                ]
            };
            for (prog, ret) in progs {
                attach_pausable(
                    &mut self.trace_probes,
                    &self.pausable,
                    alloc,
                    Uprobe {
                        prog,
                        site: &c.site,
                        ret,
                        pid,
                        cookie,
                    },
                )?;
            }
            self.attached.push(format!("{} (--alloc-fn)", c.site));
        }
        Ok(())
    }

    /// --alloc-probes session: attaches the allocator session links to `pid` (-1: every
    /// process), one per library.
    pub fn attach_sessions(&self, pid: i32) -> Result<()> {
        let Some(a) = &self.alloc else {
            return Ok(());
        };
        if !self.session_pids.borrow_mut().insert(pid) {
            return Ok(()); // attached already
        }
        if self.sessions_paused.get() {
            return Ok(()); // --max-cpu paused them: attached at resume
        }
        if pid > 0 {
            // Its children are held at fork until they have links too (alloc_fork).
            a.maps
                .session_pids
                .update(&(pid as u32).to_ne_bytes(), &[1], MapFlags::ANY)?;
        }
        let plan = self.session_plan.borrow();
        for (lib, offsets, cookies) in plan.iter() {
            // free in a link of its own that is not a session (see free_multi in
            // bpf/alloc.bpf.c): the sessions' other consumers would give it a return probe.
            let (free, alloc): (Vec<_>, Vec<_>) = offsets
                .iter()
                .zip(cookies)
                .map(|(&o, &c)| (o as usize, c))
                .partition(|&(_, c)| c == AK_FREE);
            let context = || {
                format!(
                    "attaching the allocator's uprobe session to {} (pid {pid}); --alloc-probes classic uses entry and return probes",
                    lib.display()
                )
            };
            for (prog, sites, session) in [
                (&a.progs.alloc_session, alloc, true),
                (&a.progs.free_multi, free, false),
            ] {
                if sites.is_empty() {
                    continue;
                }
                let link = prog
                    .attach_uprobe_multi_with_opts(
                        pid,
                        lib,
                        "",
                        libbpf_rs::UprobeMultiOpts {
                            offsets: sites.iter().map(|s| s.0).collect(),
                            cookies: sites.iter().map(|s| s.1).collect(),
                            session,
                            ..Default::default()
                        },
                    )
                    .with_context(context)?;
                self.session_links
                    .borrow_mut()
                    .entry(pid)
                    .or_default()
                    .push(link);
            }
        }
        Ok(())
    }

    /// Whether the allocator runs as uprobe sessions (its links then follow each new
    /// process by hand: see `attach_sessions`).
    pub fn alloc_sessions(&self) -> bool {
        !self.session_plan.borrow().is_empty()
    }

    /// Whether new children of session-probed processes are held stopped at fork until
    /// their links are attached (see bpf/alloc.bpf.c, alloc_fork).
    pub fn holds_children(&self) -> bool {
        self.alloc_sessions()
            && self
                .alloc
                .as_ref()
                .is_some_and(|a| a.maps.rodata_data.as_ref().is_some_and(|r| r.hold_children))
    }
}

/// An entry program and, if any, its return program.
type EntryReturn<'a, 'p> = (
    &'a libbpf_rs::ProgramMut<'p>,
    Option<&'a libbpf_rs::ProgramMut<'p>>,
);

/// The classic programs of the allocator function at `s` (None: not one): its entry
/// program, and alloc_return but for free and with --no-free (`entry_only`).
fn alloc_progs<'a, 'p>(
    pr: &'a alloc_skel::AllocProgs<'p>,
    s: &Site,
    entry_only: bool,
) -> Option<EntryReturn<'a, 'p>> {
    let entry = match s.symbol.as_ref() {
        "malloc" => &pr.malloc_enter,
        "calloc" => &pr.calloc_enter,
        "realloc" => &pr.realloc_enter,
        "reallocarray" => &pr.reallocarray_enter,
        "posix_memalign" => &pr.posix_memalign_enter,
        "aligned_alloc" => &pr.aligned_alloc_enter,
        "memalign" => &pr.memalign_enter,
        "valloc" => &pr.valloc_enter,
        "pvalloc" => &pr.pvalloc_enter,
        "free" => &pr.free_enter,
        _ => return None,
    };
    let ret = (s.symbol != "free" && !entry_only).then_some(&pr.alloc_return);
    Some((entry, ret))
}

/// The programs of the mutex function at `s` (None: not one): entry, and return.
fn lock_progs<'a, 'p>(pr: &'a lock_skel::LockProgs<'p>, s: &Site) -> Option<EntryReturn<'a, 'p>> {
    Some(match s.symbol.as_ref() {
        "pthread_mutex_lock" => (&pr.mutex_lock_enter, Some(&pr.mutex_lock_return)),
        "pthread_mutex_trylock" => (&pr.mutex_trylock_enter, Some(&pr.mutex_lock_return)),
        "pthread_mutex_unlock" => (&pr.mutex_unlock_enter, None),
        _ => return None,
    })
}

/// The session plan's cookie for an allocator function: its AllocKind, AK_FREE for free.
fn alloc_kind_cookie(symbol: &str) -> Option<u64> {
    use ebtrace_proto::v1::AllocKind as K;
    Some(match symbol {
        "malloc" => K::Malloc as u64,
        "calloc" => K::Calloc as u64,
        "realloc" => K::Realloc as u64,
        "reallocarray" => K::Reallocarray as u64,
        "posix_memalign" => K::PosixMemalign as u64,
        "aligned_alloc" => K::AlignedAlloc as u64,
        "memalign" => K::Memalign as u64,
        "valloc" => K::Valloc as u64,
        "pvalloc" => K::Pvalloc as u64,
        "free" => AK_FREE,
        _ => return None,
    })
}

/// One uprobe to attach ([`attach`], [`attach_pausable`]): `prog` at `site` (at its return
/// with `ret`) for `pid` (-1: every process) and its descendants, `cookie` its BPF cookie.
struct Uprobe<'a, 'p> {
    prog: &'a libbpf_rs::ProgramMut<'p>,
    site: &'a Site,
    ret: bool,
    pid: i32,
    cookie: u64,
}

/// Attaches `u.prog` to a uprobe at `u.site` for `u.pid` (-1: every process) and its
/// descendants.
///
/// Two perf events per target, on purpose. An inherited event that carries the program
/// would be copied into every child, program included, and when such a child exits the
/// kernel detaches *the program itself* from the shared tracepoint, for everyone (seen here
/// on 6.18: children and threads after the first child's exit went unrecorded). So the
/// program goes on a non-inherited event, and a second, inherited event without a program
/// makes the probe fire in the target's descendants: the kernel runs a tracepoint's programs
/// whenever any of its events wants the current process.
fn attach(
    probes: &mut Vec<perf::TraceProbe>,
    filters: &mut Vec<OwnedFd>,
    u: Uprobe<'_, '_>,
) -> Result<Vec<Link>> {
    let Uprobe {
        prog,
        site: s,
        ret,
        pid,
        cookie,
    } = u;
    let what = || s.to_string();
    let probe = perf::TraceProbe::new(&s.lib, s.probe_offset(), ret)
        .with_context(|| format!("uprobe on {}", what()))?;
    let fds = if pid == -1 {
        // One system-wide event makes the probe fire in every process on every CPU (the
        // program belongs to the tracepoint, not to the event; a second event would be
        // refused with EEXIST).
        vec![probe
            .open_cpu(0)
            .with_context(|| format!("perf event for {}", what()))?]
    } else {
        filters.push(
            probe
                .open(pid, true)
                .with_context(|| format!("perf event for {} (pid {pid})", what()))?,
        );
        vec![probe
            .open(pid, false)
            .with_context(|| format!("perf event for {} (pid {pid})", what()))?]
    };
    probes.push(probe);
    fds.into_iter()
        .map(|fd| {
            // The link owns the perf fd from here and closes it on detach. The cookie lives
            // in the tracepoint's program array, so it reaches the program whichever event
            // (this one or the inherited filter) made the probe fire.
            prog.attach_perf_event_with_opts(
                fd.into_raw_fd(),
                libbpf_rs::PerfEventOpts {
                    cookie,
                    ..Default::default()
                },
            )
            .with_context(|| format!("attaching to {}", what()))
        })
        .collect()
}

/// Opens `probe`'s events for `pid` (-1: every process) and attaches `prog` to them: the
/// link, and the inherited event without a program (see `attach`).
pub(super) fn open_link(
    probe: &perf::TraceProbe,
    prog: &libbpf_rs::ProgramMut<'_>,
    pid: i32,
    cookie: u64,
) -> std::io::Result<(Link, Option<OwnedFd>)> {
    let (fd, filter) = if pid == -1 {
        (probe.open_cpu(0)?, None)
    } else {
        let filter = probe.open(pid, true)?;
        (probe.open(pid, false)?, Some(filter))
    };
    let link = prog
        .attach_perf_event_with_opts(
            fd.into_raw_fd(),
            libbpf_rs::PerfEventOpts {
                cookie,
                ..Default::default()
            },
        )
        .map_err(std::io::Error::other)?;
    Ok((link, filter))
}

/// [`attach`], the link kept where `Probes::pause` can detach it (for `family`).
fn attach_pausable(
    probes: &mut Vec<perf::TraceProbe>,
    pausable: &std::cell::RefCell<Vec<PausableLink>>,
    family: ebtrace_proto::v1::EventFamily,
    u: Uprobe<'_, '_>,
) -> Result<()> {
    let Uprobe {
        prog,
        site: s,
        ret,
        pid,
        cookie,
    } = u;
    let probe = perf::TraceProbe::new(&s.lib, s.probe_offset(), ret)
        .with_context(|| format!("uprobe on {s}"))?;
    let (link, filter) = open_link(&probe, prog, pid, cookie)
        .with_context(|| format!("attaching to {s} (pid {pid})"))?;
    probes.push(probe);
    pausable.borrow_mut().push(PausableLink {
        family,
        probe: probes.len() - 1,
        prog: prog.name().to_string_lossy().into_owned(),
        pid,
        cookie,
        link: Some(link),
        filter,
    });
    Ok(())
}
