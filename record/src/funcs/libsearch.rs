//! A command not started yet: the libraries it needs, found as ld.so would (RPATH,
//! LD_LIBRARY_PATH, RUNPATH, /etc/ld.so.conf, the default directories).
use super::spec::Glob;
use anyhow::{Context, Result};
use ebtrace_elf::Elf;
use object::elf;
use std::path::{Path, PathBuf};

/// What the dynamic loader needs to find an ELF file's libraries.
pub(super) type Deps = ebtrace_elf::Dynamic;

pub(super) fn read_deps(path: &Path) -> Result<Deps> {
    let elf = Elf::open(path).with_context(|| path.display().to_string())?;
    elf.dynamic().map_err(|e| anyhow::anyhow!(e))
}

/// ld.so's search for a DT_NEEDED name, minus hwcaps subdirectories and the cache.
#[derive(Debug)]
pub(super) struct SearchPath {
    env: Vec<String>,
    system: Vec<String>,
    machine: u16,
}

impl SearchPath {
    pub(super) fn new(machine: u16) -> Self {
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

    pub(super) fn find(&self, name: &str, obj: &Path, deps: &Deps, exe: &Deps) -> Option<PathBuf> {
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
