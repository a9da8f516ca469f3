//! The vDSO a trace carries (`VdsoImage`, written by ebrec once per file): frames in
//! `[vdso]` are named from the image's `.dynsym`, the only symbols a vDSO has (no DWARF,
//! no `.symtab`): `__vdso_clock_gettime+0x56`, symbol table only.
//!
//! The image is checked before it names anything: an ELF file whose build-id note is the
//! one the record and the mappings claim. Of the aliases the vDSO exports at one address
//! (the weak `clock_gettime` and the global `__vdso_clock_gettime`), the global one is the
//! name, as perf prints it.
//!
//! ```
//! use ebtrace_symbolize::vdso::VdsoImage;
//! // Not an ELF file: refused.
//! assert!(VdsoImage::parse(vec![0u8; 64], &[1, 2, 3]).is_err());
//! ```
use crate::elf::{hex, Load};
use crate::resolve::{Frame, Lookup, Reason};
use ebtrace_elf::{functions, Table};
use object::Object;

/// A parsed vDSO image: its PT_LOAD segments and function symbols.
#[derive(Debug, Clone)]
pub struct VdsoImage {
    pub build_id: Vec<u8>,
    loads: Vec<Load>,
    /// (address, size, name), sorted by address, one per address.
    syms: Vec<(u64, u64, String)>,
}

/// What the summary and the `ModuleResolution` record say gave the vDSO's symbols.
pub const SOURCE: &str = "[vdso] image in the trace (.dynsym)";

impl VdsoImage {
    /// Parses `image`, which must be an ELF file with build-id `build_id`.
    pub fn parse(image: Vec<u8>, build_id: &[u8]) -> Result<VdsoImage, String> {
        let obj = object::File::parse(&image[..]).map_err(|e| format!("vDSO image: {e}"))?;
        if obj.format() != object::BinaryFormat::Elf {
            return Err("vDSO image: not an ELF file".into());
        }
        let has = obj.build_id().ok().flatten().unwrap_or_default();
        if has != build_id {
            return Err(format!(
                "vDSO image: build-id {} where the trace says {}",
                if has.is_empty() {
                    "none".into()
                } else {
                    hex(has)
                },
                hex(build_id)
            ));
        }
        let loads = crate::elf::loads(&obj);
        // Global before weak at one address, then the larger, then table order.
        let mut syms: Vec<(u64, u64, u8, usize, String)> = Vec::new();
        let defined = functions(&obj, Table::Dynsym)
            .filter(|s| s.definition && s.size != 0 && !s.name.is_empty());
        for (i, s) in defined.enumerate() {
            let rank = if s.weak { 1 } else { 0 };
            syms.push((s.address, s.size, rank, i, s.name.to_string()));
        }
        syms.sort_by_key(|&(a, size, rank, i, _)| (a, rank, std::cmp::Reverse(size), i));
        syms.dedup_by_key(|s| s.0);
        Ok(VdsoImage {
            build_id: build_id.to_vec(),
            loads,
            syms: syms.into_iter().map(|(a, s, _, _, n)| (a, s, n)).collect(),
        })
    }

    /// The ELF virtual address of file offset `offset` (an offset into the image).
    pub fn offset_to_vaddr(&self, offset: u64) -> Option<u64> {
        crate::elf::offset_to_vaddr(&self.loads, offset)
    }

    /// The frame of ELF virtual address `addr`: the function symbol that holds it, with
    /// the offset into it, from the symbol table only; no symbol: [`Reason::NoSymbol`].
    pub fn resolve(&self, addr: u64) -> Lookup {
        let i = self.syms.partition_point(|s| s.0 <= addr);
        match i.checked_sub(1).map(|i| &self.syms[i]) {
            Some((start, size, name)) if addr - start < *size => Ok(vec![Frame {
                function: Some(name.clone()),
                file: None,
                line: 0,
                column: 0,
                inlined: false,
                offset: Some(addr - start),
                from_symtab: true,
                discriminator: 0,
            }]),
            _ => Err(Reason::NoSymbol.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::ObjectSymbol;

    /// This process's own vDSO (the kernel's image): `clock_gettime`'s address is named
    /// `__vdso_clock_gettime`, the global alias; a wrong build-id is refused.
    #[test]
    fn own_vdso_names_clock_gettime() {
        // SAFETY: getauxval has no preconditions.
        let base = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) } as usize;
        if base == 0 {
            eprintln!("no vDSO here: nothing to test");
            return;
        }
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let line = maps.lines().find(|l| l.ends_with("[vdso]")).unwrap();
        let (a, rest) = line.split_once('-').unwrap();
        let b = rest.split_once(' ').unwrap().0;
        let (a, b) = (
            usize::from_str_radix(a, 16).unwrap(),
            usize::from_str_radix(b, 16).unwrap(),
        );
        assert_eq!(a, base);
        // SAFETY: our own vDSO mapping, readable for the life of the process.
        let image = unsafe { std::slice::from_raw_parts(a as *const u8, b - a) }.to_vec();
        let id = object::File::parse(&image[..])
            .unwrap()
            .build_id()
            .unwrap()
            .expect("the vDSO has a build-id note")
            .to_vec();
        assert!(VdsoImage::parse(image.clone(), &[0; 20])
            .unwrap_err()
            .contains("build-id"));
        let v = VdsoImage::parse(image.clone(), &id).unwrap();
        let obj = object::File::parse(&image[..]).unwrap();
        let cg = obj
            .dynamic_symbols()
            .find(|s| s.name() == Ok("clock_gettime"))
            .unwrap();
        let frames = v.resolve(cg.address() + 3).unwrap();
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0].function.as_deref(), Some("__vdso_clock_gettime"));
        assert_eq!(frames[0].offset, Some(3));
        assert!(frames[0].from_symtab);
        assert_eq!(v.offset_to_vaddr(cg.address()), Some(cg.address()));
        assert_eq!(
            v.resolve(0).unwrap_err().reason,
            Reason::NoSymbol,
            "the ELF header is no function"
        );
    }
}
