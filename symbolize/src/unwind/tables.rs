//! The CFI tables of one module, from an ELF file or from the `UnwindTables` record ebrec
//! stored: `ebtrace-elf`'s reader ([`ebtrace_elf::cfi::Tables`]: `.eh_frame` found through
//! `.eh_frame_hdr`'s binary search table or a sorted index of the FDEs built once, then
//! `.debug_frame`), the same that ebrec's kernel rows are built from, reduced for each
//! address looked up to the [`Row`] the walk ([`super::walk`]) needs, with a bounded cache of
//! rows.
use ebtrace_elf::cfi::Tables;
use ebtrace_elf::CfiSections;
use ebtrace_format::proto::UnwindTables;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

pub(super) use ebtrace_elf::cfi::{Cfa, Miss, Row, Rule, NREGS, RBP, RIP, RSP};

/// Rows kept per module before the cache is emptied (a row is ~100 bytes).
const ROWS_MAX: usize = 1 << 16;

/// Why unwind tables could not be used.
#[derive(Debug)]
pub struct Error {
    pub kind: ErrorKind,
    message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The bytes are not an ELF file that `object` can parse.
    BadElf,
    /// The file or the record has no `.eh_frame` and no `.debug_frame`.
    NoTables,
    /// The record is malformed (load segments not in triples).
    BadTables,
}

impl Error {
    fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// One PT_LOAD segment as the trace's `UnwindTables` record has it: where file bytes land
/// in the ELF's virtual addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub vaddr: u64,
    pub offset: u64,
    pub filesz: u64,
}

/// The unwind tables of one module (one build-id), with a cache of the rows looked up.
/// Shareable between threads.
pub struct UnwindInfo {
    tables: Tables,
    segments: Vec<Segment>,
    /// Rows by ELF virtual address (bounded: emptied when full).
    rows: Mutex<HashMap<u64, RowLookup>>,
}

impl fmt::Debug for UnwindInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UnwindInfo")
            .field("tables", &self.tables)
            .field("segments", &self.segments)
            .finish_non_exhaustive()
    }
}

pub(super) type RowLookup = Result<Arc<Row>, Miss>;

impl UnwindInfo {
    /// The tables `ebrec` stored for a build-id.
    pub fn from_tables(t: &UnwindTables) -> Result<UnwindInfo, Error> {
        if !t.load_segments.len().is_multiple_of(3) {
            return Err(Error::new(
                ErrorKind::BadTables,
                format!("{} load segment values, not triples", t.load_segments.len()),
            ));
        }
        if t.eh_frame.is_empty() {
            return Err(Error::new(ErrorKind::NoTables, "no .eh_frame"));
        }
        let segments = t
            .load_segments
            .chunks_exact(3)
            .map(|s| Segment {
                vaddr: s[0],
                offset: s[1],
                filesz: s[2],
            })
            .collect();
        Ok(UnwindInfo::new(
            Tables::new(
                t.eh_frame.clone(),
                t.eh_frame_address,
                t.eh_frame_hdr.clone(),
                t.eh_frame_hdr_address,
                Vec::new(),
            ),
            segments,
        ))
    }

    /// The tables of an ELF file: `.eh_frame`, `.eh_frame_hdr`, `.debug_frame` (possibly
    /// compressed) and the PT_LOAD segments.
    pub fn from_elf(bytes: &[u8]) -> Result<UnwindInfo, Error> {
        let obj =
            object::File::parse(bytes).map_err(|e| Error::new(ErrorKind::BadElf, e.to_string()))?;
        let t = CfiSections::read(&obj, true);
        if t.eh_frame.is_empty() && t.debug_frame.is_empty() {
            return Err(Error::new(
                ErrorKind::NoTables,
                "no .eh_frame and no .debug_frame",
            ));
        }
        let segments = t
            .load_segments
            .iter()
            .map(|s| Segment {
                vaddr: s.vaddr,
                offset: s.offset,
                filesz: s.filesz,
            })
            .collect();
        Ok(UnwindInfo::new(
            Tables::new(
                t.eh_frame,
                t.eh_frame_address,
                t.eh_frame_hdr,
                t.eh_frame_hdr_address,
                t.debug_frame,
            ),
            segments,
        ))
    }

    /// Adds the `.debug_frame` of a separate debug file (same build-id), the fallback for
    /// addresses `.eh_frame` does not cover. Returns whether it had one.
    pub fn add_debug_frame(&mut self, debug_elf: &[u8]) -> bool {
        let Ok(obj) = object::File::parse(debug_elf) else {
            return false;
        };
        let Some((data, _)) =
            ebtrace_elf::section(&obj, ".debug_frame").filter(|(d, _)| !d.is_empty())
        else {
            return false;
        };
        self.tables.set_debug_frame(data.into_owned());
        self.rows.lock().map(|mut r| r.clear()).ok();
        true
    }

    fn new(tables: Tables, segments: Vec<Segment>) -> UnwindInfo {
        UnwindInfo {
            tables,
            segments,
            rows: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `.eh_frame` is found through `.eh_frame_hdr`'s search table (else through
    /// an index of its FDEs built on first use).
    pub fn has_search_table(&self) -> bool {
        self.tables.has_search_table()
    }

    /// Whether a `.debug_frame` is there as a fallback.
    pub fn has_debug_frame(&self) -> bool {
        self.tables.has_debug_frame()
    }

    /// Forgets the rows looked up so far (for measuring the uncached cost).
    pub fn clear_cache(&self) {
        if let Ok(mut rows) = self.rows.lock() {
            rows.clear();
        }
    }

    /// The PT_LOAD segments.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// The ELF virtual address of file offset `offset`.
    pub fn offset_to_vaddr(&self, offset: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|s| s.offset <= offset && offset - s.offset < s.filesz.max(1))
            .and_then(|s| (offset - s.offset).checked_add(s.vaddr))
    }

    /// The row of ELF virtual address `vaddr`, from the cache or the tables.
    pub(super) fn row(&self, vaddr: u64) -> RowLookup {
        if let Some(hit) = self.rows.lock().ok().and_then(|r| r.get(&vaddr).cloned()) {
            return hit;
        }
        let compute = || self.tables.row(vaddr).map(Arc::new);
        // gimli is meant not to panic on bad input, but damaged tables have made it
        // (an overflow in `EhHdrTable::pointer_to_offset`, 0.34): a row it cannot give is
        // bad CFI, not the end of the program. Nothing is locked while it runs.
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(compute))
            .unwrap_or(Err(Miss::Bad));
        if let Ok(mut rows) = self.rows.lock() {
            if rows.len() >= ROWS_MAX {
                rows.clear();
            }
            rows.insert(vaddr, out.clone());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file whose `.eh_frame_hdr` claims 0x1b000000000000 uncompressed bytes (see
    /// `elf`'s test) still gives what it can: its `.eh_frame`, without the search table.
    #[test]
    fn a_lying_compressed_section_leaves_the_rest() {
        let bytes = include_bytes!("../../../fuzz/corpus/elf/regression-compressed-size-10d546eb");
        let info = UnwindInfo::from_elf(&bytes[..]).unwrap();
        assert!(!info.has_search_table());
    }
}
