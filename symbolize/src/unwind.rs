//! Offline x86_64 stack unwinding with DWARF call frame information (CFI): the registers
//! and the raw top of the user stack that `ebrec --stack-mode dwarf` copies at an event
//! ([`UserStackCopy`]) are walked back, frame by frame, with the `.eh_frame` rules of each
//! module (found through `.eh_frame_hdr`'s binary search table, or a sorted index of the
//! FDEs built once), `.debug_frame` of a debug file where `.eh_frame` has nothing, and the
//! frame-pointer chain where a module has no CFI at all.
//!
//! A stack that cannot be walked to its outermost frame is an answer, not an error: the
//! frames found so far come back with a [`Stop`] saying why the walk ended early (the
//! copy was too small, no CFI for an address, an address outside every mapping, a CFA
//! that does not move up the stack, …). Nothing here panics on garbage registers, stack
//! bytes or unwind tables: every read is bounds-checked and walks stop at
//! [`MAX_FRAMES`].
//!
//! ```no_run
//! use ebtrace_symbolize::unwind::{unwind, Mapped, UnwindInfo};
//! use ebtrace_format::proto::UserStackCopy;
//! let libc = UnwindInfo::from_elf(&std::fs::read("/usr/lib/x86_64-linux-gnu/libc.so.6").unwrap()).unwrap();
//! let copy = UserStackCopy::default(); // from a Stack record
//! let find = |addr: u64| {
//!     // One mapping of the process: runtime range, file offset of its start, tables.
//!     (0x7f00_0000_0000..0x7f00_0020_0000).contains(&addr).then_some(Mapped {
//!         start: 0x7f00_0000_0000, end: 0x7f00_0020_0000, file_offset: 0,
//!         info: Some(&libc), module: 1,
//!     })
//! };
//! let u = unwind(&copy, find, 128);
//! println!("{:x?} stopped: {:?}", u.ips, u.stop);
//! ```
//!
//! The rules, as libgcc's unwinder applies them: frame 0 is `rip`; every later frame is a
//! return address, looked up at `address - 1` (the call instruction) unless the frame
//! before it was a signal frame (CIE augmentation `S`, glibc's `__restore_rt`), whose
//! "return address" is the interrupted instruction itself. The CFA is a register plus an
//! offset or a DWARF expression (PLT entries, signal frames, realigned stacks), evaluated
//! with the registers known so far and the copied bytes as memory. The caller's `rsp` is
//! the CFA unless a rule says otherwise; callee-saved registers (`rbx`, `rbp`,
//! `r12`–`r15`) keep their value unless a rule restores them; the others are unknown past
//! frame 0. A return address whose rule is "undefined" (`_start`, `clone3`) or that is 0
//! ends the walk normally.
//!
//! A trace's stacks are unwound by [`TraceUnwinder`] (used by
//! [`crate::trace::symbolize_trace`], so also by the reports on a raw trace): tables from
//! the trace's `UnwindTables` records, else from the binaries found on disk; the results
//! become `UnwoundStack` records, whose user ips the reports use.
use ebtrace_format::proto::{record::Kind, Record, UnwindTables, UserStackCopy};
use ebtrace_format::Tables;
use gimli::{
    BaseAddresses, CfaRule, DebugFrame, DebugFrameOffset, EhFrame, EhFrameOffset, EndianSlice,
    EvaluationResult, Expression, FrameDescriptionEntry, LittleEndian, Register, RegisterRule,
    UnwindContext, UnwindSection, UnwindTableRow, Value,
};
use object::{Object, ObjectSection, ObjectSegment};
use rayon::prelude::*;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

/// No walk returns more frames than this, whatever the caller asks.
pub const MAX_FRAMES: usize = 1024;

