//! Process generations (a pid's life between two execs) and their mappings: snapshots of
//! running processes, build-ids and unwind tables of the mapped files, exits.
use super::*;

/// Who a generation's process is and where it runs, as its Process record says: kept to
/// write the record again in a rotation's new file.
#[derive(Debug, Clone, Default)]
pub(super) struct Ident {
    /// The process's start (its fork, not its exec; boottime ns), 0 if unknown: tells
    /// whether a pid is still this process when /proc is read again (at an exec).
    pub started_ns: u64,
    pub ppid: u32,
    pub pid_ns: u64,
    pub ns_pid: u32,
    pub ns_pids: Vec<u32>,
    /// String id of the cgroup v2 path.
    pub cgroup: u64,
    pub container_id: String,
}

/// What a new generation starts as (`Session::new_gen`): its Process record's start,
/// names and [`Ident`].
#[derive(Debug, Clone)]
pub(super) struct GenStart {
    /// When the generation began (its fork or exec, or the process's start for a
    /// snapshot; boottime ns).
    pub start_ns: u64,
    /// String id of the command name.
    pub comm: u64,
    /// String id of the executable's path.
    pub exe: u64,
    /// String ids of the command line's arguments.
    pub cmdline: Vec<u64>,
    pub ident: Ident,
}

