//! Opening the files of a build-id and resolving its addresses: [`Symbolizer`] opens a
//! [`Module`], which answers each address with its [`Frame`]s or an [`Unresolved`].
use crate::dwarf::{self, DwarfContext, SplitDwarfPlaces};
use crate::elf::{self, Load, SymbolTable};
use crate::find::{Locator, Searched};
use rayon::prelude::*;
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// One frame of an address: innermost first, inlined frames then their container.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Frame {
    /// The function name, demangled unless [`Options::demangle`] is off.
    pub function: Option<String>,
    pub file: Option<String>,
    /// 0 when unknown.
    pub line: u32,
    /// 0 when unknown.
    pub column: u32,
    /// True for an inlined call; false for the function that contains the address.
    pub inlined: bool,
    /// Offset of the address from its symbol's start (the containing frame only).
    pub offset: Option<u64>,
    /// The name came from the symbol table, not from DWARF (no file:line).
    pub from_symtab: bool,
    /// The DWARF discriminator of the address's line-table row (innermost frame only;
    /// 0 when none).
    pub discriminator: u32,
}

/// Why an address or a whole module stayed unresolved. The same values as the
/// `UnresolvedReason` of the trace schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// No file with the build-id was found.
    NoFile,
    /// Only a symbol table: function names but no file:line.
    SymtabOnly,
    /// No symbol covers the address.
    NoSymbol,
    /// The address is outside every recorded mapping.
    NoMapping,
    /// A file was found but its build-id differs (refused).
    BuildIdMismatch,
    /// The file or its DWARF could not be parsed.
    BadFile,
    /// The mapping is anonymous or has no build-id.
    NoBuildId,
}

impl Reason {
    /// The schema's enum value.
    pub fn to_proto(self) -> ebtrace_proto::v1::UnresolvedReason {
        use ebtrace_proto::v1::UnresolvedReason as U;
        match self {
            Reason::NoFile => U::NoFile,
            Reason::SymtabOnly => U::SymtabOnly,
            Reason::NoSymbol => U::NoSymbol,
            Reason::NoMapping => U::NoMapping,
            Reason::BuildIdMismatch => U::BuildIdMismatch,
            Reason::BadFile => U::BadFile,
            Reason::NoBuildId => U::NoBuildId,
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Reason::NoFile => "no file",
            Reason::SymtabOnly => "stripped, symbol table only",
            Reason::NoSymbol => "no symbol",
            Reason::NoMapping => "outside any mapping",
            Reason::BuildIdMismatch => "build-id mismatch",
            Reason::BadFile => "bad file",
            Reason::NoBuildId => "no build-id",
        })
    }
}

/// An unresolved address: the reason, and for module-wide reasons a detail.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Unresolved {
    pub reason: Reason,
    pub detail: Option<String>,
}

impl From<Reason> for Unresolved {
    fn from(reason: Reason) -> Self {
        Unresolved {
            reason,
            detail: None,
        }
    }
}

/// The answer for one address.
pub type Lookup = Result<Vec<Frame>, Unresolved>;

/// How to find files and name things.
#[derive(Debug, Clone)]
pub struct Options {
    pub locator: Locator,
    /// Demangle C++ (Itanium) names.
    pub demangle: bool,
    /// Files as binutils gives them: an address that no line-table row covers (the start
    /// of a `.cold` part) takes the file of its local symbol (`STT_FILE`). Names are never
    /// binutils': it names the innermost frame after the symbol that contains the
    /// address, which gives an inlined static helper (`BuildLookupTable`, inlined into
    /// `StringPiece::find_first_not_of`) its caller's name.
    pub binutils_files: bool,
    /// For a symbolized trace ([`crate::trace`]): keep the raw stack copies
    /// (`--stack-mode dwarf`, the target's stack memory) in the output. By default they
    /// are dropped once unwound: the output keeps the unwound frames (`UnwoundStack`) and
    /// holds no target memory.
    pub keep_stack_copies: bool,
    /// Name functions from the binaries' own ELF symbol tables only (`.symtab`, else
    /// `.dynsym`, of the file at the recorded path): no DWARF, no debug file, so no file,
    /// line or inlined frames. What the agent's Pyroscope pushes use by default, as
    /// Grafana's eBPF profiler does: cheap, and names where the binaries are not stripped.
    pub symbols_only: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            locator: Locator::default(),
            demangle: true,
            binutils_files: false,
            keep_stack_copies: false,
            symbols_only: false,
        }
    }
}

