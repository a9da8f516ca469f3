//! The CFI tables of one module: `.eh_frame` (found through `.eh_frame_hdr`'s binary
//! search table, or a sorted index of the FDEs built once) and `.debug_frame`, from an ELF
//! file or from the `UnwindTables` record ebrec stored, reduced for each address looked up
//! to the [`Row`] the walk ([`super::walk`]) needs, with a bounded cache of rows.
use ebtrace_format::proto::UnwindTables;
use gimli::{
    BaseAddresses, CfaRule, DebugFrame, DebugFrameOffset, EhFrame, EhFrameOffset, EndianSlice,
    Expression, FrameDescriptionEntry, LittleEndian, RegisterRule, UnwindContext, UnwindSection,
    UnwindTableRow,
};
use object::{Object, ObjectSection, ObjectSegment};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

/// DWARF register numbers of x86_64 that the walk tracks: 0..=16 (16 is the return
/// address column, i.e. `rip`).
pub(super) const NREGS: usize = 17;
pub(super) const RSP: u16 = 7;
pub(super) const RBP: u16 = 6;
pub(super) const RIP: u16 = 16;

/// Rows kept per module before the cache is emptied (a row is ~100 bytes).
const ROWS_MAX: usize = 1 << 16;

type Slice<'a> = EndianSlice<'a, LittleEndian>;

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

/// One PT_LOAD segment: where file bytes land in the ELF's virtual addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub vaddr: u64,
    pub offset: u64,
    pub filesz: u64,
}

/// An FDE's address range and where it is in its section.
#[derive(Debug, Clone, Copy)]
struct FdeEntry {
    start: u64,
    end: u64,
    offset: usize,
}

/// The unwind tables of one module (one build-id), with a cache of the rows looked up.
/// Shareable between threads.
pub struct UnwindInfo {
    eh_frame: Vec<u8>,
    eh_frame_address: u64,
    eh_frame_hdr: Vec<u8>,
    eh_frame_hdr_address: u64,
    /// `.eh_frame_hdr`'s binary search table, when it has one we can read.
    search: Option<SearchTable>,
    debug_frame: Vec<u8>,
    segments: Vec<Segment>,
    /// Sorted FDEs of `.eh_frame`, built on first use when there is no search table.
    eh_index: OnceLock<Vec<FdeEntry>>,
    /// Sorted FDEs of `.debug_frame`, built on first use.
    debug_index: OnceLock<Vec<FdeEntry>>,
    /// Rows by ELF virtual address (bounded: emptied when full).
    rows: Mutex<HashMap<u64, RowLookup>>,
}

impl fmt::Debug for UnwindInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UnwindInfo")
            .field("eh_frame", &self.eh_frame.len())
            .field("eh_frame_hdr", &self.eh_frame_hdr.len())
            .field("search_table", &self.search.map(|t| t.count))
            .field("debug_frame", &self.debug_frame.len())
            .field("segments", &self.segments)
            .finish_non_exhaustive()
    }
}

/// A register's rule, owned (expressions copied out of their section).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Rule {
    Undefined,
    Same,
    Offset(i64),
    ValOffset(i64),
    Register(u16),
    Expression(Box<[u8]>),
    ValExpression(Box<[u8]>),
    Constant(u64),
    Unsupported,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Cfa {
    RegisterOffset(u16, i64),
    Expression(Box<[u8]>),
}

/// The CFI row of one address, reduced to what the walk needs.
#[derive(Debug, Clone)]
pub(super) struct Row {
    pub(super) cfa: Cfa,
    /// Rules of registers 0..=16 that the row lists.
    pub(super) rules: Vec<(u16, Rule)>,
    /// The CIE's return address column (16 on x86_64).
    pub(super) ra: u16,
    /// The FDE is a signal trampoline (augmentation `S`).
    pub(super) signal: bool,
}

impl Row {
    pub(super) fn rule(&self, reg: u16) -> Option<&Rule> {
        self.rules
            .iter()
            .find(|(r, _)| *r == reg)
            .map(|(_, rule)| rule)
    }
}

