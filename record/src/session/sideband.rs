//! The perf side band (MMAP2, FORK, COMM/exec, EXIT) written into the trace as the
//! generations' mappings and process records.
use super::*;

impl Session<'_> {
    /// Applies side-band records (in time order).
    pub fn side_band(&mut self, mut recs: Vec<SideBand>) -> Result<()> {
        recs.sort_by_key(SideBand::time);
        for r in recs {
            match r {
                SideBand::Fork {
                    pid,
                    ppid,
                    tid,
                    time,
                    ..
                } if pid == tid && pid != ppid => self.process_forked(pid, ppid, time)?,
                SideBand::Fork { .. } => {}
                SideBand::Exec {
                    pid, time, comm, ..
                } => self.process_execed(pid, time, comm)?,
                m @ SideBand::Mmap { .. } => self.mapped(m)?,
                SideBand::Exit { pid, tid, time, .. } if pid == tid => {
                    self.process_exited(pid, time)?
                }
                SideBand::Exit { .. } => {}
                SideBand::Lost { count, cpu } => self.side_band_lost(count, cpu)?,
            }
        }
        if let Some(t) = self.cfi.as_mut() {
            t.flush();
        }
        Ok(())
    }

    /// A new process (FORK of a thread group leader): its generation, inheriting its
    /// parent's mappings, and with --alloc-probes session, its links.
    fn process_forked(&mut self, pid: u32, ppid: u32, time: u64) -> Result<()> {
        let parent = self.gen_at(ppid, time);
        let (comm, exe, cmdline, maps) = match parent {
            Some(p) => {
                let p = &self.gens[p as usize - 1];
                (p.comm, p.exe, p.cmdline.clone(), p.maps.clone())
            }
            None => (0, 0, Vec::new(), Vec::new()),
        };
        // Its pids, namespaces and cgroup, read now: nothing when it has
        // exited already (or its pid is another process's by now).
        let info = procfs::proc_info_started(pid, time);
        let ident = self.ident_of(info.as_ref(), ppid, time)?;
        let g = self.new_gen(
            pid,
            generations::GenStart {
                start_ns: time,
                comm,
                exe,
                cmdline,
                ident,
            },
        );
        self.write_process(g, pid, ProcessEvent::Fork, time, parent.unwrap_or(0))?;
        for m in maps {
            self.add_mapping(g, m, time, MappingSource::Fork)?;
        }
        if let Some(t) = self.cfi.as_mut() {
            t.fork(ppid, pid);
        }
        if self.follow {
            self.live.insert(pid);
            if self.probes.alloc_sessions() {
                // Held at fork (alloc_fork) and continued once attached; a
                // child the kernel side did not hold is attached late.
                // A child that is neither stopped nor about to be was not
                // held (its hold event found the ring buffer full): it has
                // run unprobed since its fork, which the trace must say.
                let held = || procfs::stopped_or_stopping(pid) != Some(false);
                let attached = procfs::start_ticks(pid)
                    .is_some_and(|t| self.children_attached.get(&pid) == Some(&t));
                if self.probes.holds_children() && (attached || held()) {
                    self.attach_child(pid);
                } else {
                    self.follow_sessions(pid, g, time)?;
                }
            }
        }
        Ok(())
    }

    /// An exec (COMM with the exec flag): a new generation of `pid`.
    fn process_execed(&mut self, pid: u32, time: u64, comm: Vec<u8>) -> Result<()> {
        let parent = self.gen_at(pid, time);
        // The process that exec'd, if /proc still shows it: the one that
        // started when its earlier generation says (when it is known).
        let started = parent
            .map(|p| self.gens[p as usize - 1].ident.started_ns)
            .unwrap_or(0);
        let info = if started != 0 {
            procfs::proc_info_started(pid, started)
        } else {
            procfs::proc_info(pid).ok()
        };
        let i = info.clone().unwrap_or_default();
        let comm = self.w.intern_string(&comm)?;
        let exe = self.w.intern_string(&i.exe)?;
        let cmdline = i
            .cmdline
            .iter()
            .map(|a| self.w.intern_string(a))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(t) = self.cfi.as_mut() {
            t.forget(pid);
        }
        let ppid = parent
            .map(|p| self.gens[p as usize - 1].ident.ppid)
            .unwrap_or(0);
        let started = match (started, &info) {
            (0, Some(i)) => boot_of_ticks(i.start_ticks),
            _ => started,
        };
        let ident = self.ident_of(info.as_ref(), ppid, started)?;
        let g = self.new_gen(
            pid,
            generations::GenStart {
                start_ns: time,
                comm,
                exe,
                cmdline,
                ident,
            },
        );
        self.write_process(g, pid, ProcessEvent::Exec, time, parent.unwrap_or(0))?;
        Ok(())
    }

    /// A mapping (MMAP2, the record `m`): its build-id, unwind tables and CFI rows, and
    /// the mapping in its generation.
    fn mapped(&mut self, m: SideBand) -> Result<()> {
        let SideBand::Mmap {
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
        } = m
        else {
            return Ok(());
        };
        let g = self.gen_or_snapshot(pid, time)?;
        let (dev, ino) = inode
            .map(|(ma, mi, ino)| ((u64::from(ma) << 20) | u64::from(mi), ino))
            .unwrap_or((0, 0));
        let file = path.starts_with(b"/").then(|| procfs::path_in(pid, &path));
        let kernel_bid = build_id.clone();
        let vdso = generations::is_vdso(&path, start, start + len);
        let bid = match (build_id, &file) {
            _ if vdso => 0,
            (Some(b), _) => self.build_id_of(0, 0, &b, || Some(b.clone()))?,
            (None, Some(file)) => {
                self.build_id_of(dev, ino, &path, || ebtrace_elf::build_id(file))?
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
                && ebtrace_elf::build_id(&here) == kernel_bid
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
        if let (Some(t), true) = (self.cfi.as_mut(), prot & libc::PROT_EXEC as u32 != 0) {
            let f = file.as_deref();
            t.map_path(&crate::cfi::ProcMapping {
                pid,
                start,
                end: start + len,
                pgoff,
                path: &path,
                file: f,
                build_id: kernel_bid.as_deref(),
            });
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
                vdso,
            },
            time,
            MappingSource::Mmap,
        )?;
        Ok(())
    }

    /// A process's exit (EXIT of its leader): its state forgotten, and its EXIT record
    /// written (the launched command's once waitpid gives its exit code).
    fn process_exited(&mut self, pid: u32, time: u64) -> Result<()> {
        if let Some(t) = self.cfi.as_mut() {
            t.forget(pid);
        }
        if self.probes.alloc_sessions() {
            self.probes.forget_session_pid(pid as i32);
        }
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
        Ok(())
    }

    /// Side-band records the kernel lost (its ring buffer was full): counted, and a Lost
    /// record.
    fn side_band_lost(&mut self, count: u64, cpu: u32) -> Result<()> {
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
        Ok(())
    }

    /// Writes a `ProbeChange` record.
    pub fn probe_change(&mut self, pc: ebtrace_proto::v1::ProbeChange) -> Result<()> {
        self.w.write_record(&Record {
            kind: Some(Kind::ProbeChange(pc)),
        })?;
        Ok(())
    }

    /// A child held stopped at its fork (alloc_fork, `stopped`) or not: attach its links and
    /// continue it. One that could not be held is attached late, which the trace marks.
    pub(super) fn held_child(&mut self, pid: u32, stopped: bool, fork_ns: u64) -> Result<()> {
        if stopped {
            self.attach_child(pid);
            return Ok(());
        }
        let g = self.gen_at(pid, fork_ns).unwrap_or(0);
        self.follow_sessions(pid, g, fork_ns)
    }

    /// Attaches a held child's links (once) and continues it (SIGCONT, whether or not the
    /// attach worked: a child must never stay stopped because of ebrec).
    fn attach_child(&mut self, pid: u32) {
        // Once per process (the hold event and the side band's fork both come here), and
        // anew for a new process that got the pid of an old one whose exit is not read yet.
        let start = procfs::start_ticks(pid);
        if start.is_some() && self.children_attached.get(&pid) == start.as_ref() {
            return;
        }
        self.probes.forget_session_pid(pid as i32);
        if let Some(t) = start {
            self.children_attached.insert(pid, t);
        }
        if let Err(e) = self.probes.attach_sessions(pid as i32) {
            if std::path::Path::new(&format!("/proc/{pid}")).exists() {
                eprintln!("ebrec: --alloc: pid {pid}: {e:#}");
                self.never_attached += 1;
                self.late_attachments += 1;
            }
        }
        // SAFETY: kill has no memory preconditions.
        unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    }

    /// --alloc-probes session: a uprobe_multi link with a pid covers that process only, so
    /// a new child gets its own links when its fork is read here, some milliseconds after
    /// it started: the trace says since when its allocations were not seen.
    fn follow_sessions(&mut self, pid: u32, generation: u32, fork_ns: u64) -> Result<()> {
        let attached = self.probes.attach_sessions(pid as i32);
        let now = procfs::clock_ns(libc::CLOCK_BOOTTIME);
        self.late_attachments += 1;
        let reason = match attached {
            Ok(()) => format!(
                "uprobe sessions follow a new process by hand: pid {pid} probed {:.1} ms after its fork",
                now.saturating_sub(fork_ns) as f64 / 1e6
            ),
            Err(e) => {
                self.never_attached += 1;
                let gone = !std::path::Path::new(&format!("/proc/{pid}")).exists();
                if gone {
                    format!("pid {pid} exited before its allocator probes could be attached (uprobe sessions follow a new process by hand): none of its allocations were seen")
                } else {
                    eprintln!("ebrec: --alloc: pid {pid}: {e:#}");
                    format!("pid {pid}: the allocator probes could not be attached: {e:#}")
                }
            }
        };
        self.probe_change(ebtrace_proto::v1::ProbeChange {
            time_ns: now,
            family: EventFamily::Alloc as i32,
            kind: ebtrace_proto::v1::ProbeChangeKind::AttachedLate as i32,
            generation,
            since_ns: fork_ns,
            reason,
            ..Default::default()
        })?;
        Ok(())
    }
}
