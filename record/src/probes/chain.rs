//! The system call chain: the families' programs on raw sys_enter and sys_exit run as
//! members of the hub's chain (bpf/hub.bpf.c), or on their own per-syscall tracepoints; its
//! maps, the targets bitmap, and the rseq fallbacks that add syscall-exit members.
use super::prog::{prog_run_stats, time_syscalls};
use super::*;
use anyhow::{bail, Context, Result};
use libbpf_rs::{Link, MapCore, MapFlags};
use std::os::fd::{AsFd, AsRawFd};

/// A family that takes its user stacks on rseq_update, and the syscall-exit member that
/// takes them for threads without rseq once one is seen ([`Probes::rseq_fallbacks`]).
#[derive(Debug)]
pub(super) struct RseqFallback {
    pub(super) family: ebtrace_proto::v1::EventFamily,
    pub(super) what: &'static str,
    pub(super) name: &'static str,
    pub(super) member: u32,
    pub(super) fd: i32,
    /// Its object's counters (mmapped .bss): kept events of threads without rseq, and kept
    /// events whose rseq_update never came.
    pub(super) norseq: *const u64,
    pub(super) missed: *const u64,
    pub(super) added: std::cell::Cell<bool>,
}

/// A family's program on raw sys_enter or sys_exit: not attached, but a member of the
/// system call chain (bpf/hub.bpf.c) that the hub's one program per tracepoint runs.
#[derive(Debug, Clone)]
pub(super) struct ChainMember {
    pub(super) family: ebtrace_proto::v1::EventFamily,
    pub(super) name: &'static str,
    /// Its CM_* (the order of the chain, and its slot of `chain_costs`).
    pub(super) member: u32,
    pub(super) exit: bool,
    /// The loaded program's fd (owned by its skeleton, which lives as long as the Probes).
    pub(super) fd: i32,
    /// Its own per-syscall program (`direct_program`) is loaded.
    pub(super) direct: bool,
    /// False while --max-cpu pauses its family.
    pub(super) active: bool,
}

/// The system calls a chain member acts on (None: every one); the hub tail-calls it for
/// these only. Its program checks the number again (bpf/*.bpf.c: NR_FUTEX, NR_BRK, ...).
pub(super) fn chain_syscalls(member: u32) -> Option<&'static [u32]> {
    const FUTEX: &[u32] = &[202];
    const MEM: &[u32] = &[9, 11, 12]; // mmap, munmap, brk
    const ACCEPT: &[u32] = &[43, 288]; // accept, accept4
    match member {
        m if m == CM_FUTEX_ENTER as u32 || m == CM_FUTEX_EXIT as u32 => Some(FUTEX),
        m if m == CM_MEM_ENTER as u32 || m == CM_MEM_EXIT as u32 => Some(MEM),
        m if m == CM_TCP_SYS_EXIT as u32 => Some(ACCEPT),
        _ => None,
    }
}

