//! Rotation: the current file ends and a new one starts that defines again the live
//! processes, their maps and the `--func` functions, so each file reads on its own.
use super::*;

impl Session<'_> {
    /// Goes on in `next` (--rotate): finishes the current file with `trailer`, then defines
    /// again in the new one what its events will refer to — the processes (alive, or ended
    /// in the last 10 s: late events may still come) with their maps, the --func functions —
    /// so that each file reads on its own. Generation ids stay the same across files.
    pub fn rotate(
        &mut self,
        next: TraceWriter<BufWriter<File>>,
        trailer: Trailer,
        now: u64,
    ) -> Result<()> {
        let strings: HashMap<u64, Vec<u8>> = self
            .w
            .interned_strings()
            .map(|(id, b)| (id, b.to_vec()))
            .collect();
        let bids: HashMap<u64, Vec<u8>> = self
            .w
            .interned_build_ids()
            .map(|(id, b)| (id, b.to_vec()))
            .collect();
        let old = std::mem::replace(&mut self.w, next);
        old.close(Some(trailer))?;
        let w = &mut self.w;
        let mut s = |id: u64| -> Result<u64> {
            Ok(match strings.get(&id) {
                Some(b) if id != 0 => w.intern_string(b)?,
                _ => 0,
            })
        };
        let mut pid_of = HashMap::new();
        for (&pid, ids) in &self.by_pid {
            for &g in ids {
                pid_of.insert(g, pid);
            }
        }
        let mut keep = Vec::new();
        for (i, g) in self.gens.iter_mut().enumerate() {
            let id = i as u32 + 1;
            let pid = pid_of.get(&id).copied().unwrap_or(0);
            let ended = self.exited.get(&pid).copied();
            let latest = self.by_pid.get(&pid).and_then(|v| v.last()) == Some(&id);
            if !latest || ended.is_some_and(|t| now.saturating_sub(t) > 10_000_000_000) {
                // Not in the new file: nothing of it is kept but its slot (generation ids
                // stay the same), so that a long recording of short-lived processes (the
                // agent's windows) does not grow with every process it has seen.
                g.comm = 0;
                g.exe = 0;
                g.cmdline = Vec::new();
                g.maps = Vec::new();
                g.exec = Vec::new();
                g.ident = Default::default();
                continue;
            }
            g.comm = s(g.comm)?;
            g.exe = s(g.exe)?;
            g.ident.cgroup = s(g.ident.cgroup)?;
            for a in g.cmdline.iter_mut() {
                *a = s(*a)?;
            }
            for m in g.maps.iter_mut() {
                m.path = s(m.path)?;
            }
            keep.push((id, pid, ended));
        }
        // Thread names: written again at each thread's next event; those of the processes
        // left out above are forgotten.
        let kept: HashSet<u32> = keep.iter().map(|k| k.0).collect();
        self.threads.new_file(|g| kept.contains(&g));
        // Processes gone for good: forgotten (a pid used again is a new process).
        let kept: HashSet<u32> = keep.iter().map(|k| k.1).collect();
        self.by_pid.retain(|pid, _| kept.contains(pid));
        self.exited.retain(|pid, _| kept.contains(pid));
        self.children_attached.retain(|pid, _| kept.contains(pid));
        for m in self.gens.iter_mut().flat_map(|g| g.maps.iter_mut()) {
            m.build_id = match bids.get(&m.build_id) {
                Some(b) if m.build_id != 0 => self.w.intern_build_id(b)?,
                _ => 0,
            };
        }
        for v in self.build_ids.values_mut() {
            *v = match bids.get(v) {
                Some(b) if *v != 0 => self.w.intern_build_id(b)?,
                _ => 0,
            };
        }
        self.unwind_written.clear();
        self.agg.new_file();
        self.vdso_written = 0;
        self.devices_written.clear();
        self.tcp_written.clear();
        self.kernel.forget_written();
        self.clock_sync()?;
        for (id, pid, ended) in keep {
            self.write_process(id, pid, ProcessEvent::Existing, now, 0)?;
            let g = &self.gens[id as usize - 1];
            for m in g.maps.clone() {
                self.write_mapping(id, &m, now, MappingSource::Snapshot)?;
            }
            if let Some(t) = ended {
                self.write_exit(pid, t, 0)?;
            }
        }
        for (id, m, bid) in std::mem::take(&mut self.probed) {
            self.probed_function(id, &m, &bid)?;
        }
        for p in std::mem::take(&mut self.probed_usdt) {
            self.probed_usdt(&p)?;
        }
        Ok(())
    }
}