impl Session<'_> {
    pub(super) fn new_gen(&mut self, pid: u32, start: GenStart) -> u32 {
        let GenStart {
            start_ns,
            comm,
            exe,
            cmdline,
            ident,
        } = start;
        self.gens.push(Gen {
            start_ns,
            comm,
            exe,
            cmdline,
            ident,
            maps: Vec::new(),
            exec: Vec::new(),
        });
        let id = self.gens.len() as u32;
        self.by_pid.entry(pid).or_default().push(id);
        id
    }
    /// The [`Ident`] of a process from what /proc said of it (`info`: empty when it was
    /// gone, or another process), with the process's start `started_ns` and parent `ppid`
    /// when known (the fork's: /proc's may be a reaper's by now; else 0, /proc's).
    pub(super) fn ident_of(
        &mut self,
        info: Option<&procfs::ProcInfo>,
        ppid: u32,
        started_ns: u64,
    ) -> Result<Ident> {
        let Some(info) = info else {
            return Ok(Ident {
                started_ns,
                ppid,
                ..Default::default()
            });
        };
        Ok(Ident {
            started_ns,
            ppid: if ppid != 0 { ppid } else { info.ppid },
            pid_ns: info.pid_ns,
            ns_pid: info.ns_pid,
            ns_pids: info.ns_pids.clone(),
            cgroup: match &info.cgroup[..] {
                [] => 0,
                c => self.w.intern_string(c)?,
            },
            container_id: info.container_id.clone(),
        })
    }
    /// The Process record that describes generation `g` of `pid` (`event` at `time`).
    pub(super) fn process_record(
        &self,
        g: u32,
        pid: u32,
        event: ProcessEvent,
        time: u64,
        parent_generation: u32,
    ) -> Process {
        let gen = &self.gens[g as usize - 1];
        let i = &gen.ident;
        Process {
            generation: g,
            pid,
            start_time_ns: gen.start_ns,
            ppid: i.ppid,
            comm: gen.comm,
            exe: gen.exe,
            cmdline: gen.cmdline.clone(),
            pid_ns: i.pid_ns,
            event: event as i32,
            time_ns: time,
            parent_generation,
            exit_code: 0,
            ns_pid: i.ns_pid,
            cgroup: i.cgroup,
            container_id: i.container_id.clone(),
            ns_pids: i.ns_pids.clone(),
        }
    }
    /// Writes the Process record of generation `g` (see [`Self::process_record`]).
    pub(super) fn write_process(
        &mut self,
        g: u32,
        pid: u32,
        event: ProcessEvent,
        time: u64,
        parent_generation: u32,
    ) -> Result<()> {
        let p = self.process_record(g, pid, event, time, parent_generation);
        self.w.write_record(&Record {
            kind: Some(Kind::Process(p)),
        })?;
        Ok(())
    }
    /// The generation of `pid` at `time`.
    pub(super) fn gen_at(&self, pid: u32, time: u64) -> Option<u32> {
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
    pub(super) fn gen_or_snapshot(&mut self, pid: u32, time: u64) -> Result<u32> {
        if let Some(g) = self.gen_at(pid, time) {
            return Ok(g);
        }
        self.snapshot(pid, time)
    }
    /// Records a running process as an EXISTING generation with its current maps.
    pub fn snapshot(&mut self, pid: u32, now: u64) -> Result<u32> {
        let info = procfs::proc_info(pid).ok();
        let i = info.clone().unwrap_or_default();
        let comm = self.w.intern_string(&i.comm)?;
        let exe = self.w.intern_string(&i.exe)?;
        let cmdline = i
            .cmdline
            .iter()
            .map(|a| self.w.intern_string(a))
            .collect::<Result<Vec<_>, _>>()?;
        let start_ns = boot_of_ticks(i.start_ticks);
        let ident = self.ident_of(info.as_ref(), 0, start_ns)?;
        let g = self.new_gen(
            pid,
            GenStart {
                start_ns,
                comm,
                exe,
                cmdline,
                ident,
            },
        );
        self.write_process(g, pid, ProcessEvent::Existing, now, 0)?;
        for m in procfs::maps(pid).unwrap_or_default() {
            if m.perms & 4 == 0 || m.path.is_empty() {
                continue;
            }
            let file = m.path.starts_with(b"/").then(|| {
                let mf = PathBuf::from(format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end));
                if mf.exists() {
                    mf
                } else {
                    procfs::path_in(pid, &m.path)
                }
            });
            if let Some(t) = self.cfi.as_mut() {
                t.map_path(&crate::cfi::ProcMapping {
                    pid,
                    start: m.start,
                    end: m.end,
                    pgoff: m.offset,
                    path: &m.path,
                    file: file.as_deref(),
                    build_id: None,
                });
            }
            let vdso = is_vdso(&m.path, m.start, m.end);
            let bid = match &file {
                _ if vdso => 0,
                Some(file) => {
                    let bid =
                        self.build_id_of(m.dev, m.inode, &m.path, || ebtrace_elf::build_id(file))?;
                    self.unwind_tables(bid, file)?;
                    bid
                }
                None => 0,
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
                    vdso,
                },
                now,
                MappingSource::Snapshot,
            )?;
        }
        if let Some(t) = self.cfi.as_mut() {
            t.flush();
        }
        Ok(g)
    }
    pub(super) fn build_id_of(
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
    pub(super) fn add_mapping(
        &mut self,
        g: u32,
        m: MapRec,
        time: u64,
        source: MappingSource,
    ) -> Result<()> {
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
    pub(super) fn write_mapping(
        &mut self,
        g: u32,
        m: &MapRec,
        time: u64,
        source: MappingSource,
    ) -> Result<()> {
        let build_id = if m.vdso {
            self.vdso_image()?
        } else {
            m.build_id
        };
        self.w.write_record(&Record {
            kind: Some(Kind::Mapping(Mapping {
                generation: g,
                start: m.start,
                end: m.end,
                file_offset: m.offset,
                path: m.path,
                build_id,
                inode: m.inode,
                dev: m.dev,
                perms: m.perms,
                time_ns: time,
                source: source as i32,
            })),
        })?;
        Ok(())
    }
    /// The build-id id of the vDSO, its `VdsoImage` record written first if the current
    /// file does not have it yet (once per file); 0 when ebrec has no vDSO image with a
    /// build-id.
    pub(super) fn vdso_image(&mut self) -> Result<u64> {
        if self.vdso_written != 0 {
            return Ok(self.vdso_written);
        }
        let Some((image, build_id)) = own_vdso() else {
            return Ok(0);
        };
        let id = self.w.intern_build_id(build_id)?;
        self.w.write_record(&Record {
            kind: Some(Kind::VdsoImage(VdsoImage {
                build_id: id,
                image: image.to_vec(),
            })),
        })?;
        self.vdso_written = id;
        Ok(id)
    }
    pub(super) fn awaiting_code(&self, pid: u32) -> bool {
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
    /// Writes the unwind tables of the binary `file` (build-id id `bid`) once.
    pub(super) fn unwind_tables(&mut self, bid: u64, file: &std::path::Path) -> Result<()> {
        if !self.unwind_info || bid == 0 || !self.unwind_written.insert(bid) {
            return Ok(());
        }
        if let Some(t) = ebtrace_elf::eh_frame_sections(file) {
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
                        .flat_map(|s| [s.vaddr, s.offset, s.filesz])
                        .collect(),
                })),
            })?;
        }
        Ok(())
    }
}

/// ebrec's own vDSO image and its build-id, read once; None without a vDSO or a build-id
/// note (nothing to key it by).
fn own_vdso() -> Option<(&'static [u8], &'static [u8])> {
    static VDSO: std::sync::OnceLock<Option<(&'static [u8], Vec<u8>)>> = std::sync::OnceLock::new();
    let v = VDSO.get_or_init(|| {
        let image = crate::elf::own_vdso_image()?;
        let id = ebtrace_elf::Elf::from_bytes("[vdso]", image)
            .ok()?
            .build_id()
            .filter(|b| !b.is_empty())?;
        Some((image, id))
    });
    v.as_ref().map(|(i, b)| (*i, &b[..]))
}

/// Whether the mapping [start, end) at `path` is a vDSO that ebrec's own image stands for:
/// `[vdso]` of a 64-bit process (mapped above 4 GiB; a 32-bit process's vDSO is another
/// image, mapped below) and of the same size.
pub(super) fn is_vdso(path: &[u8], start: u64, end: u64) -> bool {
    path == b"[vdso]"
        && start >= 1 << 32
        && own_vdso().is_some_and(|(image, _)| end.checked_sub(start) == Some(image.len() as u64))
}
