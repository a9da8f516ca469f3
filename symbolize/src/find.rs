//! Finding the files of a build-id: the debug file that has the DWARF, the binary itself
//! (for its symbol table, PT_LOAD segments and `.gnu_debuglink`), the dwz supplementary
//! file and the `.dwp` package. Every candidate is checked: a file whose build-id differs
//! from the wanted one is refused and listed as such. What was tried is kept, in order,
//! for the "no file with build-id …" reason.
//!
//! Order (see `architecture.md`): `--debug-dir`s (`.build-id/xx/rest.debug`, then the
//! recorded path mirrored, with and without `.debug`), the binary at its recorded path
//! under `--root`, the binary's `.gnu_debuglink` (CRC checked), `/usr/lib/debug/.build-id`,
//! then debuginfod ([`Locator::debuginfod`]: the debug file, and the binary when it is
//! missing; the servers asked are listed with their answers).
use crate::elf::{hex, ElfFile, ElfInfo};
pub use crate::searched::{Outcome, Searched};
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// An opened and checked file.
#[derive(Debug, Clone)]
pub struct Found {
    pub file: ElfFile,
    pub info: ElfInfo,
}

/// The files found for one build-id.
#[derive(Debug, Default)]
pub struct Located {
    /// The file with the DWARF (may be the binary).
    pub debug: Option<Found>,
    /// The binary, when found with the right build-id.
    pub binary: Option<Found>,
    /// The dwz supplementary file, when the debug file has a `.gnu_debugaltlink`.
    pub sup: Option<Found>,
    /// A `.dwp` package next to the binary or the debug file.
    pub dwp: Option<ElfFile>,
    /// Directories where `.dwo` files may be found besides their recorded path.
    pub dwo_dirs: Vec<PathBuf>,
    pub searched: Vec<Searched>,
}

impl Located {
    /// Whether some candidate was refused for its build-id.
    pub fn saw_mismatch(&self) -> bool {
        self.searched
            .iter()
            .any(|s| matches!(s.outcome, Outcome::BuildIdMismatch(_)))
    }
}

/// Where to look.
#[derive(Clone)]
pub struct Locator {
    /// `--debug-dir`s, in order.
    pub debug_dirs: Vec<PathBuf>,
    /// `--root`: recorded paths are taken under it (default `/`).
    pub root: PathBuf,
    /// The system debug directories (default `/usr/lib/debug`).
    pub system_dirs: Vec<PathBuf>,
    /// The last resort for a build-id: debuginfod servers (shared by every lookup of a
    /// run, so that a dead server is asked once).
    pub debuginfod: Option<std::sync::Arc<crate::debuginfod::Client>>,
}

impl fmt::Debug for Locator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Locator")
            .field("debug_dirs", &self.debug_dirs)
            .field("root", &self.root)
            .field("system_dirs", &self.system_dirs)
            .field(
                "debuginfod",
                &self.debuginfod.as_ref().map(|c| &c.config().urls),
            )
            .finish()
    }
}

impl Default for Locator {
    fn default() -> Self {
        Locator {
            debug_dirs: Vec::new(),
            root: PathBuf::from("/"),
            system_dirs: vec![PathBuf::from("/usr/lib/debug")],
            debuginfod: None,
        }
    }
}

/// `path` without its root, so that it can be joined under another directory.
fn relative(path: &Path) -> PathBuf {
    path.components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .collect()
}

fn build_id_path(dir: &Path, id: &[u8]) -> Option<PathBuf> {
    let (first, rest) = id.split_first()?;
    if rest.is_empty() {
        return None;
    }
    Some(
        dir.join(".build-id")
            .join(format!("{first:02x}"))
            .join(format!("{}.debug", hex(rest))),
    )
}

fn with_suffix(p: &Path, suffix: &str) -> PathBuf {
    let mut s = p.as_os_str().to_os_string();
    s.push(suffix);
    PathBuf::from(s)
}

/// What a candidate must satisfy.
enum Check<'a> {
    BuildId(Option<&'a [u8]>),
    /// `.gnu_debuglink`: the CRC, and the build-id when both sides have one.
    Debuglink(u32, Option<&'a [u8]>),
}

struct Search<'a> {
    searched: Vec<Searched>,
    tried: std::collections::HashSet<PathBuf>,
    loc: &'a Locator,
}

