//! Call frame information (`.eh_frame`, `.eh_frame_hdr`, `.debug_frame`, x86-64) read into
//! one row representation: for an address range, the CFA rule ([`Cfa`]) and the rules
//! ([`Rule`]) of the registers 0..=16 (16 is the return address column), read on demand
//! from gimli's row ([`RowRef`]) or owned ([`Row`]). Both unwinders are built from it:
//!
//! - ebrec's kernel-side walk: [`compact`] runs over every row of a file's `.eh_frame` and
//!   reduces each (reading only the CFA, return address and rbp rules) to the few rules the
//!   BPF walk can do, keyed by file offset (ebrec numbers and packs those into the u64s of
//!   `bpf/events.h`);
//! - ebsym's offline unwinder: [`Tables::row`] finds the row of one address (through
//!   `.eh_frame_hdr`'s search table, or an index of the FDEs built once, then `.debug_frame`)
//!   and the walk evaluates all of its rules.
//!
//! gimli parses the CIEs and FDEs and evaluates their instructions; a parse error ends a
//! section (what came before stays), an FDE that does not parse is skipped, and a table
//! whose row cannot be evaluated ends there. `.eh_frame_hdr` is read here with checked
//! arithmetic ([`SearchTable`]): gimli's reader overflows on some damaged headers.
pub mod compact;

use gimli::{
    BaseAddresses, CfaRule, CieOrFde, DebugFrame, DebugFrameOffset, EhFrame, EhFrameOffset,
    EndianSlice, FrameDescriptionEntry, LittleEndian, RegisterRule, UnwindContext, UnwindSection,
    UnwindTableRow,
};
use std::collections::HashMap;
use std::fmt;
use std::sync::OnceLock;

/// DWARF register numbers of x86_64 that rows keep: 0..=16 (16 is the return address
/// column, i.e. `rip`).
pub const NREGS: usize = 17;
pub const RSP: u16 = 7;
pub const RBP: u16 = 6;
pub const RIP: u16 = 16;

type Slice<'a> = EndianSlice<'a, LittleEndian>;

/// A register's rule, owned (expressions copied out of their section).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
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

/// The CFA rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cfa {
    RegisterOffset(u16, i64),
    Expression(Box<[u8]>),
}

/// The CFI row of an address range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// ELF virtual addresses [start, end) the row covers.
    pub start: u64,
    pub end: u64,
    pub cfa: Cfa,
    /// Rules of registers 0..=16 that the row lists (a register not listed keeps the ABI's
    /// default).
    pub rules: Vec<(u16, Rule)>,
    /// The CIE's return address column (16 on x86_64).
    pub ra: u16,
    /// The FDE is a signal trampoline (augmentation `S`).
    pub signal: bool,
}

impl Row {
    /// The rule of `reg`, if the row lists one.
    pub fn rule(&self, reg: u16) -> Option<&Rule> {
        self.rules
            .iter()
            .find(|(r, _)| *r == reg)
            .map(|(_, rule)| rule)
    }
}

/// Why there is no row for an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Miss {
    /// No FDE covers it.
    NoCfi,
    /// An FDE or CIE that does not parse or evaluate.
    Bad,
}

fn miss(e: gimli::Error) -> Miss {
    match e {
        gimli::Error::NoUnwindInfoForAddress => Miss::NoCfi,
        _ => Miss::Bad,
    }
}

/// The addresses `DW_EH_PE_*` pointers of `.eh_frame` are relative to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bases {
    /// `.eh_frame`'s address (`DW_EH_PE_pcrel`, what linkers write).
    pub eh_frame: u64,
    /// `.text`'s (`DW_EH_PE_textrel`).
    pub text: Option<u64>,
    /// `.got`'s (`DW_EH_PE_datarel`).
    pub got: Option<u64>,
}

impl Bases {
    fn gimli(&self) -> BaseAddresses {
        let mut b = BaseAddresses::default().set_eh_frame(self.eh_frame);
        if let Some(t) = self.text {
            b = b.set_text(t);
        }
        if let Some(g) = self.got {
            b = b.set_got(g);
        }
        b
    }
}

#[derive(Debug, Clone, Copy)]
enum Which<'a> {
    Eh(EhFrame<Slice<'a>>),
    Debug(DebugFrame<Slice<'a>>),
}

/// `.eh_frame` or `.debug_frame` bytes, ready to read.
#[derive(Debug, Clone)]
pub struct Section<'a> {
    which: Which<'a>,
    bases: BaseAddresses,
    empty: bool,
}

