//! The kallsyms entries a trace's kernel frames need, so ebsym names kernel frames offline,
//! on another machine, without this kernel's /proc/kallsyms.
//!
//! /proc/kallsyms is read once, on its own thread started once the programs are loaded
//! (their `bpf_prog_…` symbols name the tracer's frames): [`Needed::prefetch`]. A debug
//! build takes 230 ms, a release one about 40, which the recording loop once paid at its
//! first kernel frame with the targets running (and off-CPU learns in that loop that a
//! thread has no rseq). For each new kernel
//! stack, the entry covering each frame (and, for return addresses, the frame - 1, which is
//! what a symbolizer looks up) is queued once; `take_pending` hands them to the writer,
//! which stores them as KernelSymbols records as the recording goes (so a recording cut
//! short still names its kernel frames). A reader takes the greatest stored start <= the
//! address: since the true covering entry is always stored, that is always the right one.
use std::collections::HashSet;

#[derive(Debug, Default)]
struct Table {
    /// (start address, name offset in `names`, name length, module index + 1 or 0)
    entries: Vec<(u64, u32, u16, u16)>,
    names: String,
    modules: Vec<String>,
}

impl Table {
    fn read() -> Option<Table> {
        let text = std::fs::read_to_string("/proc/kallsyms").ok()?;
        let mut t = Table::default();
        for line in text.lines() {
            let mut it = line.split_ascii_whitespace();
            let (Some(addr), Some(kind), Some(name)) = (it.next(), it.next(), it.next()) else {
                continue;
            };
            // Text symbols only: frames are code addresses.
            if !matches!(kind, "t" | "T" | "w" | "W") {
                continue;
            }
            let Ok(addr) = u64::from_str_radix(addr, 16) else {
                continue;
            };
            if addr == 0 || name.len() > u16::MAX as usize {
                continue;
            }
            let module = match it.next() {
                Some(m) => {
                    let m = m.trim_start_matches('[').trim_end_matches(']');
                    match t.modules.iter().position(|x| x == m) {
                        Some(i) => i + 1,
                        None => {
                            t.modules.push(m.to_string());
                            t.modules.len()
                        }
                    }
                }
                None => 0,
            };
            let off = t.names.len() as u32;
            t.names.push_str(name);
            t.entries.push((
                addr,
                off,
                name.len() as u16,
                module.min(u16::MAX as usize) as u16,
            ));
        }
        if t.entries.is_empty() {
            return None; // kptr_restrict hides the addresses
        }
        t.entries.sort_by_key(|e| e.0);
        Some(t)
    }

    /// Entry `i`'s name and module ("" for vmlinux).
    fn entry(&self, i: usize) -> (u64, &str, &str) {
        let (a, off, len, m) = self.entries[i];
        let name = &self.names[off as usize..off as usize + len as usize];
        let module = if m == 0 {
            ""
        } else {
            self.modules[m as usize - 1].as_str()
        };
        (a, name, module)
    }

    fn covering(&self, addr: u64) -> Option<usize> {
        let i = self.entries.partition_point(|e| e.0 <= addr);
        i.checked_sub(1)
    }
}

/// The table, read (or its prefetch joined) at the first call; None when hidden.
fn table<'t>(
    table: &'t mut Option<Option<Table>>,
    loading: &mut Option<std::thread::JoinHandle<Option<Table>>>,
) -> Option<&'t Table> {
    table
        .get_or_insert_with(|| match loading.take() {
            Some(h) => h.join().ok().flatten(),
            None => Table::read(),
        })
        .as_ref()
}

/// The entries needed so far and those not yet written.
#[derive(Debug, Default)]
pub struct Needed {
    table: Option<Option<Table>>,
    /// The read started by [`Needed::prefetch`], taken at the first need.
    loading: Option<std::thread::JoinHandle<Option<Table>>>,
    written: HashSet<usize>,
    pending: Vec<usize>,
}

impl Needed {
    /// Starts reading /proc/kallsyms on its own thread (read at the first need otherwise).
    pub fn prefetch() -> Needed {
        let loading = std::thread::Builder::new()
            .name("ebrec-kallsyms".into())
            .spawn(Table::read)
            .ok();
        Needed {
            loading,
            ..Default::default()
        }
    }

    /// Queues the entries covering `frames` (a kernel stack, leaf first).
    pub fn note(&mut self, frames: &[u64]) {
        let Some(t) = table(&mut self.table, &mut self.loading) else {
            return;
        };
        for (i, &ip) in frames.iter().enumerate() {
            let lookups = if i == 0 {
                [ip, ip]
            } else {
                [ip, ip.wrapping_sub(1)]
            };
            for a in lookups {
                if let Some(e) = t.covering(a) {
                    if self.written.insert(e) {
                        self.pending.push(e);
                    }
                }
            }
        }
    }

    /// `frames` without the tracer's own frames at the top: a stack taken inside a BPF
    /// program attached to a tracepoint starts with the program and the tracepoint's
    /// dispatch (`bpf_prog_…`, `bpf_trace_run4`, `__bpf_trace_…`, `__traceiter_…`).
    pub fn strip_tracer<'f>(&mut self, frames: &'f [u64]) -> &'f [u64] {
        let Some(t) = table(&mut self.table, &mut self.loading) else {
            return frames;
        };
        let tracer = |ip: u64| {
            t.covering(ip).is_some_and(|i| {
                let name = t.entry(i).1;
                ["bpf_prog_", "bpf_trace_run", "__bpf_trace_", "__traceiter_"]
                    .iter()
                    .any(|p| name.starts_with(p))
            })
        };
        let skip = frames.iter().take_while(|&&ip| tracer(ip)).count();
        &frames[skip..]
    }

    /// Forgets what was written (a new file needs its own entries).
    pub fn forget_written(&mut self) {
        self.written.clear();
        self.pending.clear();
    }

    /// Whether kernel symbols are unavailable (/proc/kallsyms unreadable or hidden).
    pub fn unavailable(&self) -> bool {
        matches!(self.table, Some(None))
    }

    /// The queued entries, sorted by address: (start, name, module or "").
    pub fn take_pending(&mut self) -> Option<Vec<(u64, &str, &str)>> {
        if self.pending.is_empty() {
            return None;
        }
        let t = self.table.as_ref()?.as_ref()?;
        let mut idx = std::mem::take(&mut self.pending);
        idx.sort_unstable();
        Some(idx.into_iter().map(|i| t.entry(i)).collect())
    }
}