/// DWARF register numbers of x86_64 that the walk tracks: 0..=16 (16 is the return
/// address column, i.e. `rip`).
const NREGS: usize = 17;
const RSP: u16 = 7;
const RBP: u16 = 6;
const RIP: u16 = 16;
/// rbx, rbp, r12–r15: preserved across calls, so "same value" when no rule says more.
const CALLEE_SAVED: [u16; 6] = [3, 6, 12, 13, 14, 15];

/// Rows kept per module before the cache is emptied (a row is ~100 bytes).
const ROWS_MAX: usize = 1 << 16;

/// Steps allowed to one DWARF expression (a backward `DW_OP_skip` must not hang us).
const EXPRESSION_STEPS: u32 = 256;

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
enum Rule {
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
enum Cfa {
    RegisterOffset(u16, i64),
    Expression(Box<[u8]>),
}

/// The CFI row of one address, reduced to what the walk needs.
#[derive(Debug, Clone)]
struct Row {
    cfa: Cfa,
    /// Rules of registers 0..=16 that the row lists.
    rules: Vec<(u16, Rule)>,
    /// The CIE's return address column (16 on x86_64).
    ra: u16,
    /// The FDE is a signal trampoline (augmentation `S`).
    signal: bool,
}

impl Row {
    fn rule(&self, reg: u16) -> Option<&Rule> {
        self.rules
            .iter()
            .find(|(r, _)| *r == reg)
            .map(|(_, rule)| rule)
    }
}

/// Why a module gave no row for an address.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Miss {
    /// No FDE covers it.
    NoCfi,
    /// An FDE or CIE that does not parse or evaluate.
    Bad,
}

type RowLookup = Result<Arc<Row>, Miss>;

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
    fn row(&self, vaddr: u64) -> RowLookup {
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

/// One mapping of the process, as the walk needs it.
#[derive(Debug, Clone, Copy)]
pub struct Mapped<'a> {
    /// Runtime range `[start, end)`.
    pub start: u64,
    pub end: u64,
    /// Offset in the file of `start`.
    pub file_offset: u64,
    /// The module's tables; None when there are none (no file, no `.eh_frame`, an
    /// anonymous or JIT mapping): the frame-pointer chain is tried there.
    pub info: Option<&'a UnwindInfo>,
    /// The caller's name for the module (a build-id id in a trace), echoed in
    /// [`Stop::NoCfi`] and [`Stop::BadCfi`].
    pub module: u64,
}

/// Why a walk ended before the outermost frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Stop {
    /// A value the next frame needs is at `address`, outside the copied bytes.
    CopyTooSmall { address: u64 },
    /// No CFI for `address` (the runtime address looked up) in `module`, and no usable
    /// frame-pointer chain.
    NoCfi { module: u64, address: u64 },
    /// `address` is in no mapping.
    NoMapping { address: u64 },
    /// The CFI of `module` for `address` does not parse, or names an unknown rule.
    BadCfi { module: u64, address: u64 },
    /// The CFA or the caller's stack pointer did not move up the stack (a loop, or
    /// garbage).
    BadCfa { cfa: u64 },
    /// A DWARF expression the walk cannot evaluate.
    UnsupportedExpression { address: u64 },
    /// A rule needs DWARF register `register`, whose value is unknown here (not
    /// recorded, or not preserved across calls).
    MissingRegister { register: u16 },
    /// The caller's limit (or [`MAX_FRAMES`]) was reached.
    MaxFrames,
}

