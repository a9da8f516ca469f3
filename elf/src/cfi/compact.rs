//! A file's whole `.eh_frame` reduced to the rules a kernel-side walk can do (the rows of
//! ebrec's `--stack-mode cfi|auto`; ebtrace-record numbers and packs them as
//! `bpf/events.h` says): per address range the CFA (rsp or rbp plus an offset), where the
//! caller's rbp was saved, and the rules for PLT stubs, signal trampolines and the
//! outermost frames. Rows are keyed by file offset, so that the walk maps a pc to its row
//! with the mapping's offset alone; they are sorted, and a range no FDE covers is an
//! [`Rule::Invalid`] row.
//!
//! The limits are the packed row's: file offsets below 4 GiB, a CFA offset of 0..=65535
//! bytes, the saved rbp within 127 words below the CFA. A rule outside them, or one the
//! walk cannot do (an unusual CFA expression, a return address not at CFA - 8), is
//! [`Rule::Invalid`], so a pc there is "no rows", never a wrong frame.
use super::{Bases, Cfa, Context, RowRef, Section, RBP, RIP, RSP};
use crate::{Elf, Segment};

/// What the walk does in a row's range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// No rule: a gap between FDEs, or a rule the walk cannot do.
    Invalid,
    /// CFA = `base` + `offset`; the return address at CFA - 8.
    Cfa {
        base: Base,
        offset: u16,
        rbp: SavedRbp,
    },
    /// CFA = rsp + `offset` + 8 when `(pc & 15) >= threshold` (a PLT entry after its push).
    Plt { threshold: u8, offset: u16 },
    /// A signal trampoline: the registers are in the ucontext at rsp.
    Signal,
    /// The outermost frame (return address undefined: `_start`, `clone`).
    Stop,
}

/// The register the CFA is relative to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Base {
    Rsp,
    Rbp,
}

/// Where the caller's rbp is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SavedRbp {
    /// In rbp still (no rule, undefined, or same value).
    Unchanged,
    /// At CFA + 8 × `n`, `n` in -127..=-1.
    At(i8),
    /// Somewhere the walk cannot read.
    Lost,
}

/// A row: the file offset its range starts at, and its rule (up to the next row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    pub offset: u32,
    pub rule: Rule,
}

/// The rows of one file, sorted by offset, with the counts of what could not be expressed.
#[derive(Debug, Default)]
pub struct Rows {
    pub rows: Vec<Row>,
    /// Rows whose rule the walk cannot do: kept as [`Rule::Invalid`].
    pub unsupported: u64,
    /// FDEs read.
    pub fdes: u64,
}

/// What [`build_from`] reads: the bytes and addresses of an ELF file's sections.
#[derive(Debug, Clone)]
pub struct Input<'a> {
    pub eh_frame: &'a [u8],
    pub bases: Bases,
    /// The executable PT_LOAD segments (the only ones a pc can be in).
    pub segments: &'a [Segment],
    /// (address, size, threshold) of the PLT sections, whose stubs no FDE may describe:
    /// `.plt` pushes a word at entry + 11 (lazy binding), `.plt.got`/`.plt.sec` stubs only
    /// jump.
    pub plt: Vec<(u64, u64, u8)>,
}

/// The PLT sections and their thresholds (see [`Input::plt`]).
pub const PLT_SECTIONS: [(&str, u8); 3] = [(".plt", 11), (".plt.got", 16), (".plt.sec", 16)];

/// The rows of the ELF file `elf` (None: no `.eh_frame`, or no executable segment).
pub fn build(elf: &Elf) -> Option<Rows> {
    let obj = elf.object().ok()?;
    let (data, address) = crate::section(&obj, ".eh_frame")?;
    let segments: Vec<Segment> = crate::load_segments(&obj)
        .into_iter()
        .filter(|s| s.executable)
        .collect();
    if segments.is_empty() {
        return None;
    }
    let addr = |name: &str| crate::section(&obj, name).map(|(_, a)| a);
    let input = Input {
        eh_frame: &data,
        bases: Bases {
            eh_frame: address,
            text: addr(".text"),
            got: addr(".got"),
        },
        segments: &segments,
        plt: PLT_SECTIONS
            .iter()
            .filter_map(|&(name, t)| {
                let (d, a) = crate::section(&obj, name)?;
                Some((a, d.len() as u64, t))
            })
            .collect(),
    };
    Some(build_from(&input))
}

