//! The target's binaries (a process's mapped files, or a command's executable and libraries)
//! and the functions a spec names in them.
use super::libsearch::{read_deps, SearchPath};
use super::norm;
use super::spec::{FuncSpec, Glob, What};
use super::suggest::closest;
use super::symbols::{demangle, Func, Table};
use anyhow::{bail, Context, Result};
use ebtrace_elf::Segment;
use std::cell::OnceCell;
use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};

/// The most functions a glob may attach to.
pub const GLOB_LIMIT: usize = 1000;

/// One file the target runs code from.
#[derive(Debug)]
pub(super) struct Binary {
    /// Where ebrec opens it (`/proc/PID/root/...` for a process).
    pub(super) path: PathBuf,
    /// The path as the target sees it.
    pub(super) name: String,
    pub(super) table: OnceCell<Result<Table, String>>,
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

    /// What the binaries are, for messages ("process 1234").
    pub(crate) fn target(&self) -> &str {
        &self.target
    }

    /// The binaries a LIB part names ((name as the target sees it, where ebrec opens it);
    /// all without LIB), or the one-line error `--func`'s LIB:SYMBOL gives.
    pub(crate) fn files(&self, lib: Option<&str>) -> Result<Vec<(String, PathBuf)>> {
        let mut extra = None;
        let picked = self.select(lib, &mut extra)?;
        Ok(picked
            .into_iter()
            .map(|b| (b.name.clone(), b.path.clone()))
            .collect())
    }

    /// Where ebrec opens each binary.
    pub fn paths(&self) -> Vec<PathBuf> {
        self.bins.iter().map(|b| b.path.clone()).collect()
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
        let look = Lookup {
            spec,
            tables,
            unreadable,
            place,
            min_ns,
        };
        let (hits, explicit) = match &spec.what {
            What::Address(addr) => {
                return self.resolve_address(spec, &look.tables, *addr, min_ns);
            }
            What::Name(name) => look.by_name(name)?,
            What::Glob(g) => return look.by_glob(g),
        };
        refuse_ifunc(spec, &hits)?;
        let hits = merge_aliases(hits);
        refuse_ambiguous(spec, &hits, explicit)?;
        let mut all: Vec<FuncMatch> = hits
            .into_iter()
            .map(|(b, t, f)| look.found(b, t, f))
            .collect();
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

/// A function of a binary's table.
type Hit<'a> = (&'a Binary, &'a Table, &'a Func);

/// What resolving one spec searches: the tables of the binaries it selected, the ones that
/// could not be read, and where that is (for messages).
struct Lookup<'a> {
    spec: &'a FuncSpec,
    tables: Vec<(&'a Binary, &'a Table)>,
    unreadable: Vec<String>,
    place: String,
    min_ns: u64,
}

impl<'a> Lookup<'a> {
    /// The match of function `f` of `b`.
    fn found(&self, b: &Binary, t: &Table, f: &Func) -> FuncMatch {
        FuncMatch {
            spec: self.spec.text.clone(),
            path: b.path.clone(),
            binary: b.name.clone(),
            symbol: f.raw.clone(),
            demangled: f.display.clone(),
            vaddr: f.addr,
            file_offset: t.file_offset(f.addr).unwrap_or(f.addr),
            size: f.size,
            min_ns: self.min_ns,
            cold: {
                let name = format!("{}.cold", f.raw);
                t.funcs
                    .iter()
                    .find(|c| c.raw == name)
                    .and_then(|c| t.file_offset(c.addr).map(|off| (c.addr, off, c.size)))
            },
        }
    }

    /// The error for a spec no function matches, with the names closest to `query`.
    fn unknown(&self, query: &str, by_sig: bool) -> anyhow::Error {
        let mut msg = format!(
            "no function matches '{}' in {} (closest: {})",
            self.spec.text,
            self.place,
            closest(
                query,
                by_sig,
                &self.tables.iter().map(|(_, t)| *t).collect::<Vec<_>>(),
                3
            )
            .join(", ")
        );
        if !self.unreadable.is_empty() {
            msg += &format!("; could not read {}", self.unreadable.join("; "));
        }
        anyhow::anyhow!(msg)
    }

