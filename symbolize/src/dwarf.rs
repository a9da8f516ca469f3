//! DWARF: loading the sections of a file (decompressing zlib/zstd `SHF_COMPRESSED`
//! sections), a dwz supplementary file, a `.dwp` package and `.dwo` files into an
//! [`addr2line::Context`] that owns its data, and looking up the frames of an address.
//!
//! Section data is read in place from the file's memory map (or from an owned buffer, when
//! it had to be decompressed), which the [`DwarfContext`] keeps, so it has no borrowed
//! lifetime and can be cached per build-id.
use crate::elf::ElfFile;
use memmap2::Mmap;
use object::{Object, ObjectSection};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Memory that section readers point into: a file's map, or a decompressed section.
/// Held, never read (the readers have the addresses).
#[derive(Debug, Clone)]
#[allow(dead_code)]
enum Backing {
    Map(Arc<Mmap>),
    Owned(Arc<[u8]>),
}

/// Everything the readers of one [`DwarfContext`] point into, kept until it is dropped
/// (files and decompressed sections; `.dwo` files are added as they are loaded).
#[derive(Debug, Default)]
struct Backings(Mutex<Vec<Backing>>);

impl Backings {
    fn keep(&self, b: Backing) {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(b);
    }
}

/// `[begin, end)` address ranges of line-table rows with their nonzero discriminator.
type DiscriminatorRanges = Vec<(u64, u64, u32)>;

/// The reader every DWARF structure of this crate uses: a plain slice (no reference count
/// to touch on every split, 24 bytes in each parsed function and inlined call). The
/// `'static` is a promise kept by [`DwarfContext`]: the slices point into the maps and
/// buffers of its `backings`, which it drops after everything that reads them.
pub type Reader = gimli::EndianSlice<'static, gimli::RunTimeEndian>;

fn empty(endian: gimli::RunTimeEndian) -> Reader {
    gimli::EndianSlice::new(&[], endian)
}

/// A `'static` view of `bytes`, whose backing `keep` holds.
fn hold(bytes: &[u8], backing: Backing, keep: &Backings) -> &'static [u8] {
    keep.keep(backing);
    // SAFETY: `bytes` lies in the map or buffer `backing` owns (a `Mmap` or an `Arc<[u8]>`
    // behind an `Arc`, which never moves its data), and `keep` holds that backing until
    // the `DwarfContext` that owns `keep` is dropped, after every reader of it (its
    // `backings` field is declared last). No reader leaves a `DwarfContext`: lookups copy
    // names and paths into owned strings.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr(), bytes.len()) }
}

fn endian(obj: &object::File<'_>) -> gimli::RunTimeEndian {
    if obj.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    }
}

/// Section `name` of `obj` (which must be parsed from `file.data()`), decompressed if needed;
/// empty if missing or NOBITS.
fn section(
    file: &ElfFile,
    obj: &object::File<'_>,
    name: Option<&str>,
    keep: &Backings,
) -> gimli::Result<Reader> {
    let endian = endian(obj);
    let Some(sec) = name.and_then(|n| obj.section_by_name(n)) else {
        return Ok(empty(endian));
    };
    if sec.kind() == object::SectionKind::UninitializedData {
        return Ok(empty(endian));
    }
    let data = crate::elf::section_data(&sec).map_err(|_| gimli::Error::Io)?;
    let bytes = match data {
        std::borrow::Cow::Borrowed(s) => {
            // A slice of the mapped file, normally; an empty section's slice may point
            // anywhere (found by fuzzing), so anything outside the map is copied.
            let base = file.data().as_ptr() as usize;
            match (s.as_ptr() as usize).checked_sub(base) {
                Some(start) if start.saturating_add(s.len()) <= file.data().len() => {
                    hold(s, Backing::Map(file.map().clone()), keep)
                }
                _ => {
                    let owned: Arc<[u8]> = Arc::from(s);
                    hold(&owned, Backing::Owned(owned.clone()), keep)
                }
            }
        }
        std::borrow::Cow::Owned(v) => {
            let owned: Arc<[u8]> = Arc::from(v);
            hold(&owned, Backing::Owned(owned.clone()), keep)
        }
    };
    Ok(gimli::EndianSlice::new(bytes, endian))
}