/// Opens modules (the files of one build-id) with fixed options.
#[derive(Debug, Clone, Default)]
pub struct Symbolizer {
    pub options: Options,
}

/// Where a module's symbols come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Dwarf,
    Symtab,
}

/// The files of one build-id, opened, and the resolver over them.
pub struct Module {
    pub build_id: Option<Vec<u8>>,
    /// The file that gives symbols (the DWARF file, or the one with the symbol table).
    pub debug_file: Option<PathBuf>,
    /// The binary, when found.
    pub binary: Option<PathBuf>,
    /// What was searched, in order.
    pub searched: Vec<Searched>,
    /// Where symbols come from, or why there are none.
    pub status: Result<Source, Unresolved>,
    loads: Vec<Load>,
    dwarf: Option<DwarfContext>,
    symbols: SymbolTable,
    demangle: bool,
    binutils_files: bool,
    /// Answers already given, by address (bounded: cleared when full).
    cache: Mutex<HashMap<u64, Arc<Lookup>>>,
    /// Demangled names by raw name (bounded: cleared when full).
    names: Mutex<HashMap<String, String, foldhash::fast::RandomState>>,
}

/// At most this many answers are kept per module (about a kilobyte each with C++ names
/// and inline chains).
const CACHE_MAX: usize = 1 << 12;

/// At most this many demangled names are kept per module.
const NAMES_MAX: usize = 1 << 16;

/// Addresses per parallel task of [`Module::resolve_many`] for a module without DWARF.
const CHUNK: usize = 1024;

impl fmt::Debug for Module {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Module")
            .field("build_id", &self.build_id.as_deref().map(elf::hex))
            .field("debug_file", &self.debug_file)
            .field("status", &self.status)
            .finish_non_exhaustive()
    }
}

impl Symbolizer {
    pub fn new(options: Options) -> Symbolizer {
        Symbolizer { options }
    }

    /// Finds and opens the files of `build_id`, recorded at `recorded_path`.
    pub fn open(&self, build_id: Option<&[u8]>, recorded_path: &Path) -> Module {
        self.open_inner(build_id, recorded_path, None)
    }

    /// Opens a binary given by path (as `addr2line -e` does), taking its build-id from it.
    pub fn open_binary(&self, path: &Path) -> Module {
        let id = elf::ElfFile::open(path)
            .ok()
            .and_then(|f| f.info().ok())
            .and_then(|i| i.build_id);
        self.open_inner(id.as_deref(), path, Some(path))
    }

