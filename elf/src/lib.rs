//! The one ELF reader of ebtrace, for both sides: `ebrec` (as root, on any file a target
//! maps: build-ids, `--func` and probe symbols, segments, the dynamic section, the
//! `.eh_frame` rows of `--stack-mode cfi`, the `UnwindTables` record, the USDT probes of
//! [`sdt`]) and `ebsym` (build-ids and debug links to find debug files, symbol tables, the
//! CFI of the offline unwinder).
//! Every input is untrusted: nothing here panics on a malformed file (the `elf_reader` and
//! `eh_frame_rows` fuzz targets hold that), a compressed section's claimed size is checked
//! before anything is allocated, and offsets are checked arithmetic.
//!
//! A file is opened once and mapped ([`Elf::open`]): what a question needs is read from the
//! mapping, so a build-id reads the headers and the note, not the whole file. The readers
//! that the symbolizer runs on bytes it already holds take an [`object::File`] (sections,
//! segments, symbols) or plain slices ([`cfi`]).
//!
//! No DWARF line or info parsing here (that is `ebtrace-symbolize`'s, and ebrec never reads
//! debug information); [`cfi`] reads call frame information only.
//!
//! ```no_run
//! use ebtrace_elf::Elf;
//! let elf = Elf::open("/usr/lib/x86_64-linux-gnu/libc.so.6".as_ref()).unwrap();
//! let id = elf.build_id();
//! let malloc = elf.text_symbols().unwrap().into_iter().find(|s| s.name == "malloc");
//! println!("{id:02x?} {malloc:?}");
//! ```
pub mod cfi;
pub mod sdt;
mod symbols;

/// The parser underneath, for callers that hold an [`object::File`] ([`SymbolTable::load`],
/// [`CfiSections::read`]).
pub use object;

pub use symbols::{functions, FuncSymbol, Sym, Symbol, SymbolTable, Symbols, Table};

use memmap2::Mmap;
use object::read::elf::{Dyn, ElfFile64, FileHeader, ProgramHeader};
use object::{elf, Endianness, Object, ObjectSection, ObjectSegment};
use std::borrow::Cow;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// An ELF file, mapped read-only. Cheap to clone (the mapping is shared).
#[derive(Debug, Clone)]
pub struct Elf {
    path: PathBuf,
    map: Arc<Mmap>,
}

/// A PT_LOAD segment: where file bytes land in the ELF's virtual addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub vaddr: u64,
    pub offset: u64,
    /// Bytes in the file.
    pub filesz: u64,
    /// Bytes in memory.
    pub memsz: u64,
    /// `PF_X`.
    pub executable: bool,
}

impl Segment {
    /// Whether the segment's file bytes hold `vaddr`.
    pub fn holds(&self, vaddr: u64) -> bool {
        vaddr >= self.vaddr && vaddr - self.vaddr < self.filesz
    }
}

/// The file offset of `vaddr`, through the first segment whose file bytes hold it.
pub fn file_offset(segments: &[Segment], vaddr: u64) -> Option<u64> {
    let s = segments.iter().find(|s| s.holds(vaddr))?;
    (vaddr - s.vaddr).checked_add(s.offset)
}

/// The ELF virtual address of file offset `offset`, through the first segment that holds it
/// (a segment without file bytes holds its first offset).
pub fn offset_to_vaddr(segments: &[Segment], offset: u64) -> Option<u64> {
    let s = segments
        .iter()
        .find(|s| s.offset <= offset && offset - s.offset < s.filesz.max(1))?;
    (offset - s.offset).checked_add(s.vaddr)
}

/// The segments of `obj` (for ELF, its PT_LOADs).
pub fn load_segments(obj: &object::File<'_>) -> Vec<Segment> {
    obj.segments()
        .map(|s| {
            let (offset, filesz) = s.file_range();
            let executable = match s.flags() {
                object::SegmentFlags::Elf { p_flags, .. } => p_flags.0 & elf::PF_X.0 != 0,
                _ => false,
            };
            Segment {
                vaddr: s.address(),
                offset,
                filesz,
                memsz: s.size(),
                executable,
            }
        })
        .collect()
}