/// Runs `$body` with `$s` bound to the gimli section, whichever it is.
macro_rules! with_section {
    ($self:expr, $s:ident => $body:expr) => {
        match &$self.which {
            Which::Eh($s) => $body,
            Which::Debug($s) => $body,
        }
    };
}

/// An FDE's address range and where it is in its section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdeEntry {
    pub start: u64,
    pub end: u64,
    pub offset: usize,
}

/// Evaluation state for [`Fde::rows`], reused from FDE to FDE (it is large).
pub struct Context(Box<UnwindContext<usize>>);

impl Default for Context {
    fn default() -> Self {
        Context(Box::new(UnwindContext::new()))
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Context")
    }
}

impl<'a> Section<'a> {
    /// `.eh_frame`'s bytes, its pointers relative to `bases`.
    pub fn eh_frame(data: &'a [u8], bases: Bases) -> Section<'a> {
        let mut eh = EhFrame::new(data, LittleEndian);
        eh.set_address_size(8);
        Section {
            which: Which::Eh(eh),
            bases: bases.gimli(),
            empty: data.is_empty(),
        }
    }

    /// `.debug_frame`'s bytes (its addresses are absolute).
    pub fn debug_frame(data: &'a [u8]) -> Section<'a> {
        let mut df = DebugFrame::new(data, LittleEndian);
        df.set_address_size(8);
        Section {
            which: Which::Debug(df),
            bases: BaseAddresses::default(),
            empty: data.is_empty(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.empty
    }

    /// Calls `f` with every FDE that parses, in section order (CIEs parsed once each). A
    /// parse error of the entry list ends the section: what came before is still good.
    pub fn for_each_fde(&self, mut f: impl FnMut(Fde<'_, 'a>)) {
        with_section!(self, s => {
            let mut cies: HashMap<usize, gimli::CommonInformationEntry<Slice<'a>>> =
                HashMap::new();
            let mut entries = s.entries(&self.bases);
            while let Ok(Some(entry)) = entries.next() {
                let CieOrFde::Fde(partial) = entry else {
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
                    f(Fde { section: self, fde });
                }
            }
        })
    }

    /// Every FDE with a length, sorted by start address.
    pub fn index(&self) -> Vec<FdeEntry> {
        let mut out = Vec::new();
        self.for_each_fde(|fde| {
            if !fde.is_empty() {
                out.push(FdeEntry {
                    start: fde.start(),
                    end: fde.end(),
                    offset: fde.offset(),
                });
            }
        });
        out.sort_by_key(|e| (e.start, e.end));
        out
    }

    /// The FDE at `offset` in the section.
    pub fn fde_at(&self, offset: usize) -> Result<Fde<'_, 'a>, Miss> {
        let fde = match &self.which {
            Which::Eh(s) => {
                s.fde_from_offset(&self.bases, EhFrameOffset(offset), EhFrame::cie_from_offset)
            }
            Which::Debug(s) => s.fde_from_offset(
                &self.bases,
                DebugFrameOffset(offset),
                DebugFrame::cie_from_offset,
            ),
        }
        .map_err(|_| Miss::Bad)?;
        Ok(Fde { section: self, fde })
    }
}

/// The FDE of an index that covers `vaddr`: the last starting at or before it.
pub fn find(index: &[FdeEntry], vaddr: u64) -> Option<FdeEntry> {
    let i = index.partition_point(|e| e.start <= vaddr);
    let e = *index.get(i.checked_sub(1)?)?;
    (vaddr < e.end).then_some(e)
}

/// One FDE of a [`Section`].
#[derive(Debug)]
pub struct Fde<'s, 'a> {
    section: &'s Section<'a>,
    fde: FrameDescriptionEntry<Slice<'a>>,
}

impl Fde<'_, '_> {
    /// The first address it covers.
    pub fn start(&self) -> u64 {
        self.fde.initial_address()
    }

    /// How many bytes it covers.
    pub fn len(&self) -> u64 {
        self.fde.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fde.len() == 0
    }

    /// The address past it (saturating).
    pub fn end(&self) -> u64 {
        self.start().saturating_add(self.len())
    }

    /// Its offset in the section.
    pub fn offset(&self) -> usize {
        self.fde.offset()
    }

    pub fn contains(&self, vaddr: u64) -> bool {
        self.fde.contains(vaddr)
    }

    /// A signal trampoline (its CIE's augmentation has `S`).
    pub fn signal(&self) -> bool {
        self.fde.is_signal_trampoline()
    }

    /// Calls `f` with each row of the FDE's table, in address order. Err: the table cannot
    /// start (its CIE's initial instructions do not evaluate); a row that does not evaluate
    /// ends the table, the rows before it given.
    pub fn rows(&self, ctx: &mut Context, mut f: impl FnMut(&RowRef<'_, '_>)) -> Result<(), Miss> {
        with_section!(self.section, s => {
            let mut table = self
                .fde
                .rows(s, &self.section.bases, &mut ctx.0)
                .map_err(|_| Miss::Bad)?;
            while let Ok(Some(row)) = table.next_row() {
                f(&RowRef {
                    section: self.section,
                    fde: &self.fde,
                    row,
                });
            }
        });
        Ok(())
    }

    /// The row of `vaddr` (which the FDE must contain).
    pub fn row_at(&self, vaddr: u64) -> Result<Row, Miss> {
        let mut ctx = UnwindContext::new();
        with_section!(self.section, s => {
            let row = self
                .fde
                .unwind_info_for_address(s, &self.section.bases, &mut ctx, vaddr)
                .map_err(miss)?;
            RowRef {
                section: self.section,
                fde: &self.fde,
                row,
            }
            .to_row()
        })
    }
}

/// A row of an FDE's table as gimli evaluated it, its rules read on demand (a walk that
/// needs two of them reads two); [`RowRef::to_row`] owns them all.
#[derive(Debug)]
pub struct RowRef<'r, 'a> {
    section: &'r Section<'a>,
    fde: &'r FrameDescriptionEntry<Slice<'a>>,
    row: &'r UnwindTableRow<usize>,
}

impl RowRef<'_, '_> {
    /// The first address of its range.
    pub fn start(&self) -> u64 {
        self.row.start_address()
    }

    /// The address past its range.
    pub fn end(&self) -> u64 {
        self.row.end_address()
    }

    /// The bytes of expression `e`, copied out of the section (gimli checked their place
    /// when it read the row, so Err should not happen).
    fn bytes(&self, e: &gimli::UnwindExpression<usize>) -> Result<Box<[u8]>, Miss> {
        with_section!(self.section, s => {
            let gimli::Expression(r) = e.get(s).map_err(|_| Miss::Bad)?;
            Ok(r.slice().into())
        })
    }

    /// The CFA rule.
    pub fn cfa(&self) -> Result<Cfa, Miss> {
        Ok(match self.row.cfa() {
            CfaRule::RegisterAndOffset { register, offset } => {
                Cfa::RegisterOffset(register.0, *offset)
            }
            CfaRule::Expression(e) => Cfa::Expression(self.bytes(e)?),
        })
    }

    fn convert(&self, rule: &RegisterRule<usize>) -> Result<Rule, Miss> {
        Ok(match rule {
            RegisterRule::Undefined => Rule::Undefined,
            RegisterRule::SameValue => Rule::Same,
            RegisterRule::Offset(n) => Rule::Offset(*n),
            RegisterRule::ValOffset(n) => Rule::ValOffset(*n),
            RegisterRule::Register(r) => Rule::Register(r.0),
            RegisterRule::Expression(e) => Rule::Expression(self.bytes(e)?),
            RegisterRule::ValExpression(e) => Rule::ValExpression(self.bytes(e)?),
            RegisterRule::Constant(c) => Rule::Constant(*c),
            _ => Rule::Unsupported,
        })
    }

    /// The rule of `reg`, if the row lists one (an expression that cannot be copied out is
    /// [`Rule::Unsupported`]).
    pub fn rule(&self, reg: u16) -> Option<Rule> {
        let rule = self.row.register(gimli::Register(reg))?;
        Some(self.convert(&rule).unwrap_or(Rule::Unsupported))
    }

    /// The CIE's return address column (16 on x86_64).
    pub fn ra(&self) -> u16 {
        self.fde.cie().return_address_register().0
    }

    /// The FDE is a signal trampoline (augmentation `S`).
    pub fn signal(&self) -> bool {
        self.fde.is_signal_trampoline()
    }

    /// The row, owned: the rules of registers 0..=16 (Err: an expression that cannot be
    /// copied out).
    pub fn to_row(&self) -> Result<Row, Miss> {
        let mut rules = Vec::new();
        for (reg, rule) in self.row.registers() {
            if usize::from(reg.0) >= NREGS {
                continue;
            }
            rules.push((reg.0, self.convert(rule)?));
        }
        Ok(Row {
            start: self.start(),
            end: self.end(),
            cfa: self.cfa()?,
            rules,
            ra: self.ra(),
            signal: self.signal(),
        })
    }
}

/// `.eh_frame_hdr`'s binary search table in the form linkers write (version 1, entries
/// of two `DW_EH_PE_datarel | DW_EH_PE_sdata4` values: function start, FDE address,
/// relative to the header): read with checked arithmetic, since gimli's reader overflows
/// on some damaged headers. Any other form is left to the FDE index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SearchTable {
    /// Offset of the first entry in the header.
    start: usize,
    count: usize,
}

impl SearchTable {
    /// The table of header `hdr`, None if it has none in the form above.
    pub fn parse(hdr: &[u8]) -> Option<SearchTable> {
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

    /// How many entries.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The address of the FDE of the last function starting at or before `vaddr`.
    pub fn lookup(&self, hdr: &[u8], hdr_address: u64, vaddr: u64) -> Option<u64> {
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

/// The CFI of one module, owned, for rows looked up one address at a time: `.eh_frame`
/// (through `.eh_frame_hdr`'s search table, or a sorted index of its FDEs built on first
/// use), then `.debug_frame` for what `.eh_frame` does not cover. Shareable between
/// threads; no cache of rows (the symbolizer keeps one).
pub struct Tables {
    eh_frame: Vec<u8>,
    eh_frame_address: u64,
    eh_frame_hdr: Vec<u8>,
    eh_frame_hdr_address: u64,
    /// `.eh_frame_hdr`'s binary search table, when it has one we can read.
    search: Option<SearchTable>,
    debug_frame: Vec<u8>,
    /// Sorted FDEs of `.eh_frame`, built on first use when there is no search table.
    eh_index: OnceLock<Vec<FdeEntry>>,
    /// Sorted FDEs of `.debug_frame`, built on first use.
    debug_index: OnceLock<Vec<FdeEntry>>,
}

impl fmt::Debug for Tables {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tables")
            .field("eh_frame", &self.eh_frame.len())
            .field("eh_frame_hdr", &self.eh_frame_hdr.len())
            .field("search_table", &self.search.map(|t| t.count))
            .field("debug_frame", &self.debug_frame.len())
            .finish_non_exhaustive()
    }
}

impl Tables {
    /// The sections (any may be empty) and the addresses of the first two.
    pub fn new(
        eh_frame: Vec<u8>,
        eh_frame_address: u64,
        eh_frame_hdr: Vec<u8>,
        eh_frame_hdr_address: u64,
        debug_frame: Vec<u8>,
    ) -> Tables {
        Tables {
            search: SearchTable::parse(&eh_frame_hdr),
            eh_frame,
            eh_frame_address,
            eh_frame_hdr,
            eh_frame_hdr_address,
            debug_frame,
            eh_index: OnceLock::new(),
            debug_index: OnceLock::new(),
        }
    }

    /// Replaces `.debug_frame` (a separate debug file's).
    pub fn set_debug_frame(&mut self, debug_frame: Vec<u8>) {
        self.debug_frame = debug_frame;
        self.debug_index = OnceLock::new();
    }

    /// Whether `.eh_frame` is found through `.eh_frame_hdr`'s search table.
    pub fn has_search_table(&self) -> bool {
        self.search.is_some()
    }

    pub fn has_eh_frame(&self) -> bool {
        !self.eh_frame.is_empty()
    }

    pub fn has_debug_frame(&self) -> bool {
        !self.debug_frame.is_empty()
    }

    /// The search table's entries (0: none).
    pub fn search_table_len(&self) -> usize {
        self.search.map_or(0, |t| t.count)
    }

    /// The row of ELF virtual address `vaddr`: `.eh_frame`'s, else `.debug_frame`'s. A bad
    /// `.eh_frame` is worth saying over a `.debug_frame` without the address.
    pub fn row(&self, vaddr: u64) -> Result<Row, Miss> {
        match self.eh_frame_row(vaddr) {
            Ok(row) => Ok(row),
            Err(eh) => match self.debug_frame_row(vaddr) {
                Ok(row) => Ok(row),
                Err(Miss::NoCfi) => Err(eh),
                Err(Miss::Bad) => Err(Miss::Bad),
            },
        }
    }

    /// `.eh_frame`'s row of `vaddr`.
    pub fn eh_frame_row(&self, vaddr: u64) -> Result<Row, Miss> {
        if self.eh_frame.is_empty() {
            return Err(Miss::NoCfi);
        }
        let eh = Section::eh_frame(
            &self.eh_frame,
            Bases {
                eh_frame: self.eh_frame_address,
                ..Bases::default()
            },
        );
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
                let index = self.eh_index.get_or_init(|| eh.index());
                find(index, vaddr).ok_or(Miss::NoCfi)?.offset
            }
        };
        let fde = eh.fde_at(offset)?;
        if !fde.contains(vaddr) {
            return Err(Miss::NoCfi);
        }
        fde.row_at(vaddr)
    }

    /// `.debug_frame`'s row of `vaddr`.
    pub fn debug_frame_row(&self, vaddr: u64) -> Result<Row, Miss> {
        if self.debug_frame.is_empty() {
            return Err(Miss::NoCfi);
        }
        let df = Section::debug_frame(&self.debug_frame);
        let index = self.debug_index.get_or_init(|| df.index());
        let e = find(index, vaddr).ok_or(Miss::NoCfi)?;
        df.fde_at(e.offset)?.row_at(vaddr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Elf;
    use std::path::Path;

    fn libc() -> (Elf, crate::CfiSections) {
        let elf = Elf::open(Path::new("/lib/x86_64-linux-gnu/libc.so.6")).unwrap();
        let t = elf.eh_frame_sections().unwrap();
        (elf, t)
    }

    /// Every FDE start of libc finds the same row through the search table, the FDE index
    /// and the table of all its rows.
    #[test]
    fn the_three_ways_to_a_row_agree() {
        let (_, t) = libc();
        let with_hdr = Tables::new(
            t.eh_frame.clone(),
            t.eh_frame_address,
            t.eh_frame_hdr.clone(),
            t.eh_frame_hdr_address,
            Vec::new(),
        );
        let without = Tables::new(t.eh_frame.clone(), t.eh_frame_address, vec![], 0, vec![]);
        assert!(with_hdr.has_search_table() && !without.has_search_table());
        let eh = Section::eh_frame(
            &t.eh_frame,
            Bases {
                eh_frame: t.eh_frame_address,
                ..Bases::default()
            },
        );
        let mut ctx = Context::default();
        let (mut fdes, mut rows) = (0, 0);
        eh.for_each_fde(|fde| {
            if fde.is_empty() {
                return;
            }
            fdes += 1;
            fde.rows(&mut ctx, |r| {
                let r = r.to_row().unwrap();
                rows += 1;
                if r.end <= r.start {
                    return;
                }
                for vaddr in [r.start, r.end - 1] {
                    let a = with_hdr.row(vaddr).unwrap();
                    let b = without.row(vaddr).unwrap();
                    assert_eq!(a, b);
                    assert_eq!(
                        (a.cfa.clone(), a.rules.clone()),
                        (r.cfa.clone(), r.rules.clone())
                    );
                    assert_eq!((a.ra, a.signal), (RIP, fde.signal()));
                }
            })
            .unwrap();
        });
        assert!(fdes > 1000 && rows > 10_000, "{fdes} FDEs, {rows} rows");
        assert_eq!(with_hdr.row(0), Err(Miss::NoCfi));
    }

    #[test]
    fn damaged_headers_are_no_search_table() {
        assert_eq!(SearchTable::parse(&[]), None);
        assert_eq!(SearchTable::parse(&[1, 0x1b, 0x03, 0x3b]), None);
        // count u64::MAX: the end overflows, refused
        let mut h = vec![1, 0x1b, 0x04, 0x3b, 0, 0, 0, 0];
        h.extend_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(SearchTable::parse(&h), None);
        // one entry, at the edge of the address space
        let mut h = vec![1, 0x1b, 0x03, 0x3b, 0, 0, 0, 0, 1, 0, 0, 0];
        h.extend_from_slice(&(-8i32).to_le_bytes());
        h.extend_from_slice(&(-4i32).to_le_bytes());
        let t = SearchTable::parse(&h).unwrap();
        assert_eq!(t.lookup(&h, 4, u64::MAX), Some(0));
        assert_eq!(t.lookup(&h, 4, 0), None);
    }
}
