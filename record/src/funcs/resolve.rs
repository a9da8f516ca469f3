//! Which functions `--func SPEC[:MIN_US]` names: specs resolved against the ELF symbol
//! tables (`.symtab`, then `.dynsym`) of a target's binaries. Never DWARF: a stripped
//! service with only `.dynsym` still resolves its exported functions.
//!
//! ```text
//! shop::Catalog::slow_lookup            a demangled C++ name, without parameters
//! shop::Catalog::lookup(unsigned long)  ... or with them, to pick one overload
//! shop::*::get*   *_lookup   'm?lloc'   a glob: `*` is any text, `::` included; `?` one byte
//! _ZN4shop7Catalog6lookupEm             a mangled name (or any raw symbol name: `malloc`)
//! libc.so.6:malloc  /opt/x/libfoo.so:foo::bar   LIB:SYMBOL, LIB a path or a file name
//! ./server:0x4011d6                     BINARY:0xADDR, an ELF virtual address in it: a
//!                                       function's entry (inside a known function is refused)
//! shop::Catalog::slow_lookup:500        any of these + `:MIN_US`: calls ≥ 500 µs are kept
//! ```
//!
//! ```ignore
//! let spec: FuncSpec = "libc.so.6:malloc:50".parse()?;
//! let bins = Binaries::of_pid(1234)?;
//! for m in resolve_all(&bins, &[spec])? {
//!     attach_uprobe(&m.path, m.file_offset); // and the uretprobe; keep calls ≥ m.min_ns
//! }
//! ```
//!
//! Matching rules, and why:
//! - Names are compared without whitespace (`operator new(unsigned long)` ==
//!   `operator new(unsignedlong)`), against the demangled name without return type, without
//!   parameters and without the member function's cv/ref qualifiers
//!   (`shop::Catalog::slow_lookup(std::string const&) const` is `shop::Catalog::slow_lookup`);
//!   a name with `(` is compared with the parameters (and qualifiers) instead, with or
//!   without the return type a template function's name starts with (`void foo<int>(int)`).
//!   Names are demangled by `ebtrace_demangle`, the demangler ebsym prints with, so a name
//!   copied from a report is a name `--func` takes.
//! - A name is one function: every symbol it matches must be the same source function in one
//!   binary (same signature), else it is refused as ambiguous with the list (overloads, or the
//!   same function in two files: use the signature, the mangled name or `LIB:SYMBOL`).
//!   The compiler's entry-point copies of that one function are all attached: GCC clones
//!   (`.constprop.N`, `.isra.N`, `.lto_priv.N`: a caller may call the clone instead of the
//!   original, so leaving them out would miss calls; `.isra` clones take other arguments, so
//!   `--args` of a clone is not the source's) and constructor/destructor variants (C1/C2,
//!   D0/D1/D2; a deleting destructor calls the complete one, so a `delete` shows as two nested
//!   calls).
//! - Fragments are never attached by name or glob: `.cold` (a function's unlikely code, no
//!   entry) and `.part.N` (its body after a partially inlined head, so only some calls) would
//!   give wrong counts and durations. Named exactly by their raw symbol
//!   (`_ZN...Em.part.0`), they are attached as asked. A name that only matches fragments is
//!   refused with that explanation.
//! - GNU indirect functions (`memcpy`, `strlen` in glibc) are refused: the symbol is the
//!   resolver, which runs once at load; the code that runs is an implementation such as
//!   `__memcpy_avx_unaligned_erms`, which can be asked for.
//! - Aliases (several symbols at one address, `malloc` and `__libc_malloc`) count once.
//! - A glob is every match, but more than [`GLOB_LIMIT`] functions is refused (each is a
//!   uprobe pair).
//!
//! The ELF files are read with [`crate::elf::Elf`]: the symbol type (indirect functions),
//! binding (which alias to show), the executable flag of segments (for `BINARY:0xADDR`) and
//! `DT_NEEDED` (for a command not started yet).
use anyhow::{bail, Context, Result};
use crate::elf::{Elf, Segment};
use object::elf;
use std::cell::OnceCell;
use std::collections::{BTreeMap, HashSet};
use std::ffi::OsString;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// The most functions a glob may attach to.
pub const GLOB_LIMIT: usize = 1000;

/// One `--func` argument, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuncSpec {
    /// As the user wrote it, for messages.
    pub text: String,
    /// `LIB` of `LIB:SYMBOL` or `BINARY:0xADDR`.
    pub lib: Option<String>,
    pub what: What,
    /// The `:MIN_US` suffix.
    pub min_us: Option<u64>,
}

/// What a spec names inside the binaries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum What {
    /// A demangled name (with or without parameters), a mangled name or a C symbol.
    Name(String),
    /// A name with `*` or `?` (`\*`, `\?` for the characters themselves).
    Glob(String),
    /// An ELF virtual address in the binary `lib`.
    Address(u64),
}

impl FromStr for FuncSpec {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> Result<Self> {
        let s = text.trim();
        if s.is_empty() {
            bail!("empty function spec");
        }
        let (s, min_us) = split_min_us(s)?;
        if min_us.is_some_and(|us| us.checked_mul(1000).is_none()) {
            bail!("'{text}': MIN_US is too large");
        }
        let (lib, rest) = split_lib(s);
        if lib == Some("") {
            bail!("'{text}': nothing before ':' (LIB:SYMBOL or BINARY:0xADDR)");
        }
        if rest.is_empty() {
            bail!("'{text}': no function after '{}:'", lib.unwrap_or(""));
        }
        let hex = rest.strip_prefix("0x").or_else(|| rest.strip_prefix("0X"));
        let what = if let Some(hex) = hex {
            let a = u64::from_str_radix(hex, 16)
                .with_context(|| format!("'{text}': bad address '{rest}'"))?;
            if lib.is_none() {
                bail!("'{text}': an address needs its binary: BINARY:0xADDR");
            }
            What::Address(a)
        } else if is_glob(rest) {
            What::Glob(rest.to_string())
        } else {
            What::Name(rest.to_string())
        };
        Ok(FuncSpec {
            text: text.to_string(),
            lib: lib.map(str::to_string),
            what,
            min_us,
        })
    }
}