    fn open_inner(
        &self,
        build_id: Option<&[u8]>,
        recorded: &Path,
        binary: Option<&Path>,
    ) -> Module {
        let located = self.options.locator.locate(build_id, recorded, binary);
        let mut m = Module {
            build_id: build_id.map(<[u8]>::to_vec),
            debug_file: None,
            binary: located.binary.as_ref().map(|b| b.file.path().to_path_buf()),
            status: Err(Reason::NoFile.into()),
            searched: located.searched.clone(),
            loads: Vec::new(),
            dwarf: None,
            symbols: SymbolTable::default(),
            demangle: self.options.demangle,
            binutils_files: self.options.binutils_files,
            cache: Mutex::new(HashMap::new()),
            names: Mutex::new(HashMap::default()),
        };
        // PT_LOADs: from the binary. A debug file made by `objcopy --only-keep-debug`
        // keeps the program headers but not their file offsets (its segments are NOBITS),
        // so only the segments that still have file bytes are trusted from it.
        if let Some(b) = &located.binary {
            m.loads = b.info.loads.clone();
        } else if let Some(d) = &located.debug {
            m.loads = d
                .info
                .loads
                .iter()
                .filter(|l| l.filesz > 0)
                .copied()
                .collect();
        }
        let mut bad = None;
        let debug = located
            .debug
            .as_ref()
            .filter(|_| !self.options.symbols_only);
        if let Some(d) = debug {
            let places = SplitDwarfPlaces {
                dwo_dirs: located.dwo_dirs.clone(),
            };
            match DwarfContext::load(
                &d.file,
                located.sup.as_ref().map(|s| &s.file),
                located.dwp.as_ref(),
                places,
            ) {
                Ok(ctx) => {
                    m.dwarf = Some(ctx);
                    m.debug_file = Some(d.file.path().to_path_buf());
                    m.status = Ok(Source::Dwarf);
                }
                Err(e) => bad = Some(format!("{}: {e}", d.file.path().display())),
            }
            if let Ok(obj) = d.file.object() {
                m.symbols = SymbolTable::load(&obj);
            }
        }
        if m.symbols.is_empty() {
            if let Some(b) = &located.binary {
                if let Ok(obj) = b.file.object() {
                    m.symbols = SymbolTable::load(&obj);
                }
                if m.dwarf.is_none() && !m.symbols.is_empty() {
                    m.debug_file = Some(b.file.path().to_path_buf());
                }
            }
        }
        if m.dwarf.is_none() {
            m.status = if !m.symbols.is_empty() {
                Ok(Source::Symtab)
            } else if let Some(detail) = bad {
                Err(Unresolved {
                    reason: Reason::BadFile,
                    detail: Some(detail),
                })
            } else if located.binary.is_some() || debug.is_some() {
                Err(Unresolved {
                    reason: Reason::NoSymbol,
                    detail: Some("no DWARF and no symbol table".into()),
                })
            } else {
                let id = build_id.map(elf::hex).unwrap_or_else(|| "(none)".into());
                let searched: Vec<String> = m.searched.iter().map(|s| s.to_string()).collect();
                let reason = if located.saw_mismatch() {
                    Reason::BuildIdMismatch
                } else {
                    Reason::NoFile
                };
                Err(Unresolved {
                    reason,
                    detail: Some(format!(
                        "no file with build-id {id} (searched: {})",
                        searched.join(", ")
                    )),
                })
            };
        }
        m
    }

    /// Demangles `name` if it is an Itanium C++ name (or a Rust v0 one, `_R…`); else
    /// returns it as is: [`ebtrace_demangle::demangle`], the demangler ebrec's `--func`
    /// matches names with.
    pub fn demangle(name: &str) -> String {
        ebtrace_demangle::demangle(name)
    }
}

impl Module {
    /// The ELF virtual address of file offset `offset`, through the PT_LOAD segments.
    pub fn offset_to_vaddr(&self, offset: u64) -> Option<u64> {
        elf::offset_to_vaddr(&self.loads, offset)
    }

    /// The PT_LOAD segments used to normalize addresses.
    pub fn loads(&self) -> &[Load] {
        &self.loads
    }

    fn name(&self, raw: &str) -> String {
        if !self.demangle || !ebtrace_demangle::is_mangled(raw) {
            return raw.to_string();
        }
        // The same functions come back address after address: demangle each once.
        if let Some(hit) = self.names.lock().ok().and_then(|n| n.get(raw).cloned()) {
            return hit;
        }
        let out = ebtrace_demangle::demangle(raw);
        if let Ok(mut names) = self.names.lock() {
            if names.len() >= NAMES_MAX {
                names.clear();
            }
            names.insert(raw.to_string(), out.clone());
        }
        out
    }

    /// The data object (`STT_OBJECT`) symbol whose bytes hold ELF virtual address `vaddr`
    /// (a `std::type_info`, a vtable), demangled: from the debug file's symbol table, else
    /// the binary's (and its dynamic symbols). None when neither names it.
    pub fn data_symbol(&self, vaddr: u64) -> Option<String> {
        use object::{Object, ObjectSymbol, SymbolKind};
        let files = [self.debug_file.as_ref(), self.binary.as_ref()];
        for path in files.into_iter().flatten() {
            let Ok(elf) = elf::ElfFile::open(path) else {
                continue;
            };
            let Ok(obj) = elf.object() else {
                continue;
            };
            let hit = obj.symbols().chain(obj.dynamic_symbols()).find(|s| {
                s.kind() == SymbolKind::Data
                    && s.address() <= vaddr
                    && (vaddr - s.address() < s.size() || vaddr == s.address())
            });
            if let Some(name) = hit.and_then(|s| s.name().ok().map(|n| n.to_string())) {
                // A dynamic symbol's version (`_ZTISt12out_of_range@GLIBCXX_3.4`, a copy
                // relocated into the program) is not part of the name.
                let name = name.split('@').next().unwrap_or(&name);
                return Some(self.name(name));
            }
        }
        None
    }

