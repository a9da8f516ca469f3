//! What the budget (--max-cpu) and the recording turn while the programs run: pause and
//! resume per family, the sampling knobs in the objects' .bss (sample bytes, off-CPU
//! threshold, time units, cpu-clock rate), the kernel's BPF stats on or off, and the end.
use super::attach::open_link;
use super::*;
use anyhow::{bail, Context, Result};
use libbpf_rs::{Link, MapCore};
use std::os::fd::OwnedFd;
use std::path::Path;

impl<'obj> Probes<'obj> {
    /// Sets the allocation sampling period (bytes per sample, 0: off) while recording.
    pub fn set_sample_bytes(&self, period: u64) {
        if let Some(p) = self.sample_bytes_ptr {
            // SAFETY: points into the mmapped .bss of the alloc object, which lives as long
            // as `self`; an aligned u64 store is atomic on x86-64 and the BPF side only
            // reads it.
            unsafe { std::ptr::write_volatile(p, period) };
        }
    }

    /// The recording's end, before the last drain: a kept off-CPU block or run-queue wait
    /// waits in its thread's storage for the thread's return to user space (for its user
    /// stack), and a thread of a `-p` recording may still be in the kernel when it stops
    /// (woken, then blocked again in the same system call). The programs stop keeping
    /// (`*_ending`), and a task iterator sends what every thread holds, with its kernel
    /// stack (flagged: no user stack at the exit), so that the trace has it and its
    /// family's counts add up. A program that passed the flag before it was set has 20 ms
    /// to finish; a thread's exit and the iterator take the event by compare-and-swap.
    pub fn end_pending(&self) -> Result<()> {
        if self.ending_ptrs.is_empty() {
            return Ok(());
        }
        for &(ptr, _) in &self.ending_ptrs {
            // SAFETY: points into an object's mmapped .bss, alive as long as `self`; an
            // aligned u32 store is atomic on x86-64.
            unsafe { std::ptr::write_volatile(ptr, 1) };
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        for &(_, name) in &self.ending_ptrs {
            let prog = match name {
                "offcpu_end" => self.profile.as_ref().map(|p| &p.progs.offcpu_end),
                _ => self.system.as_ref().map(|p| &p.progs.runq_end),
            };
            let Some(prog) = prog else { continue };
            let link = prog
                .attach_iter_with_opts(libbpf_rs::IterOpts::None)
                .with_context(|| format!("attaching the task iterator {name}"))?;
            let mut it = libbpf_rs::Iter::new(&link)
                .with_context(|| format!("opening the task iterator {name}"))?;
            std::io::copy(&mut it, &mut std::io::sink())
                .with_context(|| format!("reading the task iterator {name}"))?;
        }
        Ok(())
    }

    /// Sets the off-CPU threshold (shortest block kept, ns) while recording; each block is
    /// judged by the value in force when it ends.
    pub fn set_offcpu_min_ns(&self, ns: u64) {
        if let Some(p) = self.offcpu_min_ptr {
            // SAFETY: as in `set_sample_bytes`, in the profile object's mmapped .bss.
            unsafe { std::ptr::write_volatile(p, ns) };
        }
    }

    /// Sets --request-slow's threshold (ns; 0: off) while recording: a block that ends once
    /// its request has run this long is kept whole.
    pub fn set_request_slow_ns(&self, ns: u64) {
        if let Some(p) = self.req_slow_ptr {
            // SAFETY: as in `set_sample_bytes`, in the profile object's mmapped .bss.
            unsafe { std::ptr::write_volatile(p, ns) };
        }
    }

    /// Sets the unit of a family's time-weighted sample (off-CPU, syscalls, run queue), ns,
    /// at most 1 s, while recording; each block, call or wait is judged by the value it
    /// reads once when it is decided (record/src/pacer.rs).
    pub fn set_sample_unit_ns(&self, family: ebtrace_proto::v1::EventFamily, ns: u64) {
        for &(f, p) in &self.unit_ptrs {
            if f == family {
                // SAFETY: as in `set_sample_bytes`, an aligned u64 in an object's mmapped
                // .bss, alive as long as self.
                unsafe { std::ptr::write_volatile(p, ns.min(crate::pacer::UNIT_CEIL_NS)) };
            }
        }
    }

    /// Sets the on-CPU sampling frequency of every per-CPU cpu-clock event while recording,
    /// with PERF_EVENT_IOC_PERIOD. cpu-clock is an hrtimer event: at open the kernel turns
    /// its frequency into a fixed period (1e9 / Hz ns) and clears `freq` (seen on 6.18: a
    /// frequency passed to the ioctl was taken as a period in ns, 1 Hz became a period of
    /// 10 µs, the hrtimer's least), so the new rate goes in as a period in ns.
    pub fn set_cpu_hz(&self, hz: u64) -> Result<()> {
        let period: u64 = 1_000_000_000 / hz.max(1);
        for &fd in &self.cpu_fds {
            // SAFETY: fd is a perf event owned by a live link of `self`; the kernel reads one
            // u64 at the pointer.
            let r = unsafe {
                libc::ioctl(
                    fd,
                    perf_event_open_sys::bindings::PERIOD as _,
                    &period as *const u64,
                )
            };
            if r != 0 {
                bail!(
                    "PERF_EVENT_IOC_PERIOD {period} ns ({hz} Hz) on the cpu-clock events: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
        Ok(())
    }

    /// Whether the kernel's BPF stats (and the chain's member timing) are on now.
    pub fn stats_on(&self) -> bool {
        self.stats_fd.borrow().is_some()
    }

    /// Turns the kernel's BPF stats and the chain's member timing on or off (--max-cpu
    /// measures a part of the time: each run of every BPF program on the machine pays two
    /// clock reads while they are on, and a guest's clock can be slow to read). Nothing
    /// when they could not be turned on at the start. Runs and run time stand still while
    /// off (unless another tool keeps the kernel's stats on): measure between two reads
    /// taken while on.
    pub fn set_stats(&self, on: bool) {
        if !self.stats_ok || self.stats_on() == on {
            return;
        }
        if on {
            // SAFETY: plain syscall wrapper.
            let fd = unsafe {
                libbpf_rs::libbpf_sys::bpf_enable_stats(libbpf_rs::libbpf_sys::BPF_STATS_RUN_TIME)
            };
            if fd < 0 {
                return;
            }
            // SAFETY: a fresh fd we own.
            *self.stats_fd.borrow_mut() =
                Some(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) });
            self.set_chain_timing(true);
        } else {
            self.set_chain_timing(false);
            self.stats_fd.borrow_mut().take();
        }
    }

    pub(super) fn set_chain_timing(&self, on: bool) {
        let v = u32::from(on).to_ne_bytes();
        if let Err(e) =
            self.chain_maps
                .timing
                .update(&0u32.to_ne_bytes(), &v, libbpf_rs::MapFlags::ANY)
        {
            eprintln!(
                "ebrec: warning: could not turn the chain's timing {}: {e}",
                if on { "on" } else { "off" }
            );
        }
    }

    /// Whether --max-cpu can pause `family` (detach its uprobes, and attach them again).
    pub fn can_pause(&self, family: ebtrace_proto::v1::EventFamily) -> bool {
        (family == ebtrace_proto::v1::EventFamily::Alloc && self.alloc_sessions())
            || self.pausable.borrow().iter().any(|p| p.family == family)
            || self.tp_pausable.borrow().iter().any(|t| t.0 == family)
            || self.chain.borrow().iter().any(|m| m.family == family)
    }

    /// --max-cpu: detaches `family`'s uprobes (their traps go with them), or the tracepoint
    /// programs that start its events (lock in futex mode, memgrowth), until `resume`.
    pub fn pause(&self, family: ebtrace_proto::v1::EventFamily) {
        if family == ebtrace_proto::v1::EventFamily::Alloc && self.alloc_sessions() {
            self.pause_sessions();
        }
        if family == ebtrace_proto::v1::EventFamily::Offcpu {
            self.bump_req_epoch();
        }
        // Each close waits for the kernel to retire the probe (~100 ms): all at once.
        let mut gone: Vec<(Option<Link>, Option<OwnedFd>)> = Vec::new();
        for p in self.pausable.borrow_mut().iter_mut() {
            if p.family == family {
                gone.push((p.link.take(), p.filter.take()));
            }
        }
        for t in self.tp_pausable.borrow_mut().iter_mut() {
            if t.0 == family {
                gone.push((t.2.take(), None));
            }
        }
        let mut chain_changed = false;
        for m in self.chain.borrow_mut().iter_mut() {
            if m.family == family && m.active {
                m.active = false;
                chain_changed = true;
            }
        }
        if chain_changed {
            if let Err(e) = self.sync_chain() {
                eprintln!("ebrec: warning: pausing {family:?}'s system call programs: {e:#}");
            }
        }
        std::thread::scope(|s| {
            for g in gone {
                s.spawn(move || drop(g));
            }
        });
    }

    /// Attaches `family`'s uprobes again after `pause`: the classic ones to the process they
    /// were attached to (and its threads and later children; children forked before the
    /// resume are not probed again), if it still runs.
    pub fn resume(&self, family: ebtrace_proto::v1::EventFamily) -> Result<()> {
        if family == ebtrace_proto::v1::EventFamily::Alloc && self.alloc_sessions() {
            self.resume_sessions()?;
        }
        // What was in flight at the pause never saw its exit: forgotten, so that no exit after
        // the resume pairs with an entry from before the pause.
        fn clear(m: &libbpf_rs::MapMut<'_>) {
            let keys: Vec<Vec<u8>> = m.keys().collect();
            for k in keys {
                let _ = m.delete(&k);
            }
        }
        let chain_paused = self
            .chain
            .borrow()
            .iter()
            .any(|m| m.family == family && !m.active);
        if chain_paused
            || self
                .tp_pausable
                .borrow()
                .iter()
                .any(|t| t.0 == family && t.2.is_none())
        {
            match family {
                ebtrace_proto::v1::EventFamily::Lock => {
                    if let Some(l) = &self.lock {
                        clear(&l.maps.waits);
                    }
                }
                ebtrace_proto::v1::EventFamily::MemGrowth => {
                    if let Some(p) = &self.profile {
                        clear(&p.maps.mem_calls);
                    }
                }
                ebtrace_proto::v1::EventFamily::Syscall | ebtrace_proto::v1::EventFamily::Runq => {
                    // Task storage cannot be listed: a new epoch makes the old state stale.
                    if let Some(e) = self.sys_epoch_ptr {
                        // SAFETY: the mmapped .bss of the system object, alive as long as
                        // self; an aligned u32 store.
                        unsafe {
                            std::ptr::write_volatile(e, std::ptr::read_volatile(e).wrapping_add(1))
                        };
                    }
                }
                ebtrace_proto::v1::EventFamily::Offcpu => {
                    self.bump_req_epoch();
                    // Task storage cannot be listed: a new epoch makes the old state stale.
                    if let Some(e) = self.offcpu_epoch_ptr {
                        // SAFETY: as in set_offcpu_min_ns (the mmapped .bss of the profile
                        // object, alive as long as self; an aligned u32 store).
                        unsafe {
                            std::ptr::write_volatile(e, std::ptr::read_volatile(e).wrapping_add(1))
                        };
                    }
                }
                _ => {}
            }
        }
        for t in self.tp_pausable.borrow_mut().iter_mut() {
            if t.0 != family || t.2.is_some() {
                continue;
            }
            let prog = match t.1 {
                "futex_exit" => self.lock.as_ref().map(|l| &l.progs.futex_exit),
                "mem_exit" => self.profile.as_ref().map(|p| &p.progs.mem_exit),
                "offcpu_sys_exit" => self.profile.as_ref().map(|p| &p.progs.offcpu_sys_exit),
                "offcpu_rseq" => self.profile.as_ref().map(|p| &p.progs.offcpu_rseq),
                "offcpu_waking" => self.profile.as_ref().map(|p| &p.progs.offcpu_waking),
                "offcpu_switch" => self.profile.as_ref().map(|p| &p.progs.offcpu_switch),
                "futex_enter" => self.lock.as_ref().map(|l| &l.progs.futex_enter),
                "mem_enter" => self.profile.as_ref().map(|p| &p.progs.mem_enter),
                "mem_fault" => self.profile.as_ref().map(|p| &p.progs.mem_fault),
                name => self.system.as_ref().and_then(|s| {
                    let g = &s.progs;
                    Some(match name {
                        "sys_exit" => &g.sys_exit,
                        "sys_enter" => &g.sys_enter,
                        "runq_sys_exit" => &g.runq_sys_exit,
                        "runq_rseq" => &g.runq_rseq,
                        "runq_switch" => &g.runq_switch,
                        "runq_wakeup" => &g.runq_wakeup,
                        "runq_wakeup_new" => &g.runq_wakeup_new,
                        "bio_io_done" => &g.bio_io_done,
                        "bio_io_start" => &g.bio_io_start,
                        "bio_rq_complete" => &g.bio_rq_complete,
                        "bio_rq_issue" => &g.bio_rq_issue,
                        "tcp_set_state" => &g.tcp_set_state,
                        "tcp_sys_exit" => &g.tcp_sys_exit,
                        "tcp_retransmit" => &g.tcp_retransmit,
                        "tcp_send_reset" => &g.tcp_send_reset,
                        "tcp_receive_reset" => &g.tcp_receive_reset,
                        _ => return None,
                    })
                }),
            };
            let prog = prog.with_context(|| format!("no program {} to attach again", t.1))?;
            t.2 = Some(
                prog.attach()
                    .with_context(|| format!("attaching {} again", t.1))?,
            );
        }
        if chain_paused {
            for m in self.chain.borrow_mut().iter_mut() {
                if m.family == family {
                    m.active = true;
                }
            }
            self.sync_chain()?;
        }
        for p in self.pausable.borrow_mut().iter_mut() {
            if p.family != family || p.link.is_some() {
                continue;
            }
            if p.pid != -1 && !Path::new(&format!("/proc/{}", p.pid)).exists() {
                continue;
            }
            let prog = self
                .pausable_prog(&p.prog)
                .with_context(|| format!("no program {} to attach again", p.prog))?;
            let (link, filter) = open_link(&self.trace_probes[p.probe], prog, p.pid, p.cookie)
                .with_context(|| format!("attaching {} again (pid {})", p.prog, p.pid))?;
            p.link = Some(link);
            p.filter = filter;
        }
        Ok(())
    }

    /// The program of a pausable link, by name.
    fn pausable_prog(&self, name: &str) -> Option<&libbpf_rs::ProgramMut<'obj>> {
        if let Some(a) = &self.alloc {
            let p = &a.progs;
            let prog = match name {
                "malloc_enter" => Some(&p.malloc_enter),
                "calloc_enter" => Some(&p.calloc_enter),
                "realloc_enter" => Some(&p.realloc_enter),
                "reallocarray_enter" => Some(&p.reallocarray_enter),
                "posix_memalign_enter" => Some(&p.posix_memalign_enter),
                "aligned_alloc_enter" => Some(&p.aligned_alloc_enter),
                "memalign_enter" => Some(&p.memalign_enter),
                "valloc_enter" => Some(&p.valloc_enter),
                "pvalloc_enter" => Some(&p.pvalloc_enter),
                "free_enter" => Some(&p.free_enter),
                "alloc_return" => Some(&p.alloc_return),
                "custom_alloc_enter" => Some(&p.custom_alloc_enter),
                "custom_alloc_return" => Some(&p.custom_alloc_return),
                "custom_free_enter" => Some(&p.custom_free_enter),
                _ => None,
            };
            if prog.is_some() {
                return prog;
            }
        }
        let p = &self.profile.as_ref()?.progs;
        match name {
            "func_enter" => Some(&p.func_enter),
            "func_return" => Some(&p.func_return),
            "func_exit" => Some(&p.func_exit),
            _ => None,
        }
    }

    /// --max-cpu: detaches the allocator's session links (their traps go with them) until
    /// `resume_sessions`; new children are not attached meanwhile.
    /// `req_epoch` + 1: odd from the pause of off-CPU's hooks, even again from their resume.
    /// A request open across either has no kernel split (its phases were not followed).
    fn bump_req_epoch(&self) {
        if let Some(e) = self.req_epoch_ptr {
            // SAFETY: as offcpu_epoch (the profile object's mmapped .bss, alive as long as
            // self; an aligned u32 store).
            unsafe { std::ptr::write_volatile(e, std::ptr::read_volatile(e).wrapping_add(1)) };
        }
    }

    pub fn pause_sessions(&self) {
        self.sessions_paused.set(true);
        let links = std::mem::take(&mut *self.session_links.borrow_mut());
        drop(links);
    }

    /// A process with session links exited: its links go (a link of a dead task would stay
    /// a consumer of the uprobes, costing every later hit a filter call), and a new process
    /// that gets the pid again is attached anew.
    pub fn forget_session_pid(&self, pid: i32) {
        self.session_pids.borrow_mut().remove(&pid);
        let links = self.session_links.borrow_mut().remove(&pid);
        drop(links);
    }

    /// Attaches the session links again to every process that had them and still runs.
    pub fn resume_sessions(&self) -> Result<()> {
        self.sessions_paused.set(false);
        let pids: Vec<i32> = self.session_pids.borrow_mut().drain().collect();
        for pid in pids {
            if pid == -1 || std::path::Path::new(&format!("/proc/{pid}")).exists() {
                self.attach_sessions(pid)?;
            }
        }
        Ok(())
    }
}
