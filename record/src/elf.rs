//! The one ELF reader of the recorder: build-ids, function symbols, sections, load segments
//! and the dynamic section, for the side band, uprobes, `--func`, `--stack-mode` and doctor.
//! (It never reads DWARF: that is ebsym's job.)
//!
//! A file is opened once and mapped ([`Elf::open`]): what a question needs is read from the
//! mapping, so a build-id reads the headers and the note, not the whole file, and the pages of
//! a big binary that nothing asks for are never read.
//!
//! ```ignore
//! let elf = Elf::open(Path::new("/proc/1234/root/usr/lib/libc.so.6"))?;
//! let id = elf.build_id();
//! let malloc = elf.text_symbols()?.into_iter().find(|s| s.name == "malloc");
//! ```
use object::read::elf::{Dyn, ElfFile64, FileHeader, ProgramHeader};
use object::{elf, Endianness, Object, ObjectSection, ObjectSegment, ObjectSymbol};
use std::borrow::Cow;
use std::path::{Path, PathBuf};

/// An ELF file, mapped.
#[derive(Debug)]
pub struct Elf {
    path: PathBuf,
    map: memmap2::Mmap,
}

/// A defined function symbol with an address (`STT_FUNC`, `STT_GNU_IFUNC`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbol<'a> {
    /// Without the ELF version suffix (`memcpy@@GLIBC_2.14` is `memcpy`).
    pub name: &'a str,
    pub address: u64,
    pub size: u64,
    /// 0 global, 1 weak, 2 local (and any other binding).
    pub bind_rank: u8,
    /// A GNU indirect function: the symbol is the resolver.
    pub ifunc: bool,
}

/// A PT_LOAD segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub vaddr: u64,
    pub offset: u64,
    /// Bytes in the file.
    pub filesz: u64,
    pub executable: bool,
}

impl Segment {
    /// Whether the segment's file bytes hold `vaddr`.
    pub fn holds(&self, vaddr: u64) -> bool {
        vaddr >= self.vaddr && vaddr - self.vaddr < self.filesz
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

impl Elf {
    /// An ELF image already in memory (the vDSO), copied into an anonymous mapping.
    pub fn from_bytes(name: &str, bytes: &[u8]) -> std::io::Result<Elf> {
        let mut m = memmap2::MmapMut::map_anon(bytes.len().max(1))?;
        m[..bytes.len()].copy_from_slice(bytes);
        Ok(Elf {
            path: PathBuf::from(name),
            map: m.make_read_only()?,
        })
    }

    /// Opens and maps the file at `path`.
    pub fn open(path: &Path) -> std::io::Result<Elf> {
        let file = std::fs::File::open(path)?;
        // SAFETY: the mapping is read-only and every read of it goes through `object`'s
        // bounds-checked parsing. A file truncated while mapped would fault on the pages past
        // its new end; binaries in use are replaced by rename, not rewritten in place.
        let map = unsafe { memmap2::Mmap::map(&file)? };
        Ok(Elf {
            path: path.to_path_buf(),
            map,
        })
    }

    /// The file's bytes.
    pub fn data(&self) -> &[u8] {
        &self.map
    }

    /// The file parsed, any ELF class.
    pub fn object(&self) -> object::Result<object::File<'_>> {
        object::File::parse(&*self.map)
    }

    /// The file parsed as a 64-bit ELF file.
    fn elf64(&self) -> object::Result<ElfFile64<'_, Endianness>> {
        ElfFile64::<Endianness>::parse(&*self.map)
    }

    /// The GNU build-id, if the file has one.
    pub fn build_id(&self) -> Option<Vec<u8>> {
        let f = self.object().ok()?;
        f.build_id().ok().flatten().map(|b| b.to_vec())
    }

    /// `.gnu_debuglink`'s file name.
    pub fn debuglink(&self) -> Option<String> {
        let f = self.object().ok()?;
        f.gnu_debuglink()
            .ok()
            .flatten()
            .map(|(name, _)| String::from_utf8_lossy(name).into_owned())
    }

    /// Whether a section named `name` exists.
    pub fn has_section(&self, name: &str) -> bool {
        self.object()
            .is_ok_and(|f| f.section_by_name(name).is_some())
    }

    /// The (uncompressed) data and address of section `name`.
    pub fn section(&self, name: &str) -> Option<(Cow<'_, [u8]>, u64)> {
        let f = self.object().ok()?;
        let s = f.section_by_name(name)?;
        Some((s.uncompressed_data().ok()?, s.address()))
    }