    /// The frames of ELF virtual address `addr`, innermost first.
    pub fn resolve(&self, addr: u64) -> Lookup {
        if let Err(u) = &self.status {
            return Err(u.clone());
        }
        if let Some(hit) = self.cache.lock().ok().and_then(|c| c.get(&addr).cloned()) {
            return (*hit).clone();
        }
        let out = match &self.dwarf {
            Some(ctx) => ctx
                .with_slot(ctx.slot_of(addr), |l| self.resolve_uncached(Some(l), addr))
                .unwrap_or_else(|e| {
                    Err(Unresolved {
                        reason: Reason::BadFile,
                        detail: Some(e),
                    })
                }),
            None => self.resolve_uncached(None, addr),
        };
        let out = Arc::new(out);
        self.remember(std::iter::once((addr, &out)));
        Arc::unwrap_or_clone(out)
    }

    /// The frames of each of `addrs`, in the same order: [`Module::resolve`] for all,
    /// spread over rayon's threads (one task per DWARF slot, see
    /// [`dwarf::DwarfContext`]). Repeated and already resolved addresses are resolved
    /// once, and their answers are shared, not copied. The answers do not depend on the
    /// number of threads.
    pub fn resolve_many(&self, addrs: &[u64]) -> Vec<Arc<Lookup>> {
        if let Err(u) = &self.status {
            // One shared answer for all.
            let answer = Arc::new(Err(u.clone()));
            return addrs.iter().map(|_| answer.clone()).collect();
        }
        let mut todo: Vec<u64> = addrs.to_vec();
        todo.sort_unstable();
        todo.dedup();
        let mut known: HashMap<u64, Arc<Lookup>> = HashMap::with_capacity(todo.len());
        if let Ok(cache) = self.cache.lock() {
            todo.retain(|a| match cache.get(a) {
                Some(hit) => {
                    known.insert(*a, hit.clone());
                    false
                }
                None => true,
            });
        }
        // Tasks: the addresses of one DWARF slot each (in address order within it);
        // fixed-size chunks without DWARF.
        let mut by_slot: Vec<Vec<u64>> = Vec::new();
        let groups: Vec<&[u64]> = match &self.dwarf {
            Some(ctx) if ctx.slot_count() > 1 => {
                by_slot.resize(ctx.slot_count(), Vec::new());
                for &a in &todo {
                    by_slot[ctx.slot_of(a)].push(a);
                }
                by_slot
                    .iter()
                    .filter(|g| !g.is_empty())
                    .map(Vec::as_slice)
                    .collect()
            }
            Some(_) => vec![&todo[..]],
            None => todo.chunks(CHUNK).collect(),
        };
        let groups: Vec<&[u64]> = groups.into_iter().filter(|g| !g.is_empty()).collect();
        let fresh: Vec<Vec<(u64, Arc<Lookup>)>> = groups
            .into_par_iter()
            .map(|addrs| {
                let one = |l: Option<&dwarf::Lookup<'_>>| -> Vec<(u64, Arc<Lookup>)> {
                    addrs
                        .iter()
                        .map(|&a| (a, Arc::new(self.resolve_uncached(l, a))))
                        .collect()
                };
                match &self.dwarf {
                    Some(ctx) => ctx
                        .with_slot(ctx.slot_of(addrs[0]), |l| one(Some(l)))
                        .unwrap_or_else(|e| {
                            let u = Arc::new(Err(Unresolved {
                                reason: Reason::BadFile,
                                detail: Some(e),
                            }));
                            addrs.iter().map(|&a| (a, u.clone())).collect()
                        }),
                    None => one(None),
                }
            })
            .collect();
        self.remember(fresh.iter().flatten().map(|(a, l)| (*a, l)));
        known.extend(fresh.into_iter().flatten());
        addrs.iter().map(|a| known[a].clone()).collect()
    }

    fn remember<'a>(&self, answers: impl Iterator<Item = (u64, &'a Arc<Lookup>)>) {
        let Ok(mut cache) = self.cache.lock() else {
            return;
        };
        for (a, l) in answers {
            if cache.len() >= CACHE_MAX {
                cache.clear();
            }
            cache.insert(a, l.clone());
        }
    }

    fn resolve_uncached(&self, lookup: Option<&dwarf::Lookup<'_>>, addr: u64) -> Lookup {
        let sym = self.symbols.find(addr);
        if let Some(ctx) = lookup {
            let raw = match ctx.frames(addr) {
                Ok(r) => r,
                Err(e) => {
                    return Err(Unresolved {
                        reason: Reason::BadFile,
                        detail: Some(e),
                    })
                }
            };
            if !raw.is_empty() {
                let n = raw.len();
                let discriminator = ctx.discriminator(addr);
                let frames = raw
                    .into_iter()
                    .enumerate()
                    .map(|(i, f)| {
                        let last = i + 1 == n;
                        // A line-table row without a DIE for its function: name it from
                        // the symbol table, as binutils does.
                        let mut function = f.function;
                        let is_cxx = matches!(
                            f.language,
                            Some(
                                gimli::DW_LANG_C_plus_plus
                                    | gimli::DW_LANG_C_plus_plus_03
                                    | gimli::DW_LANG_C_plus_plus_11
                                    | gimli::DW_LANG_C_plus_plus_14
                                    | gimli::DW_LANG_C_plus_plus_17
                                    | gimli::DW_LANG_C_plus_plus_20
                            )
                        );
                        let linkage = function.as_deref().is_some_and(|n| n.starts_with("_Z"));
                        if last && is_cxx && !linkage {
                            // gcc gives no linkage name to some functions with internal
                            // linkage (in an anonymous namespace): DWARF calls
                            // `(anonymous namespace)::oom(char const*)` just `oom`. The
                            // symbol that contains the address is the function itself (or
                            // a part split off it, `.cold`, `.part.0`): take its qualified
                            // name, without the split-off suffix. Only for the containing
                            // frame: an inlined frame is never the symbol's function
                            // (binutils names the innermost frame after the symbol, which
                            // gives an inlined static helper the name of its caller).
                            if let (Some(s), Some(short)) = (sym, function.as_deref()) {
                                let base = without_clone_suffix(&s.name);
                                if base.starts_with("_Z") && names_symbol(short, base) {
                                    function = Some(base.into());
                                }
                            }
                        }
                        // A line-table row without a DIE for its function: name it from
                        // the symbol table, as binutils does.
                        let function = function
                            // without the suffix of a split-off part (`….cold`): the
                            // frame is the function's, as DWARF names it elsewhere.
                            .or_else(|| {
                                last.then(|| sym.map(|s| without_clone_suffix(&s.name).into()))
                                    .flatten()
                            })
                            .map(|n: std::borrow::Cow<'_, str>| self.name(&n));
                        // binutils: an address that no line-table row covers (the start of
                        // a `.cold` part) takes the file of its local symbol (`STT_FILE`).
                        let file = match f.file {
                            None if self.binutils_files && i == 0 => {
                                sym.and_then(|s| s.file.clone())
                            }
                            file => file.map(str::to_string),
                        };
                        Frame {
                            function,
                            file,
                            line: f.line,
                            column: f.column,
                            inlined: !last,
                            offset: if last {
                                sym.map(|s| addr - s.address)
                            } else {
                                None
                            },
                            from_symtab: false,
                            discriminator: if i == 0 { discriminator } else { 0 },
                        }
                    })
                    .collect();
                return Ok(frames);
            }
        }
        match sym {
            Some(s) => Ok(vec![Frame {
                function: Some(self.name(&s.name)),
                file: s.file.clone(),
                line: 0,
                column: 0,
                inlined: false,
                offset: Some(addr - s.address),
                from_symtab: true,
                discriminator: 0,
            }]),
            None => Err(Reason::NoSymbol.into()),
        }
    }
}

