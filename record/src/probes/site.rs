//! Where a probe goes: a function's site in a binary (its probe placed past what the
//! program reads, see `placement`), and the libraries that provide the allocator and lock
//! functions.
use crate::placement::{self, Placement};
use crate::procfs;
use anyhow::{bail, Context, Result};
use ebtrace_elf::Symbols;
use std::path::{Path, PathBuf};

/// A --func function to probe: its id (the ProbedFunction id in the trace, the BPF cookie)
/// and its shortest call kept.
#[derive(Debug, Clone)]
pub struct FuncSite {
    pub id: u64,
    pub site: Site,
    pub min_ns: u64,
    pub exit: FuncExit,
}

/// How the end of a --func call is caught.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FuncExit {
    /// A uretprobe: one trap, but it swaps the return address on the stack, which a C++
    /// exception unwinding through the call cannot get past (the target terminates). For
    /// functions that call nothing, or when the user accepts that (`--func-exit uretprobe`).
    Uretprobe,
    /// A uprobe on each exit (file offset, is a tail jump): every `ret` (single-stepped:
    /// ≈ 5.4 µs more here) and direct tail jump (emulated). An exception just leaves the call unfinished.
    Sites(Vec<(u64, bool)>),
}

/// A function of a custom allocator (`--alloc-fn`) to probe.
#[derive(Debug, Clone)]
pub struct CustomSite {
    pub site: Site,
    /// The allocator's number (1-based, the order of `--alloc-fn`).
    pub allocator: u32,
    /// The index of the argument read: the size, or (`free`) the pointer.
    pub arg: u32,
    /// The free function (else the allocation function).
    pub free: bool,
}

/// A function to probe in a binary.
#[derive(Debug, Clone)]
pub struct Site {
    pub lib: PathBuf,
    pub symbol: std::borrow::Cow<'static, str>,
    /// File offset of the function's first byte.
    pub offset: u64,
    /// Where in the function the probe goes (see `placement`).
    pub placement: Placement,
}

impl Site {
    /// The site of the function at file `offset` (`size` bytes, 0: unknown) of `lib`, its
    /// probe placed for a BPF program that reads the registers `keep`.
    pub fn new(
        lib: &Path,
        symbol: impl Into<std::borrow::Cow<'static, str>>,
        offset: u64,
        size: u64,
        keep: &[iced_x86::Register],
    ) -> Site {
        Site {
            lib: lib.to_path_buf(),
            symbol: symbol.into(),
            offset,
            placement: place_in_file(lib, offset, size, keep),
        }
    }

    /// The file offset the uprobe goes to.
    pub fn probe_offset(&self) -> u64 {
        self.offset + self.placement.skip
    }
}

impl std::fmt::Display for Site {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.symbol)?;
        if self.placement.skip > 0 {
            write!(f, "+{:#x}", self.placement.skip)?;
        }
        write!(f, " in {}", self.lib.display())?;
        if self.placement.single_step {
            write!(
                f,
                " (first instruction single-stepped: a second trap per call)"
            )?;
        }
        Ok(())
    }
}

/// `len` bytes at file offset `offset` of `lib`.
pub fn read_at(lib: &Path, offset: u64, len: u64) -> Option<Vec<u8>> {
    use std::io::{Read, Seek};
    let mut code = vec![0u8; usize::try_from(len).ok()?];
    let mut f = std::fs::File::open(lib).ok()?;
    f.seek(std::io::SeekFrom::Start(offset)).ok()?;
    f.read_exact(&mut code).ok()?;
    Some(code)
}

/// `placement::place` on the `size` bytes at `offset` in `lib` (at most 64 KiB are looked at;
/// an unreadable file or an unknown size keeps the entry).
pub fn place_in_file(lib: &Path, offset: u64, size: u64, keep: &[iced_x86::Register]) -> Placement {
    let entry = Placement {
        skip: 0,
        single_step: false,
    };
    if size == 0 {
        return entry;
    }
    match read_at(lib, offset, size.min(64 << 10)) {
        Some(code) => placement::place(&code, keep),
        None => entry,
    }
}

