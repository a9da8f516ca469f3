//! USDT (SystemTap SDT) probes: the `.note.stapsdt` notes a program carries for each
//! `DTRACE_PROBE`/`STAP_PROBE` site of `<sys/sdt.h>` (PostgreSQL's `query__start`,
//! libstdc++'s `libstdcxx:throw`), and what a uprobe on one needs: the probe's file offset
//! and its semaphore's.
//!
//! A note (type [`NT_STAPSDT`], owner `stapsdt`) holds three addresses — the probe's pc (a
//! `nop` in the code), the link-time address of `.stapsdt.base`, the semaphore (0: none) —
//! then three NUL-terminated strings: provider, name, and the argument spec
//! (`-4@%edi 8@-16(%rbp)`, see [`Arg`]). The addresses are 4 bytes in ELFCLASS32 files and 8
//! in ELFCLASS64 ones. A file moved by prelink after linking keeps its notes' addresses:
//! the difference between the `.stapsdt.base` section's actual address and the note's base
//! is added to the pc and the semaphore, as libbpf and bcc do. The addresses then become
//! file offsets through the PT_LOAD segments (the pc's must be executable; the semaphore,
//! a 2-byte counter in the data section `.probes`, needs file bytes).
//!
//! Every input is untrusted: a note that is cut, lacks a NUL terminator or claims sizes past
//! its section is skipped and counted ([`Sdt::malformed`]), never a panic; an argument this
//! reader cannot express is [`Loc::Unsupported`], never a guess.
//!
//! ```no_run
//! use ebtrace_elf::Elf;
//! let elf = Elf::open("/usr/lib/x86_64-linux-gnu/libstdc++.so.6".as_ref()).unwrap();
//! for p in elf.sdt().unwrap().probes {
//!     println!("{}:{} at {:#x} ({})", p.provider, p.name, p.file_offset, p.args_spec);
//! }
//! ```
use crate::{load_segments, section_data, Segment};
use object::{Object, ObjectSection};
use std::fmt;

/// The note type of an SDT probe (`NT_STAPSDT`).
pub const NT_STAPSDT: u32 = 3;
/// The owner ("name") of an SDT note.
pub const OWNER: &[u8] = b"stapsdt";
/// The section that holds the notes.
pub const NOTE_SECTION: &str = ".note.stapsdt";
/// The section whose address the notes' base is (one byte, in an allocated section).
pub const BASE_SECTION: &str = ".stapsdt.base";

/// The most notes read from one file (PostgreSQL has 71; a file claiming more is lying).
pub const MAX_NOTES: usize = 1 << 16;
/// The longest string of a note (provider, name or argument spec) kept.
pub const MAX_STRING: usize = 4096;

/// One `.note.stapsdt` note, as written (addresses not adjusted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// The probe's address (its `nop`), at link time.
    pub pc: u64,
    /// The address of `.stapsdt.base` at link time.
    pub base: u64,
    /// The semaphore's address at link time; 0: the probe has none.
    pub semaphore: u64,
    pub provider: String,
    pub name: String,
    /// The argument spec as written (`-4@%edi 8@-16(%rbp)`; empty for no arguments).
    pub args: String,
}

/// The notes of a note section's bytes, in order, and how many were malformed (skipped).
/// `addr_size` is 8 for ELFCLASS64 and 4 for ELFCLASS32 (any other: every note malformed).
/// Notes of other owners or types are passed over, not counted. A note whose sizes run
/// past the section ends the walk (nothing after it can be framed): it counts as one.
pub fn parse_notes(data: &[u8], little_endian: bool, addr_size: usize) -> (Vec<Note>, usize) {
    let u32_at = |at: usize| -> Option<u32> {
        let b: [u8; 4] = data.get(at..at.checked_add(4)?)?.try_into().ok()?;
        Some(if little_endian {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        })
    };
    let align4 = |n: usize| n.checked_add(3).map(|n| n & !3);
    let (mut notes, mut malformed) = (Vec::new(), 0usize);
    let mut at = 0usize;
    while at < data.len() {
        if notes.len() + malformed >= MAX_NOTES {
            malformed += 1;
            break;
        }
        // A header, then the name and the descriptor, each padded to 4 bytes.
        let (Some(namesz), Some(descsz), Some(kind)) = (u32_at(at), u32_at(at + 4), u32_at(at + 8))
        else {
            malformed += 1;
            break;
        };
        let name_at = at + 12;
        let desc_at = align4(namesz as usize).and_then(|n| name_at.checked_add(n));
        let end = desc_at.and_then(|d| d.checked_add(descsz as usize));
        let (Some(desc_at), Some(end)) = (desc_at, end) else {
            malformed += 1;
            break;
        };
        if end > data.len() {
            malformed += 1;
            break;
        }
        let name = &data[name_at..name_at + namesz as usize];
        let desc = &data[desc_at..end];
        at = align4(end).unwrap_or(usize::MAX);
        if kind != NT_STAPSDT || name.strip_suffix(b"\0").unwrap_or(name) != OWNER {
            continue;
        }
        match parse_desc(desc, little_endian, addr_size) {
            Some(n) => notes.push(n),
            None => malformed += 1,
        }
    }
    (notes, malformed)
}