/// A chain member's own program on the per-syscall tracepoints of `chain_syscalls`
/// (bpf/common.bpf.h, `sc_exit_ctx`), and those tracepoints (category syscalls).
pub(super) fn direct_program(member: u32) -> Option<(&'static str, &'static [&'static str])> {
    Some(match member {
        m if m == CM_FUTEX_ENTER as u32 => ("futex_enter_tp", &["sys_enter_futex"]),
        m if m == CM_FUTEX_EXIT as u32 => ("futex_exit_tp", &["sys_exit_futex"]),
        m if m == CM_MEM_ENTER as u32 => (
            "mem_enter_tp",
            &["sys_enter_mmap", "sys_enter_munmap", "sys_enter_brk"],
        ),
        m if m == CM_MEM_EXIT as u32 => (
            "mem_exit_tp",
            &["sys_exit_mmap", "sys_exit_munmap", "sys_exit_brk"],
        ),
        m if m == CM_TCP_SYS_EXIT as u32 => {
            ("tcp_accept_tp", &["sys_exit_accept", "sys_exit_accept4"])
        }
        _ => return None,
    })
}

/// The chain member a program is, if it is one.
pub(super) fn chain_member(name: &str) -> Option<(u32, bool)> {
    Some(match name {
        "futex_enter" => (CM_FUTEX_ENTER as u32, false),
        "mem_enter" => (CM_MEM_ENTER as u32, false),
        "sys_enter" => (CM_SYS_ENTER as u32, false),
        "futex_exit" => (CM_FUTEX_EXIT as u32, true),
        "mem_exit" => (CM_MEM_EXIT as u32, true),
        "offcpu_sys_exit" => (CM_OFFCPU_SYS_EXIT as u32, true),
        "sys_exit" => (CM_SYS_EXIT as u32, true),
        "runq_sys_exit" => (CM_RUNQ_SYS_EXIT as u32, true),
        "tcp_sys_exit" => (CM_TCP_SYS_EXIT as u32, true),
        _ => return None,
    })
}

/// The maps every object shares (created here, their fds reused by each object at load):
/// the system call chain's, and the targets bitmap the chain's hubs and every other
/// program that sees all processes test.
#[derive(Debug)]
pub(super) struct ChainMaps {
    pub(super) enter: libbpf_rs::MapHandle,
    pub(super) exit: libbpf_rs::MapHandle,
    pub(super) state: libbpf_rs::MapHandle,
    pub(super) costs: libbpf_rs::MapHandle,
    /// Per system call number, the slots whose member wants it (`chain_wants`).
    pub(super) wants: libbpf_rs::MapHandle,
    /// Entry 0: the members are timed now (`chain_timing`), with the kernel's BPF stats.
    pub(super) timing: libbpf_rs::MapHandle,
    /// The traced processes, one bit per pid (`targets`, shared by every object).
    pub(super) targets: TargetBits,
}

/// The `targets` bitmap (bpf/targets.bpf.h): an mmapable array of TARGET_WORDS u64 words,
/// bit pid & 63 of word pid >> 6. User space sets bits through the mapping with atomic ORs,
/// as the fork programs do in the kernel, so that neither loses the other's bit of a word.
#[derive(Debug)]
pub(super) struct TargetBits {
    pub(super) map: libbpf_rs::MapHandle,
    pub(super) words: *const std::sync::atomic::AtomicU64,
}

impl TargetBits {
    const BYTES: usize = TARGET_WORDS * 8;

    pub(super) fn create() -> Result<Self> {
        let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
            sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
            map_flags: libbpf_rs::libbpf_sys::BPF_F_MMAPABLE,
            ..Default::default()
        };
        let map = libbpf_rs::MapHandle::create(
            libbpf_rs::MapType::Array,
            Some("targets"),
            4,
            8,
            TARGET_WORDS as u32,
            &opts,
        )
        .context("creating the BPF map targets")?;
        // SAFETY: a shared mapping of the whole array (page-aligned: 512 KiB), unmapped in
        // drop; the kernel keeps the map while it is mapped.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                Self::BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                map.as_fd().as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            bail!(
                "mapping the BPF map targets: {}",
                std::io::Error::last_os_error()
            );
        }
        Ok(TargetBits {
            map,
            words: p as *const std::sync::atomic::AtomicU64,
        })
    }

    fn set(&self, pid: u32) -> Result<()> {
        let w = (pid >> 6) as usize;
        if w >= TARGET_WORDS {
            bail!("process id {pid} is above the kernel's limit of 2^22");
        }
        // SAFETY: w is within the mapping; u64 words of an array map are 8-byte aligned.
        let word = unsafe { &*self.words.add(w) };
        word.fetch_or(1u64 << (pid & 63), std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

impl Drop for TargetBits {
    fn drop(&mut self) {
        // SAFETY: the mapping made in create, of BYTES bytes, no longer used.
        unsafe { libc::munmap(self.words as *mut libc::c_void, Self::BYTES) };
    }
}

impl ChainMaps {
    pub(super) fn create() -> Result<Self> {
        use libbpf_rs::{MapHandle, MapType};
        let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
            sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
            ..Default::default()
        };
        let prog_array = |name: &str| {
            MapHandle::create(
                MapType::ProgArray,
                Some(name),
                4,
                4,
                CHAIN_SLOTS as u32,
                &opts,
            )
            .with_context(|| format!("creating the BPF map {name}"))
        };
        Ok(ChainMaps {
            enter: prog_array("sys_enter_chain")?,
            exit: prog_array("sys_exit_chain")?,
            state: MapHandle::create(MapType::PercpuArray, Some("chain_state"), 4, 16, 1, &opts)
                .context("creating the BPF map chain_state")?,
            costs: MapHandle::create(
                MapType::PercpuArray,
                Some("chain_costs"),
                4,
                std::mem::size_of::<chain_cost>() as u32,
                CHAIN_MEMBERS as u32,
                &opts,
            )
            .context("creating the BPF map chain_costs")?,
            wants: MapHandle::create(
                MapType::Array,
                Some("chain_wants"),
                4,
                4,
                2 * CHAIN_NRS as u32,
                &opts,
            )
            .context("creating the BPF map chain_wants")?,
            timing: MapHandle::create(MapType::Array, Some("chain_timing"), 4, 4, 1, &opts)
                .context("creating the BPF map chain_timing")?,
            targets: TargetBits::create()?,
        })
    }
}

impl<'obj> Probes<'obj> {
    /// Marks `pid` as a target of the in-kernel filters (futex mode, and the tracepoint and
    /// sampling families).
    pub fn add_target(&self, pid: u32) -> Result<()> {
        self.chain_maps.targets.set(pid)
    }

    /// Fills the chain's program arrays and attaches the hub's programs (the fork and exit
    /// ones keep its targets; sys_enter and sys_exit only when they have members).
    pub(super) fn start_chain(&mut self, calibrate: bool) -> Result<()> {
        let Some(h) = &self.hub else {
            return Ok(());
        };
        self.chain.get_mut().sort_by_key(|m| m.member);
        self.sync_chain()?;
        let (enter, exit) = {
            let c = self.chain.borrow();
            (c.iter().any(|m| !m.exit), c.iter().any(|m| m.exit))
        };
        let g = &h.progs;
        let bare = if calibrate && enter && exit {
            Some(time_syscalls())
        } else {
            None
        };
        for (prog, on, what) in [
            (&g.hub_rename, true, "task_rename"),
            (&g.hub_fork, true, "sched_process_fork"),
            (&g.hub_exit, true, "sched_process_exit"),
        ] {
            if on {
                self.links.push(
                    prog.attach()
                        .with_context(|| format!("attaching the hub's tp_btf/{what}"))?,
                );
            }
        }
        self.chain_started.set(true);
        self.sync_hubs()?;
        if let Some(bare) = bare {
            // ebrec is not a target: its calls stop at the hubs. What a call costs more now,
            // less the hubs' measured run time, is what the stats do not see, for two runs.
            let before = [&g.hub_sys_enter, &g.hub_sys_exit].map(|p| prog_run_stats(p.as_fd()));
            let hooked = time_syscalls();
            let after = [&g.hub_sys_enter, &g.hub_sys_exit].map(|p| prog_run_stats(p.as_fd()));
            let runs: u64 = (0..2).map(|i| after[i].1 - before[i].1).sum();
            let ns: u64 = (0..2).map(|i| after[i].0 - before[i].0).sum();
            let measured = if runs > 0 {
                ns as f64 / runs as f64
            } else {
                0.0
            };
            self.dispatch_ns = ((hooked - bare) / 2.0 - measured).clamp(5.0, 1000.0);
        }
        Ok(())
    }

    /// For each family on rseq_update (--offcpu, --runq): once a kept event came from a
    /// thread without rseq (or rseq_update did not come for 16 of them), adds the family's
    /// syscall-exit member to the system call chain (attaching the hub's sys_exit if it was
    /// not), so that user stacks are taken at syscall exits from then on; one line for each
    /// (once) to say so.
    pub fn rseq_fallbacks(&self) -> Result<Vec<String>> {
        let mut lines = Vec::new();
        for f in &self.rseq_fallbacks {
            if f.added.get() {
                continue;
            }
            // SAFETY: aligned u64 loads in an object's mmapped .bss, alive as long as self
            // (as in set_offcpu_min_ns); BPF adds to them atomically.
            let (norseq, missed) = unsafe {
                (
                    std::ptr::read_volatile(f.norseq),
                    std::ptr::read_volatile(f.missed),
                )
            };
            if norseq == 0 && missed < 16 {
                continue;
            }
            if self.hub.is_none() {
                continue;
            };
            f.added.set(true);
            // Paused by --max-cpu: it joins inactive, and the resume activates it.
            let active = !self
                .tp_pausable
                .borrow()
                .iter()
                .any(|t| t.0 == f.family && t.2.is_none());
            {
                let mut chain = self.chain.borrow_mut();
                chain.push(ChainMember {
                    family: f.family,
                    name: f.name,
                    member: f.member,
                    exit: true,
                    fd: f.fd,
                    direct: false,
                    active,
                });
                chain.sort_by_key(|m| m.member);
            }
            self.sync_chain()?;
            let what = f.what;
            lines.push(if norseq > 0 {
                format!(
                    "{what}: {norseq} kept events of threads without rseq (glibc before 2.35, or rseq turned off): user stacks are now taken at syscall exits, which puts every system call on the tracepoint's slow path"
                )
            } else {
                format!(
                    "{what}: rseq_update did not come for {missed} kept events: user stacks are now taken at syscall exits, which puts every system call on the tracepoint's slow path"
                )
            });
        }
        Ok(lines)
    }

    /// Writes the active members into the chain's program arrays, in their order, exits
    /// first (a resumed family's exits are in before its entries), and empties the slots
    /// after them.
    pub(super) fn sync_chain(&self) -> Result<()> {
        let chain = self.chain.borrow();
        for (exit, map) in [
            (true, &self.chain_maps.exit),
            (false, &self.chain_maps.enter),
        ] {
            let members: Vec<&ChainMember> = chain
                .iter()
                .filter(|m| m.exit == exit && m.active)
                .collect();
            for (slot, m) in members.iter().enumerate() {
                map.update(
                    &(slot as u32).to_ne_bytes(),
                    &(m.fd as u32).to_ne_bytes(),
                    MapFlags::ANY,
                )
                .with_context(|| format!("putting {} in the system call chain", m.name))?;
            }
            for slot in members.len()..CHAIN_SLOTS {
                let _ = map.delete(&(slot as u32).to_ne_bytes());
            }
            // Each system call number's slots, for the hub's dispatch.
            let mut wants = vec![0u32; CHAIN_NRS as usize];
            for (slot, m) in members.iter().enumerate() {
                match chain_syscalls(m.member) {
                    Some(nrs) => nrs.iter().for_each(|&nr| wants[nr as usize] |= 1 << slot),
                    None => wants.iter_mut().for_each(|w| *w |= 1 << slot),
                }
            }
            let base = if exit { CHAIN_NRS as u32 } else { 0 };
            for (nr, w) in wants.iter().enumerate() {
                self.chain_maps
                    .wants
                    .update(
                        &(base + nr as u32).to_ne_bytes(),
                        &w.to_ne_bytes(),
                        MapFlags::ANY,
                    )
                    .context("writing the system call chain's dispatch")?;
            }
        }
        drop(chain);
        if self.chain_started.get() {
            self.sync_hubs()?;
        }
        Ok(())
    }

    /// Attaches each system call hub whose chain has an active member and detaches the
    /// others: with every member paused (--max-cpu), no system call of the machine pays the
    /// tracepoint's slow path and the hub's target check for nothing. A side whose active
    /// members all want a few system calls (futex, brk/mmap/munmap, accept) and have their
    /// own programs for those calls' tracepoints (`direct_program`) gets these instead of
    /// its hub: the other calls of the machine then pass a bit test in the kernel, not a
    /// BPF program (a getppid loop of an untraced process under `--lock`: +50 ns a call
    /// instead of +200). Links go before links come, so a switch may miss a call, never
    /// count one twice (a member's state is the same maps either way).
    fn sync_hubs(&self) -> Result<()> {
        let Some(h) = &self.hub else {
            return Ok(());
        };
        // Per side: (the hub attached, the members to run by their own programs).
        let mut plan: [(bool, Vec<u32>); 2] = Default::default();
        {
            let c = self.chain.borrow();
            for (i, exit) in [(0, false), (1, true)] {
                let active: Vec<&ChainMember> =
                    c.iter().filter(|m| m.exit == exit && m.active).collect();
                let direct = !self.hub_only
                    && !self.direct_failed.get()
                    && active
                        .iter()
                        .all(|m| chain_syscalls(m.member).is_some() && m.direct);
                plan[i] = if direct {
                    (false, active.iter().map(|m| m.member).collect())
                } else {
                    (!active.is_empty(), Vec::new())
                };
            }
        }
        // Exits before entries (as the chain's slots): no entry is recorded whose exit
        // is not seen.
        let want_direct: Vec<u32> = plan
            .iter()
            .rev()
            .flat_map(|p| p.1.iter().copied())
            .collect();
        let mut links = self.hub_links.borrow_mut();
        let mut direct = self.direct_links.borrow_mut();
        // Leaving first. A tracepoint link's close waits for the kernel's RCU grace periods
        // (the syscall tracepoints are faultable: RCU tasks trace too): 20-60 ms each here,
        // over half a second for a switch of eight links in the budget's tick, while the
        // ring buffers filled. Closed on a thread of their own instead; until then a member
        // may run twice for a call, which its state makes harmless (an exit finds its
        // entry gone, an accepted socket known).
        let mut gone: Vec<Link> = Vec::new();
        direct.retain(|m, l| {
            let keep = want_direct.contains(m);
            if !keep {
                gone.append(l);
            }
            keep
        });
        for (i, (want, _)) in plan.iter().enumerate() {
            if !want {
                gone.extend(links[i].take());
            }
        }
        if !gone.is_empty() {
            let t = std::thread::spawn(move || drop(gone));
            self.closing.borrow_mut().push(t);
        }
        for (i, prog, what) in [
            (0, &h.progs.hub_sys_enter, "sys_enter"),
            (1, &h.progs.hub_sys_exit, "sys_exit"),
        ] {
            if plan[i].0 && links[i].is_none() {
                // A link of the same program still closing on its thread (a switch back
                // within its grace periods) makes the kernel refuse the program twice
                // (EEXIST): wait for the closes and try again.
                let l = match prog.attach() {
                    Ok(l) => l,
                    Err(_) => {
                        self.finish_closing();
                        prog.attach()
                            .with_context(|| format!("attaching the hub's tp_btf/{what}"))?
                    }
                };
                links[i] = Some(l);
            }
        }
        let mut attach = || -> Result<()> {
            for &m in &want_direct {
                if direct.contains_key(&m) {
                    continue;
                }
                let (name, tps) = direct_program(m).context("a member without its own program")?;
                let prog = self
                    .direct_prog(name)
                    .with_context(|| format!("no program {name}"))?;
                let mut ls = Vec::new();
                for tp in tps {
                    ls.push(
                        prog.attach_tracepoint(libbpf_rs::TracepointCategory::Syscalls, *tp)
                            .with_context(|| format!("attaching {name} to syscalls:{tp}"))?,
                    );
                }
                direct.insert(m, ls);
            }
            Ok(())
        };
        let mut tried = attach();
        if tried.is_err() {
            // As the hubs: a member's own links of a moment ago may still be closing
            // (EEXIST on the same program and tracepoint).
            self.finish_closing();
            tried = attach();
        }
        if let Err(e) = tried {
            // A kernel without the syscall events (CONFIG_FTRACE_SYSCALLS), or no tracefs:
            // the chain on the raw tracepoints, as before, for the rest of the recording.
            eprintln!("ebrec: note: {e:#}: the system call families stay on the raw sys_enter/sys_exit tracepoints");
            self.direct_failed.set(true);
            direct.clear();
            drop((links, direct));
            return self.sync_hubs();
        }
        Ok(())
    }

    /// Waits for the links `sync_hubs` took off to be closed.
    pub(super) fn finish_closing(&self) {
        let closing = std::mem::take(&mut *self.closing.borrow_mut());
        for t in closing {
            let _ = t.join();
        }
    }

    /// A member's own per-syscall program (`direct_program`), loaded.
    fn direct_prog(&self, name: &str) -> Option<&libbpf_rs::ProgramMut<'obj>> {
        match name {
            "futex_enter_tp" => self.lock.as_ref().map(|l| &l.progs.futex_enter_tp),
            "futex_exit_tp" => self.lock.as_ref().map(|l| &l.progs.futex_exit_tp),
            "mem_enter_tp" => self.profile.as_ref().map(|p| &p.progs.mem_enter_tp),
            "mem_exit_tp" => self.profile.as_ref().map(|p| &p.progs.mem_exit_tp),
            "tcp_accept_tp" => self.system.as_ref().map(|p| &p.progs.tcp_accept_tp),
            _ => None,
        }
    }
}
