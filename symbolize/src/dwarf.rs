//! DWARF: loading the sections of a file (decompressing zlib/zstd `SHF_COMPRESSED`
//! sections), a dwz supplementary file, a `.dwp` package and `.dwo` files into an
//! [`addr2line::Context`] that owns its data, and looking up the frames of an address.
//!
//! Section data is shared with the file's memory map (or owned, when it had to be
//! decompressed) through [`Bytes`], so a [`DwarfContext`] has no borrowed lifetime and can
//! be cached per build-id.
use crate::elf::ElfFile;
use memmap2::Mmap;
use object::{Object, ObjectSection};
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone)]
enum Backing {
    Map(Arc<Mmap>),
    Owned(Arc<[u8]>),
}

/// A cheap-to-clone byte slice that keeps its backing map or buffer alive.
#[derive(Debug, Clone)]
pub struct Bytes {
    backing: Backing,
    start: usize,
    len: usize,
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        let all: &[u8] = match &self.backing {
            Backing::Map(m) => &m[..],
            Backing::Owned(v) => v,
        };
        &all[self.start..self.start + self.len]
    }
}

// SAFETY: the bytes live in an `Mmap` or an `Arc<[u8]>` behind an `Arc`; moving or
// cloning a `Bytes` never moves them, so the address `deref` returns is stable.
unsafe impl stable_deref_trait::StableDeref for Bytes {}
// SAFETY: a clone shares the same `Arc`, so it derefs to the same address.
unsafe impl stable_deref_trait::CloneStableDeref for Bytes {}

/// `[begin, end)` address ranges of line-table rows with their nonzero discriminator.
type DiscriminatorRanges = Vec<(u64, u64, u32)>;

/// The reader every DWARF structure of this crate uses.
pub type Reader = gimli::EndianReader<gimli::RunTimeEndian, Bytes>;

fn empty(endian: gimli::RunTimeEndian) -> Reader {
    gimli::EndianReader::new(
        Bytes {
            backing: Backing::Owned(Arc::from(&[][..])),
            start: 0,
            len: 0,
        },
        endian,
    )
}

fn endian(obj: &object::File<'_>) -> gimli::RunTimeEndian {
    if obj.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    }
}

/// Section `name` of `obj` (which must be parsed from `file.map`), decompressed if needed;
/// empty if missing or NOBITS.
fn section(file: &ElfFile, obj: &object::File<'_>, name: Option<&str>) -> gimli::Result<Reader> {
    let endian = endian(obj);
    let Some(sec) = name.and_then(|n| obj.section_by_name(n)) else {
        return Ok(empty(endian));
    };
    if sec.kind() == object::SectionKind::UninitializedData {
        return Ok(empty(endian));
    }
    let data = sec.uncompressed_data().map_err(|_| gimli::Error::Io)?;
    let bytes = match data {
        std::borrow::Cow::Borrowed(s) => {
            let base = file.map.as_ptr() as usize;
            let start = s.as_ptr() as usize - base;
            Bytes {
                backing: Backing::Map(file.map.clone()),
                start,
                len: s.len(),
            }
        }
        std::borrow::Cow::Owned(v) => Bytes {
            len: v.len(),
            backing: Backing::Owned(Arc::from(v)),
            start: 0,
        },
    };
    Ok(gimli::EndianReader::new(bytes, endian))
}