fn load_dwarf(file: &ElfFile, dwo: bool, keep: &Backings) -> Result<gimli::Dwarf<Reader>, String> {
    let obj = file.object().map_err(|e| e.to_string())?;
    let d = gimli::Dwarf::load(|id| {
        let name = if dwo { id.dwo_name() } else { Some(id.name()) };
        section(file, &obj, name, keep)
    })
    .map_err(|e| e.to_string())?;
    Ok(d)
}

/// Where split DWARF is looked for.
#[derive(Debug, Clone, Default)]
pub struct SplitDwarfPlaces {
    /// Directories tried for a `.dwo` file's base name when its recorded path fails
    /// (the binary's directory, the debug dirs).
    pub dwo_dirs: Vec<PathBuf>,
}

/// An address → frames resolver for one DWARF file, with its supplementary file, `.dwp`
/// package and `.dwo` files.
///
/// `addr2line::Context` parses units lazily through `OnceCell`s, so it is `Send` but not
/// `Sync`. A `DwarfContext` deals the compilation units out to a few "slots" (one per
/// thread) and gives each slot its own context over one shared `gimli::Dwarf`, made on
/// first use: an address goes to the slot of the unit whose ranges hold it, so lookups in
/// different slots run in parallel and each unit's line table and functions are parsed
/// by one context only. Slices of the text would not do: every unit of a large C++
/// program also has code in `.text.unlikely` (its `.cold` parts) and `.text.startup`, so
/// the slot of those sections would parse every unit again (protoc at 2 threads: 241 MiB
/// instead of 112). Each context still reads every unit's header for itself.
pub struct DwarfContext {
    dwarf: Arc<gimli::Dwarf<Reader>>,
    /// The address ranges of the units, sorted by start, with the slot of their unit.
    unit_slots: Vec<(u64, u64, u32)>,
    slots: Vec<Mutex<Option<addr2line::Context<Reader>>>>,
    dwp: Option<gimli::DwarfPackage<Reader>>,
    places: SplitDwarfPlaces,
    /// Kept alive for the `Bytes` that point into them; also what was used.
    pub files: Vec<PathBuf>,
    /// `.dwo` files already loaded or found missing, by dwo id.
    dwos: Mutex<std::collections::HashMap<u64, Option<Arc<gimli::Dwarf<Reader>>>>>,
    /// Per line program (by offset): the address ranges whose row has a discriminator.
    discriminators: Mutex<std::collections::HashMap<usize, Arc<DiscriminatorRanges>>>,
    /// Split DWARF: the skeleton unit (in the main file, which holds the line tables) of
    /// each dwo id; made on the first split unit met.
    skeletons: std::sync::OnceLock<std::collections::HashMap<u64, gimli::UnitHeader<Reader>>>,
    /// Split DWARF: the language of each split unit, by dwo id.
    languages: Mutex<std::collections::HashMap<u64, Option<gimli::DwLang>>>,
    /// What every reader above points into. Last: fields drop in order, so it outlives
    /// them all (see [`Reader`]).
    backings: Backings,
}

impl std::fmt::Debug for DwarfContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DwarfContext")
            .field("files", &self.files)
            .field("dwp", &self.dwp.is_some())
            .finish_non_exhaustive()
    }
}

/// One frame as DWARF tells it, names raw (not demangled), borrowed from the DWARF (the
/// name) and from the slot's context (the file's path, which addr2line builds once per
/// line-table file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawFrame<'a> {
    pub function: Option<std::borrow::Cow<'static, str>>,
    pub language: Option<gimli::DwLang>,
    pub file: Option<&'a str>,
    pub line: u32,
    pub column: u32,
}

