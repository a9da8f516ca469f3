//! The little ELF reading the recorder does: build-ids, and function symbols to file
//! offsets for uprobes. (It never reads DWARF: that is ebsym's job.)
use object::{Object, ObjectSegment, ObjectSymbol};
use std::path::Path;

/// The GNU build-id of the ELF file at `path`, if it has one.
pub fn build_id(path: &Path) -> Option<Vec<u8>> {
    let data = std::fs::read(path).ok()?;
    let f = object::File::parse(&*data).ok()?;
    f.build_id().ok().flatten().map(|b| b.to_vec())
}

/// An ELF file's function symbols.
#[derive(Debug)]
pub struct Symbols {
    /// (name, address, size), from .dynsym and .symtab, without version suffixes.
    pub funcs: Vec<(String, u64, u64)>,
    /// (vaddr, file offset, file size) of PT_LOAD segments.
    segments: Vec<(u64, u64, u64)>,
}

impl Symbols {
    pub fn read(path: &Path) -> Result<Self, String> {
        let data = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let f = object::File::parse(&*data).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut funcs = Vec::new();
        for s in f.dynamic_symbols().chain(f.symbols()) {
            if s.kind() != object::SymbolKind::Text || s.is_undefined() || s.address() == 0 {
                continue;
            }
            if let Ok(name) = s.name() {
                let name = name.split('@').next().unwrap_or(name);
                funcs.push((name.to_string(), s.address(), s.size()));
            }
        }
        funcs.sort();
        funcs.dedup();
        let segments = f
            .segments()
            .map(|s| (s.address(), s.file_range().0, s.file_range().1))
            .collect();
        Ok(Symbols { funcs, segments })
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
        self.segments
            .iter()
            .find(|&&(va, _, sz)| vaddr >= va && vaddr < va + sz)
            .map(|&(va, off, _)| vaddr - va + off)
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

/// The unwind tables of the ELF file at `path` (None: unreadable, or no .eh_frame).
pub fn unwind_tables(path: &Path) -> Option<UnwindTables> {
    use object::ObjectSection;
    let data = std::fs::read(path).ok()?;
    let f = object::File::parse(&*data).ok()?;
    let mut t = UnwindTables::default();
    let eh = f.section_by_name(".eh_frame")?;
    t.eh_frame = eh.uncompressed_data().ok()?.into_owned();
    t.eh_frame_address = eh.address();
    if let Some(hdr) = f.section_by_name(".eh_frame_hdr") {
        t.eh_frame_hdr = hdr.uncompressed_data().ok()?.into_owned();
        t.eh_frame_hdr_address = hdr.address();
    }
    t.load_segments = f
        .segments()
        .map(|s| {
            let (off, size) = s.file_range();
            (s.address(), off, size)
        })
        .collect();
    (!t.eh_frame.is_empty()).then_some(t)
}

/// Whether the code of the ELF file at `path` keeps frame pointers: the share of its sizable
/// functions whose prologue is `push %rbp; mov %rsp,%rbp` (after an optional endbr64).
/// Leaf functions skip the frame even with -fno-omit-frame-pointer, so a quarter is the bar;
/// code built without frame pointers has almost none. None: no symbols to judge by.
pub fn has_frame_pointers(path: &Path) -> Option<bool> {
    let data = std::fs::read(path).ok()?;
    let f = object::File::parse(&*data).ok()?;
    let segs: Vec<(u64, u64, u64)> = f
        .segments()
        .map(|s| {
            let (off, size) = s.file_range();
            (s.address(), off, size)
        })
        .collect();
    let (mut total, mut with_fp) = (0usize, 0usize);
    let syms: Vec<_> = if f.symbols().next().is_some() {
        f.symbols().collect()
    } else {
        f.dynamic_symbols().collect()
    };
    for s in syms {
        if s.kind() != object::SymbolKind::Text || s.size() < 32 {
            continue;
        }
        let a = s.address();
        let Some(off) = segs
            .iter()
            .find(|(v, _, sz)| a >= *v && a < v + sz)
            .map(|(v, o, _)| o + (a - v))
        else {
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