impl fmt::Display for FuncSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A trailing `:digits` is MIN_US unless the colon is half of a `::`.
fn split_min_us(s: &str) -> Result<(&str, Option<u64>)> {
    if let Some(i) = s.rfind(':') {
        let (head, digits) = (&s[..i], &s[i + 1..]);
        if !digits.is_empty()
            && digits.bytes().all(|b| b.is_ascii_digit())
            && !head.is_empty()
            && !head.ends_with(':')
        {
            let us = digits
                .parse()
                .with_context(|| format!("'{s}': MIN_US is too large"))?;
            return Ok((head, Some(us)));
        }
    }
    Ok((s, None))
}

/// `LIB:REST` at the first single `:` outside brackets (`::` separates C++ scopes, and
/// `[abi:cxx11]` is part of a name).
fn split_lib(s: &str) -> (Option<&str>, &str) {
    let b = s.as_bytes();
    let mut depth = 0i32;
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'(' | b'[' => depth += 1,
            b')' | b']' => depth -= 1,
            b':' if depth == 0
                && (i == 0 || b[i - 1] != b':')
                && b.get(i + 1).is_none_or(|&n| n != b':') =>
            {
                return (Some(&s[..i]), &s[i + 1..]);
            }
            _ => {}
        }
    }
    (None, s)
}

fn is_glob(s: &str) -> bool {
    let mut esc = false;
    for c in s.chars() {
        match c {
            _ if esc => esc = false,
            '\\' => esc = true,
            '*' | '?' => return true,
            _ => {}
        }
    }
    false
}

/// Names compared without whitespace.
fn norm(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Tok {
    Lit(u8),
    One,
    Star,
}

/// A glob pattern, whitespace removed: `*` any bytes, `?` one byte, `\x` the byte x.
#[derive(Debug)]
struct Glob(Vec<Tok>);

impl Glob {
    fn new(pattern: &str) -> Self {
        let mut toks = Vec::new();
        let mut it = norm(pattern).into_bytes().into_iter();
        while let Some(c) = it.next() {
            toks.push(match c {
                b'\\' => Tok::Lit(it.next().unwrap_or(b'\\')),
                b'*' => Tok::Star,
                b'?' => Tok::One,
                c => Tok::Lit(c),
            });
        }
        toks.dedup_by(|a, b| *a == Tok::Star && *b == Tok::Star);
        Glob(toks)
    }

    /// Iterative matching with one backtrack point: linear for the usual patterns.
    fn matches(&self, s: &[u8]) -> bool {
        let p = &self.0;
        let (mut pi, mut si) = (0, 0);
        let mut back: Option<(usize, usize)> = None;
        while si < s.len() {
            match p.get(pi) {
                Some(Tok::Star) => {
                    back = Some((pi, si));
                    pi += 1;
                }
                Some(Tok::One) => {
                    pi += 1;
                    si += 1;
                }
                Some(Tok::Lit(c)) if *c == s[si] => {
                    pi += 1;
                    si += 1;
                }
                _ => match back {
                    Some((bp, bs)) => {
                        pi = bp + 1;
                        si = bs + 1;
                        back = Some((bp, bs + 1));
                    }
                    None => return false,
                },
            }
        }
        p[pi..].iter().all(|t| *t == Tok::Star)
    }

    /// The literal text, for suggesting names close to it.
    fn literal(&self) -> String {
        self.0
            .iter()
            .filter_map(|t| match t {
                Tok::Lit(c) => Some(*c as char),
                _ => None,
            })
            .collect()
    }
}

/// A function symbol, with the names it is matched by.
#[derive(Debug)]
struct Func {
    /// The symbol as in the table (ELF version suffix removed).
    raw: String,
    /// Demangled, without return type, with parameters, with the clone suffix: for people.
    display: String,
    /// Without parameters, qualifiers, clone suffix: `shop::Catalog::lookup` (for people).
    base: String,
    /// `norm(base)` and `norm(signature without clone suffix)`: for matching.
    base_norm: String,
    sig_norm: String,
    /// `norm` of the whole demangled name without clone suffix, return type included (a
    /// template function's `void foo<int>(int)`), as ebsym prints a function.
    full_norm: String,
    /// `norm` of the whole symbol demangled, clone suffixes included (`foo(int) [clone
    /// .constprop.0]`), as ebsym prints a clone named from the symbol table; None without a
    /// clone suffix (then it is `full_norm`).
    clone_norm: Option<String>,
    /// `.constprop.0`, `.cold`, ... (GCC clone suffixes), if any.
    clone: Option<String>,
    addr: u64,
    size: u64,
    /// 0 global, 1 weak, 2 local: which alias to show.
    bind_rank: u8,
    ifunc: bool,
}

impl Func {
    fn new(raw: &str, addr: u64, size: u64, bind_rank: u8, ifunc: bool) -> Self {
        let (stem, clone) = match raw.find('.') {
            Some(i) if i > 0 => (&raw[..i], Some(raw[i..].to_string())),
            _ => (raw, None),
        };
        let (full, sig, base) = demangle(stem)
            .unwrap_or_else(|| (stem.to_string(), stem.to_string(), stem.to_string()));
        let display = match &clone {
            Some(c) => format!("{sig} [clone {c}]"),
            None => sig.clone(),
        };
        let clone_norm = clone.as_ref().and_then(|_| {
            ebtrace_demangle::try_demangle(raw).map(|d| norm(&d))
        });
        Func {
            raw: raw.to_string(),
            display,
            base_norm: norm(&base),
            base,
            sig_norm: norm(&sig),
            full_norm: norm(&full),
            clone_norm,
            clone,
            addr,
            size,
            bind_rank,
            ifunc,
        }
    }

    /// Code that is not a function entry: `.cold` or `.part.N` pieces.
    fn fragment(&self) -> bool {
        self.clone
            .as_deref()
            .is_some_and(|c| c.split('.').any(|p| p == "cold" || p == "part"))
    }
}

/// The names of a mangled symbol, as ebtrace's one demangler (`ebtrace_demangle`, the one
/// ebsym prints with) spells it: (whole, as printed; without return type; base name without
/// parameters and qualifiers). A template function's demangled name starts with its return
/// type (`void foo<int>(int)`): ebsym prints that, and `--func` takes it as well as `foo<int>(int)`.
fn demangle(stem: &str) -> Option<(String, String, String)> {
    if !stem.starts_with("_Z") {
        return None;
    }
    let full = ebtrace_demangle::try_demangle(stem)?;
    let (sig, base) = split_signature(&full);
    Some((full.clone(), sig.to_string(), base.to_string()))
}

/// A demangled function name split into (without return type, base name): `void
/// ns::f<int>(int) const` is (`ns::f<int>(int) const`, `ns::f<int>`). A name without a
/// parameter list (a data symbol, a special name) is its own base.
fn split_signature(full: &str) -> (&str, &str) {
    // The member function's qualifiers come after the parameters.
    let mut end = full.len();
    'strip: loop {
        for q in [" const", " volatile", " &&", " &", " noexcept"] {
            if full[..end].ends_with(q) {
                end -= q.len();
                continue 'strip;
            }
        }
        break;
    }
    let b = full.as_bytes();
    if end == 0 || b[end - 1] != b')' {
        return (full, full);
    }
    // The parameter list: the `(` matching the last `)`.
    let mut depth = 0i32;
    let mut open = None;
    for i in (0..end).rev() {
        match b[i] {
            b')' => depth += 1,
            b'(' => {
                depth -= 1;
                if depth == 0 {
                    open = Some(i);
                    break;
                }
            }
            _ => {}
        }
    }
    let Some(open) = open else {
        return (full, full);
    };
    let name = &full[..open];
    let start = return_type_end(name);
    (&full[start..], &full[start..open])
}

