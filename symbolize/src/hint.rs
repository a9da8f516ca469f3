//! What to do about a binary whose frames stayed without debug information: one line per
//! binary (not per frame) that names its build-id and how to get its debug file.
//!
//! When the binary ebsym found is the one at the recorded path on this host (same
//! build-id) and the host is Debian, the package comes from dpkg: `dpkg-query -S` of the
//! path (and of its other name across the `/usr` merge), its version, and the debug
//! package that goes with it — `libc6-dbg` for glibc (a `-dbg` package with the split
//! debug files), `PKG-dbgsym` from the debian-debug archive for the rest (Debian's
//! automatic debug packages). For `libstdc++6` the line also says what
//! `libstdc++6-N-dbg` is: another build of the library (`/usr/lib/TRIPLET/debug`,
//! another build-id, `-O0`), not the debug information of the one the program maps; it
//! names frames of a program run with it (`LD_LIBRARY_PATH`). Otherwise the advice is
//! generic: where `--debug-dir` looks for the file, and debuginfod.
//!
//! ```no_run
//! use ebtrace_symbolize::{hint, trace::symbolize_trace, Options};
//! let options = Options::default();
//! let report = symbolize_trace("t.pb.zst".as_ref(), "t.sym.pb.zst".as_ref(), &options).unwrap();
//! for line in hint::debug_hints(&report.modules, &options.locator) {
//!     eprintln!("ebsym: {line}");
//! }
//! ```
use crate::elf::hex;
use crate::find::Locator;
use crate::resolve::Reason;
use crate::trace::ModuleReport;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The debuginfod server of Debian, for the advice on a Debian host.
pub const DEBIAN_DEBUGINFOD: &str = "https://debuginfod.debian.net";

/// One line per module whose frames lack debug information
/// ([`ModuleReport::lacks_debug_info`]), in the order of `modules`.
pub fn debug_hints(modules: &[ModuleReport], locator: &Locator) -> Vec<String> {
    let wanting: Vec<&ModuleReport> = modules.iter().filter(|m| m.lacks_debug_info()).collect();
    if wanting.is_empty() {
        return Vec::new();
    }
    let host = Host::read();
    // The packages of the binaries found on this host at their recorded paths.
    let local: Vec<PathBuf> = wanting
        .iter()
        .filter_map(|m| same_file_here(m, locator))
        .collect();
    let packages = match &host {
        Some(h) if h.debian => packages_of(&local),
        _ => HashMap::new(),
    };
    wanting
        .iter()
        .map(|m| {
            let package = same_file_here(m, locator).and_then(|p| packages.get(&p));
            hint_line(m, package, host.as_ref(), locator)
        })
        .collect()
}

/// The recorded path, when the binary ebsym used is the file there (root `/`): the one
/// whose package dpkg can name.
fn same_file_here(m: &ModuleReport, locator: &Locator) -> Option<PathBuf> {
    let b = m.binary.as_ref()?;
    (locator.root == Path::new("/") && b == Path::new(&m.path)).then(|| b.clone())
}

/// The host ebsym runs on, from /etc/os-release.
#[derive(Debug, Clone)]
struct Host {
    debian: bool,
    codename: String,
}

impl Host {
    fn read() -> Option<Host> {
        let text = std::fs::read_to_string("/etc/os-release").ok()?;
        let field = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
                .map(|v| v.trim_matches('"').to_string())
                .unwrap_or_default()
        };
        Some(Host {
            debian: field("ID") == "debian",
            codename: field("VERSION_CODENAME"),
        })
    }
}

/// A Debian package that holds a binary.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Package {
    name: String,
    version: String,
    source: String,
}

