//! A binary's `.eh_frame` turned into the unwind rows the kernel-side walk reads (the row
//! format is in `bpf/events.h`): per address range the CFA (rsp or rbp plus an offset), where
//! the caller's rbp was saved, and the commands for PLT stubs, signal trampolines and the
//! outermost frames. Rows are keyed by file offset, so that the walk maps a pc to its row
//! with the mapping's offset alone.
//!
//! This is CFI, not debug information: ebrec reads no `.debug_*` section.
use crate::elf::{Elf, Segment};
use ebtrace_bpf::{CFI_INVALID, CFI_PLT, CFI_RBP, CFI_RBP_LOST, CFI_RSP, CFI_SIGNAL, CFI_STOP};
use gimli::{
    BaseAddresses, CfaRule, CieOrFde, EhFrame, EndianSlice, LittleEndian, RegisterRule,
    UnwindContext, UnwindSection,
};
#[cfg(test)]
use std::path::Path;

const RSP: gimli::Register = gimli::X86_64::RSP;
const RBP: gimli::Register = gimli::X86_64::RBP;
const RA: gimli::Register = gimli::X86_64::RA;

/// A row: the file offset it starts at and its rule, packed as the BPF side reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    pub offset: u32,
    pub kind: u8,
    /// rbp rule (signed eighths of CFA-relative offset), or the PLT threshold.
    pub rbp: u8,
    pub cfa_offset: u16,
}

impl Row {
    pub fn pack(self) -> u64 {
        u64::from(self.offset)
            | (u64::from(self.kind) << 32)
            | (u64::from(self.rbp) << 40)
            | (u64::from(self.cfa_offset) << 48)
    }
    fn same_rule(&self, o: &Row) -> bool {
        self.kind == o.kind && self.rbp == o.rbp && self.cfa_offset == o.cfa_offset
    }
}

/// The rows of one file, sorted by offset, with the counts of what could not be expressed.
#[derive(Debug, Default)]
pub struct Rows {
    pub rows: Vec<Row>,
    /// Rows whose rule the walk cannot do (an unusual CFA expression, a return address not
    /// at CFA - 8): kept as CFI_INVALID, so a pc there is "no rows", never a wrong frame.
    pub unsupported: u64,
    pub fdes: u64,
}

/// The rows of the ELF file at `elf` (None: no `.eh_frame`, or not x86-64 ELF).
pub fn build(elf: &Elf) -> Option<Rows> {
    let (data, address) = elf.section(".eh_frame")?;
    let segments: Vec<Segment> = elf
        .load_segments()
        .into_iter()
        .filter(|s| s.executable)
        .collect();
    if segments.is_empty() {
        return None;
    }
    let to_off = |vaddr: u64| -> Option<u32> {
        let s = segments.iter().find(|s| s.holds(vaddr))?;
        u32::try_from(vaddr - s.vaddr + s.offset).ok()
    };
    let eh = EhFrame::new(&data, LittleEndian);
    let mut bases = BaseAddresses::default().set_eh_frame(address);
    if let Some((_, text)) = elf.section(".text") {
        bases = bases.set_text(text);
    }
    if let Some((_, got)) = elf.section(".got") {
        bases = bases.set_got(got);
    }
    let mut ctx = Box::new(UnwindContext::new());
    let mut out = Rows::default();
    // (start, end, rows of one FDE)
    let mut fdes: Vec<(u32, u32, Vec<Row>)> = Vec::new();
    let mut entries = eh.entries(&bases);
    loop {
        let entry = match entries.next() {
            Ok(Some(e)) => e,
            Ok(None) => break,
            Err(_) => break, // a malformed entry ends the section: what came before stays
        };
        let partial = match entry {
            CieOrFde::Cie(_) => continue,
            CieOrFde::Fde(p) => p,
        };
        let Ok(fde) = partial.parse(EhFrame::cie_from_offset) else {
            continue;
        };
        out.fdes += 1;
        let (Some(start), Some(end)) = (
            to_off(fde.initial_address()),
            to_off(fde.initial_address() + fde.len().saturating_sub(1)).map(|e| e + 1),
        ) else {
            continue;
        };
        if end <= start {
            continue;
        }
        let signal = fde.cie().is_signal_trampoline();
        let mut rows = Vec::new();
        if signal {
            rows.push(Row {
                offset: start,
                kind: CFI_SIGNAL as u8,
                rbp: 0,
                cfa_offset: 0,
            });
        } else {
            let Ok(mut table) = fde.rows(&eh, &bases, &mut ctx) else {
                continue;
            };
            while let Ok(Some(r)) = table.next_row() {
                let Some(off) = to_off(r.start_address()) else {
                    continue;
                };
                let row = convert(r, off, &eh);
                if row.kind == CFI_INVALID as u8 {
                    out.unsupported += 1;
                }
                rows.push(row);
            }
        }
        fdes.push((start, end, rows));
    }
    fdes.sort_by_key(|f| (f.0, f.1));
    // PLT sections no FDE describes: `.plt` pushes a word at entry + 11 (lazy binding),
    // `.plt.got`/`.plt.sec` stubs only jump.
    for (name, threshold) in [(".plt", 11u8), (".plt.got", 16), (".plt.sec", 16)] {
        let Some((d, vaddr)) = elf.section(name) else {
            continue;
        };
        let (Some(start), Some(end)) = (to_off(vaddr), to_off(vaddr + d.len() as u64 - 1)) else {
            continue;
        };
        let end = end + 1;
        if fdes.iter().any(|f| f.0 < end && start < f.1) {
            continue;
        }
        fdes.push((
            start,
            end,
            vec![Row {
                offset: start,
                kind: CFI_PLT as u8,
                rbp: threshold,
                cfa_offset: 8,
            }],
        ));
    }
    fdes.sort_by_key(|f| (f.0, f.1));
    let mut rows: Vec<Row> = Vec::with_capacity(fdes.iter().map(|f| f.2.len() + 1).sum());
    let mut last_end = 0u32;
    for (start, end, frows) in fdes {
        if start < last_end {
            continue; // overlapping FDEs: the first wins
        }
        if start > last_end && !rows.is_empty() {
            push(&mut rows, gap(last_end));
        }
        for r in frows {
            if r.offset >= start && r.offset < end {
                push(&mut rows, r);
            }
        }
        last_end = end;
    }
    if !rows.is_empty() {
        push(&mut rows, gap(last_end));
    }
    out.rows = rows;
    Some(out)
}