/// Why a module gave no row for an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Miss {
    /// No FDE covers it.
    NoCfi,
    /// An FDE or CIE that does not parse or evaluate.
    Bad,
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
            t.eh_frame.clone(),
            t.eh_frame_address,
            t.eh_frame_hdr.clone(),
            t.eh_frame_hdr_address,
            Vec::new(),
            segments,
        ))
    }

    /// The tables of an ELF file: `.eh_frame`, `.eh_frame_hdr`, `.debug_frame` (possibly
    /// compressed) and the PT_LOAD segments.
    pub fn from_elf(bytes: &[u8]) -> Result<UnwindInfo, Error> {
        let obj =
            object::File::parse(bytes).map_err(|e| Error::new(ErrorKind::BadElf, e.to_string()))?;
        let section = |name: &str| -> (Vec<u8>, u64) {
            obj.section_by_name(name)
                .filter(|s| s.kind() != object::SectionKind::UninitializedData)
                .and_then(|s| Some((crate::elf::section_data(&s).ok()?.into_owned(), s.address())))
                .unwrap_or_default()
        };
        let (eh_frame, eh_frame_address) = section(".eh_frame");
        let (eh_frame_hdr, eh_frame_hdr_address) = section(".eh_frame_hdr");
        let (debug_frame, _) = section(".debug_frame");
        if eh_frame.is_empty() && debug_frame.is_empty() {
            return Err(Error::new(
                ErrorKind::NoTables,
                "no .eh_frame and no .debug_frame",
            ));
        }
        let segments = obj
            .segments()
            .map(|s| {
                let (offset, filesz) = s.file_range();
                Segment {
                    vaddr: s.address(),
                    offset,
                    filesz,
                }
            })
            .collect();
        Ok(UnwindInfo::new(
            eh_frame,
            eh_frame_address,
            eh_frame_hdr,
            eh_frame_hdr_address,
            debug_frame,
            segments,
        ))
    }

    /// Adds the `.debug_frame` of a separate debug file (same build-id), the fallback for
    /// addresses `.eh_frame` does not cover. Returns whether it had one.
    pub fn add_debug_frame(&mut self, debug_elf: &[u8]) -> bool {
        let Ok(obj) = object::File::parse(debug_elf) else {
            return false;
        };
        let Some(data) = obj
            .section_by_name(".debug_frame")
            .filter(|s| s.kind() != object::SectionKind::UninitializedData)
            .and_then(|s| crate::elf::section_data(&s).ok())
            .filter(|d| !d.is_empty())
        else {
            return false;
        };
        self.debug_frame = data.into_owned();
        self.debug_index = OnceLock::new();
        self.rows.lock().map(|mut r| r.clear()).ok();
        true
    }

    fn new(
        eh_frame: Vec<u8>,
        eh_frame_address: u64,
        eh_frame_hdr: Vec<u8>,
        eh_frame_hdr_address: u64,
        debug_frame: Vec<u8>,
        segments: Vec<Segment>,
    ) -> UnwindInfo {
        UnwindInfo {
            search: SearchTable::parse(&eh_frame_hdr),
            eh_frame,
            eh_frame_address,
            eh_frame_hdr,
            eh_frame_hdr_address,
            debug_frame,
            segments,
            eh_index: OnceLock::new(),
            debug_index: OnceLock::new(),
            rows: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `.eh_frame` is found through `.eh_frame_hdr`'s search table (else through
    /// an index of its FDEs built on first use).
    pub fn has_search_table(&self) -> bool {
        self.search.is_some()
    }

    /// Whether a `.debug_frame` is there as a fallback.
    pub fn has_debug_frame(&self) -> bool {
        !self.debug_frame.is_empty()
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

    fn bases(&self) -> BaseAddresses {
        BaseAddresses::default()
            .set_eh_frame(self.eh_frame_address)
            .set_eh_frame_hdr(self.eh_frame_hdr_address)
    }

    /// The row of ELF virtual address `vaddr`, from the cache or the tables.
    pub(super) fn row(&self, vaddr: u64) -> RowLookup {
        if let Some(hit) = self.rows.lock().ok().and_then(|r| r.get(&vaddr).cloned()) {
            return hit;
        }
        let compute = || match self.eh_frame_row(vaddr) {
            Ok(row) => Ok(Arc::new(row)),
            Err(eh) => match self.debug_frame_row(vaddr) {
                Ok(row) => Ok(Arc::new(row)),
                // Bad .eh_frame data is worth saying over a .debug_frame without the
                // address.
                Err(Miss::NoCfi) => Err(eh),
                Err(Miss::Bad) => Err(Miss::Bad),
            },
        };
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

    fn eh_frame_row(&self, vaddr: u64) -> Result<Row, Miss> {
        if self.eh_frame.is_empty() {
            return Err(Miss::NoCfi);
        }
        let mut eh = EhFrame::new(&self.eh_frame, LittleEndian);
        eh.set_address_size(8);
        let bases = self.bases();
        let offset = match &self.search {
            Some(t) => {
                let fde = t
                    .lookup(&self.eh_frame_hdr, self.eh_frame_hdr_address, vaddr)
                    .ok_or(Miss::NoCfi)?;
                fde.checked_sub(self.eh_frame_address)
                    .and_then(|o| usize::try_from(o).ok())
                    .ok_or(Miss::Bad)?
            }
            None => {
                let index = self.eh_index.get_or_init(|| index(&eh, &bases));
                find(index, vaddr).ok_or(Miss::NoCfi)?.offset
            }
        };
        let fde = eh
            .fde_from_offset(&bases, EhFrameOffset(offset), EhFrame::cie_from_offset)
            .map_err(|_| Miss::Bad)?;
        if !fde.contains(vaddr) {
            return Err(Miss::NoCfi);
        }
        row_of(&eh, &bases, &fde, vaddr)
    }

    fn debug_frame_row(&self, vaddr: u64) -> Result<Row, Miss> {
        if self.debug_frame.is_empty() {
            return Err(Miss::NoCfi);
        }
        let mut df = DebugFrame::new(&self.debug_frame, LittleEndian);
        df.set_address_size(8);
        let bases = BaseAddresses::default();
        let index = self.debug_index.get_or_init(|| index(&df, &bases));
        let e = find(index, vaddr).ok_or(Miss::NoCfi)?;
        let fde = df
            .fde_from_offset(
                &bases,
                DebugFrameOffset(e.offset),
                DebugFrame::cie_from_offset,
            )
            .map_err(|_| Miss::Bad)?;
        row_of(&df, &bases, &fde, vaddr)
    }
}

/// `.eh_frame_hdr`'s binary search table in the form linkers write (version 1, entries
/// of two `DW_EH_PE_datarel | DW_EH_PE_sdata4` values: function start, FDE address,
/// relative to the header): read here with checked arithmetic, since gimli's reader
/// overflows on some damaged headers. Any other form is left to the FDE index.
#[derive(Debug, Clone, Copy)]
struct SearchTable {
    /// Offset of the first entry in the header.
    start: usize,
    count: usize,
}

impl SearchTable {
    fn parse(hdr: &[u8]) -> Option<SearchTable> {
        let (&[version, ptr_enc, count_enc, table_enc], rest) = hdr.split_first_chunk::<4>()?;
        const DATAREL_SDATA4: u8 = 0x3b;
        if version != 1 || table_enc != DATAREL_SDATA4 || ptr_enc == 0xff {
            return None;
        }
        let ptr_size = match ptr_enc & 0x0f {
            0x02 | 0x0a => 2,
            0x03 | 0x0b => 4,
            0x04 | 0x0c => 8,
            _ => return None,
        };
        let count_size = match count_enc {
            0x03 | 0x0b => 4,
            0x04 | 0x0c => 8,
            _ => return None,
        };
        let count_bytes = rest.get(ptr_size..ptr_size + count_size)?;
        let mut buf = [0u8; 8];
        buf[..count_size].copy_from_slice(count_bytes);
        let count = usize::try_from(u64::from_le_bytes(buf)).ok()?;
        let start = 4 + ptr_size + count_size;
        let end = count.checked_mul(8)?.checked_add(start)?;
        (end <= hdr.len() && count > 0).then_some(SearchTable { start, count })
    }

    /// The address of the FDE of the last function starting at or before `vaddr`.
    fn lookup(&self, hdr: &[u8], hdr_address: u64, vaddr: u64) -> Option<u64> {
        let at = |i: usize, field: usize| -> Option<u64> {
            let off = self.start + i * 8 + field * 4;
            let b = hdr.get(off..off + 4)?;
            let rel = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            Some(hdr_address.wrapping_add_signed(i64::from(rel)))
        };
        // partition_point over the entries, by hand (each read is checked).
        let (mut lo, mut hi) = (0, self.count);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if at(mid, 0)? <= vaddr {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        at(lo.checked_sub(1)?, 1)
    }
}

fn miss(e: gimli::Error) -> Miss {
    match e {
        gimli::Error::NoUnwindInfoForAddress => Miss::NoCfi,
        _ => Miss::Bad,
    }
}

/// Every FDE of `section`, sorted by start address (CIEs parsed once each).
fn index<'a, S: UnwindSection<Slice<'a>>>(section: &S, bases: &BaseAddresses) -> Vec<FdeEntry> {
    let mut cies: HashMap<usize, gimli::CommonInformationEntry<Slice<'a>>> = HashMap::new();
    let mut out = Vec::new();
    let mut entries = section.entries(bases);
    // A parse error ends the section: what came before is still good.
    while let Ok(Some(entry)) = entries.next() {
        let gimli::CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let fde = partial.parse(|s, b, off| {
            let key: usize = gimli::UnwindOffset::into(off);
            if let Some(c) = cies.get(&key) {
                return Ok(c.clone());
            }
            let c = s.cie_from_offset(b, off)?;
            cies.insert(key, c.clone());
            Ok(c)
        });
        if let Ok(fde) = fde {
            if fde.len() > 0 {
                out.push(FdeEntry {
                    start: fde.initial_address(),
                    end: fde.initial_address().saturating_add(fde.len()),
                    offset: fde.offset(),
                });
            }
        }
    }
    out.sort_by_key(|e| (e.start, e.end));
    out
}

/// The FDE of the index that covers `vaddr`: the last starting at or before it.
fn find(index: &[FdeEntry], vaddr: u64) -> Option<FdeEntry> {
    let i = index.partition_point(|e| e.start <= vaddr);
    let e = *index.get(i.checked_sub(1)?)?;
    (vaddr < e.end).then_some(e)
}

fn row_of<'a, S: UnwindSection<Slice<'a>>>(
    section: &S,
    bases: &BaseAddresses,
    fde: &FrameDescriptionEntry<Slice<'a>>,
    vaddr: u64,
) -> Result<Row, Miss> {
    let mut ctx = UnwindContext::new();
    let row: &UnwindTableRow<usize> = fde
        .unwind_info_for_address(section, bases, &mut ctx, vaddr)
        .map_err(miss)?;
    let bytes = |e: &gimli::UnwindExpression<usize>| -> Result<Box<[u8]>, Miss> {
        let Expression(r) = e.get(section).map_err(|_| Miss::Bad)?;
        Ok(r.slice().into())
    };
    let cfa = match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } => Cfa::RegisterOffset(register.0, *offset),
        CfaRule::Expression(e) => Cfa::Expression(bytes(e)?),
    };
    let mut rules = Vec::new();
    for (reg, rule) in row.registers() {
        if usize::from(reg.0) >= NREGS {
            continue;
        }
        let rule = match rule {
            RegisterRule::Undefined => Rule::Undefined,
            RegisterRule::SameValue => Rule::Same,
            RegisterRule::Offset(n) => Rule::Offset(*n),
            RegisterRule::ValOffset(n) => Rule::ValOffset(*n),
            RegisterRule::Register(r) => Rule::Register(r.0),
            RegisterRule::Expression(e) => Rule::Expression(bytes(e)?),
            RegisterRule::ValExpression(e) => Rule::ValExpression(bytes(e)?),
            RegisterRule::Constant(c) => Rule::Constant(*c),
            _ => Rule::Unsupported,
        };
        rules.push((reg.0, rule));
    }
    Ok(Row {
        cfa,
        rules,
        ra: fde.cie().return_address_register().0,
        signal: fde.is_signal_trampoline(),
    })
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