/// Whether `short`, DWARF's name of a function without a linkage name, is the function
/// that mangled symbol `symbol` names: its identifier, without template arguments (which
/// DWARF spells out and the symbol encodes: `ParseMessageSetItemImpl<…::MSReflective>` is
/// `…23ParseMessageSetItemImplINS1_…`), appears in the symbol as a `<length><identifier>`
/// source name. `~Counters` is `…8CountersD2Ev`; an operator (`operator()`, encoded `cl`)
/// only if the symbol holds the whole name.
fn names_symbol(short: &str, symbol: &str) -> bool {
    let destructor = short.starts_with('~');
    let short = short.trim_start_matches('~');
    if let Some(op) = short.strip_prefix("operator") {
        // The operator's code, then the end of the name (`E`) or template arguments; or
        // first, for an operator of the global namespace (`_ZlsRSo…`).
        return match operator_code(op.trim_start()) {
            Some(code) => {
                symbol.starts_with(&format!("_Z{code}"))
                    || ["E", "I"]
                        .iter()
                        .any(|end| symbol.contains(&format!("{code}{end}")))
            }
            None => symbol.contains(short),
        };
    }
    if short == "<lambda>" {
        // A closure type (`UlRKiE_`); its destructor `…E_D2Ev`.
        return symbol.contains("Ul")
            && (!destructor || ["D0Ev", "D1Ev", "D2Ev"].iter().any(|d| symbol.ends_with(d)));
    }
    let ident = short.split('<').next().unwrap_or(short);
    if ident.is_empty()
        || !ident
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        return symbol.contains(short);
    }
    // (A digit before it may end the previous name: `12_GLOBAL__N_18Counters`.)
    symbol.contains(&format!("{}{ident}", ident.len()))
}