impl Search<'_> {
    fn record(&mut self, path: &Path, outcome: Outcome) {
        self.searched.push(Searched {
            path: path.to_path_buf(),
            outcome,
        });
    }

    /// Opens and checks `path`; records what happened unless it was tried already.
    fn try_file(&mut self, path: &Path, check: &Check<'_>) -> Option<Found> {
        if !self.tried.insert(path.to_path_buf()) {
            return None;
        }
        if !path.exists() {
            self.record(path, Outcome::Missing);
            return None;
        }
        let file = match ElfFile::open(path) {
            Ok(f) => f,
            Err(e) => {
                self.record(path, Outcome::Unreadable(e.to_string()));
                return None;
            }
        };
        let info = match file.info() {
            Ok(i) => i,
            Err(e) => {
                self.record(path, Outcome::Unreadable(e.to_string()));
                return None;
            }
        };
        let id_ok = |want: Option<&[u8]>, strict: bool| match (want, info.build_id.as_deref()) {
            (Some(w), Some(h)) => w == h,
            (Some(_), None) => !strict,
            (None, _) => true,
        };
        let mismatch =
            || Outcome::BuildIdMismatch(info.build_id.as_deref().map(hex).unwrap_or("none".into()));
        match check {
            Check::BuildId(want) => {
                if !id_ok(*want, true) {
                    self.record(path, mismatch());
                    return None;
                }
            }
            Check::Debuglink(crc, want) => {
                if !id_ok(*want, false) {
                    self.record(path, mismatch());
                    return None;
                }
                if crate::elf::crc32(file.data()) != *crc {
                    self.record(path, Outcome::CrcMismatch);
                    return None;
                }
            }
        }
        Some(Found { file, info })
    }

    /// Tries `path` as the DWARF file; on success records it as used.
    fn try_debug(
        &mut self,
        path: &Path,
        check: &Check<'_>,
        others: &mut Vec<Found>,
    ) -> Option<Found> {
        let f = self.try_file(path, check)?;
        if f.info.has_dwarf {
            self.record(path, Outcome::Used);
            Some(f)
        } else {
            self.record(path, Outcome::NoDebugInfo);
            others.push(f);
            None
        }
    }
}