    /// The functions named `name` (a raw symbol, a clone as ebsym names it, a base name or
    /// a signature), and whether it named them exactly (by symbol).
    fn by_name(&self, name: &str) -> Result<(Vec<Hit<'a>>, bool)> {
        let mut hits = Vec::new();
        // A raw symbol named exactly: `_ZN...`, or `foo.part.0`.
        if name.starts_with("_Z") || name.contains('.') {
            for &(b, t) in &self.tables {
                hits.extend(t.funcs.iter().filter(|f| f.raw == *name).map(|f| (b, t, f)));
            }
        }
        let key = norm(name);
        if hits.is_empty() && key.contains("[clone") {
            // A clone as ebsym names it from the symbol table: that symbol.
            for &(b, t) in &self.tables {
                hits.extend(
                    t.funcs
                        .iter()
                        .filter(|f| f.clone_norm.as_ref() == Some(&key))
                        .map(|f| (b, t, f)),
                );
            }
        }
        if !hits.is_empty() {
            return Ok((hits, true));
        }
        let by_sig = key.contains('(');
        for &(b, t) in &self.tables {
            hits.extend(
                t.funcs
                    .iter()
                    .filter(|f| {
                        // With `(`: the signature, with or without the return
                        // type ebsym prints for a template function; or a base
                        // name that holds brackets itself (a lambda's
                        // `{lambda()#1}::operator()`).
                        if by_sig {
                            f.sig_norm == key || f.full_norm == key || f.base_norm == key
                        } else {
                            f.base_norm == key
                        }
                    })
                    .map(|f| (b, t, f)),
            );
        }
        if hits.is_empty() {
            // An unknown mangled name: suggest by what it means.
            let query = demangle(name).map(|(_, sig, base)| if by_sig { sig } else { base });
            return Err(self.unknown(query.as_deref().unwrap_or(name), by_sig));
        }
        if hits.iter().all(|h| h.2.fragment()) {
            let frags: Vec<&str> = hits.iter().map(|h| h.2.raw.as_str()).collect();
            bail!(
                "'{}' is only in fragments ({}): the function was inlined into its callers and these pieces are not its entry; name one by its symbol to probe it anyway",
                self.spec.text,
                frags.join(", ")
            );
        }
        hits.retain(|h| !h.2.fragment());
        Ok((hits, false))
    }

    /// The functions glob `g` matches (by raw symbol, signature or base name), sorted; at
    /// most GLOB_LIMIT.
    fn by_glob(&self, g: &str) -> Result<Vec<FuncMatch>> {
        let glob = Glob::new(g);
        let by_raw = g.starts_with("_Z");
        let by_sig = g.contains('(');
        let mut hits = Vec::new();
        for &(b, t) in &self.tables {
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
            return Err(self.unknown(&glob.literal(), by_sig));
        }
        let mut all = merge_aliases(hits)
            .into_iter()
            .map(|(b, t, f)| self.found(b, t, f))
            .collect::<Vec<_>>();
        if all.len() > GLOB_LIMIT {
            bail!(
                "'{}' matches {} functions in {}, more than {GLOB_LIMIT}: narrow it",
                self.spec.text,
                all.len(),
                self.place
            );
        }
        sort_matches(&mut all);
        Ok(all)
    }
}

/// An indirect function (GNU ifunc) among `hits`: an error naming what to probe instead.
fn refuse_ifunc(spec: &FuncSpec, hits: &[Hit<'_>]) -> Result<()> {
    if let Some(&(b, _, f)) = hits.iter().find(|h| h.2.ifunc) {
        bail!(
            "'{}' is an indirect function (GNU ifunc) in {}: its symbol is the resolver that picks an implementation at load time; probe the implementation instead (`ebrec probes` with '{}:*{}*' lists them)",
            spec.text,
            b.file_name(),
            b.file_name(),
            f.base.trim_start_matches('_')
        );
    }
    Ok(())
}

/// More than one function among `hits` (one function: one binary, one signature, or one
/// raw name when named `explicit`ly): an error listing them.
fn refuse_ambiguous(spec: &FuncSpec, hits: &[Hit<'_>], explicit: bool) -> Result<()> {
    let mut groups: Vec<(&str, &str, &Func)> = Vec::new();
    for &(b, _, f) in hits {
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
    Ok(())
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