/// Where the function name starts after a return type in `name` (the text before the
/// parameter list): past the last space outside brackets that comes before an `operator`
/// keyword (`operator new`, `operator<`, `operator unsigned long` hold spaces and brackets of
/// their own), 0 when there is no return type.
fn return_type_end(name: &str) -> usize {
    let b = name.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut depth = 0i32;
    let mut after_space = 0;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'<' | b'(' | b'[' | b'{' => depth += 1,
            b'>' | b')' | b']' | b'}' => depth -= 1,
            b' ' if depth == 0 => after_space = i + 1,
            b'o' if depth == 0
                && name[i..].starts_with("operator")
                && (i == 0 || !ident(b[i - 1]))
                && b.get(i + 8).is_none_or(|&c| !ident(c)) =>
            {
                break;
            }
            _ => {}
        }
        i += 1;
    }
    after_space
}
/// The function symbols and load segments of one ELF file.
#[derive(Debug)]
struct Table {
    /// Sorted by address.
    funcs: Vec<Func>,
    segments: Vec<Segment>,
}

impl Table {
    fn read(path: &Path) -> Result<Table, String> {
        let elf = Elf::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let syms = elf
            .text_symbols()
            .map_err(|e| format!("{}: not an ELF file ({e})", path.display()))?;
        let mut seen: BTreeMap<(u64, &str), Func> = BTreeMap::new();
        for s in syms {
            if s.name.is_empty() {
                continue;
            }
            match seen.get_mut(&(s.address, s.name)) {
                Some(f) => {
                    // The same symbol in both tables: keep the better facts.
                    f.bind_rank = f.bind_rank.min(s.bind_rank);
                    f.size = f.size.max(s.size);
                }
                None => {
                    seen.insert(
                        (s.address, s.name),
                        Func::new(s.name, s.address, s.size, s.bind_rank, s.ifunc),
                    );
                }
            }
        }
        Ok(Table {
            funcs: seen.into_values().collect(),
            segments: elf.load_segments(),
        })
    }

    /// The segment holding `vaddr`'s bytes in the file.
    fn segment(&self, vaddr: u64) -> Option<&Segment> {
        self.segments.iter().find(|s| s.holds(vaddr))
    }

    fn file_offset(&self, vaddr: u64) -> Option<u64> {
        Elf::file_offset(&self.segments, vaddr)
    }
}

/// One file the target runs code from.
#[derive(Debug)]
struct Binary {
    /// Where ebrec opens it (`/proc/PID/root/...` for a process).
    path: PathBuf,
    /// The path as the target sees it.
    name: String,
    table: OnceCell<Result<Table, String>>,
}

impl Binary {
    fn new(path: PathBuf, name: String) -> Self {
        Binary {
            path,
            name,
            table: OnceCell::new(),
        }
    }

    fn table(&self) -> Result<&Table, &str> {
        self.table
            .get_or_init(|| Table::read(&self.path))
            .as_ref()
            .map_err(|e| e.as_str())
    }

    fn file_name(&self) -> &str {
        self.name.rsplit('/').next().unwrap_or(&self.name)
    }
}

/// The binaries of a target: a running process's mapped executable files, or a command's
/// executable and the libraries it needs. Symbol tables are read when first searched.
#[derive(Debug)]
pub struct Binaries {
    /// "process 1234" or "./server and its libraries", for messages.
    target: String,
    pid: Option<u32>,
    bins: Vec<Binary>,
}

/// A function a spec resolved to: where to put the uprobe and uretprobe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuncMatch {
    /// The spec, as written.
    pub spec: String,
    /// The file to attach to, openable by ebrec (`/proc/PID/root/...` for a process).
    pub path: PathBuf,
    /// The file as the target sees it.
    pub binary: String,
    /// The symbol (mangled); `0x...` for a `BINARY:0xADDR` spec where no symbol starts.
    pub symbol: String,
    /// Demangled, with parameters, without return type.
    pub demangled: String,
    /// ELF virtual address.
    pub vaddr: u64,
    /// File offset of `vaddr` (through the PT_LOAD segments): what a uprobe takes.
    pub file_offset: u64,
    /// Symbol size in bytes (0 if unknown).
    pub size: u64,
    /// Calls shorter than this are not kept (`:MIN_US` × 1000, else 0).
    pub min_ns: u64,
    /// The function's `.cold` fragment, if the symbol table has one: (vaddr, file offset,
    /// size). Its code is the function's too: exits may be there.
    pub cold: Option<(u64, u64, u64)>,
}

impl fmt::Display for FuncMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} in {} at {:#x} (file offset {:#x}, {} bytes)",
            self.demangled, self.binary, self.vaddr, self.file_offset, self.size
        )
    }
}