impl Stop {
    /// A short, stable name of the reason, for counting ("copy too small", "no CFI", …).
    pub fn reason(&self) -> &'static str {
        match self {
            Stop::CopyTooSmall { .. } => "copy too small",
            Stop::NoCfi { .. } => "no CFI",
            Stop::NoMapping { .. } => "outside any mapping",
            Stop::BadCfi { .. } => "bad CFI",
            Stop::BadCfa { .. } => "bad CFA",
            Stop::UnsupportedExpression { .. } => "unsupported CFI expression",
            Stop::MissingRegister { .. } => "missing register",
            Stop::MaxFrames => "max frames",
        }
    }

    /// The module the reason is about, for the reasons that name one.
    pub fn module(&self) -> Option<u64> {
        match self {
            Stop::NoCfi { module, .. } | Stop::BadCfi { module, .. } => Some(*module),
            _ => None,
        }
    }
}

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason())?;
        match self {
            Stop::CopyTooSmall { address } => write!(f, " (read at {address:#x})"),
            Stop::NoCfi { address, .. }
            | Stop::BadCfi { address, .. }
            | Stop::NoMapping { address }
            | Stop::UnsupportedExpression { address } => write!(f, " at {address:#x}"),
            Stop::BadCfa { cfa } => write!(f, " {cfa:#x}"),
            Stop::MissingRegister { register } => write!(f, " {register}"),
            Stop::MaxFrames => Ok(()),
        }
    }
}

/// The result of a walk.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unwound {
    /// Leaf first: `rip`, then return addresses (the interrupted instruction after a
    /// signal frame).
    pub ips: Vec<u64>,
    /// Why the walk ended early; None when it reached the outermost frame.
    pub stop: Option<Stop>,
    /// Frames found by the frame-pointer chain, where a module had no CFI.
    pub fp_steps: u32,
    /// Indices (> 0) of `ips` that are exact instruction addresses (after a signal frame).
    pub exact: Vec<u32>,
}

/// The copied stack as memory.
struct Memory<'a> {
    base: u64,
    data: &'a [u8],
}

impl Memory<'_> {
    fn read(&self, address: u64, size: u8) -> Result<u64, Stop> {
        let size = usize::from(size);
        let bytes = address
            .checked_sub(self.base)
            .and_then(|off| usize::try_from(off).ok())
            .and_then(|off| self.data.get(off..off.checked_add(size)?))
            .filter(|_| (1..=8).contains(&size))
            .ok_or(Stop::CopyTooSmall { address })?;
        let mut buf = [0u8; 8];
        buf[..size].copy_from_slice(bytes);
        Ok(u64::from_le_bytes(buf))
    }

    fn contains(&self, address: u64, len: u64) -> bool {
        address
            .checked_sub(self.base)
            .and_then(|off| off.checked_add(len))
            .is_some_and(|end| end <= self.data.len() as u64)
    }
}

/// A register's value, or why it has none.
type Reg = Result<u64, Stop>;

/// Walks the stack of `copy`. `find` gives the mapping of a runtime address;
/// at most `max_frames` (capped at [`MAX_FRAMES`]) addresses come back.
pub fn unwind<'a, F>(copy: &UserStackCopy, find: F, max_frames: usize) -> Unwound
where
    F: Fn(u64) -> Option<Mapped<'a>>,
{
    let max = max_frames.min(MAX_FRAMES);
    let mut regs: [Reg; NREGS] =
        std::array::from_fn(|r| Err(Stop::MissingRegister { register: r as u16 }));
    let mut values = copy.regs.iter();
    for (r, reg) in regs.iter_mut().enumerate() {
        if copy.reg_mask & (1 << r) != 0 {
            match values.next() {
                Some(&v) => *reg = Ok(v),
                None => break,
            }
        }
    }
    let mem = Memory {
        base: copy.sp,
        data: &copy.data,
    };
    let mut out = Unwound::default();
    // Frame 0 and the frame after a signal frame are exact instruction addresses.
    let mut exact = true;
    loop {
        let pc = match regs[usize::from(RIP)] {
            Ok(pc) => pc,
            Err(why) => {
                out.stop = Some(why);
                break;
            }
        };
        if out.ips.len() >= max {
            out.stop = Some(Stop::MaxFrames);
            break;
        }
        if exact && !out.ips.is_empty() {
            out.exact.push(out.ips.len() as u32);
        }
        out.ips.push(pc);
        let lookup = if exact { pc } else { pc.wrapping_sub(1) };
        match step(&mut regs, &mem, lookup, &find) {
            Ok(Step::Next { signal, fp }) => {
                exact = signal;
                out.fp_steps += u32::from(fp);
            }
            Ok(Step::Outermost) => break,
            Err(why) => {
                out.stop = Some(why);
                break;
            }
        }
    }
    out
}