/// A note's descriptor: three addresses and three NUL-terminated strings.
fn parse_desc(desc: &[u8], little_endian: bool, addr_size: usize) -> Option<Note> {
    let addr = |i: usize| -> Option<u64> {
        let b = desc.get(i * addr_size..(i + 1) * addr_size)?;
        Some(match (addr_size, little_endian) {
            (8, true) => u64::from_le_bytes(b.try_into().ok()?),
            (8, false) => u64::from_be_bytes(b.try_into().ok()?),
            (4, true) => u32::from_le_bytes(b.try_into().ok()?).into(),
            (4, false) => u32::from_be_bytes(b.try_into().ok()?).into(),
            _ => return None,
        })
    };
    let (pc, base, semaphore) = (addr(0)?, addr(1)?, addr(2)?);
    let mut rest = desc.get(3 * addr_size..)?;
    let mut string = || -> Option<String> {
        let nul = rest.iter().position(|&b| b == 0)?;
        let s = std::str::from_utf8(&rest[..nul]).ok()?;
        rest = &rest[nul + 1..];
        (s.len() <= MAX_STRING).then(|| s.to_string())
    };
    let (provider, name, args) = (string()?, string()?, string()?);
    if provider.is_empty() || name.is_empty() {
        return None;
    }
    Some(Note {
        pc,
        base,
        semaphore,
        provider,
        name,
        args,
    })
}

/// An SDT probe, placed in its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub provider: String,
    pub name: String,
    /// The probe's ELF virtual address (the note's pc, prelink-adjusted).
    pub address: u64,
    /// Where its uprobe goes: the file offset of `address`.
    pub file_offset: u64,
    /// The semaphore's ELF virtual address (prelink-adjusted); 0: none.
    pub semaphore: u64,
    /// The semaphore's file offset (the uprobe's reference counter offset); 0: none.
    pub semaphore_offset: u64,
    /// The argument spec as written in the note.
    pub args_spec: String,
    /// The arguments, parsed (x86-64 only: on other machines each is
    /// [`Loc::Unsupported`]).
    pub args: Vec<Arg>,
    /// The note as read.
    pub note: Note,
}

/// The SDT probes of a file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sdt {
    /// In the notes' order.
    pub probes: Vec<Probe>,
    /// Notes skipped because they could not be read (cut, no NUL terminator, sizes past
    /// the section, empty provider or name, not UTF-8).
    pub malformed: usize,
    /// Notes read but not placed: a pc outside the executable PT_LOADs, or a semaphore
    /// without file bytes (a probe that could be attached but never enabled).
    pub unplaced: usize,
    /// The `.stapsdt.base` section's address, when the file has one.
    pub base: Option<u64>,
}

/// The SDT probes of `obj` (an empty [`Sdt`] for a file without notes). Err: not ELF.
pub fn probes(obj: &object::File<'_>) -> Result<Sdt, String> {
    if obj.format() != object::BinaryFormat::Elf {
        return Err("not an ELF file".into());
    }
    let addr_size = if obj.is_64() { 8 } else { 4 };
    let x86_64 = obj.architecture() == object::Architecture::X86_64;
    let base = obj.section_by_name(BASE_SECTION).map(|s| s.address());
    let segments = load_segments(obj);
    let mut sdt = Sdt {
        base,
        ..Sdt::default()
    };
    for sec in obj.sections() {
        if sec.name() != Ok(NOTE_SECTION) || sec.kind() != object::SectionKind::Note {
            continue;
        }
        let Ok(data) = section_data(&sec) else {
            sdt.malformed += 1;
            continue;
        };
        let (notes, malformed) = parse_notes(&data, obj.is_little_endian(), addr_size);
        sdt.malformed += malformed;
        for note in notes {
            match place(note, base, &segments, x86_64) {
                Some(p) => sdt.probes.push(p),
                None => sdt.unplaced += 1,
            }
        }
    }
    Ok(sdt)
}

/// A note's addresses adjusted for prelink and turned into file offsets.
fn place(note: Note, base: Option<u64>, segments: &[Segment], x86_64: bool) -> Option<Probe> {
    // libbpf and bcc: only when the file has the section and the note a base.
    let shift = |a: u64| match base {
        Some(b) if note.base != 0 => a.wrapping_add(b.wrapping_sub(note.base)),
        _ => a,
    };
    let address = shift(note.pc);
    let code = segments.iter().find(|s| s.executable && s.holds(address))?;
    let file_offset = (address - code.vaddr).checked_add(code.offset)?;
    let (semaphore, semaphore_offset) = match note.semaphore {
        0 => (0, 0),
        s => {
            let s = shift(s);
            let off = crate::file_offset(segments, s)?;
            // The kernel takes 0 as "no counter": a counter at offset 0 cannot be had.
            if off == 0 {
                return None;
            }
            (s, off)
        }
    };
    let args = if x86_64 {
        parse_args(&note.args)
    } else {
        note.args
            .split_ascii_whitespace()
            .map(|t| Arg::unsupported(t, "arguments are read on x86-64 only"))
            .collect()
    };
    Some(Probe {
        provider: note.provider.clone(),
        name: note.name.clone(),
        address,
        file_offset,
        semaphore,
        semaphore_offset,
        args_spec: note.args.clone(),
        args,
        note,
    })
}

/// An x86-64 general purpose register (the 64-bit one a name's sub-register belongs to:
/// `%edi`, `%di` and `%dil` are [`Reg::Rdi`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reg {
    Rax,
    Rbx,
    Rcx,
    Rdx,
    Rsi,
    Rdi,
    Rbp,
    Rsp,
    R8,
    R9,
    R10,
    R11,
    R12,
    R13,
    R14,
    R15,
}