impl Locator {
    /// Finds the files of `build_id`, recorded at `recorded_path` (taken under `root`).
    /// With `binary`, that path is the binary (as `addr2line -e` gives it) and is taken
    /// as is; without a build-id, nothing can be checked and the binary is trusted.
    pub fn locate(
        &self,
        build_id: Option<&[u8]>,
        recorded_path: &Path,
        binary: Option<&Path>,
    ) -> Located {
        let mut s = Search {
            searched: Vec::new(),
            tried: Default::default(),
            loc: self,
        };
        let check = Check::BuildId(build_id);
        let mut nodebug: Vec<Found> = Vec::new();
        let mut debug: Option<Found> = None;
        let rel = relative(recorded_path);

        // 1. --debug-dir: build-id tree, then path-mirrored.
        if let Some(id) = build_id {
            for dir in &self.debug_dirs {
                if debug.is_some() {
                    break;
                }
                if let Some(p) = build_id_path(dir, id) {
                    debug = s.try_debug(&p, &check, &mut nodebug);
                }
            }
        }
        if !rel.as_os_str().is_empty() {
            for dir in &self.debug_dirs {
                if debug.is_some() {
                    break;
                }
                let p = dir.join(&rel);
                debug = s.try_debug(&p, &check, &mut nodebug);
                if debug.is_none() {
                    debug = s.try_debug(&with_suffix(&p, ".debug"), &check, &mut nodebug);
                }
            }
        }

        // 2. The binary at its recorded path (needed anyway for symbols and debuglink).
        let bin_path = match binary {
            Some(b) => Some(b.to_path_buf()),
            None if !rel.as_os_str().is_empty() => Some(s.loc.root.join(&rel)),
            None => None,
        };
        let mut bin: Option<Found> = None;
        if let Some(p) = &bin_path {
            if let Some(f) = s.try_file(p, &check) {
                if debug.is_none() && f.info.has_dwarf {
                    s.record(p, Outcome::Used);
                    debug = Some(f.clone());
                } else if debug.is_none() {
                    s.record(p, Outcome::NoDebugInfo);
                }
                bin = Some(f);
            }
        }

        // 3. .gnu_debuglink of the binary (or of a matching file without DWARF).
        if debug.is_none() {
            let link = bin.iter().chain(nodebug.iter()).find_map(|f| {
                f.info
                    .debuglink
                    .clone()
                    .map(|l| (l, f.file.path().to_path_buf()))
            });
            if let Some(((name, crc), owner)) = link {
                let name = PathBuf::from(std::ffi::OsStr::from_bytes(&name));
                let dir = owner.parent().map(Path::to_path_buf).unwrap_or_default();
                let recorded_dir = rel.parent().map(Path::to_path_buf).unwrap_or_default();
                let mut cands = vec![dir.join(&name), dir.join(".debug").join(&name)];
                for d in self.debug_dirs.iter().chain(&self.system_dirs) {
                    cands.push(d.join(&recorded_dir).join(&name));
                    cands.push(d.join(&name));
                }
                let check = Check::Debuglink(crc, build_id);
                for c in cands {
                    if debug.is_some() {
                        break;
                    }
                    debug = s.try_debug(&c, &check, &mut nodebug);
                }
            }
        }

        // 4. The system build-id trees.
        if let (None, Some(id)) = (&debug, build_id) {
            for dir in &self.system_dirs {
                if debug.is_some() {
                    break;
                }
                if let Some(p) = build_id_path(dir, id) {
                    debug = s.try_debug(&p, &check, &mut nodebug);
                }
            }
        }

        // 5. debuginfod: the debug file, then the binary if it is still missing (for its
        // PT_LOADs and symbols; and its DWARF, if it has some and no debug file came).
        if let (Some(id), Some(client)) = (build_id, &self.debuginfod) {
            use crate::debuginfod::Kind;
            if debug.is_none() {
                let got = client.fetch(id, Kind::Debuginfo);
                s.searched.extend(got.searched);
                if let Some(p) = got.path {
                    debug = s.try_debug(&p, &check, &mut nodebug);
                }
            }
            if bin.is_none() && nodebug.is_empty() {
                let got = client.fetch(id, Kind::Executable);
                s.searched.extend(got.searched);
                if let Some(p) = got.path {
                    if let Some(f) = s.try_file(&p, &check) {
                        if debug.is_none() && f.info.has_dwarf {
                            s.record(&p, Outcome::Used);
                            debug = Some(f.clone());
                        } else if debug.is_none() {
                            s.record(&p, Outcome::NoDebugInfo);
                        } else {
                            s.record(&p, Outcome::Used);
                        }
                        bin = Some(f);
                    }
                }
            }
        }

        // A matching file without DWARF still gives a symbol table.
        if bin.is_none() {
            bin = nodebug.into_iter().next();
        }

        // dwz supplementary file, found by its own build-id.
        let mut sup = None;
        if let Some(d) = &debug {
            if let Some((path, alt_id)) = &d.info.debugaltlink {
                let path = PathBuf::from(std::ffi::OsStr::from_bytes(path));
                let dir = d
                    .file
                    .path()
                    .parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_default();
                let mut cands = vec![dir.join(&path)];
                for dd in self.debug_dirs.iter().chain(&self.system_dirs) {
                    cands.extend(build_id_path(dd, alt_id));
                    cands.push(dd.join(relative(&path)));
                    if let Some(n) = path.file_name() {
                        cands.push(dd.join(".dwz").join(n));
                    }
                }
                if path.is_absolute() {
                    cands.push(self.root.join(relative(&path)));
                }
                let check = Check::BuildId(Some(alt_id));
                for c in cands {
                    if let Some(f) = s.try_file(&c, &check) {
                        s.record(&c, Outcome::Used);
                        sup = Some(f);
                        break;
                    }
                }
            }
        }

        // Split DWARF: a .dwp next to the binary or the debug file; .dwo directories.
        let mut dwo_dirs = Vec::new();
        let mut dwp_cands = Vec::new();
        for f in bin.iter().chain(debug.iter()) {
            dwp_cands.push(with_suffix(f.file.path(), ".dwp"));
            if let Some(dir) = f.file.path().parent() {
                dwo_dirs.push(dir.to_path_buf());
            }
        }
        if let Some(name) = rel.file_name() {
            for d in &self.debug_dirs {
                dwp_cands.push(with_suffix(&d.join(name), ".dwp"));
                dwo_dirs.push(d.clone());
            }
        }
        let dwp = dwp_cands
            .iter()
            .find_map(|p| p.is_file().then(|| ElfFile::open(p).ok()).flatten());

        Located {
            debug,
            binary: bin,
            sup,
            dwp,
            dwo_dirs,
            searched: s.searched,
        }
    }
}