/// What a step did: moved `regs` to the caller's frame (found by CFI or, `fp`, by the
/// frame-pointer chain; `signal`: the frame left was a signal frame), or found the
/// outermost frame.
enum Step {
    Next { signal: bool, fp: bool },
    Outermost,
}

fn step<'a, F>(
    regs: &mut [Reg; NREGS],
    mem: &Memory<'_>,
    lookup: u64,
    find: &F,
) -> Result<Step, Stop>
where
    F: Fn(u64) -> Option<Mapped<'a>>,
{
    let m = find(lookup).ok_or(Stop::NoMapping { address: lookup })?;
    let no_cfi = Stop::NoCfi {
        module: m.module,
        address: lookup,
    };
    let row = match m.info {
        Some(info) => {
            let vaddr = lookup
                .checked_sub(m.start)
                .filter(|_| lookup < m.end)
                .and_then(|o| o.checked_add(m.file_offset))
                .and_then(|o| info.offset_to_vaddr(o));
            match vaddr.map(|v| info.row(v)) {
                Some(Ok(row)) => Some(row),
                None | Some(Err(Miss::NoCfi)) => None,
                Some(Err(Miss::Bad)) => {
                    return Err(Stop::BadCfi {
                        module: m.module,
                        address: lookup,
                    })
                }
            }
        }
        None => None,
    };
    match row {
        Some(row) => cfi_step(regs, mem, &row, lookup, m.module),
        None => fp_step(regs, mem).ok_or(no_cfi),
    }
}

/// The caller's registers by the frame-pointer chain: `rbp` → saved `rbp` at `[rbp]`,
/// return address at `[rbp + 8]`, `rsp` = `rbp + 16`. Only when `rbp` points into the
/// copy, above the current `rsp`.
fn fp_step(regs: &mut [Reg; NREGS], mem: &Memory<'_>) -> Option<Step> {
    let rbp = *regs[usize::from(RBP)].as_ref().ok()?;
    let rsp = *regs[usize::from(RSP)].as_ref().ok()?;
    if rbp < rsp || !mem.contains(rbp, 16) {
        return None;
    }
    let mut next: [Reg; NREGS] =
        std::array::from_fn(|r| Err(Stop::MissingRegister { register: r as u16 }));
    for r in CALLEE_SAVED {
        next[usize::from(r)] = regs[usize::from(r)];
    }
    next[usize::from(RBP)] = Ok(mem.read(rbp, 8).ok()?);
    next[usize::from(RIP)] = Ok(mem.read(rbp.checked_add(8)?, 8).ok()?);
    next[usize::from(RSP)] = Ok(rbp.checked_add(16)?);
    if next[usize::from(RIP)] == Ok(0) {
        return Some(Step::Outermost);
    }
    *regs = next;
    Some(Step::Next {
        signal: false,
        fp: true,
    })
}