impl Reg {
    /// Every register, in `Reg` order.
    pub const ALL: [Reg; 16] = [
        Reg::Rax,
        Reg::Rbx,
        Reg::Rcx,
        Reg::Rdx,
        Reg::Rsi,
        Reg::Rdi,
        Reg::Rbp,
        Reg::Rsp,
        Reg::R8,
        Reg::R9,
        Reg::R10,
        Reg::R11,
        Reg::R12,
        Reg::R13,
        Reg::R14,
        Reg::R15,
    ];

    /// The 64-bit name (`rax`).
    pub fn name(self) -> &'static str {
        [
            "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11",
            "r12", "r13", "r14", "r15",
        ][self as usize]
    }

    /// A register name without `%` and the bytes it names: `edi` → (Rdi, 4). None: not a
    /// general purpose register, or one this reader cannot express as a whole register's
    /// low bytes (`ah`, `bh`, `ch`, `dh` are bits 8..16).
    pub fn parse(name: &str) -> Option<(Reg, u8)> {
        const LEGACY: [(&str, &str, &str, &str, Reg); 8] = [
            ("rax", "eax", "ax", "al", Reg::Rax),
            ("rbx", "ebx", "bx", "bl", Reg::Rbx),
            ("rcx", "ecx", "cx", "cl", Reg::Rcx),
            ("rdx", "edx", "dx", "dl", Reg::Rdx),
            ("rsi", "esi", "si", "sil", Reg::Rsi),
            ("rdi", "edi", "di", "dil", Reg::Rdi),
            ("rbp", "ebp", "bp", "bpl", Reg::Rbp),
            ("rsp", "esp", "sp", "spl", Reg::Rsp),
        ];
        for (q, d, w, b, r) in LEGACY {
            for (n, bytes) in [(q, 8), (d, 4), (w, 2), (b, 1)] {
                if name == n {
                    return Some((r, bytes));
                }
            }
        }
        let rest = name.strip_prefix('r')?;
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (num, suffix) = rest.split_at(digits);
        let n: usize = num.parse().ok().filter(|n| (8..16).contains(n))?;
        if num.starts_with('0') {
            return None;
        }
        let bytes = match suffix {
            "" => 8,
            "d" => 4,
            "w" => 2,
            "b" => 1,
            _ => return None,
        };
        Some((Reg::ALL[n], bytes))
    }
}

impl fmt::Display for Reg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where an argument's value is at the probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Loc {
    /// In a register (`%edi`, `%rax`, `%r8d`): its low [`Arg::size`] bytes.
    Register(Reg),
    /// In memory at the register's value plus `offset` (`-16(%rbp)`, `(%rax)`).
    Memory { base: Reg, offset: i64 },
    /// At `base + index * scale + offset` (`8(%rbx,%rax,4)`).
    Indexed {
        base: Reg,
        index: Reg,
        scale: u8,
        offset: i64,
    },
    /// In memory at `symbol + offset`, addressed relative to the instruction pointer
    /// (`foo(%rip)`, `foo+8(%rip)`; the symbol is the file's, resolved by the caller). An
    /// empty symbol: `offset` is the address itself.
    RipRelative { symbol: String, offset: i64 },
    /// The value itself (`$5`, `$-1`).
    Constant(i64),
    /// A form this reader cannot express (a segment prefix, `%ah`, an `%xmm` register, a
    /// symbolic constant, a size that is not 1, 2, 4 or 8, …), with why.
    Unsupported(String),
}

/// One argument of a probe: `[-]SIZE@OPERAND`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arg {
    /// The argument as written (`-4@%edi`).
    pub text: String,
    /// Bytes: 1, 2, 4 or 8; 0 when the size could not be read (then `loc` is
    /// [`Loc::Unsupported`]).
    pub size: u8,
    /// A negative size: sign-extend.
    pub signed: bool,
    pub loc: Loc,
}

impl Arg {
    fn unsupported(text: &str, why: &str) -> Arg {
        Arg {
            text: text.to_string(),
            size: 0,
            signed: false,
            loc: Loc::Unsupported(why.to_string()),
        }
    }
}

/// The arguments of an x86-64 (AT&T syntax) argument spec, split at whitespace: each one
/// [`parse_arg`]. Empty for an empty spec.
pub fn parse_args(spec: &str) -> Vec<Arg> {
    spec.split_ascii_whitespace().map(parse_arg).collect()
}

/// One argument, `[-]SIZE@OPERAND` in x86-64 AT&T syntax; what it cannot read is
/// [`Loc::Unsupported`] with the reason (it never panics).
pub fn parse_arg(text: &str) -> Arg {
    let Some((size, operand)) = text.split_once('@') else {
        return Arg::unsupported(text, "no SIZE@ before the operand");
    };
    let (signed, digits) = match size.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, size.strip_prefix('+').unwrap_or(size)),
    };
    let size = match digits {
        "1" => 1,
        "2" => 2,
        "4" => 4,
        "8" => 8,
        _ => return Arg::unsupported(text, &format!("size '{size}' is not 1, 2, 4 or 8")),
    };
    Arg {
        text: text.to_string(),
        size,
        signed,
        loc: operand_loc(operand, size),
    }
}

