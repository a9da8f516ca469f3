//! Function symbols: one reader of `.symtab` and `.dynsym` ([`functions`]) and the views the
//! two sides choose from it: ebrec's [`Symbol`]s and [`Symbols`] (defined functions, indirect
//! ones included, found by name: probes and `--func`), ebsym's [`SymbolTable`] (definitions,
//! found by address, sized to the next symbol when they have no size).
use crate::{file_offset, Elf, Segment};
use object::{elf, Object, ObjectSection, ObjectSymbol, SymbolKind};
use std::path::Path;

/// Which symbol table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    /// `.symtab`.
    Symtab,
    /// `.dynsym`.
    Dynsym,
}

/// A function symbol (`STT_FUNC`, `STT_GNU_IFUNC`) with a readable name, with the facts
/// the readers choose by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuncSymbol<'d> {
    /// As in the table, with any ELF version suffix (`memcpy@@GLIBC_2.14`); may be empty.
    pub name: &'d str,
    pub address: u64,
    pub size: u64,
    /// `st_bind` (`STB_GLOBAL`, `STB_WEAK`, `STB_LOCAL`, …); `STB_LOCAL` for other formats.
    pub bind: u8,
    /// A GNU indirect function (`STT_GNU_IFUNC`): the symbol is the resolver.
    pub ifunc: bool,
    /// `SHN_UNDEF`.
    pub undefined: bool,
    /// `object`'s definition: in a section, and not an indirect function.
    pub definition: bool,
    pub local: bool,
    pub weak: bool,
    /// The name of the `STT_FILE` symbol before it in the table, if any and not empty.
    pub file: Option<&'d str>,
    /// For a symbol without a size, the end address of its section (None: no section, or
    /// the symbol has a size).
    pub section_end: Option<u64>,
}

/// The function symbols of one table of `obj`, in table order.
pub fn functions<'d, 'f>(
    obj: &'f object::File<'d>,
    table: Table,
) -> impl Iterator<Item = FuncSymbol<'d>> + 'f {
    let it = match table {
        Table::Symtab => obj.symbols(),
        Table::Dynsym => obj.dynamic_symbols(),
    };
    // Local symbols follow the STT_FILE symbol of their file, in table order.
    let mut file: Option<&'d str> = None;
    it.filter_map(move |s| {
        if s.kind() == SymbolKind::File {
            file = s.name().ok().filter(|n| !n.is_empty());
        }
        if s.kind() != SymbolKind::Text {
            return None;
        }
        let name = s.name().ok()?;
        let (bind, ifunc) = match s.flags() {
            object::SymbolFlags::Elf { st_info, .. } => {
                (st_info.st_bind().0, st_info.st_type() == elf::STT_GNU_IFUNC)
            }
            _ => (elf::STB_LOCAL.0, false),
        };
        let section_end = if s.size() == 0 {
            s.section_index()
                .and_then(|i| obj.section_by_index(i).ok())
                .map(|sec| sec.address().saturating_add(sec.size()))
        } else {
            None
        };
        Some(FuncSymbol {
            name,
            address: s.address(),
            size: s.size(),
            bind,
            ifunc,
            undefined: s.is_undefined(),
            definition: s.is_definition(),
            local: s.is_local(),
            weak: s.is_weak(),
            file,
            section_end,
        })
    })
}

/// A defined function symbol with an address (`STT_FUNC`, `STT_GNU_IFUNC`): ebrec's view.
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

/// The [`Symbol`]s of one table: not undefined, at an address other than 0.
pub(crate) fn text_symbols<'d>(obj: &object::File<'d>, table: Table) -> Vec<Symbol<'d>> {
    functions(obj, table)
        .filter(|s| !s.undefined && s.address != 0)
        .map(|s| Symbol {
            name: s.name.split('@').next().unwrap_or(s.name),
            address: s.address,
            size: s.size,
            bind_rank: match s.bind {
                b if b == elf::STB_GLOBAL.0 => 0,
                b if b == elf::STB_WEAK.0 => 1,
                _ => 2,
            },
            ifunc: s.ifunc,
        })
        .collect()
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
        file_offset(&self.segments, vaddr)
    }
}

/// A function symbol: address, size and raw (mangled) name: ebsym's view.
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
        let collect = |table: Table| -> Vec<Sym> {
            functions(obj, table)
                .filter(|s| s.definition && s.address != 0 && !s.name.is_empty())
                .filter_map(|s| {
                    // A zero-sized symbol (`_init`, `_fini`, assembly) covers up to the
                    // next symbol, and never past the end of its section.
                    let size = match s.size {
                        0 => s.section_end?.checked_sub(s.address)?,
                        n => n,
                    };
                    Some(Sym {
                        address: s.address,
                        size,
                        name: s.name.to_string(),
                        file: if s.local {
                            s.file.map(str::to_string)
                        } else {
                            None
                        },
                    })
                })
                .collect()
        };
        let mut syms = collect(Table::Symtab);
        if syms.is_empty() {
            syms = collect(Table::Dynsym);
        }
        // Aliases at one address (a C1/C2 constructor pair): like binutils, the first in
        // table order among the largest wins. The sort is stable, so the result depends
        // on the file only.
        syms.sort_by_key(|s| (s.address, std::cmp::Reverse(s.size)));
        syms.dedup_by_key(|s| s.address);
        SymbolTable { syms }
    }

    /// [`SymbolTable::load`] of a mapped file (empty if it does not parse).
    pub fn of(elf: &Elf) -> SymbolTable {
        elf.object()
            .map(|o| SymbolTable::load(&o))
            .unwrap_or_default()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_two_views_of_libc() {
        let elf = Elf::open(Path::new("/lib/x86_64-linux-gnu/libc.so.6")).unwrap();
        let syms = elf.text_symbols().unwrap();
        // ebrec's view: version suffixes gone, indirect functions kept.
        assert!(syms.iter().all(|s| !s.name.contains('@')));
        assert!(syms.iter().any(|s| s.name == "memcpy" && s.ifunc));
        let malloc = syms.iter().find(|s| s.name == "malloc").unwrap();
        let by_name = Symbols::read(Path::new("/lib/x86_64-linux-gnu/libc.so.6")).unwrap();
        assert_eq!(
            by_name.function("malloc"),
            Some((malloc.address, malloc.size))
        );
        // ebsym's view: found by address, no indirect function (object's definition).
        let t = SymbolTable::of(&elf);
        let s = t.find(malloc.address + 1).unwrap();
        assert_eq!(s.address, malloc.address);
        assert!(t.find(0).is_none());
    }
}
