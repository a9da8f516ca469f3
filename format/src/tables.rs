//! [`Tables`]: the definitions a reader has seen (strings, build-ids, stacks, processes,
//! mappings), to turn the ids in events back into meaning.
use ebtrace_proto::v1::{
    record::Kind, Mapping, MappingSource, Process, ProcessEvent, Record, Stack,
};
use std::collections::HashMap;

/// One process generation as reconstructed from its `Process` records.
#[derive(Debug, Clone, Default)]
pub struct GenerationInfo {
    /// The record that started it (EXISTING, FORK or EXEC).
    pub process: Process,
    /// Exit time and code, if it exited during the recording.
    pub exit: Option<(u64, i32)>,
    /// Mappings in the order they were recorded.
    pub mappings: Vec<Mapping>,
}

/// Definitions gathered from the record stream; feed every record to [`Tables::observe`].
#[derive(Debug, Default)]
pub struct Tables {
    pub strings: HashMap<u64, Vec<u8>>,
    pub build_ids: HashMap<u64, Vec<u8>>,
    /// By id, hashed fast: a compiler's trace defines a hundred thousand stacks.
    pub stacks: crate::hash::FastMap<u64, Stack>,
    pub generations: HashMap<u32, GenerationInfo>,
    /// Thread names by (generation, tid): (since, string id), in the order written.
    pub threads: HashMap<(u32, u32), Vec<(u64, u64)>>,
    /// Records that referenced an id that was not defined (yet), e.g. after a corrupt chunk.
    pub dangling: u64,
}

impl Tables {
    /// [`Tables::observe`] of a record the caller is done with: a stack or a string is
    /// moved in, not copied (a compiler's trace holds a hundred thousand stacks of a hundred
    /// addresses). Gives the record back when it defines nothing.
    pub fn take(&mut self, r: Record) -> Option<Record> {
        match r.kind {
            Some(Kind::Stack(mut s)) => {
                // Decoded into vectors grown by doubling: held at their length.
                s.user_ips.shrink_to_fit();
                s.kernel_ips.shrink_to_fit();
                self.stacks.insert(s.id, s);
                None
            }
            Some(Kind::String(s)) => {
                self.strings.insert(s.id, s.value);
                None
            }
            kind => {
                let r = Record { kind };
                if self.observe(&r) {
                    None
                } else {
                    Some(r)
                }
            }
        }
    }

    /// Remembers the definition in `r`, if it is one. Returns true if it was.
    pub fn observe(&mut self, r: &Record) -> bool {
        match &r.kind {
            Some(Kind::String(s)) => {
                self.strings.insert(s.id, s.value.clone());
            }
            Some(Kind::BuildId(b)) => {
                self.build_ids.insert(b.id, b.value.clone());
            }
            Some(Kind::Stack(s)) => {
                self.stacks.insert(s.id, s.clone());
            }
            Some(Kind::Process(p)) => {
                if p.event() == ProcessEvent::Exit {
                    match self.generations.get_mut(&p.generation) {
                        Some(g) => g.exit = Some((p.time_ns, p.exit_code)),
                        None => {
                            self.dangling += 1;
                            self.generations.insert(
                                p.generation,
                                GenerationInfo {
                                    process: p.clone(),
                                    exit: Some((p.time_ns, p.exit_code)),
                                    mappings: Vec::new(),
                                },
                            );
                        }
                    }
                } else {
                    let g = self.generations.entry(p.generation).or_default();
                    g.process = p.clone();
                }
            }
            Some(Kind::Thread(t)) => {
                let v = self.threads.entry((t.generation, t.tid)).or_default();
                // the same name again (each file of a rotation, a window) is no new entry
                if v.last().map(|l| l.1) != Some(t.name) {
                    v.push((t.time_ns, t.name));
                    if v.len() > 1 && v[v.len() - 2].0 > t.time_ns {
                        v.sort_by_key(|x| x.0);
                    }
                }
            }
            Some(Kind::Mapping(m)) => {
                self.generations
                    .entry(m.generation)
                    .or_default()
                    .mappings
                    .push(*m);
            }
            _ => return false,
        }
        true
    }