fn operand_loc(op: &str, size: u8) -> Loc {
    let unsupported = |why: &str| Loc::Unsupported(format!("'{op}': {why}"));
    if let Some(imm) = op.strip_prefix('$') {
        return match parse_int(imm) {
            Some(v) => Loc::Constant(v),
            None => unsupported("not a number (a symbolic constant?)"),
        };
    }
    if let Some(name) = op.strip_prefix('%') {
        if name.contains(':') {
            return unsupported("a segment prefix");
        }
        return match Reg::parse(name) {
            Some((r, bytes)) if bytes >= size => Loc::Register(r),
            Some(_) => unsupported("more bytes than the register holds"),
            None => unsupported("not a general purpose register"),
        };
    }
    if op.contains(':') {
        return unsupported("a segment prefix");
    }
    let Some(open) = op.find('(') else {
        return unsupported("an absolute address");
    };
    let Some(inner) = op[open + 1..].strip_suffix(')') else {
        return unsupported("no closing parenthesis at the end");
    };
    let disp = &op[..open];
    let parts: Vec<&str> = inner.split(',').map(str::trim).collect();
    let reg = |s: &str| -> Option<Reg> {
        let (r, bytes) = Reg::parse(s.strip_prefix('%')?)?;
        // Only 64-bit addressing is expressed (a 32-bit address wraps differently).
        (bytes == 8).then_some(r)
    };
    if parts.len() == 1 && parts[0] == "%rip" {
        let (symbol, offset) = match parse_int(disp) {
            Some(v) => (String::new(), v),
            None => match symbol_offset(disp) {
                Some(so) => so,
                None => return unsupported("a displacement that is not SYMBOL[+-N]"),
            },
        };
        return Loc::RipRelative { symbol, offset };
    }
    let offset = if disp.is_empty() {
        0
    } else {
        match parse_int(disp) {
            Some(v) => v,
            None => return unsupported("a symbolic displacement"),
        }
    };
    match parts.as_slice() {
        [b] => match reg(b) {
            Some(base) => Loc::Memory { base, offset },
            None => unsupported("the base is not a 64-bit general purpose register"),
        },
        [b, i] | [b, i, _] => {
            let scale = match parts.get(2) {
                None => Some(1),
                Some(s) => match *s {
                    "1" => Some(1),
                    "2" => Some(2),
                    "4" => Some(4),
                    "8" => Some(8),
                    _ => None,
                },
            };
            match (reg(b), reg(i), scale) {
                (Some(base), Some(index), Some(scale)) if index != Reg::Rsp => Loc::Indexed {
                    base,
                    index,
                    scale,
                    offset,
                },
                (None, ..) if b.is_empty() => unsupported("an index without a base"),
                _ => unsupported("not BASE,INDEX,SCALE with 64-bit registers"),
            }
        }
        _ => unsupported("not (BASE) or (BASE,INDEX,SCALE)"),
    }
}

/// A decimal or `0x` hexadecimal integer, optionally signed, that fits an i64.
fn parse_int(s: &str) -> Option<i64> {
    let (neg, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if digits.is_empty() || digits.starts_with(['+', '-']) {
        return None;
    }
    let magnitude: i128 = match digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        Some(h) if !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit()) => {
            i128::from_str_radix(h, 16).ok()?
        }
        Some(_) => return None,
        None if digits.bytes().all(|b| b.is_ascii_digit()) => digits.parse().ok()?,
        None => return None,
    };
    i64::try_from(if neg { -magnitude } else { magnitude }).ok()
}

/// A symbol plus constants, as GNU as writes a displacement: `SYMBOL`, `SYMBOL+N`,
/// `SYMBOL-N`, `N+SYMBOL` (GCC's `40+CheckpointStats` for a field of a global struct),
/// `-N+SYMBOL`.
fn symbol_offset(s: &str) -> Option<(String, i64)> {
    let ident = |t: &str| {
        !t.is_empty()
            && !t.starts_with(|c: char| c.is_ascii_digit())
            && t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'$')
    };
    let mut symbol = None;
    let mut offset = 0i64;
    let mut negative = s.starts_with('-');
    let mut rest = s.strip_prefix(['-', '+']).unwrap_or(s);
    loop {
        let end = rest.find(['+', '-']).unwrap_or(rest.len());
        let term = &rest[..end];
        if ident(term) {
            // One symbol, added (a difference of symbols is no address).
            if symbol.is_some() || negative {
                return None;
            }
            symbol = Some(term.to_string());
        } else {
            let v = parse_int(term)?;
            offset = if negative {
                offset.checked_sub(v)?
            } else {
                offset.checked_add(v)?
            };
        }
        if end == rest.len() {
            break;
        }
        negative = rest.as_bytes()[end] == b'-';
        rest = &rest[end + 1..];
    }
    Some((symbol?, offset))
}