impl DwarfContext {
    /// Loads the DWARF of `file`, with `sup` as the dwz supplementary file and `dwp` as
    /// the split DWARF package, if given.
    pub fn load(
        file: &ElfFile,
        sup: Option<&ElfFile>,
        dwp: Option<&ElfFile>,
        places: SplitDwarfPlaces,
    ) -> Result<DwarfContext, String> {
        let backings = Backings::default();
        let mut dwarf = load_dwarf(file, false, &backings)?;
        let mut files = vec![file.path().to_path_buf()];
        if let Some(sup) = sup {
            let obj = sup.object().map_err(|e| e.to_string())?;
            dwarf
                .load_sup(|id| section(sup, &obj, Some(id.name()), &backings))
                .map_err(|e| e.to_string())?;
            files.push(sup.path().to_path_buf());
        }
        // Every unit's abbreviations parsed once and shared by the slots' contexts (each
        // would parse them again: protoc at 2 threads, 171 MiB with `Duplicates`, 161 so).
        dwarf.populate_abbreviations_cache(gimli::AbbreviationsCacheStrategy::All);
        let dwp = match dwp {
            Some(p) => {
                let obj = p.object().map_err(|e| e.to_string())?;
                let endian = endian(&obj);
                let pkg = gimli::DwarfPackage::load(
                    |id| section(p, &obj, id.dwo_name(), &backings),
                    empty(endian),
                )
                .map_err(|e| format!("{}: {e}", p.path().display()))?;
                files.push(p.path().to_path_buf());
                Some(pkg)
            }
            None => None,
        };
        let dwarf = Arc::new(dwarf);
        let ctx = addr2line::Context::from_arc_dwarf(dwarf.clone()).map_err(|e| e.to_string())?;
        // One slot per thread: each context reads every unit header (memory), and the
        // units dealt round-robin balance the load.
        let threads = rayon::current_num_threads().max(1);
        let n = threads.min(64);
        let unit_slots = if n > 1 {
            unit_slots(&dwarf, n)
        } else {
            Vec::new()
        };
        let n = if unit_slots.is_empty() { 1 } else { n };
        let mut slots: Vec<_> = (0..n).map(|_| Mutex::new(None)).collect();
        slots[0] = Mutex::new(Some(ctx));
        Ok(DwarfContext {
            dwarf,
            unit_slots,
            slots,
            dwp,
            places,
            files,
            dwos: Mutex::new(Default::default()),
            discriminators: Mutex::new(Default::default()),
            skeletons: Default::default(),
            languages: Default::default(),
            backings,
        })
    }

    /// The slot of `addr`: that of the unit whose ranges hold it (0 when none does).
    pub fn slot_of(&self, addr: u64) -> usize {
        let i = self
            .unit_slots
            .partition_point(|&(begin, _, _)| begin <= addr);
        match i.checked_sub(1).map(|i| self.unit_slots[i]) {
            Some((_, end, slot)) if addr < end => slot as usize,
            _ => 0,
        }
    }