    /// The string with id `id`, lossily as UTF-8 ("" for 0 or unknown).
    pub fn string(&self, id: u64) -> std::borrow::Cow<'_, str> {
        match self.strings.get(&id) {
            Some(v) => String::from_utf8_lossy(v),
            None => "".into(),
        }
    }

    /// The name of thread `tid` of `generation` at `time_ns`: the last name given at or
    /// before then (the first one, for an earlier time); None when the trace names no
    /// such thread (an older trace, or a thread gone before the recorder read its name).
    pub fn thread_name(&self, generation: u32, tid: u32, time_ns: u64) -> Option<&[u8]> {
        let v = self.threads.get(&(generation, tid))?;
        let at = v.partition_point(|&(t, _)| t <= time_ns);
        let (_, id) = v[at.saturating_sub(1)];
        self.strings.get(&id).map(|s| s.as_slice())
    }

    /// The build-id with id `id` as lowercase hex ("" for 0 or unknown).
    pub fn build_id_hex(&self, id: u64) -> String {
        self.build_ids.get(&id).map(|b| hex(b)).unwrap_or_default()
    }

    /// The mapping of `generation` that covers `addr` at `time_ns`: the latest recorded
    /// one not after `time_ns` (or the earliest, for events before the first snapshot),
    /// unless an UNMAP of the range came after it.
    pub fn mapping_at(&self, generation: u32, addr: u64, time_ns: u64) -> Option<&Mapping> {
        let g = self.generations.get(&generation)?;
        let covering = g
            .mappings
            .iter()
            .filter(|m| m.start <= addr && addr < m.end);
        // max_by_key keeps the last of equals: of two records at the same time, the later.
        let best = covering
            .clone()
            .filter(|m| m.time_ns <= time_ns)
            .max_by_key(|m| m.time_ns)
            .or_else(|| covering.min_by_key(|m| m.time_ns));
        best.filter(|m| m.source() != MappingSource::Unmap)
    }
}

/// The path of the page the kernel maps into a process for its uprobes (its "xol area",
/// mapped at the first probe hit): slot 0 holds the return-probe trampoline, the other
/// slots the instructions that probes single-step out of line.
pub const UPROBES_PATH: &[u8] = b"[uprobes]";

/// Bytes of one slot of the uprobes page (the kernel's `UPROBE_XOL_SLOT_BYTES` on x86).
pub const UPROBES_SLOT_BYTES: u64 = 128;

/// What a frame in the uprobes page is ([`Tables::uprobes_frame`]): kernel code, no
/// function of the program, named for what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum UprobesFrame {
    /// The return-probe trampoline: a uretprobe swapped a return address for it (kernels
    /// before 6.14 leave it in frame-pointer stacks), or the thread was in it, returning
    /// through a pending return probe.
    ReturnTrampoline,
    /// An instruction of a probed function, single-stepped out of line.
    SingleStepSlot,
}

impl UprobesFrame {
    /// How a report names the frame.
    pub fn name(self) -> &'static str {
        match self {
            UprobesFrame::ReturnTrampoline => "[uprobes] return trampoline",
            UprobesFrame::SingleStepSlot => "[uprobes] single-step slot",
        }
    }
}

impl Tables {
    /// What the frame at recorded address `ip` is when `m`, the mapping that holds `ip`,
    /// is the uprobes page; None for any other mapping. `ip` is the recorded address, not
    /// the one looked up: a return address that is the trampoline is the page's first
    /// byte, and `ip - 1` lies before it.
    pub fn uprobes_frame(&self, m: &Mapping, ip: u64) -> Option<UprobesFrame> {
        if self.strings.get(&m.path).map(Vec::as_slice) != Some(UPROBES_PATH) {
            return None;
        }
        Some(if ip.wrapping_sub(m.start) < UPROBES_SLOT_BYTES {
            UprobesFrame::ReturnTrampoline
        } else {
            UprobesFrame::SingleStepSlot
        })
    }
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}