/// The most a compressed section may claim to grow by. zlib cannot pass ~1032:1; real
/// debug sections compress 3–10:1. zstd can do more on runs of zeros, which debug
/// sections do not have, so 4096:1 refuses only headers that lie.
pub const MAX_DECOMPRESSION_RATIO: u64 = 4096;
/// And at most this much in any case (a section's size must fit memory on a laptop).
pub const MAX_SECTION_BYTES: u64 = 16 << 30;

/// A section's bytes, decompressed when it is `SHF_COMPRESSED` (or `.zdebug_`), with the
/// uncompressed size its header claims checked before anything is allocated: at most
/// [`MAX_DECOMPRESSION_RATIO`] times the compressed bytes (plus 1 MiB) and
/// [`MAX_SECTION_BYTES`]. `object`'s own `uncompressed_data` reserves whatever the header
/// says (a fuzzed 24 GiB header found that).
pub fn section_data<'d>(sec: &impl ObjectSection<'d>) -> Result<Cow<'d, [u8]>, String> {
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

/// The bytes (decompressed, [`section_data`]) and address of section `name` of `obj`.
/// None: no such section, no bytes in the file (`SHT_NOBITS`, as in a debug file's
/// `.eh_frame`), or compressed bytes that cannot be had.
pub fn section<'d>(obj: &object::File<'d>, name: &str) -> Option<(Cow<'d, [u8]>, u64)> {
    let s = obj
        .section_by_name(name)
        .filter(|s| s.kind() != object::SectionKind::UninitializedData)?;
    Some((section_data(&s).ok()?, s.address()))
}

/// What the symbolizer reads from an ELF file's headers.
#[derive(Debug, Clone, Default)]
pub struct ElfInfo {
    pub build_id: Option<Vec<u8>>,
    /// `.gnu_debuglink`: file name and CRC32 of the debug file.
    pub debuglink: Option<(Vec<u8>, u32)>,
    /// `.gnu_debugaltlink`: path and build-id of the dwz supplementary file.
    pub debugaltlink: Option<(Vec<u8>, Vec<u8>)>,
    pub loads: Vec<Segment>,
    /// Has `.debug_info` with content (not a NOBITS placeholder).
    pub has_dwarf: bool,
    /// Has a symbol table (`.symtab` or `.dynsym`).
    pub has_symtab: bool,
}

impl ElfInfo {
    /// The ELF virtual address of file offset `offset`, through the PT_LOAD that holds it.
    pub fn offset_to_vaddr(&self, offset: u64) -> Option<u64> {
        offset_to_vaddr(&self.loads, offset)
    }
}

/// What the dynamic loader reads to find a file's libraries.
#[derive(Debug, Default)]
pub struct Dynamic {
    pub needed: Vec<String>,
    pub rpath: Vec<String>,
    pub runpath: Vec<String>,
    /// PT_INTERP.
    pub interp: Option<String>,
    /// `e_machine`.
    pub machine: u16,
}

/// The call frame information sections of a file, copied out, and its PT_LOAD layout: what
/// the offline unwinder needs without the file (ebrec stores it as the trace's
/// `UnwindTables` record, without `.debug_frame`).
#[derive(Debug, Default)]
pub struct CfiSections {
    pub eh_frame: Vec<u8>,
    pub eh_frame_address: u64,
    /// Empty when the file has none (or it cannot be read).
    pub eh_frame_hdr: Vec<u8>,
    pub eh_frame_hdr_address: u64,
    /// Empty unless asked for, and when the file has none.
    pub debug_frame: Vec<u8>,
    pub load_segments: Vec<Segment>,
}

