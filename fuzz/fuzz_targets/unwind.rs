//! Arbitrary unwind tables and stack copies through ebsym's CFI unwinder
//! (`ebtrace_symbolize::unwind`): tables from a trace's `UnwindTables` record or from an ELF
//! file, a copy with any registers and bytes. It must stop with a reason, never panic, loop
//! or read outside the copy.
//!
//! Input layout: byte 0 picks the source of the tables (even: an UnwindTables record, odd:
//! the rest of the input as an ELF file); then u16 length of `.eh_frame`, the `.eh_frame`
//! bytes, u16 length of `.eh_frame_hdr`, its bytes, rip, rsp, rbp (u64 each), and the rest
//! is the stack copy.
#![no_main]

use ebtrace_proto::v1::{UnwindTables, UserStackCopy};
use ebtrace_symbolize::unwind::{unwind, Mapped, UnwindInfo};
use libfuzzer_sys::fuzz_target;

fn take<'a>(d: &mut &'a [u8], n: usize) -> &'a [u8] {
    let n = n.min(d.len());
    let (a, b) = d.split_at(n);
    *d = b;
    a
}

fn u16_of(d: &mut &[u8]) -> usize {
    let b = take(d, 2);
    b.iter().fold(0usize, |a, &x| (a << 8) | x as usize)
}

fn u64_of(d: &mut &[u8]) -> u64 {
    let b = take(d, 8);
    b.iter().fold(0u64, |a, &x| (a << 8) | x as u64)
}

const BASE: u64 = 0x40_0000;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, mut d)) = data.split_first() else {
        return;
    };
    let info = if mode & 1 == 0 {
        let n = u16_of(&mut d);
        let eh_frame = take(&mut d, n).to_vec();
        let n = u16_of(&mut d);
        let eh_frame_hdr = take(&mut d, n).to_vec();
        UnwindInfo::from_tables(&UnwindTables {
            build_id: 1,
            eh_frame,
            eh_frame_address: 0x2000,
            eh_frame_hdr,
            eh_frame_hdr_address: 0x1000,
            load_segments: vec![0, 0, 0x10_0000],
        })
    } else {
        UnwindInfo::from_elf(d)
    };
    let Ok(info) = info else {
        return;
    };
    let (rip, rsp, rbp) = (u64_of(&mut d), u64_of(&mut d), u64_of(&mut d));
    let copy = UserStackCopy {
        regs: vec![rbp, rsp, rip],
        reg_mask: (1 << 6) | (1 << 7) | (1 << 16),
        sp: rsp,
        data: d.to_vec(),
    };
    let find = |addr: u64| {
        (BASE..BASE + 0x10_0000).contains(&addr).then_some(Mapped {
            start: BASE,
            end: BASE + 0x10_0000,
            file_offset: 0,
            info: Some(&info),
            module: 1,
        })
    };
    let u = unwind(&copy, find, 256);
    assert!(u.ips.len() <= 256);
});
