//! Arbitrary bytes as an ELF file through ebsym's symbolizer: the ELF reader, the DWARF
//! reader (addr2line/gimli, with compressed sections, split DWARF references, dwz links) and
//! the symbol tables, resolving a spread of addresses. Nothing may panic or hang; a broken
//! file gives a reason, never a crash.
#![no_main]

use ebtrace_symbolize::Symbolizer;
use libfuzzer_sys::fuzz_target;
use std::io::Write;

fuzz_target!(|data: &[u8]| {
    // The symbolizer maps files: each input goes to a private file of this process.
    let path = std::env::temp_dir().join(format!("ebtrace-fuzz-elf-{}", std::process::id()));
    {
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(data).unwrap();
    }
    let s = Symbolizer::default();
    let m = s.open_binary(&path);
    for addr in [0u64, 0x1000, 0x1040, 0x1130, 0x2000, 0x40_1000, u64::MAX] {
        let _ = m.resolve(addr);
    }
    let _ = m.resolve_many(&[0x1000, 0x1001, 0x1002]);
});