impl CfiSections {
    /// The sections of `obj`; `.debug_frame` too when `debug_frame` (ebrec never asks:
    /// it reads no `.debug_*` section). A missing section is empty.
    pub fn read(obj: &object::File<'_>, debug_frame: bool) -> CfiSections {
        let get = |name: &str| -> (Vec<u8>, u64) {
            section(obj, name)
                .map(|(d, a)| (d.into_owned(), a))
                .unwrap_or_default()
        };
        let (eh_frame, eh_frame_address) = get(".eh_frame");
        let (eh_frame_hdr, eh_frame_hdr_address) = get(".eh_frame_hdr");
        let debug_frame = if debug_frame {
            get(".debug_frame").0
        } else {
            Vec::new()
        };
        CfiSections {
            eh_frame,
            eh_frame_address,
            eh_frame_hdr,
            eh_frame_hdr_address,
            debug_frame,
            load_segments: load_segments(obj),
        }
    }
}

/// `O_NONBLOCK`, so that opening a FIFO put where a mapped file was does not wait for a
/// writer (ebrec opens the paths its targets map). Linux's value on these architectures.
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
const O_NONBLOCK: i32 = 0o4000;
#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
const O_NONBLOCK: i32 = 0;

impl Elf {
    /// Opens and maps the regular file at `path` (anything else is refused).
    pub fn open(path: &Path) -> io::Result<Elf> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(O_NONBLOCK)
            .open(path)?;
        if !file.metadata()?.is_file() {
            return Err(io::Error::other("not a regular file"));
        }
        // SAFETY: the map is read-only and private, and every read of it goes through
        // bounds-checked parsing. A file truncated by another process while mapped would
        // fault on the pages past its new end; binaries in use and debug files are replaced
        // by rename, not rewritten in place, and we accept that risk as every symbolizer
        // that maps its inputs (addr2line, llvm-symbolizer) does.
        let map = unsafe { Mmap::map(&file)? };
        Ok(Elf {
            path: path.to_path_buf(),
            map: Arc::new(map),
        })
    }

    /// An ELF image already in memory (the vDSO, a fuzzer's input), copied into an
    /// anonymous mapping.
    pub fn from_bytes(name: &str, bytes: &[u8]) -> io::Result<Elf> {
        let mut m = memmap2::MmapMut::map_anon(bytes.len().max(1))?;
        m[..bytes.len()].copy_from_slice(bytes);
        Ok(Elf {
            path: PathBuf::from(name),
            map: Arc::new(m.make_read_only()?),
        })
    }

    /// The path it was opened at (or the name given to [`Elf::from_bytes`]).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's bytes.
    pub fn data(&self) -> &[u8] {
        &self.map
    }

    /// The mapping, to keep it alive past this `Elf` (slices of it handed to readers).
    pub fn map(&self) -> &Arc<Mmap> {
        &self.map
    }

    /// The file parsed, any format `object` reads (see [`Elf::info`] for ELF only).
    pub fn object(&self) -> object::Result<object::File<'_>> {
        object::File::parse(&self.map[..])
    }

    /// The file parsed as a 64-bit ELF file.
    fn elf64(&self) -> object::Result<ElfFile64<'_, Endianness>> {
        ElfFile64::<Endianness>::parse(&self.map[..])
    }

    /// The GNU build-id, if the file has one.
    pub fn build_id(&self) -> Option<Vec<u8>> {
        let f = self.object().ok()?;
        f.build_id().ok().flatten().map(<[u8]>::to_vec)
    }

    /// `.gnu_debuglink`: the debug file's name and CRC32.
    pub fn debuglink(&self) -> Option<(&[u8], u32)> {
        self.object().ok()?.gnu_debuglink().ok().flatten()
    }

    /// The header facts the symbolizer needs (an error for a file that is not ELF).
    pub fn info(&self) -> Result<ElfInfo, String> {
        let obj = self.object().map_err(|e| e.to_string())?;
        if obj.format() != object::BinaryFormat::Elf {
            return Err("not an ELF file".into());
        }
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
            loads: load_segments(&obj),
            has_dwarf,
            has_symtab,
        })
    }

    /// Whether a section named `name` exists (with bytes in the file or not).
    pub fn has_section(&self, name: &str) -> bool {
        self.object()
            .is_ok_and(|f| f.section_by_name(name).is_some())
    }

    /// The (uncompressed) bytes and address of section `name`: see [`section`].
    pub fn section(&self, name: &str) -> Option<(Cow<'_, [u8]>, u64)> {
        section(&self.object().ok()?, name)
    }

    /// The PT_LOAD segments (none if the file does not parse).
    pub fn load_segments(&self) -> Vec<Segment> {
        self.object().map(|f| load_segments(&f)).unwrap_or_default()
    }

    /// The file offset of `vaddr`, through the PT_LOAD segments ([`file_offset`]).
    pub fn file_offset(segments: &[Segment], vaddr: u64) -> Option<u64> {
        file_offset(segments, vaddr)
    }

    /// The defined function symbols with an address, `.symtab`'s then `.dynsym`'s (a symbol
    /// in both comes twice), without version suffixes: what ebrec's probes and `--func`
    /// choose from.
    pub fn text_symbols(&self) -> object::Result<Vec<Symbol<'_>>> {
        let f = self.object()?;
        let mut out = symbols::text_symbols(&f, Table::Symtab);
        out.extend(symbols::text_symbols(&f, Table::Dynsym));
        Ok(out)
    }

    /// [`text_symbols`](Self::text_symbols) of `.symtab` only, or of `.dynsym` when the file
    /// has no `.symtab`.
    fn main_text_symbols(&self) -> object::Result<Vec<Symbol<'_>>> {
        let f = self.object()?;
        Ok(if f.symbols().next().is_some() {
            symbols::text_symbols(&f, Table::Symtab)
        } else {
            symbols::text_symbols(&f, Table::Dynsym)
        })
    }

    /// DT_NEEDED, DT_RPATH, DT_RUNPATH, PT_INTERP and the machine (64-bit ELF only).
    pub fn dynamic(&self) -> Result<Dynamic, String> {
        let data = &self.map[..];
        let f = self
            .elf64()
            .map_err(|e| format!("{}: not a 64-bit ELF file ({e})", self.path.display()))?;
        let endian = f.endian();
        let mut d = Dynamic {
            machine: f.elf_header().e_machine(endian).0,
            ..Default::default()
        };
        for ph in f.elf_program_headers() {
            if let Ok(Some(i)) = ph.interpreter(endian, data) {
                d.interp = Some(String::from_utf8_lossy(i).into_owned());
            }
        }
        let sections = f.elf_section_table();
        if let Ok(Some((dyns, link))) = sections.dynamic(endian, data) {
            let strings = sections.strings(endian, data, link).unwrap_or_default();
            for dy in dyns {
                let Ok(s) = dy.string(endian, strings) else {
                    continue;
                };
                let s = String::from_utf8_lossy(s).into_owned();
                match dy.tag(endian) {
                    elf::DT_NEEDED => d.needed.push(s),
                    elf::DT_RPATH => d.rpath.extend(s.split(':').map(str::to_string)),
                    elf::DT_RUNPATH => d.runpath.extend(s.split(':').map(str::to_string)),
                    _ => {}
                }
            }
        }
        Ok(d)
    }

    /// `.eh_frame`, `.eh_frame_hdr` and the PT_LOAD layout, for the trace's `UnwindTables`
    /// record (None: no `.eh_frame`, or an empty one). Never `.debug_frame`.
    pub fn eh_frame_sections(&self) -> Option<CfiSections> {
        let t = CfiSections::read(&self.object().ok()?, false);
        (!t.eh_frame.is_empty()).then_some(t)
    }

    /// Whether the code keeps frame pointers: the share of its sizable functions whose
    /// prologue is `push %rbp; mov %rsp,%rbp` (after an optional endbr64). Leaf functions
    /// skip the frame even with -fno-omit-frame-pointer, so a quarter is the bar; code built
    /// without frame pointers has almost none. None: no symbols to judge by.
    pub fn has_frame_pointers(&self) -> Option<bool> {
        let segs = self.load_segments();
        let data = self.data();
        let (mut total, mut with_fp) = (0usize, 0usize);
        for s in self.main_text_symbols().ok()? {
            if s.size < 32 {
                continue;
            }
            let Some(off) = file_offset(&segs, s.address).and_then(|o| usize::try_from(o).ok())
            else {
                continue;
            };
            let Some(code) = off.checked_add(8).and_then(|end| data.get(off..end)) else {
                continue;
            };
            let code = code
                .strip_prefix(&[0xf3, 0x0f, 0x1e, 0xfa][..])
                .unwrap_or(code);
            total += 1;
            if code.starts_with(&[0x55, 0x48, 0x89, 0xe5]) {
                with_fp += 1;
            }
        }
        (total >= 4).then_some(with_fp * 4 >= total)
    }
}