    /// The PT_LOAD segments.
    pub fn load_segments(&self) -> Vec<Segment> {
        let Ok(f) = self.object() else {
            return Vec::new();
        };
        f.segments()
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
                    executable,
                }
            })
            .collect()
    }

    /// The file offset of `vaddr`, through the PT_LOAD segments.
    pub fn file_offset(segments: &[Segment], vaddr: u64) -> Option<u64> {
        segments
            .iter()
            .find(|s| s.holds(vaddr))
            .map(|s| vaddr - s.vaddr + s.offset)
    }

    /// The defined function symbols with an address, `.symtab`'s then `.dynsym`'s (a symbol
    /// in both comes twice).
    pub fn text_symbols(&self) -> object::Result<Vec<Symbol<'_>>> {
        let f = self.object()?;
        Ok(text_symbols(f.symbols().chain(f.dynamic_symbols())))
    }

    /// [`text_symbols`](Self::text_symbols) of `.symtab` only, or of `.dynsym` when the file
    /// has no `.symtab`.
    fn main_text_symbols(&self) -> object::Result<Vec<Symbol<'_>>> {
        let f = self.object()?;
        Ok(if f.symbols().next().is_some() {
            text_symbols(f.symbols())
        } else {
            text_symbols(f.dynamic_symbols())
        })
    }

    /// DT_NEEDED, DT_RPATH, DT_RUNPATH, PT_INTERP and the machine (64-bit ELF only).
    pub fn dynamic(&self) -> Result<Dynamic, String> {
        let data = &*self.map;
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

    /// What ebsym needs to unwind this binary's stacks without it (None: no .eh_frame).
    pub fn unwind_tables(&self) -> Option<UnwindTables> {
        let mut t = UnwindTables::default();
        let (eh, eh_addr) = self.section(".eh_frame")?;
        t.eh_frame = eh.into_owned();
        t.eh_frame_address = eh_addr;
        if self.has_section(".eh_frame_hdr") {
            let (hdr, hdr_addr) = self.section(".eh_frame_hdr")?;
            t.eh_frame_hdr = hdr.into_owned();
            t.eh_frame_hdr_address = hdr_addr;
        }
        t.load_segments = self
            .load_segments()
            .iter()
            .map(|s| (s.vaddr, s.offset, s.filesz))
            .collect();
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
            let Some(off) = Elf::file_offset(&segs, s.address) else {
                continue;
            };
            let Some(code) = data.get(off as usize..off as usize + 8) else {
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

fn text_symbols<'data: 'file, 'file>(
    syms: impl Iterator<Item = object::Symbol<'data, 'file>>,
) -> Vec<Symbol<'data>> {
    let mut out = Vec::new();
    for s in syms {
        if s.kind() != object::SymbolKind::Text || s.is_undefined() || s.address() == 0 {
            continue;
        }
        let Ok(name) = s.name() else { continue };
        let name = name.split('@').next().unwrap_or(name);
        let (bind_rank, ifunc) = match s.flags() {
            object::SymbolFlags::Elf { st_info, .. } => (
                match st_info.st_bind() {
                    elf::STB_GLOBAL => 0,
                    elf::STB_WEAK => 1,
                    _ => 2,
                },
                st_info.st_type() == elf::STT_GNU_IFUNC,
            ),
            _ => (2, false),
        };
        out.push(Symbol {
            name,
            address: s.address(),
            size: s.size(),
            bind_rank,
            ifunc,
        });
    }
    out
}

/// ebrec's own vDSO image: the bytes of its `[vdso]` mapping (at getauxval(AT_SYSINFO_EHDR),
/// its size from /proc/self/maps), read once. The kernel maps the same image into every
/// 64-bit process, so it stands for theirs (the unwind rows of `[vdso]`, the trace's
/// `VdsoImage`). None when there is no vDSO.
pub fn own_vdso_image() -> Option<&'static [u8]> {
    static IMAGE: std::sync::OnceLock<Option<&'static [u8]>> = std::sync::OnceLock::new();
    *IMAGE.get_or_init(|| {
        // SAFETY: getauxval has no preconditions.
        let base = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) };
        if base == 0 {
            return None;
        }
        let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
        let line = maps.lines().find(|l| l.ends_with("[vdso]"))?;
        let (range, _) = line.split_once(' ')?;
        let (a, b) = range.split_once('-')?;
        let (a, b) = (
            u64::from_str_radix(a, 16).ok()?,
            u64::from_str_radix(b, 16).ok()?,
        );
        if a != base as u64 || b <= a {
            return None;
        }
        // SAFETY: [a, b) is our own vDSO mapping, readable and never unmapped for the life
        // of the process.
        Some(unsafe { std::slice::from_raw_parts(a as *const u8, (b - a) as usize) })
    })
}

/// The GNU build-id of the ELF file at `path`, if it has one.
pub fn build_id(path: &Path) -> Option<Vec<u8>> {
    Elf::open(path).ok()?.build_id()
}

/// [`Elf::unwind_tables`] of the file at `path` (None: unreadable, or no .eh_frame).
pub fn unwind_tables(path: &Path) -> Option<UnwindTables> {
    Elf::open(path).ok()?.unwind_tables()
}

/// An ELF file's function symbols, by name: what the allocator and lock probes look up.
#[derive(Debug)]
pub struct Symbols {
    /// (name, address, size), from .dynsym and .symtab, without version suffixes.
    pub funcs: Vec<(String, u64, u64)>,
    segments: Vec<Segment>,
}

impl Symbols {
    pub fn read(path: &Path) -> Result<Self, String> {
        let elf = Elf::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let syms = elf
            .text_symbols()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let mut funcs: Vec<(String, u64, u64)> = syms
            .into_iter()
            .map(|s| (s.name.to_string(), s.address, s.size))
            .collect();
        funcs.sort();
        funcs.dedup();
        Ok(Symbols {
            funcs,
            segments: elf.load_segments(),
        })
    }

    /// Address and size of the function `name`.
    pub fn function(&self, name: &str) -> Option<(u64, u64)> {
        self.funcs
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|&(_, a, size)| (a, size))
    }

    /// File offset of virtual address `vaddr`.
    pub fn file_offset(&self, vaddr: u64) -> Option<u64> {
        Elf::file_offset(&self.segments, vaddr)
    }
}

/// What ebsym needs to unwind a binary's stacks without the binary: `.eh_frame` and
/// `.eh_frame_hdr` with their addresses, and the PT_LOAD layout.
#[derive(Debug, Default)]
pub struct UnwindTables {
    pub eh_frame: Vec<u8>,
    pub eh_frame_address: u64,
    pub eh_frame_hdr: Vec<u8>,
    pub eh_frame_hdr_address: u64,
    /// (vaddr, file offset, file size) of each PT_LOAD segment.
    pub load_segments: Vec<(u64, u64, u64)>,
}