fn cfi_step(
    regs: &mut [Reg; NREGS],
    mem: &Memory<'_>,
    row: &Row,
    lookup: u64,
    module: u64,
) -> Result<Step, Stop> {
    let bad_cfi = Stop::BadCfi {
        module,
        address: lookup,
    };
    let get = |r: u16| -> Reg {
        regs.get(usize::from(r))
            .cloned()
            .unwrap_or(Err(Stop::MissingRegister { register: r }))
    };
    let cfa = match &row.cfa {
        Cfa::RegisterOffset(r, off) => get(*r)?.wrapping_add(*off as u64),
        Cfa::Expression(e) => evaluate(e, regs, mem, None, lookup)?,
    };
    let apply = |reg: u16, rule: &Rule| -> Reg {
        match rule {
            Rule::Undefined => Err(Stop::MissingRegister { register: reg }),
            Rule::Same => get(reg),
            Rule::Offset(n) => mem.read(cfa.wrapping_add(*n as u64), 8),
            Rule::ValOffset(n) => Ok(cfa.wrapping_add(*n as u64)),
            Rule::Register(r) => get(*r),
            Rule::Expression(e) => {
                let at = evaluate(e, regs, mem, Some(cfa), lookup)?;
                mem.read(at, 8)
            }
            Rule::ValExpression(e) => evaluate(e, regs, mem, Some(cfa), lookup),
            Rule::Constant(c) => Ok(*c),
            Rule::Unsupported => Err(Stop::UnsupportedExpression { address: lookup }),
        }
    };
    let mut next: [Reg; NREGS] =
        std::array::from_fn(|r| Err(Stop::MissingRegister { register: r as u16 }));
    for r in CALLEE_SAVED {
        next[usize::from(r)] = regs[usize::from(r)];
    }
    next[usize::from(RSP)] = Ok(cfa);
    for (reg, rule) in &row.rules {
        if *reg == row.ra {
            continue;
        }
        next[usize::from(*reg)] = apply(*reg, rule);
    }
    // The return address: its own column; undefined marks the outermost frame.
    if usize::from(row.ra) >= NREGS {
        return Err(bad_cfi);
    }
    let ra = match row.rule(row.ra) {
        Some(Rule::Undefined) => return Ok(Step::Outermost),
        Some(rule) => apply(row.ra, rule)?,
        // x86_64 CIEs always say where the return address is; without it the same value
        // would come back forever.
        None => return Err(bad_cfi),
    };
    if ra == 0 {
        return Ok(Step::Outermost);
    }
    let sp = get(RSP)?;
    let next_sp = next[usize::from(RSP)]?;
    // The caller's frame is above ours: a CFA that does not move up is a loop or garbage.
    if next_sp <= sp || cfa <= sp {
        return Err(Stop::BadCfa { cfa });
    }
    next[usize::from(RIP)] = Ok(ra);
    *regs = next;
    Ok(Step::Next {
        signal: row.signal,
        fp: false,
    })
}

/// Evaluates a CFI expression over the registers and the copy; `initial` is pushed first
/// (the CFA, for register rules).
fn evaluate(
    bytes: &[u8],
    regs: &[Reg; NREGS],
    mem: &Memory<'_>,
    initial: Option<u64>,
    lookup: u64,
) -> Result<u64, Stop> {
    let unsupported = Stop::UnsupportedExpression { address: lookup };
    let encoding = gimli::Encoding {
        address_size: 8,
        format: gimli::Format::Dwarf32,
        version: 4,
    };
    let mut e = Expression(EndianSlice::new(bytes, LittleEndian)).evaluation(encoding);
    e.set_max_iterations(EXPRESSION_STEPS);
    if let Some(v) = initial {
        e.set_initial_value(v);
    }
    let mut state = e.evaluate();
    loop {
        state = match state {
            Ok(EvaluationResult::Complete) => break,
            Ok(EvaluationResult::RequiresRegister { register, .. }) => {
                let Register(r) = register;
                let v = regs
                    .get(usize::from(r))
                    .cloned()
                    .unwrap_or(Err(Stop::MissingRegister { register: r }))?;
                e.resume_with_register(Value::Generic(v))
            }
            Ok(EvaluationResult::RequiresMemory { address, size, .. }) => {
                let v = mem.read(address, size)?;
                e.resume_with_memory(Value::Generic(v))
            }
            Ok(_) | Err(_) => return Err(unsupported),
        };
    }
    e.value_result()
        .and_then(|v| v.to_u64(u64::MAX).ok())
        .ok_or(unsupported)
}