/// Symbol `name` without the suffix gcc gives a part split off a function or a clone
/// of it (`foo.cold`, `_ZN3fooEv.part.0.isra.0`): from the first `.` that starts a word,
/// so Rust's `..` path separators (`_ZN…$LT$alloc..vec..Vec…`) stay.
fn without_clone_suffix(name: &str) -> &str {
    let b = name.as_bytes();
    let cut = (1..b.len()).find(|&i| {
        b[i] == b'.' && b[i - 1] != b'.' && b.get(i + 1).is_some_and(|c| c.is_ascii_alphabetic())
    });
    &name[..cut.unwrap_or(name.len())]
}

/// The Itanium ABI's code of an operator, as DWARF names it after `operator`.
fn operator_code(op: &str) -> Option<&'static str> {
    const CODES: &[(&str, &str)] = &[
        ("new[]", "na"),
        ("delete[]", "da"),
        ("new", "nw"),
        ("delete", "dl"),
        ("()", "cl"),
        ("[]", "ix"),
        ("->*", "pm"),
        ("->", "pt"),
        ("<=>", "ss"),
        ("<<=", "lS"),
        (">>=", "rS"),
        ("<<", "ls"),
        (">>", "rs"),
        ("==", "eq"),
        ("!=", "ne"),
        ("<=", "le"),
        (">=", "ge"),
        ("<", "lt"),
        (">", "gt"),
        ("+=", "pL"),
        ("-=", "mI"),
        ("*=", "mL"),
        ("/=", "dV"),
        ("%=", "rM"),
        ("&=", "aN"),
        ("|=", "oR"),
        ("^=", "eO"),
        ("&&", "aa"),
        ("||", "oo"),
        ("++", "pp"),
        ("--", "mm"),
        ("+", "pl"),
        ("-", "mi"),
        ("*", "ml"),
        ("/", "dv"),
        ("%", "rm"),
        ("&", "an"),
        ("|", "or"),
        ("^", "eo"),
        ("=", "aS"),
        ("!", "nt"),
        ("~", "co"),
        (",", "cm"),
    ];
    CODES.iter().find(|(o, _)| *o == op).map(|(_, c)| *c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::{Object, ObjectSymbol};

    #[test]
    fn names_symbol_matches_source_names() {
        assert!(names_symbol(
            "ParseMessageSetItemImpl<google::protobuf::internal::MSReflective>",
            "_ZN6google8protobuf8internal23ParseMessageSetItemImplINS1_12MSReflectiveEEEbPv"
        ));
        assert!(names_symbol("~Counters", "_ZN12_GLOBAL__N_18CountersD2Ev"));
        assert!(names_symbol("oom", "_ZN12_GLOBAL__N_13oomEPKc"));
        // Another function whose name ends the same, or a longer length prefix.
        assert!(!names_symbol("oom", "_ZN12_GLOBAL__N_14boomEPKc"));
        assert!(names_symbol(
            "operator()",
            "_ZNK12_GLOBAL__N_116FieldIndexSorterclEPKNS_15FieldDescriptorES3_"
        ));
        assert!(names_symbol(
            "operator[]",
            "_ZNSt8__detail9_Map_baseIiEixEOi"
        ));
        assert!(!names_symbol(
            "operator[]",
            "_ZNSt8__detail9_Map_baseIiEclEOi"
        ));
    }

    /// `symbols_only`: the binary's own symbol table names its functions, one frame an
    /// address, no line, though the binary has DWARF.
    #[test]
    fn symbols_only_names_from_the_symbol_table_and_reads_no_dwarf() {
        let exe = std::env::current_exe().unwrap();
        let data = std::fs::read(&exe).unwrap();
        let obj = object::File::parse(&*data).unwrap();
        let sym = obj
            .symbols()
            .find(|s| s.kind() == object::SymbolKind::Text && s.size() > 16)
            .unwrap();
        let only = Symbolizer {
            options: Options {
                symbols_only: true,
                ..Options::default()
            },
        };
        let m = only.open_binary(&exe);
        assert_eq!(m.status, Ok(Source::Symtab));
        let frames = m.resolve(sym.address() + sym.size() / 2).unwrap();
        assert_eq!(frames.len(), 1, "{frames:?}");
        let f = &frames[0];
        assert!(f.from_symtab && f.line == 0, "{f:?}");
        assert!(f.function.as_ref().is_some_and(|n| !n.is_empty()), "{f:?}");
        assert_eq!(
            Symbolizer::default().open_binary(&exe).status,
            Ok(Source::Dwarf)
        );
    }

    /// `resolve_many` gives the same answers on 1 and 3 threads as `resolve` one by one,
    /// repeated addresses included (on this test binary's own DWARF).
    #[test]
    fn resolve_many_is_the_same_at_any_thread_count() {
        let exe = std::env::current_exe().unwrap();
        let data = std::fs::read(&exe).unwrap();
        let obj = object::File::parse(&*data).unwrap();
        let mut addrs: Vec<u64> = obj
            .symbols()
            .filter(|s| s.kind() == object::SymbolKind::Text && s.size() > 0)
            .step_by(7)
            .take(800)
            .flat_map(|s| [s.address(), s.address().saturating_add(s.size() / 2)])
            .collect();
        addrs.extend(addrs.clone());
        addrs.push(0);
        let sym = Symbolizer::default();
        let on = |threads: usize| -> Vec<Lookup> {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| {
                let m = sym.open_binary(&exe);
                assert_eq!(m.status, Ok(Source::Dwarf));
                let mut out: Vec<Lookup> = Vec::new();
                for half in addrs.chunks(addrs.len() / 2 + 1) {
                    out.extend(m.resolve_many(half).iter().map(|l| (**l).clone()));
                }
                out
            })
        };
        let one = on(1);
        assert_eq!(one, on(3));
        let m = sym.open_binary(&exe);
        let seq: Vec<Lookup> = addrs.iter().map(|&a| m.resolve(a)).collect();
        assert_eq!(one, seq);
        let named = one
            .iter()
            .filter(|l| matches!(l, Ok(f) if f.last().is_some_and(|f| f.function.is_some())))
            .count();
        assert!(named * 10 > addrs.len() * 9, "{named} of {}", addrs.len());
    }
}
