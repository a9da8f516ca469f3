//! ELF files: memory-mapped opening, the facts the symbolizer needs from the headers
//! (build-id, PT_LOAD segments, `.gnu_debuglink`, `.gnu_debugaltlink`, whether there is
//! DWARF) and the symbol table fallback (`.symtab`, else `.dynsym`).
//!
//! ```no_run
//! use ebtrace_symbolize::elf::ElfFile;
//! let f = ElfFile::open("/usr/bin/ls".as_ref()).unwrap();
//! let info = f.info().unwrap();
//! println!("build-id {:02x?}, {} PT_LOAD", info.build_id, info.loads.len());
//! ```
use memmap2::Mmap;
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SymbolKind};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// An ELF file mapped into memory. Cheap to clone (the map is shared).
#[derive(Debug, Clone)]
pub struct ElfFile {
    pub path: PathBuf,
    pub map: Arc<Mmap>,
}

/// One PT_LOAD segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Load {
    pub vaddr: u64,
    pub offset: u64,
    pub filesz: u64,
    pub memsz: u64,
}

/// What the symbolizer reads from an ELF file's headers.
#[derive(Debug, Clone, Default)]
pub struct ElfInfo {
    pub build_id: Option<Vec<u8>>,
    /// `.gnu_debuglink`: file name and CRC32 of the debug file.
    pub debuglink: Option<(Vec<u8>, u32)>,
    /// `.gnu_debugaltlink`: path and build-id of the dwz supplementary file.
    pub debugaltlink: Option<(Vec<u8>, Vec<u8>)>,
    pub loads: Vec<Load>,
    /// Has `.debug_info` with content (not a NOBITS placeholder).
    pub has_dwarf: bool,
    /// Has DWARF compilation units that point to split DWARF (`.dwo`/`.dwp`); only a hint.
    pub has_symtab: bool,
}

impl ElfFile {
    /// Maps `path` read-only.
    pub fn open(path: &Path) -> io::Result<ElfFile> {
        let file = File::open(path)?;
        if !file.metadata()?.is_file() {
            return Err(io::Error::other("not a regular file"));
        }
        // SAFETY: the map is read-only and private. A file truncated by another process
        // while mapped would fault; debug files are not rewritten in place by the tools
        // that produce them (they write a new file and rename), and we accept that risk as
        // every symbolizer that maps its inputs (addr2line, llvm-symbolizer) does.
        let map = unsafe { Mmap::map(&file)? };
        Ok(ElfFile {
            path: path.to_path_buf(),
            map: Arc::new(map),
        })
    }

    /// Parses the file.
    pub fn object(&self) -> object::Result<object::File<'_>> {
        object::File::parse(&self.map[..])
    }

    /// Reads the header facts.
    pub fn info(&self) -> Result<ElfInfo, String> {
        let obj = self.object().map_err(|e| e.to_string())?;
        if obj.format() != object::BinaryFormat::Elf {
            return Err("not an ELF file".into());
        }
        let loads = loads(&obj);
        let has_dwarf = obj
            .section_by_name(".debug_info")
            .is_some_and(|s| s.kind() != object::SectionKind::UninitializedData && s.size() > 0);
        let has_symtab = obj.symbols().next().is_some() || obj.dynamic_symbols().next().is_some();
        let e = |e: object::Error| e.to_string();
        Ok(ElfInfo {
            build_id: obj.build_id().map_err(e)?.map(<[u8]>::to_vec),
            debuglink: obj
                .gnu_debuglink()
                .map_err(e)?
                .map(|(n, c)| (n.to_vec(), c)),
            debugaltlink: obj
                .gnu_debugaltlink()
                .map_err(e)?
                .map(|(p, b)| (p.to_vec(), b.to_vec())),
            loads,
            has_dwarf,
            has_symtab,
        })
    }
}

impl ElfInfo {
    /// The ELF virtual address of file offset `offset`, through the PT_LOAD that holds it.
    pub fn offset_to_vaddr(&self, offset: u64) -> Option<u64> {
        self.loads
            .iter()
            .find(|l| l.offset <= offset && offset - l.offset < l.filesz.max(1))
            .and_then(|l| (offset - l.offset).checked_add(l.vaddr))
    }
}

/// A function symbol: address, size and raw (mangled) name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sym {
    pub address: u64,
    pub size: u64,
    pub name: String,
    /// For a local symbol, the source file named by the `STT_FILE` symbol before it in
    /// the table (`crtstuff.c`), as binutils and llvm-symbolizer print it when there is
    /// no DWARF.
    pub file: Option<String>,
}