// --- The stack copies of a trace ---

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
    locator: &'l crate::find::Locator,
    recorded: HashMap<u64, UnwindTables>,
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

    pub fn new(locator: &'l crate::find::Locator) -> TraceUnwinder<'l> {
        TraceUnwinder {
            locator,
            recorded: HashMap::new(),
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
                    let m = crate::trace::mapping_for(tables_ref, stack.generation, addr)?;
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
                let info = load_tables(tables, &self.recorded, self.locator, id, path);
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
    locator: &crate::find::Locator,
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
    let build_id = tables.build_ids.get(&id)?;
    let located = locator.locate(
        Some(build_id),
        std::path::Path::new(std::ffi::OsStr::from_bytes(path)),
        None,
    );
    let binary = located.binary.as_ref()?;
    let mut info = UnwindInfo::from_elf(&binary.file.map[..]).ok()?;
    if let Some(d) = located
        .debug
        .as_ref()
        .filter(|d| d.file.path != binary.file.path)
    {
        info.add_debug_frame(&d.file.map[..]);
    }
    Some((info, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(regs: &[(u16, u64)], sp: u64, data: Vec<u8>) -> UserStackCopy {
        let mut regs = regs.to_vec();
        regs.sort();
        UserStackCopy {
            reg_mask: regs.iter().fold(0, |m, (r, _)| m | 1 << r),
            regs: regs.iter().map(|(_, v)| *v).collect(),
            sp,
            data,
        }
    }

    fn words(w: &[u64]) -> Vec<u8> {
        w.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// Without tables the frame-pointer chain is followed while rbp stays in the copy,
    /// and the first rbp outside it is a "no CFI" stop naming the module.
    #[test]
    fn frame_pointer_chain_without_tables() {
        let sp = 0x7000_0000;
        // [sp]: junk, [sp+8]: saved rbp -> sp+24, [sp+16]: ra 0x1234, [sp+24]: rbp
        // outside, [sp+32]: ra 0x1300.
        let data = words(&[0xdead, sp + 24, 0x1234, 0x10, 0x1300]);
        let c = copy(&[(RIP, 0x1100), (RSP, sp), (RBP, sp + 8)], sp, data);
        let find = |a: u64| {
            (0x1000..0x2000).contains(&a).then_some(Mapped {
                start: 0x1000,
                end: 0x2000,
                file_offset: 0,
                info: None,
                module: 9,
            })
        };
        let u = unwind(&c, find, 100);
        assert_eq!(u.ips, [0x1100, 0x1234, 0x1300]);
        assert_eq!(u.fp_steps, 2);
        assert_eq!(
            u.stop,
            Some(Stop::NoCfi {
                module: 9,
                address: 0x12ff
            })
        );
    }

    #[test]
    fn no_rip_is_a_missing_register() {
        let u = unwind(&copy(&[(RSP, 8)], 8, vec![]), |_| None, 10);
        assert!(u.ips.is_empty());
        assert_eq!(u.stop, Some(Stop::MissingRegister { register: RIP }));
        let u = unwind(&copy(&[(RIP, 8)], 8, vec![]), |_| None, 10);
        assert_eq!(u.ips, [8]);
        assert_eq!(u.stop, Some(Stop::NoMapping { address: 8 }));
    }

    #[test]
    fn memory_reads_are_bounded() {
        let m = Memory {
            base: u64::MAX - 4,
            data: &[1, 2, 3, 4],
        };
        assert!(m.read(u64::MAX - 4, 8).is_err());
        assert_eq!(m.read(u64::MAX - 4, 4), Ok(0x0403_0201));
        assert!(m.read(u64::MAX, 8).is_err());
        assert!(m.read(0, 8).is_err());
        assert!(m.read(u64::MAX - 4, 0).is_err());
        assert!(!m.contains(u64::MAX - 4, 16));
        assert!(m.contains(u64::MAX - 4, 4));
    }
}