fn gap(offset: u32) -> Row {
    Row {
        offset,
        kind: CFI_INVALID as u8,
        rbp: 0,
        cfa_offset: 0,
    }
}

/// Appends `r`, merging it into the previous row when both have the same rule, and
/// replacing the previous row when both start at the same offset.
fn push(rows: &mut Vec<Row>, r: Row) {
    if let Some(last) = rows.last_mut() {
        if last.offset == r.offset {
            *last = r;
            // the one before may now have the same rule
            let n = rows.len();
            if n >= 2 && rows[n - 2].same_rule(&rows[n - 1]) {
                rows.pop();
            }
            return;
        }
        if last.same_rule(&r) {
            return;
        }
    }
    rows.push(r);
}

type Slice<'a> = EndianSlice<'a, LittleEndian>;

fn convert(r: &gimli::UnwindTableRow<usize>, offset: u32, eh: &EhFrame<Slice<'_>>) -> Row {
    let invalid = gap(offset);
    match r.register(RA) {
        Some(RegisterRule::Undefined) => {
            return Row {
                offset,
                kind: CFI_STOP as u8,
                rbp: 0,
                cfa_offset: 0,
            }
        }
        Some(RegisterRule::Offset(-8)) => {}
        _ => return invalid,
    }
    let (kind, cfa_offset, plt) = match r.cfa() {
        CfaRule::RegisterAndOffset { register, offset } => {
            let Ok(off) = u16::try_from(*offset) else {
                return invalid;
            };
            if *register == RSP {
                (CFI_RSP, off, None)
            } else if *register == RBP {
                (CFI_RBP, off, None)
            } else {
                return invalid;
            }
        }
        CfaRule::Expression(e) => match plt_threshold(e, eh) {
            Some(t) => (CFI_PLT, 8, Some(t)),
            None => return invalid,
        },
    };
    let rbp = match plt {
        Some(t) => t,
        None => match r.register(RBP) {
            None | Some(RegisterRule::Undefined | RegisterRule::SameValue) => 0,
            Some(RegisterRule::Offset(o)) if o % 8 == 0 && (-127 * 8..0).contains(&o) => {
                (o / 8) as i8 as u8
            }
            _ => CFI_RBP_LOST as u8,
        },
    };
    Row {
        offset,
        kind: kind as u8,
        rbp,
        cfa_offset,
    }
}