pub const ALLOC_FUNCS: &[&str] = &[
    "malloc",
    "calloc",
    "realloc",
    "reallocarray",
    "posix_memalign",
    "aligned_alloc",
    "memalign",
    "valloc",
    "pvalloc",
    "free",
];

/// What the allocator entry programs read: up to three arguments (posix_memalign's).
pub const ALLOC_KEEP: &[iced_x86::Register] = &crate::placement::ARGS_3;

/// What the lock entry programs read: the mutex.
pub const LOCK_KEEP: &[iced_x86::Register] = &crate::placement::ARGS_1;

pub const LOCK_FUNCS: &[&str] = &[
    "pthread_mutex_lock",
    "pthread_mutex_trylock",
    "pthread_mutex_unlock",
];

/// The probe sites for `funcs` in the library at `lib`: one per distinct address (glibc's
/// aligned_alloc and memalign are one function: probing both would count each call twice).
/// `keep`: the argument registers the entry programs read.
pub fn sites(lib: &Path, funcs: &[&'static str], keep: &[iced_x86::Register]) -> Result<Vec<Site>> {
    let syms = Symbols::read(lib).map_err(|e| anyhow::anyhow!(e))?;
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for &f in funcs {
        let Some((addr, size)) = syms.function(f) else {
            continue;
        };
        let Some(offset) = syms.file_offset(addr) else {
            continue;
        };
        if seen.insert(offset) {
            out.push(Site::new(lib, f, offset, size, keep));
        }
    }
    Ok(out)
}

/// The libraries of `pid` that provide `needed` (e.g. "malloc"): an interposing allocator
/// (the executable itself, jemalloc, tcmalloc) wins over libc.
pub fn find_provider(pid: Option<u32>, exe: Option<&Path>, needed: &str) -> Result<Vec<PathBuf>> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(exe) = exe {
        candidates.push(exe.to_path_buf());
    }
    let maps = match pid {
        Some(pid) => procfs::maps(pid).with_context(|| format!("reading /proc/{pid}/maps"))?,
        None => procfs::maps(std::process::id())?,
    };
    let see_pid = pid.unwrap_or(std::process::id());
    for m in maps
        .iter()
        .filter(|m| m.perms & 4 != 0 && m.path.starts_with(b"/"))
    {
        let p = procfs::path_in(see_pid, &m.path);
        if !candidates.contains(&p) {
            candidates.push(p);
        }
    }
    let mut libc = Vec::new();
    let mut others = Vec::new();
    let mut refused = None;
    for c in candidates {
        let syms = match Symbols::read(&c) {
            Ok(s) => s,
            Err(e) => {
                // Symbols::read's error is the io error's text.
                let denied = e.contains("Permission denied")
                    || std::fs::File::open(&c)
                        .is_err_and(|io| io.kind() == std::io::ErrorKind::PermissionDenied);
                if denied && refused.is_none() {
                    refused = Some(c.clone());
                }
                continue;
            }
        };
        if syms.function(needed).is_none() {
            continue;
        }
        let name = c
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name.starts_with("libc.so") || name.starts_with("libc-") {
            libc.push(c);
        } else if name.starts_with("ld-linux") || name.starts_with("ld-") {
            // the dynamic loader's private minimal malloc: never what the program calls
        } else {
            others.push(c);
        }
    }
    if needed == "malloc" && !others.is_empty() {
        return Ok(others);
    }
    libc.extend(others);
    if libc.is_empty() {
        if let Some(c) = refused {
            bail!(
                "cannot read the target's libraries ({}: permission denied): run ebrec as root, or with CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH beside CAP_BPF and CAP_PERFMON",
                c.display()
            );
        }
        bail!(
            "no {needed} found in {}",
            match pid {
                Some(p) => format!("process {p}"),
                None => "the command or ebrec's own libc".into(),
            }
        );
    }
    Ok(libc)
}
