//! Which USDT probes `--usdt BINARY_OR_LIB:PROVIDER:NAME` names: the `.note.stapsdt` notes
//! (read by `ebtrace_elf::sdt`) of the target's binaries, matched by globs on the provider
//! and the name; and the start/done pairs among them.
//!
//! ```text
//! postgres:postgresql:query__start   BINARY_OR_LIB: a path, or a file name (`libc.so.6`,
//!                                    `libc`), as --func's LIB:SYMBOL
//! ./server:shop:request__*           globs (`*`, `?`) on PROVIDER and NAME
//! shop:request__start                PROVIDER:NAME: in every binary of the target
//! usdt:./server:shop:idle            `usdt:` (as `ebrec probes` prints them) is optional
//! ```
//!
//! A probe is one (binary, provider, name): every site of that name in the binary (a name
//! can have several, like `request__done` on two paths) is one probe, one id. Pairs: `X__start`
//! with `X__done` or `X__end`, `X_start` with `X_end` or `X_done` (same binary and provider),
//! or as `--usdt-pair START,DONE` says.
use anyhow::{bail, Context, Result};
use ebtrace_elf::sdt::{Loc, Probe};
use ebtrace_elf::Elf;
use std::path::PathBuf;

use super::resolve::Binaries;
use super::suggest::levenshtein;

/// The probes `--exceptions` attaches: libstdc++'s `__cxa_throw` and `__cxa_rethrow`
/// (arguments: the exception object, its `std::type_info`), in every binary that has them.
pub const EXCEPTION_PROBES: [&str; 2] = ["libstdcxx:throw", "libstdcxx:rethrow"];

/// One `--usdt` spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsdtSpec {
    /// As written.
    pub text: String,
    pub lib: Option<String>,
    pub provider: String,
    pub name: String,
}

impl std::str::FromStr for UsdtSpec {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> Result<Self> {
        let rest = text.strip_prefix("usdt:").unwrap_or(text);
        let mut parts = rest.rsplitn(3, ':');
        let name = parts.next().unwrap_or_default();
        let (lib, provider) = match (parts.next(), parts.next()) {
            (Some(p), None) => (None, p),
            (Some(p), Some(b)) => (Some(b.to_string()), p),
            _ => bail!("--usdt '{text}': give BINARY_OR_LIB:PROVIDER:NAME (or PROVIDER:NAME)"),
        };
        if provider.is_empty() || name.is_empty() || lib.as_deref() == Some("") {
            bail!("--usdt '{text}': an empty part (BINARY_OR_LIB:PROVIDER:NAME)");
        }
        Ok(UsdtSpec {
            text: text.to_string(),
            lib,
            provider: provider.to_string(),
            name: name.to_string(),
        })
    }
}

/// A USDT probe to attach: one (binary, provider, name), all its sites.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsdtProbe {
    /// The ProbedUsdt id (the BPF cookie), from 1.
    pub id: u64,
    /// Where ebrec opens the binary (and libbpf attaches).
    pub path: PathBuf,
    /// The binary as the target sees it.
    pub binary: String,
    pub build_id: Vec<u8>,
    pub provider: String,
    pub name: String,
    /// The first site's argument spec as written.
    pub args_spec: String,
    pub arg_count: u32,
    /// Bit i: argument i is signed.
    pub arg_signed: u32,
    /// The first site's file offset, and its semaphore's (0: none).
    pub offset: u64,
    pub semaphore: u64,
    /// Sites of this name in the binary.
    pub sites: usize,
    /// Arguments the reader cannot express (libbpf reads none of them then): why.
    pub unreadable: Option<String>,
    /// The done probe's id, for a start probe of a pair (0: none).
    pub done: u64,
}

impl std::fmt::Display for UsdtProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{} in {} ({} site{}, args '{}'{})",
            self.provider,
            self.name,
            self.binary,
            self.sites,
            if self.sites == 1 { "" } else { "s" },
            self.args_spec,
            if self.semaphore != 0 {
                ", semaphore"
            } else {
                ""
            }
        )
    }
}

