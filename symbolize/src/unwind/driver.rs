//! The trace driver: the stack copies of a trace unwound as its records stream by. It
//! picks each frame's mapping ([`crate::mapping`]), loads each module's tables once (from
//! the trace's `UnwindTables`, else from the files the [`Locator`] finds) and walks the
//! copies in parallel batches ([`super::walk`]).
use super::tables::UnwindInfo;
use super::walk::{unwind, Mapped, Stop, Unwound, MAX_FRAMES};
use crate::find::Locator;
use crate::mapping::mapping_for;
use ebtrace_format::proto::{record::Kind, Record, UnwindTables};
use ebtrace_format::Tables;
use rayon::prelude::*;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;

/// What unwinding the stack copies of a trace gave: see [`TraceUnwinder`].
#[derive(Debug, Clone, Default)]
pub struct TraceUnwind {
    /// By stack id: the walk, and the text of its stop reason ("" when it reached the
    /// outermost frame), as written in `UnwoundStack.stop_reason`.
    pub stacks: BTreeMap<u64, (Unwound, String)>,
    pub summary: UnwindSummary,
}

/// Counts of a trace's unwinding, for people.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnwindSummary {
    /// Stacks with a copy that were unwound.
    pub stacks: u64,
    /// Of those, walked to their outermost frame.
    pub complete: u64,
    /// Frames found, and of those, by the frame-pointer chain.
    pub frames: u64,
    pub fp_frames: u64,
    /// Stacks cut short, by reason text.
    pub stops: BTreeMap<String, u64>,
    /// Modules whose tables came from the trace's `UnwindTables`, and from files found on
    /// disk (or debuginfod).
    pub tables_in_trace: u64,
    pub tables_from_files: u64,
    /// Recorded paths of the modules with no tables (frame pointers only there).
    pub no_tables: Vec<String>,
}

impl UnwindSummary {
    /// One line for stderr: `unwound N stacks: M complete, F frames (K by frame pointers);
    /// cut short: reason (n), …; tables: T in the trace, D from files, none for …`.
    pub fn summary_line(&self) -> String {
        let mut s = format!(
            "unwound {} stacks: {} complete, {} frames ({} by frame pointers)",
            self.stacks, self.complete, self.frames, self.fp_frames
        );
        if !self.stops.is_empty() {
            let v: Vec<String> = self
                .stops
                .iter()
                .map(|(k, n)| format!("{k} ({n})"))
                .collect();
            s += &format!("; cut short: {}", v.join(", "));
        }
        s += &format!(
            "; tables: {} in the trace, {} from files",
            self.tables_in_trace, self.tables_from_files
        );
        if !self.no_tables.is_empty() {
            s += &format!(", none for {}", self.no_tables.join(", "));
        }
        s
    }
}

/// The text of a stop reason for the trace and the reports: [`Stop::reason`], and for
/// the reasons about a module, its file name (`module` is a path string id).
pub fn stop_text(stop: &Stop, tables: &Tables) -> String {
    match stop.module() {
        Some(path) => {
            let path = tables.string(path);
            let name = path.rsplit('/').next().unwrap_or(&path);
            let name = if name.is_empty() { "[anonymous]" } else { name };
            format!("{} in {name}", stop.reason())
        }
        None => stop.reason().to_string(),
    }
}

/// Unwinds the stacks of a trace as its records stream by: feed every record to
/// [`TraceUnwinder::observe`] after [`Tables::observe`], then call
/// [`TraceUnwinder::finish`].
///
/// Stacks with a copy are unwound in batches (in parallel; the result does not depend
/// on the number of threads) at the end, or whenever the copies waiting reach
/// [`TraceUnwinder::BATCH_BYTES`]; the copies are then dropped from the tables, so memory
/// holds at most one batch of copies. A module's tables come from its `UnwindTables`
/// record (by build-id id), else from its binary found by the locator (with the
/// `.debug_frame` of its debug file, when there is one); a module with neither is walked
/// by frame pointers. Stacks that the input already has an `UnwoundStack` for are left
/// out of the result.
pub struct TraceUnwinder<'l> {
    locator: &'l Locator,
    recorded: HashMap<u64, UnwindTables>,
    /// The trace's vDSO images (`VdsoImage`) by build-id id: their `.eh_frame`.
    images: HashMap<u64, Vec<u8>>,
    /// Tables by build-id id, None when there are none; loaded once.
    infos: HashMap<u64, Option<UnwindInfo>>,
    pending: Vec<u64>,
    pending_bytes: usize,
    already: HashSet<u64>,
    out: TraceUnwind,
}

