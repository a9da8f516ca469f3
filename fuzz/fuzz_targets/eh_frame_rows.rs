//! Arbitrary call frame information through `ebtrace-elf`'s CFI reader, both ways it is
//! used: every row of every FDE reduced to the kernel walk's rows (`cfi::compact`, what
//! ebrec packs for the BPF side; only the numbering of `bpf/events.h` and the bit packing
//! are left out, they need the BPF crate), and single rows looked up the way ebsym's offline
//! unwinder does (`.eh_frame_hdr`'s search table or the FDE index, then `.debug_frame`),
//! each converted to the owned row both are built from. Nothing may panic or hang; the
//! kernel rows must be sorted, distinct and end with a gap, and a row found for an address
//! must cover it.
//!
//! Input layout (integers big-endian): byte 0 picks the source (even: raw sections, odd:
//! the rest of the input as an ELF file). Raw sections: `.eh_frame`'s and
//! `.eh_frame_hdr`'s addresses (u32 each), a second executable segment (vaddr, offset,
//! file size: u64 each; the first is [0, 1 MiB) at offset 0), a PLT section (address u64,
//! size u16, threshold u8), then `.eh_frame`, `.eh_frame_hdr` and `.debug_frame`, each as a
//! u16 length and its bytes; the rest are addresses to look up (u64 each, at most 32).
//!
//! Run: `cargo +nightly fuzz run eh_frame_rows` (from the workspace root); seeds are in
//! `fuzz/corpus/eh_frame_rows/`.
#![no_main]

use ebtrace_elf::cfi::compact::{self, Input, Rule};
use ebtrace_elf::cfi::{Bases, Context, Section, Tables};
use ebtrace_elf::{CfiSections, Elf, Segment};
use libfuzzer_sys::fuzz_target;

fn take<'a>(d: &mut &'a [u8], n: usize) -> &'a [u8] {
    let n = n.min(d.len());
    let (a, b) = d.split_at(n);
    *d = b;
    a
}

fn uint(d: &mut &[u8], bytes: usize) -> u64 {
    take(d, bytes)
        .iter()
        .fold(0u64, |a, &x| (a << 8) | u64::from(x))
}

fn check_rows(rows: &compact::Rows) {
    assert!(
        rows.rows.windows(2).all(|w| w[0].offset < w[1].offset),
        "rows not sorted: {:?}",
        rows.rows
    );
    assert!(
        rows.rows.windows(2).all(|w| w[0].rule != w[1].rule),
        "equal neighbours not merged: {:?}",
        rows.rows
    );
    if let Some(last) = rows.rows.last() {
        assert_eq!(last.rule, Rule::Invalid, "{:?}", rows.rows);
    }
}

/// Every row of every FDE of `section`, owned.
fn all_rows(section: &Section<'_>) {
    let mut ctx = Context::default();
    section.for_each_fde(|fde| {
        let _ = fde.rows(&mut ctx, |r| {
            let _ = r.to_row();
        });
    });
}

fn lookups(t: &Tables, addrs: impl IntoIterator<Item = u64>) {
    for a in addrs {
        if let Ok(r) = t.row(a) {
            assert!(r.start <= a && a < r.end, "{a:#x}: row {r:?}");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, mut d)) = data.split_first() else {
        return;
    };
    if mode & 1 == 1 {
        let Ok(elf) = Elf::from_bytes("fuzz", d) else {
            return;
        };
        if let Some(rows) = compact::build(&elf) {
            check_rows(&rows);
        }
        let Ok(obj) = elf.object() else {
            return;
        };
        let s = CfiSections::read(&obj, true);
        all_rows(&Section::eh_frame(
            &s.eh_frame,
            Bases {
                eh_frame: s.eh_frame_address,
                ..Bases::default()
            },
        ));
        all_rows(&Section::debug_frame(&s.debug_frame));
        let mut starts = Vec::new();
        Section::eh_frame(
            &s.eh_frame,
            Bases {
                eh_frame: s.eh_frame_address,
                ..Bases::default()
            },
        )
        .for_each_fde(|f| {
            if starts.len() < 64 {
                starts.extend([f.start(), f.end().wrapping_sub(1)]);
            }
        });
        let t = Tables::new(
            s.eh_frame,
            s.eh_frame_address,
            s.eh_frame_hdr,
            s.eh_frame_hdr_address,
            s.debug_frame,
        );
        lookups(&t, starts);
        return;
    }
    let eh_address = uint(&mut d, 4);
    let hdr_address = uint(&mut d, 4);
    let second = Segment {
        vaddr: uint(&mut d, 8),
        offset: uint(&mut d, 8),
        filesz: uint(&mut d, 8),
        memsz: 0,
        executable: true,
    };
    let plt = (uint(&mut d, 8), uint(&mut d, 2), uint(&mut d, 1) as u8);
    let n = uint(&mut d, 2) as usize;
    let eh_frame = take(&mut d, n);
    let n = uint(&mut d, 2) as usize;
    let eh_frame_hdr = take(&mut d, n);
    let n = uint(&mut d, 2) as usize;
    let debug_frame = take(&mut d, n);
    let addrs: Vec<u64> = d.chunks(8).take(32).map(|mut c| uint(&mut c, 8)).collect();

    let segments = [
        Segment {
            vaddr: 0,
            offset: 0,
            filesz: 1 << 20,
            memsz: 1 << 20,
            executable: true,
        },
        second,
    ];
    let bases = Bases {
        eh_frame: eh_address,
        text: Some(0x1000),
        got: Some(0x3000),
    };
    let rows = compact::build_from(&Input {
        eh_frame,
        bases,
        segments: &segments,
        plt: vec![plt],
    });
    check_rows(&rows);
    all_rows(&Section::eh_frame(eh_frame, bases));
    all_rows(&Section::debug_frame(debug_frame));
    let t = Tables::new(
        eh_frame.to_vec(),
        eh_address,
        eh_frame_hdr.to_vec(),
        hdr_address,
        debug_frame.to_vec(),
    );
    lookups(&t, addrs);
});