    /// How many slots there are.
    pub fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// Runs `f` with the context of slot `slot` (made on first use), holding it for the
    /// whole call: a caller with many addresses of one slot takes it once.
    pub fn with_slot<T>(&self, slot: usize, f: impl FnOnce(&Lookup<'_>) -> T) -> Result<T, String> {
        let mut guard = self.slots[slot]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if guard.is_none() {
            let ctx = addr2line::Context::from_arc_dwarf(self.dwarf.clone())
                .map_err(|e| e.to_string())?;
            *guard = Some(ctx);
        }
        let ctx = guard.as_ref().expect("set above");
        Ok(f(&Lookup { dwarf: self, ctx }))
    }

    /// The discriminator of the line-table row of `addr` (0 when none), which binutils
    /// prints after the line.
    pub fn discriminator(&self, addr: u64) -> u32 {
        self.with_slot(self.slot_of(addr), |l| l.discriminator(addr))
            .unwrap_or(0)
    }

    /// The line program of the skeleton unit of split unit `dwo_id`: a split unit's rows
    /// are in the main file, not in its `.dwo`.
    fn skeleton_line_program(
        &self,
        dwo_id: gimli::DwoId,
    ) -> Option<gimli::IncompleteLineProgram<Reader>> {
        let map = self.skeletons.get_or_init(|| {
            let mut m = std::collections::HashMap::new();
            let mut headers = self.dwarf.units();
            while let Ok(Some(h)) = headers.next() {
                if let Ok(unit) = self.dwarf.unit(h) {
                    if let Some(id) = unit.dwo_id {
                        m.insert(id.0, h);
                    }
                }
            }
            m
        });
        let header = *map.get(&dwo_id.0)?;
        self.dwarf.unit(header).ok()?.line_program
    }

    fn load_dwo(
        &self,
        load: addr2line::SplitDwarfLoad<Reader>,
    ) -> Option<Arc<gimli::Dwarf<Reader>>> {
        let key = load.dwo_id.0;
        if let Some(hit) = self.dwos.lock().ok()?.get(&key) {
            return hit.clone();
        }
        let found = self.find_dwo(&load);
        if let Ok(mut m) = self.dwos.lock() {
            m.insert(key, found.clone());
        }
        found
    }

    fn find_dwo(
        &self,
        load: &addr2line::SplitDwarfLoad<Reader>,
    ) -> Option<Arc<gimli::Dwarf<Reader>>> {
        if let Some(dwp) = &self.dwp {
            if let Ok(Some(cu)) = dwp.find_cu(load.dwo_id, &load.parent) {
                return Some(Arc::new(cu));
            }
        }
        let to_path = |r: &Option<Reader>| -> Option<PathBuf> {
            let bytes = gimli::Reader::to_slice(r.as_ref()?).ok()?;
            use std::os::unix::ffi::OsStrExt;
            Some(PathBuf::from(std::ffi::OsStr::from_bytes(&bytes)))
        };
        let rel = to_path(&load.path)?;
        let mut candidates = Vec::new();
        match to_path(&load.comp_dir) {
            Some(dir) => candidates.push(dir.join(&rel)),
            None => candidates.push(rel.clone()),
        }
        if let Some(name) = rel.file_name() {
            for d in &self.places.dwo_dirs {
                candidates.push(d.join(name));
            }
        }
        candidates
            .iter()
            .find_map(|p| open_dwo(p, load.dwo_id, &load.parent, &self.backings))
    }
}

/// The address ranges of the compilation units of `dwarf`, sorted, with the slot of their
/// unit (units dealt round-robin over `n` slots); empty when no unit has ranges.
fn unit_slots(dwarf: &gimli::Dwarf<Reader>, n: usize) -> Vec<(u64, u64, u32)> {
    let mut out = Vec::new();
    let mut headers = dwarf.units();
    let mut index = 0usize;
    while let Ok(Some(header)) = headers.next() {
        if matches!(
            header.type_(),
            gimli::UnitType::Type { .. }
                | gimli::UnitType::SplitType { .. }
                | gimli::UnitType::Partial
        ) {
            continue;
        }
        let Ok(unit) = dwarf.unit(header) else {
            continue;
        };
        let slot = (index % n) as u32;
        index += 1;
        let Ok(mut ranges) = dwarf.unit_ranges(&unit) else {
            continue;
        };
        while let Ok(Some(r)) = ranges.next() {
            if r.begin < r.end {
                out.push((r.begin, r.end, slot));
            }
        }
    }
    out.sort_unstable();
    out
}

/// A [`DwarfContext`] with the `addr2line::Context` of one slot held by the caller:
/// lookups through it need no other lock (but for the split DWARF and discriminator
/// caches that all contexts share).
pub struct Lookup<'a> {
    dwarf: &'a DwarfContext,
    ctx: &'a addr2line::Context<Reader>,
}

impl std::fmt::Debug for Lookup<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lookup").finish_non_exhaustive()
    }
}