impl Binaries {
    /// The executable files mapped by process `pid`, read through `/proc/PID/root` (so
    /// containers work).
    pub fn of_pid(pid: u32) -> Result<Binaries> {
        let maps = match crate::procfs::maps(pid) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                bail!("no process with pid {pid}")
            }
            Err(e) => return Err(e).with_context(|| format!("cannot read /proc/{pid}/maps")),
        };
        let mut seen = HashSet::new();
        let mut bins = Vec::new();
        for m in &maps {
            if m.perms & 4 == 0 || !m.path.starts_with(b"/") || m.path.ends_with(b" (deleted)") {
                continue;
            }
            // One file under two names (a merged /usr) is one binary.
            let key = if m.inode != 0 {
                (m.dev, m.inode, Vec::new())
            } else {
                (0, 0, m.path.clone())
            };
            if !seen.insert(key) {
                continue;
            }
            let name = String::from_utf8_lossy(&m.path).into_owned();
            if bins.iter().any(|b: &Binary| b.name == name) {
                continue;
            }
            bins.push(Binary::new(crate::procfs::path_in(pid, &m.path), name));
        }
        if bins.is_empty() {
            bail!("process {pid} maps no executable file");
        }
        Ok(Binaries {
            target: format!("process {pid}"),
            pid: Some(pid),
            bins,
        })
    }

    /// A command not started yet: its executable, the interpreter and the libraries it needs
    /// (`DT_NEEDED`, recursively, searched like ld.so: RPATH, LD_LIBRARY_PATH, RUNPATH,
    /// /etc/ld.so.conf, the default directories). Libraries it would `dlopen` are not known.
    pub fn of_command(exe: &Path) -> Result<Binaries> {
        let deps = read_deps(exe).with_context(|| format!("cannot read {}", exe.display()))?;
        let mut bins = vec![Binary::new(exe.to_path_buf(), exe.display().to_string())];
        let mut seen: HashSet<PathBuf> = std::fs::canonicalize(exe).into_iter().collect();
        let search = SearchPath::new(deps.machine);
        let mut queue = vec![(exe.to_path_buf(), deps)];
        let mut i = 0;
        while i < queue.len() {
            let (obj, d) = &queue[i];
            let mut found = Vec::new();
            if let Some(interp) = &d.interp {
                found.push(PathBuf::from(interp));
            }
            for n in &d.needed {
                if let Some(p) = search.find(n, obj, d, &queue[0].1) {
                    found.push(p);
                }
            }
            for p in found {
                let canon = std::fs::canonicalize(&p).unwrap_or_else(|_| p.clone());
                if !seen.insert(canon) {
                    continue;
                }
                if let Ok(dd) = read_deps(&p) {
                    bins.push(Binary::new(p.clone(), p.display().to_string()));
                    queue.push((p, dd));
                }
            }
            i += 1;
        }
        Ok(Binaries {
            target: format!("{} and its libraries", exe.display()),
            pid: None,
            bins,
        })
    }

    /// The binaries a spec's LIB names (all of them without LIB).
    fn select<'a>(
        &'a self,
        lib: Option<&str>,
        extra: &'a mut Option<Binary>,
    ) -> Result<Vec<&'a Binary>> {
        let Some(lib) = lib else {
            return Ok(self.bins.iter().collect());
        };
        let canon = |p: &Path| std::fs::canonicalize(p).ok();
        let lib_path = Path::new(lib);
        let openable = match self.pid {
            Some(pid) if lib.starts_with('/') => crate::procfs::path_in(pid, lib.as_bytes()),
            _ => lib_path.to_path_buf(),
        };
        let lib_canon = if lib.contains('/') {
            canon(&openable)
        } else {
            None
        };
        let hits: Vec<&Binary> = self
            .bins
            .iter()
            .filter(|b| {
                if lib.contains('/') {
                    b.name == lib || (lib_canon.is_some() && canon(&b.path) == lib_canon)
                } else {
                    let f = b.file_name();
                    f == lib || f.strip_prefix(lib).is_some_and(|r| r.starts_with('.'))
                }
            })
            .collect();
        if !hits.is_empty() {
            return Ok(hits);
        }
        if lib.contains('/') && openable.is_file() {
            // Not mapped (yet): a library the target may dlopen later can still be probed.
            return Ok(vec![extra.insert(Binary::new(openable, lib.to_string()))]);
        }
        let mut names: Vec<&str> = self.bins.iter().map(|b| b.file_name()).collect();
        names.dedup();
        bail!(
            "no file matching '{lib}' in {} (its files: {})",
            self.target,
            names.join(", ")
        )
    }

    /// The functions `spec` names, sorted by binary and address, or a one-line error saying
    /// why none (unknown name with the closest ones, ambiguous name with the candidates, a
    /// too broad glob, an address outside code).
    pub fn resolve(&self, spec: &FuncSpec) -> Result<Vec<FuncMatch>> {
        let mut extra = None;
        let bins = self.select(spec.lib.as_deref(), &mut extra)?;
        let min_ns = spec.min_us.unwrap_or(0).saturating_mul(1000);
        let mut tables = Vec::new();
        let mut unreadable = Vec::new();
        for b in &bins {
            match b.table() {
                Ok(t) => tables.push((*b, t)),
                Err(e) => unreadable.push(e.to_string()),
            }
        }
        if spec.lib.is_some() && !unreadable.is_empty() && tables.is_empty() {
            bail!("{}", unreadable.join("; "));
        }
        let place = match &spec.lib {
            Some(l) => format!("{l} of {}", self.target),
            None => self.target.clone(),
        };
        let out = |b: &Binary, t: &Table, f: &Func| FuncMatch {
            spec: spec.text.clone(),
            path: b.path.clone(),
            binary: b.name.clone(),
            symbol: f.raw.clone(),
            demangled: f.display.clone(),
            vaddr: f.addr,
            file_offset: t.file_offset(f.addr).unwrap_or(f.addr),
            size: f.size,
            min_ns,
            cold: {
                let name = format!("{}.cold", f.raw);
                t.funcs
                    .iter()
                    .find(|c| c.raw == name)
                    .and_then(|c| t.file_offset(c.addr).map(|off| (c.addr, off, c.size)))
            },
        };
        let unknown = |query: &str, by_sig: bool| {
            let mut msg = format!(
                "no function matches '{}' in {place} (closest: {})",
                spec.text,
                closest(query, by_sig, &tables, 3).join(", ")
            );
            if !unreadable.is_empty() {
                msg += &format!("; could not read {}", unreadable.join("; "));
            }
            anyhow::anyhow!(msg)
        };

        let (hits, explicit): (Vec<(&Binary, &Table, &Func)>, bool) = match &spec.what {
            What::Address(addr) => return self.resolve_address(spec, &tables, *addr, min_ns),
            What::Name(name) => {
                let mut hits = Vec::new();
                // A raw symbol named exactly: `_ZN...`, or `foo.part.0`.
                if name.starts_with("_Z") || name.contains('.') {
                    for &(b, t) in &tables {
                        hits.extend(t.funcs.iter().filter(|f| f.raw == *name).map(|f| (b, t, f)));
                    }
                }
                let key = norm(name);
                if hits.is_empty() && key.contains("[clone") {
                    // A clone as ebsym names it from the symbol table: that symbol.
                    for &(b, t) in &tables {
                        hits.extend(
                            t.funcs
                                .iter()
                                .filter(|f| f.clone_norm.as_ref() == Some(&key))
                                .map(|f| (b, t, f)),
                        );
                    }
                }
                if !hits.is_empty() {
                    (hits, true)
                } else {
                    let by_sig = key.contains('(');
                    for &(b, t) in &tables {
                        hits.extend(
                            t.funcs
                                .iter()
                                .filter(|f| {
                                    // With `(`: the signature, with or without the return
                                    // type ebsym prints for a template function; or a base
                                    // name that holds brackets itself (a lambda's
                                    // `{lambda()#1}::operator()`).
                                    if by_sig {
                                        f.sig_norm == key
                                            || f.full_norm == key
                                            || f.base_norm == key
                                    } else {
                                        f.base_norm == key
                                    }
                                })
                                .map(|f| (b, t, f)),
                        );
                    }
                    if hits.is_empty() {
                        // An unknown mangled name: suggest by what it means.
                        let query =
                            demangle(name).map(|(_, sig, base)| if by_sig { sig } else { base });
                        return Err(unknown(query.as_deref().unwrap_or(name), by_sig));
                    }
                    if hits.iter().all(|h| h.2.fragment()) {
                        let frags: Vec<&str> = hits.iter().map(|h| h.2.raw.as_str()).collect();
                        bail!(
                            "'{}' is only in fragments ({}): the function was inlined into its callers and these pieces are not its entry; name one by its symbol to probe it anyway",
                            spec.text,
                            frags.join(", ")
                        );
                    }
                    hits.retain(|h| !h.2.fragment());
                    (hits, false)
                }
            }
            What::Glob(g) => {
                let glob = Glob::new(g);
                let by_raw = g.starts_with("_Z");
                let by_sig = g.contains('(');
                let mut hits = Vec::new();
                for &(b, t) in &tables {
                    hits.extend(
                        t.funcs
                            .iter()
                            .filter(|f| !f.fragment() && !f.ifunc)
                            .filter(|f| {
                                if by_raw {
                                    glob.matches(f.raw.as_bytes())
                                } else if by_sig {
                                    glob.matches(f.sig_norm.as_bytes())
                                        || glob.matches(f.full_norm.as_bytes())
                                } else {
                                    glob.matches(f.base_norm.as_bytes())
                                }
                            })
                            .map(|f| (b, t, f)),
                    );
                }
                if hits.is_empty() {
                    return Err(unknown(&glob.literal(), by_sig));
                }
                let mut all = merge_aliases(hits)
                    .into_iter()
                    .map(|(b, t, f)| out(b, t, f))
                    .collect::<Vec<_>>();
                if all.len() > GLOB_LIMIT {
                    bail!(
                        "'{}' matches {} functions in {place}, more than {GLOB_LIMIT}: narrow it",
                        spec.text,
                        all.len()
                    );
                }
                sort_matches(&mut all);
                return Ok(all);
            }
        };

        if let Some(&(b, _, f)) = hits.iter().find(|h| h.2.ifunc) {
            bail!(
                "'{}' is an indirect function (GNU ifunc) in {}: its symbol is the resolver that picks an implementation at load time; probe the implementation instead (`ebrec probes` with '{}:*{}*' lists them)",
                spec.text,
                b.file_name(),
                b.file_name(),
                f.base.trim_start_matches('_')
            );
        }
        let hits = merge_aliases(hits);
        // One function: one binary, one signature (raw name when named exactly).
        let mut groups: Vec<(&str, &str, &Func)> = Vec::new();
        for &(b, _, f) in &hits {
            let key = if explicit {
                f.raw.as_str()
            } else {
                f.sig_norm.as_str()
            };
            if !groups.iter().any(|g| g.0 == b.name && g.1 == key) {
                groups.push((b.name.as_str(), key, f));
            }
        }
        if groups.len() > 1 {
            let files: HashSet<&str> = groups.iter().map(|g| g.0).collect();
            let mut list: Vec<String> = groups
                .iter()
                .take(8)
                .map(|(bin, _, f)| {
                    let file = bin.rsplit('/').next().unwrap_or(bin);
                    if files.len() > 1 || explicit {
                        format!("{} [{}] in {file}", f.display, f.raw)
                    } else {
                        format!("{} [{}]", f.display, f.raw)
                    }
                })
                .collect();
            if groups.len() > 8 {
                list.push(format!("and {} more", groups.len() - 8));
            }
            bail!(
                "'{}' is ambiguous: {} functions ({}); use the signature, the mangled name or LIB:SYMBOL",
                spec.text,
                groups.len(),
                list.join("; ")
            );
        }
        let mut all: Vec<FuncMatch> = hits.into_iter().map(|(b, t, f)| out(b, t, f)).collect();
        sort_matches(&mut all);
        Ok(all)
    }

    fn resolve_address(
        &self,
        spec: &FuncSpec,
        tables: &[(&Binary, &Table)],
        addr: u64,
        min_ns: u64,
    ) -> Result<Vec<FuncMatch>> {
        let lib = spec.lib.as_deref().unwrap_or("");
        let [(b, t)] = tables else {
            let names: Vec<&str> = tables.iter().map(|(b, _)| b.name.as_str()).collect();
            bail!(
                "'{}': {} files match '{lib}' ({}): give its path",
                spec.text,
                names.len(),
                names.join(", ")
            );
        };
        let Some(&Segment {
            vaddr: va,
            offset: off,
            executable: exec,
            ..
        }) = t.segment(addr)
        else {
            bail!(
                "'{}': {addr:#x} is in no loaded segment of {}",
                spec.text,
                b.name
            );
        };
        if !exec {
            bail!(
                "'{}': {addr:#x} is not code (segment not executable) in {}",
                spec.text,
                b.name
            );
        }
        // The function at the address, if the symbol table knows it. An address inside a
        // known function is refused: the return probe would take whatever is at [sp] there
        // for the return address and overwrite it.
        let i = t.funcs.partition_point(|f| f.addr <= addr);
        let holder = t.funcs[..i]
            .iter()
            .rev()
            .filter(|f| f.addr == addr || addr - f.addr < f.size)
            .min_by_key(|f| (addr - f.addr, f.bind_rank, f.raw.len()));
        let (symbol, demangled, size) = match holder {
            Some(f) if f.addr == addr => (f.raw.clone(), f.display.clone(), f.size),
            Some(f) => bail!(
                "'{}': {addr:#x} is inside {} (+{:#x}), not at a function's entry: use {:#x}",
                spec.text,
                f.display,
                addr - f.addr,
                f.addr
            ),
            // No symbol: a stripped binary, the user knows where the function starts.
            None => (format!("{addr:#x}"), format!("{addr:#x}"), 0),
        };
        Ok(vec![FuncMatch {
            spec: spec.text.clone(),
            path: b.path.clone(),
            binary: b.name.clone(),
            symbol,
            demangled,
            vaddr: addr,
            file_offset: addr - va + off,
            size,
            min_ns,
            cold: None,
        }])
    }
}