impl crate::Elf {
    /// The file's SDT probes ([`probes`]). Err: not an ELF file.
    pub fn sdt(&self) -> Result<Sdt, String> {
        probes(&self.object().map_err(|e| e.to_string())?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Elf;
    use std::path::{Path, PathBuf};
    use std::process::Command;

    const LIBSTDCXX: &str = "/usr/lib/x86_64-linux-gnu/libstdc++.so.6";

    fn arg(text: &str) -> (u8, bool, Loc) {
        let a = parse_arg(text);
        assert_eq!(a.text, text);
        (a.size, a.signed, a.loc)
    }

    fn unsupported(text: &str) -> String {
        match parse_arg(text).loc {
            Loc::Unsupported(why) => why,
            l => panic!("{text}: {l:?}"),
        }
    }

    #[test]
    fn argument_forms() {
        use Reg::*;
        assert_eq!(arg("-4@%edi"), (4, true, Loc::Register(Rdi)));
        assert_eq!(arg("8@%rax"), (8, false, Loc::Register(Rax)));
        assert_eq!(arg("-1@%cl"), (1, true, Loc::Register(Rcx)));
        assert_eq!(arg("2@%r8w"), (2, false, Loc::Register(R8)));
        assert_eq!(arg("4@%r15d"), (4, false, Loc::Register(R15)));
        assert_eq!(arg("1@%sil"), (1, false, Loc::Register(Rsi)));
        assert_eq!(
            arg("8@-16(%rbp)"),
            (
                8,
                false,
                Loc::Memory {
                    base: Rbp,
                    offset: -16
                }
            )
        );
        assert_eq!(
            arg("-8@(%rax)"),
            (
                8,
                true,
                Loc::Memory {
                    base: Rax,
                    offset: 0
                }
            )
        );
        assert_eq!(
            arg("4@0x20(%rsp)"),
            (
                4,
                false,
                Loc::Memory {
                    base: Rsp,
                    offset: 0x20
                }
            )
        );
        assert_eq!(arg("-8@$5"), (8, true, Loc::Constant(5)));
        assert_eq!(arg("-4@$-1"), (4, true, Loc::Constant(-1)));
        assert_eq!(arg("8@$0x10"), (8, false, Loc::Constant(16)));
        assert_eq!(
            arg("4@foo(%rip)"),
            (
                4,
                false,
                Loc::RipRelative {
                    symbol: "foo".into(),
                    offset: 0
                }
            )
        );
        assert_eq!(
            arg("-8@_ZN4shop5stateE+8(%rip)"),
            (
                8,
                true,
                Loc::RipRelative {
                    symbol: "_ZN4shop5stateE".into(),
                    offset: 8
                }
            )
        );
        assert_eq!(
            arg("-4@40+CheckpointStats(%rip)"),
            (
                4,
                true,
                Loc::RipRelative {
                    symbol: "CheckpointStats".into(),
                    offset: 40
                }
            )
        );
        assert_eq!(
            arg("4@8+foo-2(%rip)"),
            (
                4,
                false,
                Loc::RipRelative {
                    symbol: "foo".into(),
                    offset: 6
                }
            )
        );
        assert_eq!(
            arg("4@-8+foo(%rip)"),
            (
                4,
                false,
                Loc::RipRelative {
                    symbol: "foo".into(),
                    offset: -8
                }
            )
        );
        assert_eq!(
            arg("8@-8(%rip)"),
            (
                8,
                false,
                Loc::RipRelative {
                    symbol: String::new(),
                    offset: -8
                }
            )
        );
        assert_eq!(
            arg("-4@8(%rbx,%rax,4)"),
            (
                4,
                true,
                Loc::Indexed {
                    base: Rbx,
                    index: Rax,
                    scale: 4,
                    offset: 8
                }
            )
        );
        assert_eq!(
            arg("1@(%rdi,%rsi)"),
            (
                1,
                false,
                Loc::Indexed {
                    base: Rdi,
                    index: Rsi,
                    scale: 1,
                    offset: 0
                }
            )
        );
        assert_eq!(parse_args(""), vec![]);
        assert_eq!(
            parse_args("  8@%rdi   8@%rsi "),
            vec![parse_arg("8@%rdi"), parse_arg("8@%rsi")]
        );

        // What it cannot express, with why; never a guess.
        for (text, why) in [
            ("%rdi", "no SIZE@"),
            ("16@%xmm0", "size '16'"),
            ("3@%rax", "size '3'"),
            ("@%rax", "size ''"),
            ("8@%xmm0", "not a general purpose register"),
            ("1@%ah", "not a general purpose register"),
            ("8@%eax", "more bytes than the register holds"),
            ("8@%fs:0x28", "segment prefix"),
            ("8@%fs:(%rax)", "segment prefix"),
            ("8@$sink", "symbolic constant"),
            ("8@sink", "absolute address"),
            ("8@0x601040", "absolute address"),
            ("4@foo(%rbx)", "symbolic displacement"),
            ("4@(%eax)", "64-bit"),
            ("4@8(,%rax,4)", "index without a base"),
            ("4@8(%rbx,%rax,3)", "BASE,INDEX,SCALE"),
            ("4@8(%rbx,%rsp,2)", "BASE,INDEX,SCALE"),
            ("4@8(%rbx", "closing parenthesis"),
            ("4@(%rip)", "SYMBOL"),
            ("4@foo+bar(%rip)", "SYMBOL"),
            ("4@8-foo(%rip)", "SYMBOL"),
            ("4@-foo(%rip)", "SYMBOL"),
            ("4@--8+foo(%rip)", "SYMBOL"),
            ("4@foo+(%rip)", "SYMBOL"),
            ("4@foo++8(%rip)", "SYMBOL"),
            ("8@$99999999999999999999", "not a number"),
            ("8@-(%rbp)", "symbolic displacement"),
            ("8@%r16", "not a general purpose register"),
            ("8@%r08", "not a general purpose register"),
        ] {
            let w = unsupported(text);
            assert!(w.contains(why), "{text}: {w}");
        }
        assert_eq!(parse_arg("16@%xmm0").size, 0);
        assert_eq!(parse_arg("8@%xmm0").size, 8);
    }

    /// A note as `<sys/sdt.h>` lays it out, for `addr_size`-byte addresses.
    fn note_bytes(addr_size: usize, addrs: [u64; 3], strings: &[&[u8]]) -> Vec<u8> {
        let mut desc = Vec::new();
        for a in addrs {
            desc.extend_from_slice(&a.to_le_bytes()[..addr_size]);
        }
        for s in strings {
            desc.extend_from_slice(s);
        }
        let mut v = Vec::new();
        v.extend_from_slice(&8u32.to_le_bytes());
        v.extend_from_slice(&(desc.len() as u32).to_le_bytes());
        v.extend_from_slice(&NT_STAPSDT.to_le_bytes());
        v.extend_from_slice(b"stapsdt\0");
        v.extend_from_slice(&desc);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }

    #[test]
    fn malformed_notes_are_skipped_and_counted() {
        let good = note_bytes(8, [0x1150, 0x2004, 0], &[b"t\0", b"one\0", b"-8@%rdi\0"]);
        let (notes, bad) = parse_notes(&good, true, 8);
        assert_eq!(bad, 0);
        assert_eq!(
            notes,
            vec![Note {
                pc: 0x1150,
                base: 0x2004,
                semaphore: 0,
                provider: "t".into(),
                name: "one".into(),
                args: "-8@%rdi".into(),
            }]
        );
        // Two good ones around bad descriptors (the framing holds, the descriptor does not).
        let no_nul = note_bytes(8, [1, 2, 0], &[b"t\0", b"x\0", b"8@%rax"]);
        let no_name = note_bytes(8, [1, 2, 0], &[b"t\0"]);
        let empty_name = note_bytes(8, [1, 2, 0], &[b"t\0", b"\0", b"\0"]);
        let short = note_bytes(4, [1, 2, 0], &[]);
        let not_utf8 = note_bytes(8, [1, 2, 0], &[b"t\0", b"\xff\0", b"\0"]);
        let mut other = note_bytes(8, [1, 2, 0], &[b"t\0", b"x\0", b"\0"]);
        other[8] = 1; // another type: passed over, not counted
        let mut all = good.clone();
        for n in [&no_nul, &no_name, &empty_name, &short, &not_utf8, &other] {
            all.extend_from_slice(n);
        }
        all.extend_from_slice(&good);
        let (notes, bad) = parse_notes(&all, true, 8);
        assert_eq!((notes.len(), bad), (2, 5));

        // Sizes past the section end the walk, counted once.
        let mut absurd = good.clone();
        absurd[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        absurd.extend_from_slice(&good);
        assert_eq!(parse_notes(&absurd, true, 8), (vec![], 1));
        let mut absurd = good.clone();
        absurd[0..4].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
        assert_eq!(parse_notes(&absurd, true, 8), (vec![], 1));
        // Cut anywhere: never a panic, at most the notes before the cut.
        for cut in 0..all.len() {
            let (notes, bad) = parse_notes(&all[..cut], true, 8);
            assert!(notes.len() <= 2 && bad <= 6, "{cut}");
            let _ = parse_notes(&all[..cut], false, 4);
        }
        assert_eq!(parse_notes(&good[..good.len() - 4], true, 8), (vec![], 1));
        assert_eq!(parse_notes(&good[..5], true, 8), (vec![], 1));
        assert_eq!(parse_notes(&good, true, 3), (vec![], 1));

        // ELFCLASS32: 4-byte addresses.
        let n32 = note_bytes(
            4,
            [0x8048000, 0x8049000, 0x804a010],
            &[b"p\0", b"n\0", b"4@%eax\0"],
        );
        let (notes, bad) = parse_notes(&n32, true, 4);
        assert_eq!(bad, 0);
        assert_eq!(
            (notes[0].pc, notes[0].base, notes[0].semaphore),
            (0x8048000, 0x8049000, 0x804a010)
        );
        assert_eq!(notes[0].args, "4@%eax");
    }

    /// A probe's arguments as `readelf -n` prints them, by (provider, name, address).
    fn readelf(path: &Path) -> Vec<(String, String, u64, u64, u64, String)> {
        let out = Command::new("readelf")
            .arg("-n")
            .arg(path)
            .output()
            .expect("readelf (binutils, scripts/setup test) runs");
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        let hex = |s: &str| u64::from_str_radix(s.trim().trim_start_matches("0x"), 16).unwrap();
        let mut got = Vec::new();
        let mut lines = text.lines().map(str::trim);
        while let Some(l) = lines.next() {
            let Some((_, provider)) = l.split_once("Provider: ") else {
                continue;
            };
            let name = lines.next().unwrap().strip_prefix("Name: ").unwrap();
            let loc = lines.next().unwrap().strip_prefix("Location: ").unwrap();
            let f: Vec<&str> = loc.split(", ").collect();
            let args = lines.next().unwrap().strip_prefix("Arguments:").unwrap();
            got.push((
                provider.to_string(),
                name.to_string(),
                hex(f[0]),
                hex(f[1].strip_prefix("Base: ").unwrap()),
                hex(f[2].strip_prefix("Semaphore: ").unwrap()),
                args.trim().to_string(),
            ));
        }
        got.sort();
        got
    }

    fn notes_of(sdt: &Sdt) -> Vec<(String, String, u64, u64, u64, String)> {
        let mut v: Vec<_> = sdt
            .probes
            .iter()
            .map(|p| {
                let n = &p.note;
                (
                    n.provider.clone(),
                    n.name.clone(),
                    n.pc,
                    n.base,
                    n.semaphore,
                    n.args.clone(),
                )
            })
            .collect();
        v.sort();
        v
    }

    /// Each probe's file offset holds its `nop`, and each semaphore's two zero bytes in
    /// `.probes`.
    fn check_placed(elf: &Elf, sdt: &Sdt) {
        let data = elf.data();
        let obj = elf.object().unwrap();
        let probes_sec = obj.section_by_name(".probes");
        for p in &sdt.probes {
            assert_eq!(p.address, p.note.pc, "not prelinked");
            assert_eq!(data[p.file_offset as usize], 0x90, "{p:?}");
            assert_eq!(
                crate::offset_to_vaddr(&elf.load_segments(), p.file_offset),
                Some(p.address)
            );
            if p.semaphore != 0 {
                let s = probes_sec.as_ref().expect("a semaphore lives in .probes");
                assert!(
                    p.semaphore >= s.address() && p.semaphore + 2 <= s.address() + s.size(),
                    "{p:?}"
                );
                let (start, _) = s.file_range().unwrap();
                assert_eq!(p.semaphore_offset, start + (p.semaphore - s.address()));
                let o = p.semaphore_offset as usize;
                assert_eq!(&data[o..o + 2], &[0, 0]);
            } else {
                assert_eq!(p.semaphore_offset, 0);
            }
        }
    }

    const PROBES_C: &str = r#"#include <sys/sdt.h>
void guarded(long id);
volatile long sink;
__attribute__((noinline)) void work(long id, int kind, short s, char c, long long big) {
  DTRACE_PROBE(t, zero);
  DTRACE_PROBE1(t, one, id);
  DTRACE_PROBE2(t, two, id, kind);
  DTRACE_PROBE3(t, three, id, kind, 5);
  DTRACE_PROBE6(t, six, id, kind, s, c, big, sink);
  guarded(id);
}
int main(int argc, char **argv) {
  work(argc, argc * 2, (short)argc, (char)argc, (long long)argv);
  return 0;
}
"#;

    /// The semaphore-guarded probe: `_SDT_HAS_SEMAPHORES` is for a whole translation unit.
    const GUARDED_C: &str = r#"#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
__attribute__((visibility("hidden"))) unsigned short t_guarded_semaphore
    __attribute__((section(".probes")));
void guarded(long id) {
  if (t_guarded_semaphore)
    DTRACE_PROBE1(t, guarded, id);
}
"#;

    /// `PROBES_C` and `GUARDED_C` compiled with `cc -O2 FLAGS` into `dir/name`.
    fn compile(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
        std::fs::write(dir.join("probes.c"), PROBES_C).unwrap();
        std::fs::write(dir.join("guarded.c"), GUARDED_C).unwrap();
        let out = dir.join(name);
        let o = Command::new("cc")
            .arg("-O2")
            .args(flags)
            .arg("-o")
            .arg(&out)
            .args(["probes.c", "guarded.c"])
            .current_dir(dir)
            .output()
            .expect("cc runs");
        assert!(
            o.status.success(),
            "cc {flags:?} (is systemtap-sdt-dev installed? scripts/setup test): {}",
            String::from_utf8_lossy(&o.stderr)
        );
        out
    }

    #[test]
    fn probes_of_programs_built_here() {
        let dir = tempfile::tempdir().unwrap();
        for (name, flags) in [
            ("pie", &["-fPIE", "-pie"][..]),
            ("nopie", &["-fno-pie", "-no-pie"][..]),
            ("lib.so", &["-fPIC", "-shared"][..]),
        ] {
            let path = compile(dir.path(), name, flags);
            let elf = Elf::open(&path).unwrap();
            let sdt = elf.sdt().unwrap();
            assert_eq!((sdt.malformed, sdt.unplaced), (0, 0), "{name}");
            assert!(sdt.base.is_some());
            assert_eq!(notes_of(&sdt), readelf(&path), "{name}");
            check_placed(&elf, &sdt);
            let by = |n: &str| {
                let p: Vec<&Probe> = sdt.probes.iter().filter(|p| p.name == n).collect();
                assert_eq!(p.len(), 1, "{name}: {n}");
                assert_eq!(p[0].provider, "t");
                p[0]
            };
            let sizes = |n: &str| -> Vec<(u8, bool)> {
                by(n).args.iter().map(|a| (a.size, a.signed)).collect()
            };
            assert_eq!(by("zero").args, vec![]);
            assert_eq!(by("zero").args_spec, "");
            assert_eq!(sizes("one"), [(8, true)]);
            assert_eq!(sizes("two"), [(8, true), (4, true)]);
            assert_eq!(by("three").args[2].loc, Loc::Constant(5));
            assert_eq!(
                sizes("six"),
                [
                    (8, true),
                    (4, true),
                    (2, true),
                    (1, true),
                    (8, true),
                    (8, true)
                ]
            );
            for p in &sdt.probes {
                for a in &p.args {
                    assert!(!matches!(a.loc, Loc::Unsupported(_)), "{name}: {a:?}");
                }
                assert_eq!(p.args, parse_args(&p.args_spec));
            }
            // `sink`, a global: rip-relative in an executable, through the GOT in a library.
            let sink = &by("six").args[5].loc;
            if name == "lib.so" {
                assert!(matches!(sink, Loc::Memory { .. }), "{sink:?}");
            } else {
                assert!(
                    matches!(sink, Loc::RipRelative { symbol, offset: 0 } if symbol == "sink"),
                    "{sink:?}"
                );
            }
            for p in &sdt.probes {
                assert_eq!(p.semaphore != 0, p.name == "guarded", "{name}: {p:?}");
            }
            if name == "nopie" {
                // Fixed-address: the file offsets are not the addresses.
                assert!(sdt.probes.iter().all(|p| p.file_offset < p.address));
            }
        }
    }

    /// prelink moves a file's sections without rewriting the notes: the pc and the
    /// semaphore move by `.stapsdt.base`'s move.
    #[test]
    fn prelinked_notes_are_moved_by_the_base() {
        let dir = tempfile::tempdir().unwrap();
        let path = compile(dir.path(), "pie", &["-fPIE", "-pie"]);
        let want = Elf::open(&path).unwrap().sdt().unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        let (off, size) = {
            let f = object::File::parse(&bytes[..]).unwrap();
            f.section_by_name(NOTE_SECTION)
                .unwrap()
                .file_range()
                .unwrap()
        };
        // Every note's three addresses 0x10000 higher than where the file has them.
        let mut at = off as usize;
        let end = (off + size) as usize;
        while at < end {
            let u = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap()) as usize;
            let (namesz, descsz) = (u(at), u(at + 4));
            let desc = at + 12 + namesz.div_ceil(4) * 4;
            for i in 0..3 {
                let a = desc + 8 * i;
                let v = u64::from_le_bytes(bytes[a..a + 8].try_into().unwrap());
                if v != 0 {
                    bytes[a..a + 8].copy_from_slice(&(v + 0x10000).to_le_bytes());
                }
            }
            at = desc + descsz.div_ceil(4) * 4;
        }
        let moved = Elf::from_bytes("prelinked", &bytes).unwrap().sdt().unwrap();
        assert_eq!(moved.probes.len(), want.probes.len());
        for (m, w) in moved.probes.iter().zip(&want.probes) {
            assert_eq!(m.note.pc, w.note.pc + 0x10000);
            assert_eq!(
                (m.address, m.file_offset, m.semaphore, m.semaphore_offset),
                (w.address, w.file_offset, w.semaphore, w.semaphore_offset)
            );
        }
    }

    #[test]
    fn libstdcxx_has_throw_rethrow_catch() {
        let elf = Elf::open(Path::new(LIBSTDCXX)).unwrap();
        let sdt = elf.sdt().unwrap();
        assert_eq!((sdt.malformed, sdt.unplaced), (0, 0));
        let mut names: Vec<(&str, &str)> = sdt
            .probes
            .iter()
            .map(|p| (p.provider.as_str(), p.name.as_str()))
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                ("libstdcxx", "catch"),
                ("libstdcxx", "rethrow"),
                ("libstdcxx", "throw")
            ]
        );
        assert_eq!(notes_of(&sdt), readelf(Path::new(LIBSTDCXX)));
        check_placed(&elf, &sdt);
        let throw = sdt.probes.iter().find(|p| p.name == "throw").unwrap();
        // __cxa_throw(obj, tinfo, dest): the object and its type_info.
        assert_eq!(
            throw.args.iter().map(|a| &a.loc).collect::<Vec<_>>(),
            [&Loc::Register(Reg::Rdi), &Loc::Register(Reg::Rsi)]
        );
        assert!(sdt.probes.iter().all(|p| p.semaphore == 0));
    }

