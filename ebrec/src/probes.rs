//! `ebrec probes`: what `--func` would attach to, one function a line; or the USDT probes of
//! a process, a command or a binary, one probe a line, named as bpftrace names them.
use crate::cli::{ProbePattern, ProbesArgs, UsdtPattern};
use anyhow::{bail, Context, Result};
use ebtrace_elf::sdt::Probe;
use ebtrace_elf::Elf;
use ebtrace_record::lookup::{glob, resolve_all, Binaries, FuncSpec};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Runs `ebrec probes`.
pub fn probes(a: ProbesArgs) -> Result<()> {
    if a.pid.is_none() && a.command.is_empty() {
        return binary_usdt(&a.patterns);
    }
    let mut funcs = Vec::new();
    let mut usdt = Vec::new();
    for p in a.patterns {
        match p {
            ProbePattern::Func(f) => funcs.push(f),
            ProbePattern::Usdt(u) => usdt.push(u),
            // Not a function spec after all: its error.
            ProbePattern::File(f) => {
                return Err(f.to_string_lossy().parse::<FuncSpec>().unwrap_err());
            }
        }
    }
    if !funcs.is_empty() && !usdt.is_empty() {
        bail!("list functions or USDT probes, not both at once");
    }
    let bins = match (a.pid, a.command.first()) {
        (Some(pid), None) => Binaries::of_pid(pid)?,
        (None, Some(cmd)) => {
            let exe = ebtrace_record::lookup::find_in_path(cmd)
                .with_context(|| format!("command not found: {}", cmd.to_string_lossy()))?;
            Binaries::of_command(&exe)?
        }
        _ => bail!("say where to look: -p PID, or -- CMD ARGS..."),
    };
    if funcs.is_empty() {
        let target = match a.pid {
            Some(pid) => format!("process {pid}"),
            None => format!("{} and its libraries", a.command[0].to_string_lossy()),
        };
        let root = a.pid.map(|pid| format!("/proc/{pid}/root"));
        let files: Vec<(String, PathBuf)> = bins
            .paths()
            .into_iter()
            .map(|p| (p.display().to_string(), p))
            .collect();
        return list_usdt(&target, &files, root.as_deref(), &usdt, false);
    }
    functions(&bins, &funcs)
}

/// `ebrec probes BINARY [usdt:PATTERN...]`.
fn binary_usdt(patterns: &[ProbePattern]) -> Result<()> {
    let where_ =
        "say where to look: -p PID, or -- CMD ARGS... (or a BINARY alone, for its USDT probes)";
    let Some(first) = patterns.first() else {
        bail!(where_);
    };
    let text = match first {
        ProbePattern::Func(f) => f.text.clone(),
        ProbePattern::File(p) => p.display().to_string(),
        ProbePattern::Usdt(_) => bail!(where_),
    };
    let path = if Path::new(&text).is_file() {
        PathBuf::from(&text)
    } else if !text.contains('/') {
        match ebtrace_record::lookup::find_in_path(&std::ffi::OsString::from(&text)) {
            Some(p) => p,
            None => bail!(where_),
        }
    } else {
        bail!("{where_}: no file {text}");
    };
    let mut usdt = Vec::new();
    for p in &patterns[1..] {
        match p {
            ProbePattern::Usdt(u) => usdt.push(u.clone()),
            ProbePattern::Func(f) => bail!(
                "'{}': with a BINARY, only usdt: patterns (functions need -p PID or -- CMD)",
                f.text
            ),
            ProbePattern::File(f) => bail!(
                "'{}': with a BINARY, only usdt: patterns (one BINARY at a time)",
                f.display()
            ),
        }
    }
    // Named as given: bpftrace -l 'usdt:BINARY:*' prints the path as written.
    let shown = if Path::new(&text).is_file() {
        text
    } else {
        path.display().to_string()
    };
    list_usdt(&shown.clone(), &[(shown, path)], None, &usdt, true)
}