/// The function symbols of a file, sorted by address: `.symtab` if it has one, else
/// `.dynsym`.
#[derive(Debug, Clone, Default)]
pub struct SymbolTable {
    syms: Vec<Sym>,
}

impl SymbolTable {
    pub fn load(obj: &object::File<'_>) -> SymbolTable {
        let collect = |it: object::SymbolIterator<'_, '_>| -> Vec<Sym> {
            let mut out = Vec::new();
            // Local symbols follow the STT_FILE symbol of their file, in table order.
            let mut file: Option<String> = None;
            for s in it {
                if s.kind() == SymbolKind::File {
                    file = s.name().ok().filter(|n| !n.is_empty()).map(str::to_string);
                }
                if s.kind() != SymbolKind::Text || !s.is_definition() || s.address() == 0 {
                    continue;
                }
                let Some(name) = s.name().ok().filter(|n| !n.is_empty()) else {
                    continue;
                };
                let mut size = s.size();
                if size == 0 {
                    // A zero-sized symbol (`_init`, `_fini`, assembly) covers up to the
                    // next symbol, and never past the end of its section.
                    let Some(sec) = s.section_index().and_then(|i| obj.section_by_index(i).ok())
                    else {
                        continue;
                    };
                    let Some(to_end) = sec
                        .address()
                        .saturating_add(sec.size())
                        .checked_sub(s.address())
                    else {
                        continue;
                    };
                    size = to_end;
                }
                out.push(Sym {
                    address: s.address(),
                    size,
                    name: name.to_string(),
                    file: if s.is_local() { file.clone() } else { None },
                });
            }
            out
        };
        let mut syms = collect(obj.symbols());
        if syms.is_empty() {
            syms = collect(obj.dynamic_symbols());
        }
        // Aliases at one address (a C1/C2 constructor pair): like binutils, the first in
        // table order among the largest wins. The sort is stable, so the result depends
        // on the file only.
        syms.sort_by_key(|s| (s.address, std::cmp::Reverse(s.size)));
        syms.dedup_by_key(|s| s.address);
        SymbolTable { syms }
    }

    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }

    /// The symbol that contains `addr`: the last one at or before it, when `addr` is
    /// inside its size.
    pub fn find(&self, addr: u64) -> Option<&Sym> {
        let i = self.syms.partition_point(|s| s.address <= addr);
        let s = self.syms.get(i.checked_sub(1)?)?;
        (addr < s.address.saturating_add(s.size)).then_some(s)
    }
}

/// The most a compressed section may claim to grow by. zlib cannot pass ~1032:1; real
/// debug sections compress 3–10:1. zstd can do more on runs of zeros, which debug
/// sections do not have, so 4096:1 refuses only headers that lie.
pub const MAX_DECOMPRESSION_RATIO: u64 = 4096;
/// And at most this much in any case (a section's size must fit memory on a laptop).
pub const MAX_SECTION_BYTES: u64 = 16 << 30;

/// The segments of `obj` as [`Load`]s (the vaddr ↔ file offset map).
pub fn loads(obj: &object::File<'_>) -> Vec<Load> {
    obj.segments()
        .map(|s| {
            let (offset, filesz) = s.file_range();
            Load {
                vaddr: s.address(),
                offset,
                filesz,
                memsz: s.size(),
            }
        })
        .collect()
}

/// A section's bytes, decompressed when it is `SHF_COMPRESSED` (or `.zdebug_`), with the
/// uncompressed size its header claims checked before anything is allocated: at most
/// [`MAX_DECOMPRESSION_RATIO`] times the compressed bytes (plus 1 MiB) and
/// [`MAX_SECTION_BYTES`]. `object`'s own `uncompressed_data` reserves whatever the header
/// says (a fuzzed 24 GiB header found that).
pub fn section_data<'d>(
    sec: &impl ObjectSection<'d>,
) -> Result<std::borrow::Cow<'d, [u8]>, String> {
    let c = sec.compressed_data().map_err(|e| e.to_string())?;
    if c.format != object::CompressionFormat::None {
        let bound = (c.data.len() as u64)
            .saturating_mul(MAX_DECOMPRESSION_RATIO)
            .saturating_add(1 << 20)
            .min(MAX_SECTION_BYTES);
        if c.uncompressed_size > bound {
            return Err(format!(
                "compressed section {} claims {} bytes from {} (more than {bound})",
                sec.name().unwrap_or("?"),
                c.uncompressed_size,
                c.data.len()
            ));
        }
    }
    c.decompress().map_err(|e| e.to_string())
}

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