/// Several symbols at one address of one file are one function: keep the global, shortest
/// name.
fn merge_aliases<'a>(
    mut hits: Vec<(&'a Binary, &'a Table, &'a Func)>,
) -> Vec<(&'a Binary, &'a Table, &'a Func)> {
    hits.sort_by(|x, y| {
        (
            x.0.name.as_str(),
            x.2.addr,
            x.2.bind_rank,
            x.2.raw.len(),
            &x.2.raw,
        )
            .cmp(&(
                y.0.name.as_str(),
                y.2.addr,
                y.2.bind_rank,
                y.2.raw.len(),
                &y.2.raw,
            ))
    });
    hits.dedup_by(|x, y| x.0.name == y.0.name && x.2.addr == y.2.addr);
    hits
}

fn sort_matches(all: &mut [FuncMatch]) {
    all.sort_by(|x, y| (&x.binary, x.vaddr).cmp(&(&y.binary, y.vaddr)));
}

/// Every spec resolved, in order; a function named by several specs is attached once, with
/// the lowest MIN_US among them. The first spec that does not resolve is the error.
pub fn resolve_all(bins: &Binaries, specs: &[FuncSpec]) -> Result<Vec<FuncMatch>> {
    let mut all: Vec<FuncMatch> = Vec::new();
    for spec in specs {
        for m in bins.resolve(spec)? {
            match all
                .iter_mut()
                .find(|a| a.path == m.path && a.vaddr == m.vaddr)
            {
                Some(a) => a.min_ns = a.min_ns.min(m.min_ns),
                None => all.push(m),
            }
        }
    }
    Ok(all)
}

