//! A binary's `.eh_frame` turned into the unwind rows the kernel-side walk reads (the row
//! format is in `bpf/events.h`). The rows are `ebtrace-elf`'s compact rows
//! ([`ebtrace_elf::cfi::compact`]: per address range, keyed by file offset, the CFA as rsp or
//! rbp plus an offset, where the caller's rbp was saved, and the rules for PLT stubs,
//! signal trampolines and the outermost frames, within the packed row's limits), built
//! from the same `.eh_frame` reader as ebsym's unwinder; here they get `events.h`'s
//! numbers (`CFI_*`) and are packed into the u64 the BPF side reads.
//!
//! This is CFI, not debug information: ebrec reads no `.debug_*` section.
use ebtrace_bpf::{CFI_INVALID, CFI_PLT, CFI_RBP, CFI_RBP_LOST, CFI_RSP, CFI_SIGNAL, CFI_STOP};
use ebtrace_elf::cfi::compact::{self, Base, Rule, SavedRbp};
use ebtrace_elf::Elf;
#[cfg(test)]
use std::path::Path;

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
    #[cfg(test)]
    fn same_rule(&self, o: &Row) -> bool {
        self.kind == o.kind && self.rbp == o.rbp && self.cfa_offset == o.cfa_offset
    }
}

impl From<compact::Row> for Row {
    /// `events.h`'s numbering of a compact row (one to one: rows that differ stay apart).
    fn from(r: compact::Row) -> Row {
        let (kind, rbp, cfa_offset) = match r.rule {
            Rule::Invalid => (CFI_INVALID, 0, 0),
            Rule::Cfa { base, offset, rbp } => (
                match base {
                    Base::Rsp => CFI_RSP,
                    Base::Rbp => CFI_RBP,
                },
                match rbp {
                    SavedRbp::Unchanged => 0,
                    SavedRbp::At(n) => n as u8,
                    SavedRbp::Lost => CFI_RBP_LOST as u8,
                },
                offset,
            ),
            Rule::Plt { threshold, offset } => (CFI_PLT, threshold, offset),
            Rule::Signal => (CFI_SIGNAL, 0, 0),
            Rule::Stop => (CFI_STOP, 0, 0),
        };
        Row {
            offset: r.offset,
            kind: kind as u8,
            rbp,
            cfa_offset,
        }
    }
}

/// The rows of one file, sorted by offset, with the counts of what could not be expressed.
#[derive(Debug, Default)]
pub struct Rows {
    pub rows: Vec<Row>,
    /// Rows whose rule the walk cannot do (an unusual CFA expression, a return address not
    /// at CFA - 8): kept as CFI_INVALID, so a pc there is "no rows", never a wrong frame.
    pub unsupported: u64,
}

/// The rows of the ELF file at `elf` (None: no `.eh_frame`, or not x86-64 ELF).
pub fn build(elf: &Elf) -> Option<Rows> {
    let c = compact::build(elf)?;
    Some(Rows {
        rows: c.rows.into_iter().map(Row::from).collect(),
        unsupported: c.unsupported,
    })
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
            "{} rows, {} unsupported",
            built.rows.len(),
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
    use ebtrace_elf::cfi::{Bases, Context, Section};
    use ebtrace_elf::Segment;

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
        let eh = Section::eh_frame(
            &data,
            Bases {
                eh_frame: address,
                ..Bases::default()
            },
        );
        let mut ctx = Context::default();
        let (mut checked, mut fdes) = (0u64, 0u64);
        eh.for_each_fde(|fde| {
            if fde.signal() {
                return;
            }
            fdes += 1;
            let _ = fde.rows(&mut ctx, |r| {
                let (Some(a), Some(b)) = (to_off(r.start()), to_off(r.end() - 1)) else {
                    return;
                };
                let want = Row::from(compact::convert(r, a));
                for off in (a..=b).step_by(((b - a) / 7).max(1) as usize) {
                    let i = rows.partition_point(|x| x.offset <= off);
                    let got = rows[i - 1];
                    assert!(
                        got.same_rule(&want),
                        "{path}: {off:#x}: rows say {got:?}, gimli {want:?}"
                    );
                    checked += 1;
                }
            });
        });
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