/// Whether `text` matches `pattern`, where `*` is any run of characters and `?` any one.
pub fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// The probes `specs` name in `bins`, added to `probes` (ids go on from its length; a probe
/// already there keeps its id). Err: a spec that names nothing, with the closest names.
pub fn resolve(bins: &Binaries, specs: &[UsdtSpec], probes: &mut Vec<UsdtProbe>) -> Result<()> {
    for spec in specs {
        let files = bins
            .files(spec.lib.as_deref())
            .with_context(|| format!("--usdt '{}'", spec.text))?;
        let mut found = 0;
        let mut names: Vec<String> = Vec::new();
        for (binary, path) in files {
            let Ok(sdt) = Elf::open(&path)
                .map_err(|e| e.to_string())
                .and_then(|e| e.sdt())
            else {
                continue;
            };
            let mut seen: Vec<(&str, &str)> = Vec::new();
            for p in &sdt.probes {
                let key = (p.provider.as_str(), p.name.as_str());
                if !seen.contains(&key) {
                    seen.push(key);
                    names.push(format!("{}:{}", p.provider, p.name));
                }
                if !(glob(&spec.provider, &p.provider) && glob(&spec.name, &p.name)) {
                    continue;
                }
                found += 1;
                add(probes, &binary, &path, p, &sdt.probes);
            }
        }
        if found == 0 {
            bail!("{}", nothing_matches(spec, bins, names));
        }
    }
    Ok(())
}

/// The refusal of a spec that names no probe: the closest names, or that there are none.
fn nothing_matches(spec: &UsdtSpec, bins: &Binaries, mut names: Vec<String>) -> String {
    let in_ = match &spec.lib {
        Some(l) => format!("{l} ({})", bins.target()),
        None => bins.target().to_string(),
    };
    if names.is_empty() {
        return format!(
            "--usdt '{}': no USDT probes in {in_} (no .note.stapsdt notes)",
            spec.text
        );
    }
    let q = format!("{}:{}", spec.provider, spec.name);
    names.sort_by_key(|n| (levenshtein(q.as_bytes(), n.as_bytes()), n.clone()));
    names.dedup();
    names.truncate(5);
    format!(
        "--usdt '{}': no USDT probe {q} in {in_} (closest: {})",
        spec.text,
        names.join(", ")
    )
}

/// Adds probe `p` of `path` (a site of it: every site of the same name is the one probe).
fn add(probes: &mut Vec<UsdtProbe>, binary: &str, path: &PathBuf, p: &Probe, all: &[Probe]) {
    let same_file = |q: &UsdtProbe| {
        q.path == *path
            || (std::fs::canonicalize(&q.path).ok())
                .is_some_and(|c| std::fs::canonicalize(path).ok() == Some(c))
    };
    if probes
        .iter()
        .any(|q| q.provider == p.provider && q.name == p.name && same_file(q))
    {
        return;
    }
    let sites = all
        .iter()
        .filter(|q| q.provider == p.provider && q.name == p.name)
        .count();
    let unreadable = p.args.iter().find_map(|a| match &a.loc {
        Loc::Unsupported(why) => Some(format!("{}: {why}", a.text)),
        _ => None,
    });
    let arg_signed = p
        .args
        .iter()
        .take(32)
        .enumerate()
        .filter(|(_, a)| a.signed)
        .fold(0u32, |m, (i, _)| m | (1 << i));
    probes.push(UsdtProbe {
        id: probes.len() as u64 + 1,
        path: path.clone(),
        binary: binary.to_string(),
        build_id: ebtrace_elf::build_id(path).unwrap_or_default(),
        provider: p.provider.clone(),
        name: p.name.clone(),
        args_spec: p.args_spec.clone(),
        arg_count: p.args.len() as u32,
        arg_signed,
        offset: p.file_offset,
        semaphore: p.semaphore_offset,
        sites,
        unreadable,
        done: 0,
    });
}