/// The GNU build-id of the ELF file at `path`, if it has one.
pub fn build_id(path: &Path) -> Option<Vec<u8>> {
    Elf::open(path).ok()?.build_id()
}

/// [`Elf::eh_frame_sections`] of the file at `path` (None: unreadable, or no `.eh_frame`).
pub fn eh_frame_sections(path: &Path) -> Option<CfiSections> {
    Elf::open(path).ok()?.eh_frame_sections()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIBC: &str = "/lib/x86_64-linux-gnu/libc.so.6";

    #[test]
    fn libc_facts() {
        let elf = Elf::open(Path::new(LIBC)).unwrap();
        let info = elf.info().unwrap();
        assert_eq!(info.build_id, elf.build_id());
        assert!(info.build_id.is_some_and(|b| b.len() >= 16));
        assert!(info.has_symtab);
        assert_eq!(info.loads, elf.load_segments());
        assert!(info.loads.iter().any(|s| s.executable));
        let d = elf.dynamic().unwrap();
        assert_eq!(d.machine, elf::EM_X86_64.0);
        assert!(d.needed.iter().any(|n| n.starts_with("ld-linux")), "{d:?}");
        let syms = elf.text_symbols().unwrap();
        let malloc = syms.iter().find(|s| s.name == "malloc").unwrap();
        let off = Elf::file_offset(&info.loads, malloc.address).unwrap();
        assert_eq!(
            offset_to_vaddr(&info.loads, off),
            Some(malloc.address),
            "offset and address round-trip"
        );
        let t = elf.eh_frame_sections().unwrap();
        assert!(!t.eh_frame.is_empty() && !t.eh_frame_hdr.is_empty());
        assert!(t.debug_frame.is_empty());
    }

    #[test]
    fn not_a_regular_file_is_refused() {
        let e = Elf::open(Path::new("/dev/null")).unwrap_err();
        assert_eq!(e.to_string(), "not a regular file");
        assert!(Elf::open(Path::new("/")).is_err());
    }

    #[test]
    fn arithmetic_at_the_edges_is_checked() {
        let s = [Segment {
            vaddr: 0x1000,
            offset: u64::MAX - 4,
            filesz: 0x100,
            memsz: 0x100,
            executable: true,
        }];
        assert_eq!(file_offset(&s, 0x1000), Some(u64::MAX - 4));
        assert_eq!(file_offset(&s, 0x1010), None);
        let s = [Segment {
            vaddr: u64::MAX - 4,
            offset: 0,
            filesz: 0x100,
            memsz: 0x100,
            executable: true,
        }];
        assert_eq!(offset_to_vaddr(&s, 2), Some(u64::MAX - 2));
        assert_eq!(offset_to_vaddr(&s, 8), None);
    }

    #[test]
    fn garbage_is_no_elf() {
        let e = Elf::from_bytes("garbage", b"\x7fELF not really").unwrap();
        assert!(e.info().is_err());
        assert_eq!(e.build_id(), None);
        assert!(e.load_segments().is_empty());
        assert!(e.dynamic().is_err());
        assert!(e.eh_frame_sections().is_none());
        assert_eq!(e.has_frame_pointers(), None);
        let empty = Elf::from_bytes("empty", b"").unwrap();
        assert!(empty.object().is_err());
    }
}
