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

    /// Address of the function `name`.
    pub fn address(&self, name: &str) -> Option<u64> {
        self.funcs
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|&(_, a, _)| a)
    }

    /// File offset of virtual address `vaddr`.
    pub fn file_offset(&self, vaddr: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|&&(va, _, sz)| vaddr >= va && vaddr < va + sz)
            .map(|&(va, off, _)| vaddr - va + off)
    }
}