/// The done names a start probe's name pairs with by convention.
fn done_names(start: &str) -> Vec<String> {
    if let Some(x) = start.strip_suffix("__start") {
        vec![format!("{x}__done"), format!("{x}__end")]
    } else if let Some(x) = start.strip_suffix("_start") {
        vec![format!("{x}_end"), format!("{x}_done")]
    } else {
        Vec::new()
    }
}

/// Sets each start probe's `done`: by name, then as `pairs` (`START,DONE`, each a NAME or
/// PROVIDER:NAME among the probes) say. Err: a pair naming a probe not attached.
pub fn pair(probes: &mut [UsdtProbe], pairs: &[String]) -> Result<()> {
    let ids: Vec<(u64, PathBuf, String, String)> = probes
        .iter()
        .map(|p| (p.id, p.path.clone(), p.provider.clone(), p.name.clone()))
        .collect();
    for p in probes.iter_mut() {
        let names = done_names(&p.name);
        p.done = ids
            .iter()
            .find(|(_, path, prov, name)| {
                *path == p.path && *prov == p.provider && names.contains(name)
            })
            .map_or(0, |d| d.0);
    }
    for text in pairs {
        let Some((start, done)) = text.split_once(',') else {
            bail!("--usdt-pair '{text}': give START,DONE (probe names, or PROVIDER:NAME)");
        };
        let named = |q: &str, p: &UsdtProbe| match q.split_once(':') {
            Some((prov, name)) => p.provider == prov && p.name == name,
            None => p.name == q,
        };
        let mut any = false;
        for i in 0..probes.len() {
            if !named(start, &probes[i]) {
                continue;
            }
            let s = &probes[i];
            let d = probes
                .iter()
                .find(|d| d.path == s.path && d.provider == s.provider && named(done, d))
                .map(|d| d.id);
            if let Some(d) = d {
                probes[i].done = d;
                any = true;
            }
        }
        if !any {
            bail!("--usdt-pair '{text}': no attached --usdt probe {start} with a {done} beside it in its binary (add both with --usdt)");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        let s: UsdtSpec = "postgres:postgresql:query__start".parse().unwrap();
        assert_eq!(s.lib.as_deref(), Some("postgres"));
        assert_eq!(
            (s.provider.as_str(), s.name.as_str()),
            ("postgresql", "query__start")
        );
        let s: UsdtSpec = "usdt:shop:request__*".parse().unwrap();
        assert_eq!(s.lib, None);
        assert_eq!(s.name, "request__*");
        assert!("shop".parse::<UsdtSpec>().is_err());
        assert!("a::b".parse::<UsdtSpec>().is_err());
    }

    #[test]
    fn globs() {
        assert!(glob("*", ""));
        assert!(glob("query*", "query__start"));
        assert!(glob("*__start", "query__start"));
        assert!(glob("q?ery*t", "query__start"));
        assert!(!glob("query", "query__start"));
        assert!(glob("a*b*c", "aXbYbZc"));
        assert!(!glob("a*b*c", "aXbYbZ"));
    }

    fn probe(id: u64, name: &str) -> UsdtProbe {
        UsdtProbe {
            id,
            path: "/bin/x".into(),
            binary: "/bin/x".into(),
            build_id: Vec::new(),
            provider: "p".into(),
            name: name.into(),
            args_spec: String::new(),
            arg_count: 0,
            arg_signed: 0,
            offset: 0,
            semaphore: 0,
            sites: 1,
            unreadable: None,
            done: 0,
        }
    }

    #[test]
    fn pairs_by_name_and_by_flag() {
        let mut ps = vec![
            probe(1, "query__start"),
            probe(2, "query__done"),
            probe(3, "tx_start"),
            probe(4, "tx_end"),
            probe(5, "begin"),
            probe(6, "finish"),
        ];
        pair(&mut ps, &["begin,p:finish".into()]).unwrap();
        let done: Vec<u64> = ps.iter().map(|p| p.done).collect();
        assert_eq!(done, [2, 0, 4, 0, 6, 0]);
        assert!(pair(&mut ps, &["begin,nothing".into()]).is_err());
        assert!(pair(&mut ps, &["begin".into()]).is_err());
    }
}