/// The `n` names closest to `query` by edit distance, comparing with the whole name and
/// with each of its trailing scopes (`slow_lokup` is close to `shop::Catalog::slow_lookup`).
fn closest(query: &str, by_sig: bool, tables: &[(&Binary, &Table)], n: usize) -> Vec<String> {
    let q = norm(query);
    let q = q.as_bytes();
    let mut names: HashSet<&str> = HashSet::new();
    for (_, t) in tables {
        for f in t.funcs.iter().filter(|f| !f.fragment()) {
            names.insert(if by_sig {
                f.display.as_str()
            } else {
                f.base.as_str()
            });
        }
    }
    let mut scored: Vec<(usize, usize, &str)> = names
        .into_iter()
        .map(|name| {
            let full = norm(name);
            let whole = levenshtein(q, full.as_bytes());
            let mut best = whole;
            let mut rest = full.as_str();
            while let Some(i) = rest.find("::") {
                rest = &rest[i + 2..];
                best = best.min(levenshtein(q, rest.as_bytes()));
            }
            (best, whole, name)
        })
        .collect();
    scored.sort();
    let picked: Vec<String> = scored
        .into_iter()
        .take(n)
        .map(|s| s.2.to_string())
        .collect();
    if picked.is_empty() {
        vec!["no function symbols found".into()]
    } else {
        picked
    }
}

fn levenshtein(a: &[u8], b: &[u8]) -> usize {
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, &ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// What the dynamic loader needs to find an ELF file's libraries.
type Deps = crate::elf::Dynamic;

fn read_deps(path: &Path) -> Result<Deps> {
    let elf = Elf::open(path).with_context(|| path.display().to_string())?;
    elf.dynamic().map_err(|e| anyhow::anyhow!(e))
}

/// ld.so's search for a DT_NEEDED name, minus hwcaps subdirectories and the cache.
#[derive(Debug)]
struct SearchPath {
    env: Vec<String>,
    system: Vec<String>,
    machine: u16,
}

impl SearchPath {
    fn new(machine: u16) -> Self {
        let env = std::env::var("LD_LIBRARY_PATH")
            .unwrap_or_default()
            .split([':', ';'])
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        let mut system = Vec::new();
        ld_so_conf(Path::new("/etc/ld.so.conf"), &mut system, 0);
        let triplet = match machine {
            m if m == elf::EM_X86_64.0 => "x86_64-linux-gnu",
            m if m == elf::EM_AARCH64.0 => "aarch64-linux-gnu",
            _ => "",
        };
        if !triplet.is_empty() {
            system.push(format!("/lib/{triplet}"));
            system.push(format!("/usr/lib/{triplet}"));
        }
        system.extend(["/lib64", "/usr/lib64", "/lib", "/usr/lib"].map(String::from));
        SearchPath {
            env,
            system,
            machine,
        }
    }

    fn find(&self, name: &str, obj: &Path, deps: &Deps, exe: &Deps) -> Option<PathBuf> {
        if name.contains('/') {
            return Some(PathBuf::from(name));
        }
        let origin = std::fs::canonicalize(obj)
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .unwrap_or_default();
        let expand = |d: &String| {
            d.replace("${ORIGIN}", &origin.to_string_lossy())
                .replace("$ORIGIN", &origin.to_string_lossy())
        };
        let mut dirs: Vec<String> = Vec::new();
        if deps.runpath.is_empty() {
            dirs.extend(deps.rpath.iter().chain(&exe.rpath).map(expand));
        }
        dirs.extend(self.env.iter().cloned());
        dirs.extend(deps.runpath.iter().map(expand));
        dirs.extend(self.system.iter().cloned());
        dirs.into_iter()
            .map(|d| Path::new(&d).join(name))
            .find(|p| read_deps(p).is_ok_and(|d| d.machine == self.machine))
    }
}

/// The directories of an ld.so.conf file, following `include` lines (globs allowed).
fn ld_so_conf(path: &Path, out: &mut Vec<String>, depth: u32) {
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if let Some(pattern) = line.strip_prefix("include") {
            if depth > 4 {
                continue;
            }
            let pattern = Path::new("/etc").join(pattern.trim());
            let (Some(dir), Some(file)) = (pattern.parent(), pattern.file_name()) else {
                continue;
            };
            let glob = Glob::new(&file.to_string_lossy());
            let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| glob.matches(n.as_encoded_bytes()))
                })
                .collect();
            files.sort();
            for f in files {
                ld_so_conf(&f, out, depth + 1);
            }
        } else if line.starts_with('/') {
            out.push(line.to_string());
        }
    }
}