/// The threshold of the PLT CFA expression `rsp + 8 + ((rip & 15) >= T) << 3` (what
/// binutils writes for `.plt`), None for any other expression.
fn plt_threshold(e: &gimli::UnwindExpression<usize>, eh: &EhFrame<Slice<'_>>) -> Option<u8> {
    let gimli::Expression(bytes) = e.get(eh).ok()?;
    match bytes.slice() {
        // breg7 8; breg16 0; lit15; and; litT; ge; lit3; shl; plus
        [0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, t @ 0x30..=0x4f, 0x2a, 0x33, 0x24, 0x22] => {
            Some(t - 0x30)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The row covering `off`, as the BPF side finds it (the last starting at or before).
    fn lookup(rows: &[Row], off: u32) -> Option<Row> {
        let i = rows.partition_point(|r| r.offset <= off);
        i.checked_sub(1).map(|i| rows[i])
    }

    #[test]
    fn libc_rows_cover_its_functions() {
        let elf = Elf::open(Path::new("/lib/x86_64-linux-gnu/libc.so.6")).unwrap();
        let built = build(&elf).unwrap();
        eprintln!(
            "{} rows, {} fdes, {} unsupported",
            built.rows.len(),
            built.fdes,
            built.unsupported
        );
        let syms = elf.text_symbols().unwrap();
        let segs = elf.load_segments();
        let mut missing = Vec::new();
        for name in [
            "__lll_lock_wait",
            "__lll_lock_wake",
            "pthread_mutex_lock",
            "memcpy",
            "malloc",
        ] {
            let Some(s) = syms.iter().find(|s| s.name == name) else {
                continue;
            };
            let off = Elf::file_offset(&segs, s.address).unwrap() as u32;
            let r = lookup(&built.rows, off + 1);
            eprintln!("{name} {:#x} -> {:?}", off, r);
            if r.is_none_or(|r| r.kind == CFI_INVALID as u8) {
                missing.push(name);
            }
        }
        assert!(missing.is_empty(), "no rows for {missing:?}");
    }
}

#[cfg(test)]
mod differential {
    use super::*;

    /// Every address of every FDE row finds, through the packed rows and the lookup the BPF
    /// side does, the rule gimli evaluates there: merging, gaps and overlaps lose nothing.
    fn check(path: &str) {
        let elf = Elf::open(Path::new(path)).unwrap();
        let built = build(&elf).unwrap();
        let rows = &built.rows;
        assert!(
            rows.windows(2).all(|w| w[0].offset < w[1].offset),
            "{path}: rows not sorted"
        );
        let (data, address) = elf.section(".eh_frame").unwrap();
        let segs: Vec<Segment> = elf
            .load_segments()
            .into_iter()
            .filter(|s| s.executable)
            .collect();
        let to_off = |v: u64| {
            segs.iter()
                .find(|s| s.holds(v))
                .map(|s| (v - s.vaddr + s.offset) as u32)
        };
        let eh = EhFrame::new(&data, LittleEndian);
        let bases = BaseAddresses::default().set_eh_frame(address);
        let mut ctx = Box::new(UnwindContext::new());
        let mut entries = eh.entries(&bases);
        let (mut checked, mut fdes) = (0u64, 0u64);
        while let Ok(Some(e)) = entries.next() {
            let CieOrFde::Fde(p) = e else { continue };
            let Ok(fde) = p.parse(EhFrame::cie_from_offset) else {
                continue;
            };
            if fde.cie().is_signal_trampoline() {
                continue;
            }
            fdes += 1;
            let Ok(mut table) = fde.rows(&eh, &bases, &mut ctx) else {
                continue;
            };
            while let Ok(Some(r)) = table.next_row() {
                let (Some(a), Some(b)) = (to_off(r.start_address()), to_off(r.end_address() - 1))
                else {
                    continue;
                };
                let want = convert(r, a, &eh);
                for off in (a..=b).step_by(((b - a) / 7).max(1) as usize) {
                    let i = rows.partition_point(|x| x.offset <= off);
                    let got = rows[i - 1];
                    assert!(
                        got.same_rule(&want),
                        "{path}: {off:#x}: rows say {got:?}, gimli {want:?}"
                    );
                    checked += 1;
                }
            }
        }
        assert!(
            fdes > 100 && checked > 1000,
            "{path}: {fdes} FDEs, {checked} addresses"
        );
    }

    #[test]
    fn libc_rows_equal_gimli() {
        check("/lib/x86_64-linux-gnu/libc.so.6");
    }

    #[test]
    fn libstdcxx_rows_equal_gimli() {
        check("/usr/lib/x86_64-linux-gnu/libstdc++.so.6");
    }

    #[test]
    fn plt_stubs_have_the_plt_rule() {
        let elf = Elf::open(Path::new("/lib/x86_64-linux-gnu/libc.so.6")).unwrap();
        let built = build(&elf).unwrap();
        let (_, vaddr) = elf.section(".plt").expect("libc has a .plt");
        let off = Elf::file_offset(&elf.load_segments(), vaddr).unwrap() as u32;
        // past PLT0 (16 bytes), inside the first stub
        let i = built.rows.partition_point(|x| x.offset <= off + 20);
        let r = built.rows[i - 1];
        assert_eq!(r.kind, CFI_PLT as u8, "{r:?}");
        assert!(r.rbp == 10 || r.rbp == 11, "threshold {r:?}");
    }
}
