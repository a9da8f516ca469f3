//! ELF files: the reader is `ebtrace-elf`'s, the one ebrec uses too (mapping, build-id,
//! `.gnu_debuglink`, `.gnu_debugaltlink`, PT_LOAD segments, sections with the
//! compressed-size check, the symbol table fallback `.symtab`, else `.dynsym`), under the
//! names the symbolizer uses; the CRC32 of `.gnu_debuglink` and hex are the symbolizer's.
//!
//! ```no_run
//! use ebtrace_symbolize::elf::ElfFile;
//! let f = ElfFile::open("/usr/bin/ls".as_ref()).unwrap();
//! let info = f.info().unwrap();
//! println!("build-id {:02x?}, {} PT_LOAD", info.build_id, info.loads.len());
//! ```
pub use ebtrace_elf::{
    load_segments as loads, offset_to_vaddr, section_data, Elf as ElfFile, ElfInfo,
    Segment as Load, Sym, SymbolTable, MAX_DECOMPRESSION_RATIO, MAX_SECTION_BYTES,
};

/// The CRC32 (the zlib one, as `.gnu_debuglink` uses) of a whole file's bytes.
pub fn crc32(data: &[u8]) -> u32 {
    crc32fast::hash(data)
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    ebtrace_format::tables::hex(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::Object;

    /// A section header that claims 0x1b000000000000 uncompressed bytes from 52 (found by
    /// the `unwind` fuzz target): refused before any allocation, by name.
    #[test]
    fn lying_compressed_size_is_refused() {
        let bytes = include_bytes!("../../fuzz/corpus/elf/regression-compressed-size-10d546eb");
        let obj = object::File::parse(&bytes[..]).unwrap();
        let sec = obj.section_by_name(".eh_frame_hdr").unwrap();
        let err = section_data(&sec).unwrap_err();
        assert!(
            err.starts_with("compressed section .eh_frame_hdr claims 7599824371187712 bytes from"),
            "{err}"
        );
        // The whole file still gives what it can: see `unwind::tables`'s test.
    }
}