impl Lookup<'_> {
    /// The frames of `addr`, innermost first; empty when no unit covers it.
    pub fn frames(&self, addr: u64) -> Result<Vec<RawFrame<'_>>, String> {
        // No code is at the last address of the address space; addr2line computes
        // `addr + 1` (found by fuzzing with a hostile trace's address).
        if addr == u64::MAX {
            return Ok(Vec::new());
        }
        let mut lookup = self.ctx.find_frames(addr);
        let mut iter = loop {
            match lookup {
                addr2line::LookupResult::Output(r) => break r.map_err(|e| e.to_string())?,
                addr2line::LookupResult::Load { load, continuation } => {
                    let dwo = self.dwarf.load_dwo(load);
                    lookup = addr2line::LookupContinuation::resume(continuation, dwo);
                }
            }
        };
        let mut out = Vec::new();
        while let Some(f) = iter.next().map_err(|e| e.to_string())? {
            let (function, language) = match &f.function {
                // The name's bytes in place (valid UTF-8, nearly always): no copy.
                Some(n) => {
                    let bytes = n.name.slice();
                    let name = match std::str::from_utf8(bytes) {
                        Ok(s) => std::borrow::Cow::Borrowed(s),
                        Err(_) => String::from_utf8_lossy(bytes),
                    };
                    (Some(name), n.language)
                }
                None => (None, None),
            };
            let (file, line, column) = match &f.location {
                Some(l) => (l.file, l.line.unwrap_or(0), l.column.unwrap_or(0)),
                None => (None, 0, 0),
            };
            out.push(RawFrame {
                function,
                language,
                file,
                line,
                column,
            });
        }
        // addr2line takes the language from the skeleton unit, which split DWARF leaves
        // without one: take it from the split unit.
        if out
            .iter()
            .any(|f| f.function.is_some() && f.language.is_none())
        {
            if let Some(lang) = self.split_unit_language(addr) {
                for f in out.iter_mut().filter(|f| f.function.is_some()) {
                    f.language.get_or_insert(lang);
                }
            }
        }
        Ok(out)
    }

    /// The `DW_AT_language` of the split unit that covers `addr`, if it is one.
    fn split_unit_language(&self, addr: u64) -> Option<gimli::DwLang> {
        let unit = self.unit(addr)?;
        let (gimli::DwarfFileType::Dwo, Some(id)) = (unit.dwarf.file_type, unit.unit.dwo_id) else {
            return None;
        };
        if let Some(hit) = self.dwarf.languages.lock().ok()?.get(&id.0) {
            return *hit;
        }
        let mut entries = unit.unit.entries();
        let lang = match entries.next_dfs() {
            Ok(Some(root)) => match root.attr_value(gimli::DW_AT_language) {
                Some(gimli::AttributeValue::Language(l)) => Some(l),
                _ => None,
            },
            _ => None,
        };
        if let Ok(mut m) = self.dwarf.languages.lock() {
            m.insert(id.0, lang);
        }
        lang
    }

    /// The unit that covers `addr` (the split unit, for split DWARF).
    fn unit(&self, addr: u64) -> Option<gimli::UnitRef<'_, Reader>> {
        let mut lookup = self.ctx.find_dwarf_and_unit(addr);
        loop {
            match lookup {
                addr2line::LookupResult::Output(r) => break r,
                addr2line::LookupResult::Load { load, continuation } => {
                    let dwo = self.dwarf.load_dwo(load);
                    lookup = addr2line::LookupContinuation::resume(continuation, dwo);
                }
            }
        }
    }

    /// The discriminator of the line-table row of `addr` (0 when none), which binutils
    /// prints after the line.
    pub fn discriminator(&self, addr: u64) -> u32 {
        let Some(unit) = self.unit(addr) else {
            return 0;
        };
        let skeleton;
        let program = match (unit.dwarf.file_type, unit.unit.dwo_id) {
            (gimli::DwarfFileType::Dwo, Some(id)) => {
                skeleton = self.dwarf.skeleton_line_program(id);
                skeleton.as_ref()
            }
            _ => unit.unit.line_program.as_ref(),
        };
        let Some(program) = program else {
            return 0;
        };
        let key = program.header().offset().0;
        let discriminators = &self.dwarf.discriminators;
        let cached = discriminators
            .lock()
            .ok()
            .and_then(|m| m.get(&key).cloned());
        let ranges = match cached {
            Some(r) => r,
            None => {
                let r = Arc::new(discriminator_ranges(program.clone()));
                if let Ok(mut m) = discriminators.lock() {
                    m.insert(key, r.clone());
                }
                r
            }
        };
        let i = ranges.partition_point(|&(begin, _, _)| begin <= addr);
        match i.checked_sub(1).map(|i| ranges[i]) {
            Some((_, end, d)) if addr < end => d,
            _ => 0,
        }
    }
}

/// The `[begin, end)` ranges of the rows of `program` that carry a discriminator, sorted.
fn discriminator_ranges(program: gimli::IncompleteLineProgram<Reader>) -> Vec<(u64, u64, u32)> {
    let mut out = Vec::new();
    let mut rows = program.rows();
    let mut prev: Option<(u64, u32)> = None;
    while let Ok(Some((_, row))) = rows.next_row() {
        if let Some((begin, d)) = prev.take() {
            if d != 0 && row.address() > begin {
                out.push((begin, row.address(), d));
            }
        }
        if !row.end_sequence() {
            prev = Some((row.address(), row.discriminator() as u32));
        }
    }
    out.sort_unstable();
    out
}

fn open_dwo(
    path: &Path,
    id: gimli::DwoId,
    parent: &gimli::Dwarf<Reader>,
    keep: &Backings,
) -> Option<Arc<gimli::Dwarf<Reader>>> {
    let file = ElfFile::open(path).ok()?;
    let mut dwarf = load_dwarf(&file, true, keep).ok()?;
    let header = dwarf.units().next().ok()??;
    let unit = dwarf.unit(header).ok()?;
    // A .dwo from another build of the same source has another id: refuse it.
    if unit.dwo_id != Some(id) {
        return None;
    }
    dwarf.make_dwo(parent);
    Some(Arc::new(dwarf))
}