/// `ebrec probes`: what `--func` would attach to, one function a line.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Each line: demangled name, binary, ELF address, size (tab-separated).

Examples:
  ebrec probes -p 1234 'shop::*lookup*'
  ebrec probes -p 1234 shop::Catalog::slow_lookup libc.so.6:malloc
  ebrec probes 'operator new(unsigned long)' -- ./server --port 8080
  ebrec probes ./server:0x4011d6 _ZN4shop7Catalog6lookupEm -- ./server"
)]
pub struct ProbesArgs {
    /// Search the binaries this running process maps.
    #[arg(short, long = "pid")]
    pid: Option<u32>,
    /// What `--func` takes: NAME, GLOB, MANGLED, LIB:SYMBOL or BINARY:0xADDR, each with an
    /// optional :MIN_US.
    #[arg(value_name = "PATTERN", required = true)]
    patterns: Vec<FuncSpec>,
    /// Search this command's executable and the libraries it needs, without starting it.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<OsString>,
}

/// Runs `ebrec probes`.
pub fn probes(a: ProbesArgs) -> Result<()> {
    let bins = match (a.pid, a.command.first()) {
        (Some(pid), None) => Binaries::of_pid(pid)?,
        (None, Some(cmd)) => {
            let exe = crate::find_in_path(cmd)
                .with_context(|| format!("command not found: {}", cmd.to_string_lossy()))?;
            Binaries::of_command(&exe)?
        }
        _ => bail!("say where to look: -p PID, or -- CMD ARGS..."),
    };
    let matches = resolve_all(&bins, &a.patterns)?;
    let mut out = std::io::stdout().lock();
    // The fifth column: where --func's uprobe would go and what a hit costs (see
    // placement.rs): "entry" (an emulated first instruction), "+0xN" (past instructions the
    // kernel would single-step), "single-step" (a second trap per call).
    let written = matches.iter().try_for_each(|m| {
        let p =
            crate::probes::place_in_file(&m.path, m.file_offset, m.size, &crate::placement::ARGS);
        let at = match (p.skip, p.single_step) {
            (_, true) => "single-step".to_string(),
            (0, false) => "entry".to_string(),
            (n, false) => format!("+{n:#x}"),
        };
        writeln!(
            out,
            "{}\t{}\t{:#x}\t{}\t{at}",
            m.demangled, m.binary, m.vaddr, m.size
        )
    });
    match written.and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(s: &str) -> FuncSpec {
        s.parse().unwrap()
    }

    #[test]
    fn specs_parse_from_the_right() {
        let s = spec("shop::Catalog::slow_lookup");
        assert_eq!((s.lib, s.min_us), (None, None));
        assert_eq!(s.what, What::Name("shop::Catalog::slow_lookup".into()));

        let s = spec("shop::Catalog::slow_lookup:500");
        assert_eq!(s.min_us, Some(500));
        assert_eq!(s.what, What::Name("shop::Catalog::slow_lookup".into()));
        assert_eq!(s.text, "shop::Catalog::slow_lookup:500");

        // `::123` is no MIN_US.
        let s = spec("ns::123");
        assert_eq!((s.lib, s.min_us), (None, None));

        let s = spec("libfoo.so:_ZN3foo3barEv:500");
        assert_eq!(s.lib.as_deref(), Some("libfoo.so"));
        assert_eq!(s.what, What::Name("_ZN3foo3barEv".into()));
        assert_eq!(s.min_us, Some(500));

        let s = spec("/usr/lib/x86_64-linux-gnu/libc.so.6:malloc");
        assert_eq!(
            s.lib.as_deref(),
            Some("/usr/lib/x86_64-linux-gnu/libc.so.6")
        );
        assert_eq!(s.what, What::Name("malloc".into()));

        let s = spec("libstdc++.so.6:std::__cxx11::basic_string<char>::_M_create");
        assert_eq!(s.lib.as_deref(), Some("libstdc++.so.6"));
        assert_eq!(
            s.what,
            What::Name("std::__cxx11::basic_string<char>::_M_create".into())
        );

        let s = spec("./server:0x4011d6:20");
        assert_eq!(s.lib.as_deref(), Some("./server"));
        assert_eq!((s.what, s.min_us), (What::Address(0x4011d6), Some(20)));

        // ABI tags and parameters hold single colons that are no LIB separator.
        let s = spec("foo::bar[abi:cxx11]");
        assert_eq!(s.lib, None);
        assert_eq!(s.what, What::Name("foo::bar[abi:cxx11]".into()));
        let s = spec("libx.so:f(std::map<int, int>::iterator)");
        assert_eq!(s.lib.as_deref(), Some("libx.so"));

        assert_eq!(spec("ns::*::get*").what, What::Glob("ns::*::get*".into()));
        assert_eq!(
            spec("x::operator\\*").what,
            What::Name("x::operator\\*".into())
        );
        assert_eq!(spec(" malloc ").what, What::Name("malloc".into()));
        let s = spec("(anonymous namespace)::helper:7");
        assert_eq!((s.lib, s.min_us), (None, Some(7)));
        assert_eq!(s.what, What::Name("(anonymous namespace)::helper".into()));
    }

    #[test]
    fn bad_specs_are_refused() {
        for (s, why) in [
            ("", "empty"),
            ("0x1234", "needs its binary"),
            ("./a:0xzz", "bad address"),
            (":foo", "nothing before"),
            ("libc.so.6:", "no function after"),
            ("f:99999999999999999999", "too large"),
            ("f:99999999999999999", "too large"),
        ] {
            let e = s.parse::<FuncSpec>().unwrap_err().to_string();
            assert!(e.contains(why), "{s:?}: {e}");
        }
    }

    #[test]
    fn globs_cross_scopes() {
        let m = |p: &str, s: &str| Glob::new(p).matches(norm(s).as_bytes());
        assert!(m("ns::*::get*", "ns::A::B::get_value"));
        assert!(m("ns::*::get*", "ns::A::get"));
        assert!(!m("ns::*::get*", "ns::get"));
        assert!(!m("ns::*::get*", "other::A::get"));
        assert!(m("shop::*lookup*", "shop::Catalog::slow_lookup"));
        assert!(m("shop::*lookup*", "shop::Catalog::lookup"));
        assert!(!m("shop::*lookup*", "shop::Cart::add_item"));
        assert!(m("*", ""));
        assert!(m("m?lloc", "malloc"));
        assert!(!m("m?lloc", "mlloc"));
        assert!(m("a*b*c", "aXXbYYbZc"));
        assert!(!m("a*b*c", "aXXbYYbZ"));
        assert!(m("operator new(*)", "operator new(unsigned long)"));
        assert!(m("x::operator\\*", "x::operator*"));
        assert!(!m("x::operator\\*", "x::operator+"));
        assert!(m("*.conf", "libc.conf"));
        assert!(!m("*.conf", "libc.conf~"));
        assert_eq!(Glob::new("shop::*lookup*").literal(), "shop::lookup");
    }

    #[test]
    fn demangled_names_lose_params_qualifiers_and_clones() {
        let f = Func::new(
            "_ZNK4shop7Catalog11slow_lookupERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
            0x10,
            4,
            0,
            false,
        );
        assert_eq!(f.base, "shop::Catalog::slow_lookup");
        assert!(f.display.ends_with("> const&) const"), "{}", f.display);
        assert_eq!(f.clone, None);

        let f = Func::new("_ZNKR3foo3barEv", 0x10, 4, 0, false);
        assert_eq!(f.base, "foo::bar");
        assert_eq!(f.sig_norm, "foo::bar()const&");

        let f = Func::new("_ZN4shop4Cart8add_itemEmmm.cold", 0x10, 4, 0, false);
        assert_eq!(f.base, "shop::Cart::add_item");
        assert_eq!(f.clone.as_deref(), Some(".cold"));
        assert!(f.fragment());
        assert!(f.display.ends_with("[clone .cold]"), "{}", f.display);

        let f = Func::new("_ZN3foo3barEv.constprop.0.isra.0", 0x10, 4, 0, false);
        assert_eq!((f.base.as_str(), f.fragment()), ("foo::bar", false));
        assert!(Func::new("_ZN3foo3barEv.part.0", 0, 0, 0, false).fragment());
        assert!(Func::new("helper.constprop.0.cold", 0, 0, 0, false).fragment());

        // Templates: no return type in either form.
        let f = Func::new("_Z3fooIiEvT_", 0x10, 4, 0, false);
        assert_eq!(
            (f.base.as_str(), f.sig_norm.as_str()),
            ("foo<int>", "foo<int>(int)")
        );

        // C symbols are their own names.
        let f = Func::new("malloc", 0x10, 4, 0, false);
        assert_eq!((f.base.as_str(), f.display.as_str()), ("malloc", "malloc"));

        let f = Func::new("_ZZ4mainENKUlvE_clEv", 0x10, 4, 0, false);
        assert_eq!(f.base, "main::{lambda()#1}::operator()");
    }

    #[test]
    fn return_types_and_parameters_split_off() {
        let s = split_signature;
        assert_eq!(s("void foo<int>(int)"), ("foo<int>(int)", "foo<int>"));
        assert_eq!(s("foo::bar() const &"), ("foo::bar() const &", "foo::bar"));
        assert_eq!(s("operator new(unsigned long)"), ("operator new(unsigned long)", "operator new"));
        assert_eq!(
            s("bool operator< <int>(A<int> const&, A<int> const&)"),
            ("operator< <int>(A<int> const&, A<int> const&)", "operator< <int>")
        );
        assert_eq!(
            s("main::{lambda()#1}::operator()() const"),
            ("main::{lambda()#1}::operator()() const", "main::{lambda()#1}::operator()")
        );
        assert_eq!(
            s("std::vector<int, std::allocator<int> > make<int>(unsigned long)"),
            ("make<int>(unsigned long)", "make<int>")
        );
        assert_eq!(
            s("(anonymous namespace)::oom(char const*)"),
            ("(anonymous namespace)::oom(char const*)", "(anonymous namespace)::oom")
        );
        assert_eq!(s("X::operator unsigned long() const"), ("X::operator unsigned long() const", "X::operator unsigned long"));
        assert_eq!(s("guard variable for x"), ("guard variable for x", "guard variable for x"));
    }

    #[test]
    fn names_as_ebsym_prints_them() {
        // A template function: ebsym prints the return type.
        let f = Func::new("_Z3fooIiEvT_", 0x10, 4, 0, false);
        assert_eq!(f.full_norm, "voidfoo<int>(int)");
        let f = Func::new("_ZN3foo3barEm.constprop.0", 0x10, 4, 0, false);
        assert_eq!(
            f.clone_norm.as_deref(),
            Some("foo::bar(unsignedlong)[clone.constprop.0]")
        );
    }

    #[test]
    fn edit_distance() {
        assert_eq!(levenshtein(b"kitten", b"sitting"), 3);
        assert_eq!(levenshtein(b"", b"abc"), 3);
        assert_eq!(levenshtein(b"same", b"same"), 0);
    }
}