fn load_dwarf(file: &ElfFile, dwo: bool) -> Result<gimli::Dwarf<Reader>, String> {
    let obj = file.object().map_err(|e| e.to_string())?;
    let d = gimli::Dwarf::load(|id| {
        let name = if dwo { id.dwo_name() } else { Some(id.name()) };
        section(file, &obj, name)
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
pub struct DwarfContext {
    ctx: addr2line::Context<Reader>,
    dwp: Option<gimli::DwarfPackage<Reader>>,
    places: SplitDwarfPlaces,
    /// Kept alive for the `Bytes` that point into them; also what was used.
    pub files: Vec<PathBuf>,
    /// `.dwo` files already loaded or found missing, by dwo id.
    dwos: Mutex<std::collections::HashMap<u64, Option<Arc<gimli::Dwarf<Reader>>>>>,
    /// Per line program (by offset): the address ranges whose row has a discriminator.
    discriminators: Mutex<std::collections::HashMap<usize, Arc<DiscriminatorRanges>>>,
}

impl std::fmt::Debug for DwarfContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DwarfContext")
            .field("files", &self.files)
            .field("dwp", &self.dwp.is_some())
            .finish_non_exhaustive()
    }
}

/// One frame as DWARF tells it, names raw (not demangled).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawFrame {
    pub function: Option<String>,
    pub language: Option<gimli::DwLang>,
    pub file: Option<String>,
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
        let mut dwarf = load_dwarf(file, false)?;
        let mut files = vec![file.path.clone()];
        if let Some(sup) = sup {
            let obj = sup.object().map_err(|e| e.to_string())?;
            dwarf
                .load_sup(|id| section(sup, &obj, Some(id.name())))
                .map_err(|e| e.to_string())?;
            files.push(sup.path.clone());
        }
        dwarf.populate_abbreviations_cache(gimli::AbbreviationsCacheStrategy::Duplicates);
        let dwp = match dwp {
            Some(p) => {
                let obj = p.object().map_err(|e| e.to_string())?;
                let endian = endian(&obj);
                let pkg =
                    gimli::DwarfPackage::load(|id| section(p, &obj, id.dwo_name()), empty(endian))
                        .map_err(|e| format!("{}: {e}", p.path.display()))?;
                files.push(p.path.clone());
                Some(pkg)
            }
            None => None,
        };
        let ctx = addr2line::Context::from_dwarf(dwarf).map_err(|e| e.to_string())?;
        Ok(DwarfContext {
            ctx,
            dwp,
            places,
            files,
            dwos: Mutex::new(Default::default()),
            discriminators: Mutex::new(Default::default()),
        })
    }

    /// The frames of `addr`, innermost first; empty when no unit covers it.
    pub fn frames(&self, addr: u64) -> Result<Vec<RawFrame>, String> {
        let mut lookup = self.ctx.find_frames(addr);
        let mut iter = loop {
            match lookup {
                addr2line::LookupResult::Output(r) => break r.map_err(|e| e.to_string())?,
                addr2line::LookupResult::Load { load, continuation } => {
                    let dwo = self.load_dwo(load);
                    lookup = addr2line::LookupContinuation::resume(continuation, dwo);
                }
            }
        };
        let mut out = Vec::new();
        while let Some(f) = iter.next().map_err(|e| e.to_string())? {
            let (function, language) = match &f.function {
                Some(n) => (
                    Some(n.raw_name().map_err(|e| e.to_string())?.into_owned()),
                    n.language,
                ),
                None => (None, None),
            };
            let (file, line, column) = match &f.location {
                Some(l) => (
                    l.file.map(str::to_string),
                    l.line.unwrap_or(0),
                    l.column.unwrap_or(0),
                ),
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
        Ok(out)
    }

    /// The discriminator of the line-table row of `addr` (0 when none), which binutils
    /// prints after the line.
    pub fn discriminator(&self, addr: u64) -> u32 {
        let mut lookup = self.ctx.find_dwarf_and_unit(addr);
        let unit = loop {
            match lookup {
                addr2line::LookupResult::Output(r) => break r,
                addr2line::LookupResult::Load { load, continuation } => {
                    let dwo = self.load_dwo(load);
                    lookup = addr2line::LookupContinuation::resume(continuation, dwo);
                }
            }
        };
        let Some(unit) = unit else { return 0 };
        let Some(program) = unit.unit.line_program.as_ref() else {
            return 0;
        };
        let key = program.header().offset().0;
        let cached = self
            .discriminators
            .lock()
            .ok()
            .and_then(|m| m.get(&key).cloned());
        let ranges = match cached {
            Some(r) => r,
            None => {
                let r = Arc::new(discriminator_ranges(program.clone()));
                if let Ok(mut m) = self.discriminators.lock() {
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
            .find_map(|p| open_dwo(p, load.dwo_id, &load.parent))
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
) -> Option<Arc<gimli::Dwarf<Reader>>> {
    let file = ElfFile::open(path).ok()?;
    let mut dwarf = load_dwarf(&file, true).ok()?;
    let header = dwarf.units().next().ok()??;
    let unit = dwarf.unit(header).ok()?;
    // A .dwo from another build of the same source has another id: refuse it.
    if unit.dwo_id != Some(id) {
        return None;
    }
    dwarf.make_dwo(parent);
    Some(Arc::new(dwarf))
}
