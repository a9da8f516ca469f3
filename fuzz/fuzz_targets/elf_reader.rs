//! Arbitrary bytes as an ELF file through `ebtrace-elf`, the reader ebrec runs as root on
//! every file its targets map and ebsym on every file it finds: the header facts (build-id,
//! debug links), every section (compressed ones with their size check), the segments and
//! offset ↔ address, both symbol tables in both views (ebrec's by name, ebsym's by
//! address), the dynamic section, the frame-pointer guess, the CFI sections, and the USDT
//! notes with their argument specs (`sdt`; also the raw bytes as a note section, both
//! address sizes). Nothing may panic, hang or allocate without bound.
//!
//! Run: `cargo +nightly fuzz run elf_reader` (from the workspace root); seeds are in
//! `fuzz/corpus/elf_reader/` (small ELF files, and the regressions of the `elf` target).
#![no_main]

use ebtrace_elf::object::Object;
use ebtrace_elf::{
    file_offset, functions, offset_to_vaddr, sdt, section_data, CfiSections, Elf, SymbolTable,
    Table,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for (little, addr_size) in [(true, 8), (false, 4)] {
        let (notes, _) = sdt::parse_notes(data, little, addr_size);
        for n in notes.iter().take(64) {
            let _ = sdt::parse_args(&n.args);
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = sdt::parse_args(text);
    }
    let Ok(elf) = Elf::from_bytes("fuzz", data) else {
        return;
    };
    let _ = elf.sdt();
    let _ = elf.info();
    let _ = elf.build_id();
    let _ = elf.debuglink();
    let _ = elf.has_section(".symtab");
    for name in [
        ".eh_frame",
        ".eh_frame_hdr",
        ".text",
        ".plt",
        ".debug_frame",
    ] {
        let _ = elf.section(name);
    }
    let segments = elf.load_segments();
    for s in &segments {
        for vaddr in [
            s.vaddr,
            s.vaddr.wrapping_add(s.filesz / 2),
            s.vaddr.wrapping_add(s.filesz),
        ] {
            if let Some(off) = file_offset(&segments, vaddr) {
                let _ = offset_to_vaddr(&segments, off);
            }
        }
        let _ = offset_to_vaddr(&segments, s.offset.wrapping_add(s.filesz));
    }
    let _ = elf.dynamic();
    let _ = elf.has_frame_pointers();
    let _ = elf.eh_frame_sections();
    if let Ok(syms) = elf.text_symbols() {
        for s in syms.iter().take(64) {
            let _ = file_offset(&segments, s.address);
        }
    }
    let table = SymbolTable::of(&elf);
    for addr in [0u64, 0x1000, 0x1040, 0x40_1000, u64::MAX] {
        let _ = table.find(addr);
    }
    let Ok(obj) = elf.object() else {
        return;
    };
    for t in [Table::Symtab, Table::Dynsym] {
        for s in functions(&obj, t) {
            if let Some(end) = s.section_end {
                let _ = end.checked_sub(s.address);
            }
            let _ = table.find(s.address);
        }
    }
    for sec in obj.sections() {
        let _ = section_data(&sec);
    }
    let _ = CfiSections::read(&obj, true);
});