impl fmt::Debug for TraceUnwinder<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceUnwinder")
            .field("pending", &self.pending.len())
            .field("summary", &self.out.summary)
            .finish_non_exhaustive()
    }
}

impl<'l> TraceUnwinder<'l> {
    /// Copies held before a batch is unwound (and dropped).
    pub const BATCH_BYTES: usize = 64 << 20;

    pub fn new(locator: &'l Locator) -> TraceUnwinder<'l> {
        TraceUnwinder {
            locator,
            recorded: HashMap::new(),
            images: HashMap::new(),
            infos: HashMap::new(),
            pending: Vec::new(),
            pending_bytes: 0,
            already: HashSet::new(),
            out: TraceUnwind::default(),
        }
    }

    /// Takes note of `record` (`tables` has observed it already).
    pub fn observe(&mut self, record: &Record, tables: &mut Tables) {
        match &record.kind {
            Some(Kind::UnwindTables(t)) => {
                self.recorded.entry(t.build_id).or_insert_with(|| t.clone());
            }
            Some(Kind::VdsoImage(v)) => {
                self.images
                    .entry(v.build_id)
                    .or_insert_with(|| v.image.clone());
            }
            Some(Kind::Stack(s)) => {
                if let Some(c) = &s.copy {
                    self.pending.push(s.id);
                    self.pending_bytes += c.data.len();
                    if self.pending_bytes >= Self::BATCH_BYTES {
                        self.flush(tables);
                    }
                }
            }
            Some(Kind::UnwoundStack(u)) => {
                self.already.insert(u.stack);
            }
            _ => {}
        }
    }

    /// Unwinds what is left and returns every stack unwound.
    pub fn finish(mut self, tables: &mut Tables) -> TraceUnwind {
        self.flush(tables);
        for id in &self.already {
            if let Some((u, text)) = self.out.stacks.remove(id) {
                let s = &mut self.out.summary;
                s.stacks -= 1;
                s.frames -= u.ips.len() as u64;
                s.fp_frames -= u64::from(u.fp_steps);
                if text.is_empty() {
                    s.complete -= 1;
                } else if let Some(n) = s.stops.get_mut(&text) {
                    *n -= 1;
                }
            }
        }
        self.out.summary.stops.retain(|_, n| *n > 0);
        self.out
    }

    fn flush(&mut self, tables: &mut Tables) {
        let mut ids = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        // A stack id defined twice (after damage) is unwound as last defined, once.
        ids.sort_unstable();
        ids.dedup();
        ids.retain(|id| tables.stacks.get(id).is_some_and(|s| s.copy.is_some()));
        if ids.is_empty() {
            return;
        }
        self.load(tables, &ids);
        let infos = &self.infos;
        let tables_ref: &Tables = tables;
        let walked: Vec<(u64, Unwound)> = ids
            .par_iter()
            .map(|&id| {
                let stack = &tables_ref.stacks[&id];
                let Some(copy) = stack.copy.as_ref() else {
                    return (id, Unwound::default());
                };
                let find = |addr: u64| {
                    let m = mapping_for(tables_ref, stack.generation, addr)?;
                    Some(Mapped {
                        start: m.start,
                        end: m.end,
                        file_offset: m.file_offset,
                        info: infos
                            .get(&m.build_id)
                            .and_then(Option::as_ref)
                            .filter(|_| m.build_id != 0),
                        module: m.path,
                    })
                };
                (id, unwind(copy, find, MAX_FRAMES))
            })
            .collect();
        for (id, u) in walked {
            let s = &mut self.out.summary;
            s.stacks += 1;
            s.frames += u.ips.len() as u64;
            s.fp_frames += u64::from(u.fp_steps);
            let text = match &u.stop {
                Some(stop) => {
                    let t = stop_text(stop, tables);
                    *s.stops.entry(t.clone()).or_default() += 1;
                    t
                }
                None => {
                    s.complete += 1;
                    String::new()
                }
            };
            self.out.stacks.insert(id, (u, text));
            // The copy is done with: memory holds one batch at a time.
            if let Some(stack) = tables.stacks.get_mut(&id) {
                stack.copy = None;
            }
        }
    }

    /// Loads the tables of every module not loaded yet that the processes of `ids` map:
    /// each executable mapping with a build-id (perms 0: not recorded, taken as
    /// executable).
    fn load(&mut self, tables: &Tables, ids: &[u64]) {
        let generations: BTreeSet<u32> =
            ids.iter().map(|id| tables.stacks[id].generation).collect();
        let mut wanted: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
        for g in &generations {
            let Some(info) = tables.generations.get(g) else {
                continue;
            };
            for m in &info.mappings {
                if m.build_id == 0
                    || (m.perms != 0 && m.perms & 4 == 0)
                    || self.infos.contains_key(&m.build_id)
                {
                    continue;
                }
                let path = tables.strings.get(&m.path).cloned().unwrap_or_default();
                let e = wanted.entry(m.build_id).or_insert_with(|| path.clone());
                if path < *e {
                    *e = path;
                }
            }
        }
        let loaded: Vec<(u64, Option<(UnwindInfo, bool)>)> = wanted
            .par_iter()
            .map(|(&id, path)| {
                let info =
                    load_tables(tables, &self.recorded, &self.images, self.locator, id, path);
                (id, info)
            })
            .collect();
        for (id, info) in loaded {
            let s = &mut self.out.summary;
            let info = match info {
                Some((info, true)) => {
                    s.tables_in_trace += 1;
                    Some(info)
                }
                Some((info, false)) => {
                    s.tables_from_files += 1;
                    Some(info)
                }
                None => {
                    s.no_tables
                        .push(String::from_utf8_lossy(&wanted[&id]).into_owned());
                    None
                }
            };
            self.infos.insert(id, info);
        }
    }
}

/// The tables of build-id id `id`, and whether they came from the trace.
fn load_tables(
    tables: &Tables,
    recorded: &HashMap<u64, UnwindTables>,
    images: &HashMap<u64, Vec<u8>>,
    locator: &Locator,
    id: u64,
    path: &[u8],
) -> Option<(UnwindInfo, bool)> {
    use std::os::unix::ffi::OsStrExt;
    if let Some(info) = recorded
        .get(&id)
        .and_then(|t| UnwindInfo::from_tables(t).ok())
    {
        return Some((info, true));
    }
    // The vDSO: its image is in the trace, `.eh_frame` included (build-id checked).
    let image_tables = || {
        let image = images.get(&id)?;
        let obj = object::File::parse(&image[..]).ok()?;
        let want = tables.build_ids.get(&id)?;
        (object::Object::build_id(&obj).ok().flatten()? == want.as_slice())
            .then(|| UnwindInfo::from_elf(image).ok())
            .flatten()
    };
    if let Some(info) = image_tables() {
        return Some((info, true));
    }
    let build_id = tables.build_ids.get(&id)?;
    let located = locator.locate(
        Some(build_id),
        std::path::Path::new(std::ffi::OsStr::from_bytes(path)),
        None,
    );
    let binary = located.binary.as_ref()?;
    let mut info = UnwindInfo::from_elf(binary.file.data()).ok()?;
    if let Some(d) = located
        .debug
        .as_ref()
        .filter(|d| d.file.path() != binary.file.path())
    {
        info.add_debug_frame(d.file.data());
    }
    Some((info, false))
}