    /// Debian's PostgreSQL 15 (scripts/setup test installs it): 71 notes, every argument
    /// form read.
    #[test]
    fn postgres_probes_are_all_read() {
        let path = Path::new("/usr/lib/postgresql/15/bin/postgres");
        if !path.exists() {
            assert_ne!(
                std::env::var("CI").as_deref(),
                Ok("true"),
                "{} is missing and CI=true (scripts/setup test)",
                path.display()
            );
            eprintln!(
                "\n*** SKIPPED: {} is missing (scripts/setup test) ***\n",
                path.display()
            );
            return;
        }
        let elf = Elf::open(path).unwrap();
        let sdt = elf.sdt().unwrap();
        assert_eq!((sdt.malformed, sdt.unplaced), (0, 0));
        assert_eq!(notes_of(&sdt), readelf(path));
        assert!(sdt.probes.len() >= 70, "{}", sdt.probes.len());
        check_placed(&elf, &sdt);
        for p in &sdt.probes {
            assert_eq!(p.provider, "postgresql");
            assert!(p.semaphore != 0, "{p:?}");
            for a in &p.args {
                assert!(!matches!(a.loc, Loc::Unsupported(_)), "{}: {a:?}", p.name);
            }
        }
        let start = sdt
            .probes
            .iter()
            .find(|p| p.name == "query__start")
            .unwrap();
        assert_eq!(start.args.len(), 1);
    }

    #[test]
    fn files_without_notes() {
        let libc = Elf::open(Path::new("/lib/x86_64-linux-gnu/libc.so.6")).unwrap();
        assert_eq!(libc.sdt().unwrap().probes, vec![]);
        let garbage = Elf::from_bytes("garbage", b"\x7fELF not really").unwrap();
        assert!(garbage.sdt().is_err());
    }
}