/// The rows of `input`.
pub fn build_from(input: &Input<'_>) -> Rows {
    let to_off = |vaddr: u64| -> Option<u32> {
        let s = input.segments.iter().find(|s| s.holds(vaddr))?;
        u32::try_from((vaddr - s.vaddr).checked_add(s.offset)?).ok()
    };
    // The offset past the range of `len` bytes at `vaddr`.
    let end_off = |vaddr: u64, len: u64| -> Option<u32> {
        to_off(vaddr.checked_add(len.saturating_sub(1))?)?.checked_add(1)
    };
    let eh = Section::eh_frame(input.eh_frame, input.bases);
    let mut ctx = Context::default();
    let mut out = Rows::default();
    // (start, end, rows of one FDE)
    let mut fdes: Vec<(u32, u32, Vec<Row>)> = Vec::new();
    eh.for_each_fde(|fde| {
        out.fdes += 1;
        let (Some(start), Some(end)) = (to_off(fde.start()), end_off(fde.start(), fde.len()))
        else {
            return;
        };
        if end <= start {
            return;
        }
        let mut rows = Vec::new();
        if fde.signal() {
            rows.push(Row {
                offset: start,
                rule: Rule::Signal,
            });
        } else {
            let table = fde.rows(&mut ctx, |r| {
                let Some(off) = to_off(r.start()) else {
                    return;
                };
                let row = convert(r, off);
                if row.rule == Rule::Invalid {
                    out.unsupported += 1;
                }
                rows.push(row);
            });
            if table.is_err() {
                return;
            }
        }
        fdes.push((start, end, rows));
    });
    fdes.sort_by_key(|f| (f.0, f.1));
    for &(vaddr, len, threshold) in &input.plt {
        if len == 0 {
            continue;
        }
        let (Some(start), Some(end)) = (to_off(vaddr), end_off(vaddr, len)) else {
            continue;
        };
        if end <= start || fdes.iter().any(|f| f.0 < end && start < f.1) {
            continue;
        }
        fdes.push((
            start,
            end,
            vec![Row {
                offset: start,
                rule: Rule::Plt {
                    threshold,
                    offset: 8,
                },
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
    out
}

fn gap(offset: u32) -> Row {
    Row {
        offset,
        rule: Rule::Invalid,
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
            if n >= 2 && rows[n - 2].rule == rows[n - 1].rule {
                rows.pop();
            }
            return;
        }
        if last.rule == r.rule {
            return;
        }
    }
    rows.push(r);
}

/// The walk's rule for CFI row `r`, as a row at `offset`.
pub fn convert(r: &RowRef<'_, '_>, offset: u32) -> Row {
    let row = |rule| Row { offset, rule };
    match r.rule(RIP) {
        Some(super::Rule::Undefined) => return row(Rule::Stop),
        Some(super::Rule::Offset(-8)) => {}
        _ => return gap(offset),
    }
    let Ok(cfa) = r.cfa() else {
        return gap(offset);
    };
    let (base, cfa_offset) = match &cfa {
        Cfa::RegisterOffset(register, off) => {
            let Ok(off) = u16::try_from(*off) else {
                return gap(offset);
            };
            match *register {
                RSP => (Base::Rsp, off),
                RBP => (Base::Rbp, off),
                _ => return gap(offset),
            }
        }
        Cfa::Expression(e) => {
            return match plt_threshold(e) {
                Some(threshold) => row(Rule::Plt {
                    threshold,
                    offset: 8,
                }),
                None => gap(offset),
            }
        }
    };
    let rbp = match r.rule(RBP) {
        None | Some(super::Rule::Undefined | super::Rule::Same) => SavedRbp::Unchanged,
        Some(super::Rule::Offset(o)) if o % 8 == 0 && (-127 * 8..0).contains(&o) => {
            SavedRbp::At((o / 8) as i8)
        }
        _ => SavedRbp::Lost,
    };
    row(Rule::Cfa {
        base,
        offset: cfa_offset,
        rbp,
    })
}

/// The threshold of the PLT CFA expression `rsp + 8 + ((rip & 15) >= T) << 3` (what
/// binutils writes for `.plt`), None for any other expression.
fn plt_threshold(e: &[u8]) -> Option<u8> {
    match e {
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
    use std::path::Path;

    fn seg(vaddr: u64, offset: u64, filesz: u64) -> Segment {
        Segment {
            vaddr,
            offset,
            filesz,
            memsz: filesz,
            executable: true,
        }
    }

    /// PLT sections at the ends of the address space, empty or past 4 GiB of offsets, and
    /// no `.eh_frame`: no rows, no panic.
    #[test]
    fn plt_ranges_at_the_edges() {
        let segments = [
            seg(0, 0, u64::MAX),
            seg(u64::MAX - 1, u64::from(u32::MAX), 1),
        ];
        let input = Input {
            eh_frame: &[],
            bases: Bases::default(),
            segments: &segments,
            plt: vec![
                (0, 0, 11),
                (u64::MAX - 1, 1, 16),
                (u64::MAX, 16, 16),
                (u64::from(u32::MAX), 2, 16),
            ],
        };
        let r = build_from(&input);
        assert!(r.rows.is_empty(), "{:?}", r.rows);
        // one that fits: a row and the gap after it
        let input = Input {
            plt: vec![(0x1000, 0x20, 11)],
            ..input
        };
        let r = build_from(&input);
        assert_eq!(
            r.rows,
            [
                Row {
                    offset: 0x1000,
                    rule: Rule::Plt {
                        threshold: 11,
                        offset: 8
                    }
                },
                gap(0x1020)
            ]
        );
    }

    #[test]
    fn libc_rows_are_sorted_and_mostly_supported() {
        let elf = Elf::open(Path::new("/lib/x86_64-linux-gnu/libc.so.6")).unwrap();
        let r = build(&elf).unwrap();
        assert!(r.rows.windows(2).all(|w| w[0].offset < w[1].offset));
        assert!(r.rows.windows(2).all(|w| w[0].rule != w[1].rule));
        assert!(r.fdes > 1000 && r.unsupported * 100 < r.rows.len() as u64);
        assert_eq!(r.rows.last().unwrap().rule, Rule::Invalid);
    }
}