/// The package of each path that dpkg knows, by path. One `dpkg-query -S` for all (each
/// path also under its other name across the `/usr` merge: bookworm's dpkg knows
/// `/lib/x86_64-linux-gnu/libc.so.6`, the kernel maps `/usr/lib/...`), one
/// `dpkg-query -W` for the packages found.
fn packages_of(paths: &[PathBuf]) -> HashMap<PathBuf, Package> {
    let mut names: HashMap<String, PathBuf> = HashMap::new();
    for p in paths {
        let s = p.to_string_lossy().into_owned();
        names.insert(s.clone(), p.clone());
        if let Some(rest) = s.strip_prefix("/usr") {
            if ["/lib", "/bin", "/sbin"]
                .iter()
                .any(|d| rest.starts_with(d))
            {
                names.insert(rest.to_string(), p.clone());
            }
        } else if ["/lib", "/bin", "/sbin"].iter().any(|d| s.starts_with(d)) {
            names.insert(format!("/usr{s}"), p.clone());
        }
    }
    if names.is_empty() {
        return HashMap::new();
    }
    let mut queried: Vec<&String> = names.keys().collect();
    queried.sort();
    // Exits 1 when some path belongs to no package: the others are still listed.
    let Ok(out) = Command::new("dpkg-query").arg("-S").args(&queried).output() else {
        return HashMap::new();
    };
    let mut owner: HashMap<PathBuf, String> = HashMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // "libstdc++6:amd64: /usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30"; a diversion
        // line has no path after the package list, and several packages may share one.
        let Some((pkgs, path)) = line.split_once(": ") else {
            continue;
        };
        let (Some(p), false) = (names.get(path.trim()), pkgs.contains(',')) else {
            continue;
        };
        let pkg = pkgs.split(':').next().unwrap_or(pkgs).trim().to_string();
        owner.entry(p.clone()).or_insert(pkg);
    }
    let mut pkgs: Vec<&String> = owner.values().collect();
    pkgs.sort();
    pkgs.dedup();
    if pkgs.is_empty() {
        return HashMap::new();
    }
    let Ok(out) = Command::new("dpkg-query")
        .arg("-W")
        .arg("-f=${Package}\t${Version}\t${source:Package}\n")
        .args(&pkgs)
        .output()
    else {
        return HashMap::new();
    };
    let mut info: HashMap<String, Package> = HashMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<&str> = line.split('\t').collect();
        if let [name, version, source] = f[..] {
            info.insert(
                name.to_string(),
                Package {
                    name: name.to_string(),
                    version: version.to_string(),
                    source: source.to_string(),
                },
            );
        }
    }
    owner
        .into_iter()
        .filter_map(|(p, pkg)| Some((p, info.get(&pkg)?.clone())))
        .collect()
}

/// Whether apt knows `package` (an archive that has it is configured).
fn apt_knows(package: &str) -> bool {
    Command::new("apt-cache")
        .args(["show", "--no-all-versions", package])
        .output()
        .is_ok_and(|o| o.status.success() && !o.stdout.is_empty())
}

/// The advice for a Debian package: the debug package to install, and a note on a
/// package that looks like the one but is not.
fn package_advice(p: &Package, host: &Host, dir: Option<&Path>) -> (String, Option<String>) {
    // glibc keeps a manual -dbg package with the split debug files (/usr/lib/debug/
    // .build-id); the automatic PKG-dbgsym packages are in the debian-debug archive.
    let dbg = if p.name == "libc6" {
        "libc6-dbg".to_string()
    } else {
        format!("{}-dbgsym", p.name)
    };
    let mut s = format!("install {dbg}={}", p.version);
    if dbg.ends_with("-dbgsym") && !apt_knows(&dbg) {
        let suite = if host.codename.is_empty() {
            "CODENAME-debug".to_string()
        } else {
            format!("{}-debug", host.codename)
        };
        s += &format!(
            " (from Debian's debug archive: deb http://deb.debian.org/debian-debug {suite} main)"
        );
    }
    let mut note = None;
    // gcc-12's libstdc++6-12-dbg is no such package: another build of the library.
    if let (Some(major), "libstdc++6") = (p.source.strip_prefix("gcc-"), p.name.as_str()) {
        let debug_dir = dir
            .map(|d| d.join("debug").display().to_string())
            .unwrap_or_else(|| "/usr/lib/TRIPLET/debug".into());
        note = Some(format!(
            "libstdc++6-{major}-dbg is not its debug info but another build of the library \
             (its own build-id): it names the frames of a program run with \
             LD_LIBRARY_PATH={debug_dir}"
        ));
    }
    (s, note)
}