/// One line per USDT probe of `files` ((name shown, path to open)) that `patterns` select
/// (all without patterns): `usdt:FILE:PROVIDER:NAME`, the argument spec, `semaphore` or `-`,
/// the ELF address. `root`: the `/proc/PID/root` prefix the shown names carry, which a
/// BINARY part of a pattern may leave out. `strict`: a file that cannot be read is an error
/// (else a warning, and the next file).
fn list_usdt(
    target: &str,
    files: &[(String, PathBuf)],
    root: Option<&str>,
    patterns: &[UsdtPattern],
    strict: bool,
) -> Result<()> {
    let mut lines = Vec::new();
    let mut providers: Vec<String> = Vec::new();
    for (shown, path) in files {
        let sdt = match Elf::open(path)
            .map_err(|e| e.to_string())
            .and_then(|e| e.sdt())
        {
            Ok(s) => s,
            Err(e) if strict => bail!("cannot read {shown}: {e}"),
            Err(e) => {
                eprintln!("ebrec: warning: {shown}: skipped, cannot read its USDT notes: {e}");
                continue;
            }
        };
        if sdt.malformed > 0 {
            eprintln!(
                "ebrec: warning: {shown}: {} malformed .note.stapsdt notes skipped",
                sdt.malformed
            );
        }
        if sdt.unplaced > 0 {
            eprintln!(
                "ebrec: warning: {shown}: {} USDT probes skipped: their address or semaphore is \
                 outside the file's loaded segments",
                sdt.unplaced
            );
        }
        let mut probes: Vec<&Probe> = sdt.probes.iter().collect();
        probes.sort_by(|a, b| {
            (&a.provider, &a.name, a.address).cmp(&(&b.provider, &b.name, b.address))
        });
        for p in probes {
            if !providers.contains(&p.provider) {
                providers.push(p.provider.clone());
            }
            let seen = shown.strip_prefix(root.unwrap_or("")).unwrap_or(shown);
            if !patterns.is_empty() && !patterns.iter().any(|u| selects(u, shown, seen, p)) {
                continue;
            }
            let args = if p.args_spec.is_empty() {
                "-"
            } else {
                &p.args_spec
            };
            let sem = if p.semaphore != 0 { "semaphore" } else { "-" };
            lines.push(format!(
                "usdt:{shown}:{}:{}\t{args}\t{sem}\t{:#x}",
                p.provider, p.name, p.address
            ));
        }
    }
    if lines.is_empty() {
        if providers.is_empty() {
            bail!("no USDT probes in {target} (no .note.stapsdt notes)");
        }
        providers.sort();
        let pats: Vec<&str> = patterns.iter().map(|u| u.text.as_str()).collect();
        bail!(
            "no USDT probe matches {} in {target} (its providers: {})",
            pats.join(", "),
            providers.join(", ")
        );
    }
    write_lines(lines.iter().map(String::as_str))
}

/// Whether `u` selects probe `p` of the file shown as `shown` (`seen`: as the process sees
/// it).
fn selects(u: &UsdtPattern, shown: &str, seen: &str, p: &Probe) -> bool {
    let file_ok = match &u.binary {
        None => true,
        Some(b) => {
            let file_name = shown.rsplit('/').next().unwrap_or(shown);
            glob(b, shown) || glob(b, seen) || glob(b, file_name)
        }
    };
    file_ok && glob(&u.provider, &p.provider) && glob(&u.name, &p.name)
}

/// The function listing: what `--func` would attach to.
fn functions(bins: &Binaries, specs: &[FuncSpec]) -> Result<()> {
    let matches = resolve_all(bins, specs)?;
    // The fifth column: where --func's uprobe would go and what a hit costs (see
    // placement.rs): "entry" (an emulated first instruction), "+0xN" (past instructions the
    // kernel would single-step), "single-step" (a second trap per call).
    let lines = matches.iter().map(|m| {
        let p = ebtrace_record::lookup::place_in_file(
            &m.path,
            m.file_offset,
            m.size,
            &ebtrace_record::lookup::ARGS,
        );
        let at = match (p.skip, p.single_step) {
            (_, true) => "single-step".to_string(),
            (0, false) => "entry".to_string(),
            (n, false) => format!("+{n:#x}"),
        };
        format!(
            "{}\t{}\t{:#x}\t{}\t{at}",
            m.demangled, m.binary, m.vaddr, m.size
        )
    });
    write_lines(lines)
}

/// `lines` on stdout, one a line; a closed pipe (`| head`) is no error.
fn write_lines<S: AsRef<str>>(lines: impl IntoIterator<Item = S>) -> Result<()> {
    let mut out = std::io::stdout().lock();
    let written = lines
        .into_iter()
        .try_for_each(|l| writeln!(out, "{}", l.as_ref()));
    match written.and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

#[cfg(test)]
mod tests {
    use super::glob;

    #[test]
    fn globs() {
        assert!(glob("*", ""));
        assert!(glob("*", "query__start"));
        assert!(glob("query*", "query__start"));
        assert!(glob("*__start", "query__start"));
        assert!(glob("q?ery*t", "query__start"));
        assert!(glob("libstdc++*", "libstdc++.so.6.0.30"));
        assert!(!glob("query", "query__start"));
        assert!(!glob("*done", "query__start"));
        assert!(!glob("?", ""));
        assert!(glob("a*b*c", "aXbYbZc"));
        assert!(!glob("a*b*c", "aXbYbZ"));
    }
}