fn hint_line(
    m: &ModuleReport,
    package: Option<&Package>,
    host: Option<&Host>,
    locator: &Locator,
) -> String {
    let name = Path::new(&m.path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| m.path.clone());
    let id = hex(&m.build_id);
    let unnamed: u64 = m.unresolved.values().sum();
    let missing = matches!(
        m.status.as_ref().map(|u| u.reason),
        Some(Reason::NoFile | Reason::BuildIdMismatch)
    );
    let what = match missing {
        true => "no file with this build-id".to_string(),
        false => {
            let mut counts = Vec::new();
            if m.symtab_only > 0 {
                counts.push(format!(
                    "{} named from the symbol table only",
                    plural(m.symtab_only, "address", "addresses")
                ));
            }
            if unnamed > 0 {
                counts.push(format!("{unnamed} unnamed"));
            }
            format!("no debug info ({})", counts.join(", "))
        }
    };
    let mut advice = Vec::new();
    let mut note = None;
    match (package, host) {
        (Some(p), Some(h)) => {
            let (a, n) = package_advice(p, h, Path::new(&m.path).parent());
            advice.push(a);
            note = n;
        }
        _ => {
            let rest = if id.len() > 2 { &id[2..] } else { "" };
            advice.push(format!(
                "give {} with --debug-dir DIR (as DIR/.build-id/{}/{rest}.debug, or DIR{}{})",
                if missing {
                    "the binary or its debug file"
                } else {
                    "its debug file"
                },
                id.get(..2).unwrap_or(""),
                if m.path.starts_with('/') { "" } else { "/" },
                m.path
            ));
        }
    }
    match &locator.debuginfod {
        None => {
            // Debian's server has Debian's packages, not a program built here.
            advice.push(match package {
                Some(_) if host.is_some_and(|h| h.debian) => {
                    format!("or set DEBUGINFOD_URLS={DEBIAN_DEBUGINFOD}")
                }
                _ => "or set DEBUGINFOD_URLS to a server that has it".to_string(),
            });
        }
        Some(c) => {
            advice.push(format!(
                "(debuginfod {} has no debug info for it)",
                c.config().urls.join(" ")
            ));
        }
    }
    let mut line = format!("{name} (build-id {id}): {what}; {}", advice.join(", "));
    if let Some(n) = note {
        line += "; ";
        line += &n;
    }
    line
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn report(path: &str, symtab_only: u64, unresolved: u64) -> ModuleReport {
        ModuleReport {
            build_id: vec![0xab, 0xcd, 0xef],
            path: path.into(),
            debug_file: None,
            resolved: symtab_only,
            symtab_only,
            unresolved: if unresolved > 0 {
                BTreeMap::from([(Reason::NoSymbol, unresolved)])
            } else {
                BTreeMap::new()
            },
            status: None,
            binary: None,
            dwarf: false,
            vdso_image: false,
        }
    }

    /// A binary dpkg does not know: where --debug-dir looks, and debuginfod.
    #[test]
    fn generic_advice_names_the_build_id_path() {
        let line = hint_line(
            &report("/opt/app/server", 3, 2),
            None,
            None,
            &Locator::default(),
        );
        assert_eq!(
            line,
            "server (build-id abcdef): no debug info (3 addresses named from the symbol \
             table only, 2 unnamed); give its debug file with --debug-dir DIR (as \
             DIR/.build-id/ab/cdef.debug, or DIR/opt/app/server), or set DEBUGINFOD_URLS to \
             a server that has it"
        );
    }

    /// libstdc++ on Debian: its dbgsym package at the installed version, and what the
    /// -dbg package of gcc is.
    #[test]
    fn libstdcxx_advice_says_what_the_dbg_package_is() {
        let p = Package {
            name: "libstdc++6".into(),
            version: "12.2.0-14+deb12u1".into(),
            source: "gcc-12".into(),
        };
        let host = Host {
            debian: true,
            codename: "bookworm".into(),
        };
        let line = hint_line(
            &report("/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30", 11, 0),
            Some(&p),
            Some(&host),
            &Locator::default(),
        );
        assert!(
            line.starts_with(
                "libstdc++.so.6.0.30 (build-id abcdef): no debug info (11 addresses named from \
                 the symbol table only); install libstdc++6-dbgsym=12.2.0-14+deb12u1"
            ),
            "{line}"
        );
        assert!(
            line.ends_with(
                ", or set DEBUGINFOD_URLS=https://debuginfod.debian.net; libstdc++6-12-dbg is \
                 not its debug info but another build of the library (its own build-id): it \
                 names the frames of a program run with \
                 LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/debug"
            ),
            "{line}"
        );
    }

    /// Modules with DWARF, and the vDSO named from its image, get no line.
    #[test]
    fn only_modules_without_debug_info() {
        let mut dwarf = report("/a", 1, 1);
        dwarf.dwarf = true;
        let mut vdso = report("[vdso]", 5, 0);
        vdso.vdso_image = true;
        let none = report("/b", 0, 0);
        assert!(debug_hints(&[dwarf, vdso, none], &Locator::default()).is_empty());
    }
}
