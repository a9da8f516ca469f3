//! `ebrec diagnose`: the one command to run when paged. Every cheap family at once (cpu,
//! offcpu, lock, memgrowth, syscalls, bio, runq, tcp) for DURATION, under a CPU budget,
//! then the whole report set in the output folder.
//!
//! ebrec never symbolizes: the reports are `ebsym`'s, run as a separate program (next to
//! ebrec, or on PATH). Without it, the folder has the trace and `README.txt` says which
//! commands make the rest.
use crate::cli::{Cli, DiagnoseArgs};
use anyhow::{bail, Context, Result};
use clap::Parser;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The families a diagnose records, as `ebrec record` flags: each costs little on a
/// service (tracepoints and sampling; no allocator uprobes, whose trap is paid on every
/// call).
const FAMILIES: &[&str] = &[
    "--cpu=99",
    "--offcpu=1000",
    "--lock=100",
    "--memgrowth",
    "--syscalls=1000",
    "--bio",
    "--runq=1000",
    "--tcp",
];

/// The stack kinds a flame graph and a top report are made for.
const STACK_KINDS: &[&str] = &[
    "cpu",
    "offcpu",
    "lock",
    "memgrowth",
    "syscall",
    "bio",
    "runq",
    "tcp",
];

fn find_ebsym(given: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = given {
        return Some(p.to_path_buf());
    }
    let sibling = std::env::current_exe().ok()?.with_file_name("ebsym");
    if sibling.is_file() {
        return Some(sibling);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("ebsym"))
            .find(|p| p.is_file())
    })
}

/// Runs `ebsym ARGS`, its stdout into `out` (if given); a failure is one line, not fatal.
fn ebsym(exe: &Path, args: &[OsString], out: Option<&Path>, made: &mut Vec<String>) -> bool {
    let r = Command::new(exe).args(args).output();
    match r {
        Ok(o) if o.status.success() => {
            if let Some(out) = out {
                if let Err(e) = std::fs::write(out, &o.stdout) {
                    eprintln!("ebrec: diagnose: cannot write {}: {e}", out.display());
                    return false;
                }
                made.push(out.file_name().unwrap().to_string_lossy().into_owned());
            }
            true
        }
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            let last = err
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            eprintln!(
                "ebrec: diagnose: ebsym {} failed: {last}",
                args.first()
                    .map(|a| a.to_string_lossy())
                    .unwrap_or_default()
            );
            false
        }
        Err(e) => {
            eprintln!("ebrec: diagnose: cannot run {}: {e}", exe.display());
            false
        }
    }
}

pub fn run(a: DiagnoseArgs) -> Result<()> {
    let targets =
        usize::from(!a.pid.is_empty()) + usize::from(a.all) + usize::from(!a.command.is_empty());
    if targets != 1 {
        bail!("say what to diagnose: -p PID (repeatable), --all, or -- CMD ARGS...");
    }
    if !(a.duration > 0.0) {
        bail!("--duration must be more than 0 seconds");
    }
    std::fs::create_dir_all(&a.output)
        .with_context(|| format!("cannot create {}", a.output.display()))?;
    let dir = &a.output;
    let trace = dir.join("trace.pb.zst");
    let sym = dir.join("trace.sym.pb.zst");

    // 1. The recording: `ebrec record` with every cheap family, parsed as its command line
    // (so the trace's header says exactly how it was made).
    let mut args: Vec<OsString> = vec!["ebrec".into(), "record".into(), "-q".into(), "-o".into()];
    args.push(trace.clone().into_os_string());
    args.extend(FAMILIES.iter().map(OsString::from));
    args.push(format!("--max-cpu={}", a.max_cpu).into());
    if let Some(r) = &a.request {
        args.push("--request".into());
        args.push(r.into());
    }
    args.push(format!("--duration={}", a.duration).into());
    for p in &a.pid {
        args.push("-p".into());
        args.push(p.to_string().into());
    }
    if a.all {
        args.push("--all".into());
    }
    if !a.command.is_empty() {
        args.push("--".into());
        args.extend(a.command.iter().cloned());
    }
    let cli = Cli::try_parse_from(&args).context("the recording's command line")?;
    let crate::cli::Command::Record(rec) = cli.command else {
        unreachable!("parsed as record")
    };
    eprintln!(
        "ebrec: diagnose: recording {} for {} s into {}",
        FAMILIES.join(" "),
        a.duration,
        trace.display()
    );
    ebtrace_record::record(*rec)?;

    // 2. The reports, by ebsym.
    let Some(exe) = find_ebsym(a.ebsym.as_deref()) else {
        let readme = format!(
            "ebsym was not found next to ebrec or on PATH: the reports were not made.\n\
             On a machine with ebsym:\n  ebsym {t} -o {s}\n  ebsym summary {s}\n  \
             ebsym flamegraph {s} --kind cpu -o flame-cpu.svg\n  ebsym latency {t} --kind syscall\n",
            t = trace.display(),
            s = sym.display()
        );
        std::fs::write(dir.join("README.txt"), &readme)?;
        eprintln!("ebrec: diagnose: {}", readme.lines().next().unwrap_or(""));
        return Ok(());
    };
    let (made, requests) = reports(&a, &exe, &trace, &sym);
    if requests {
        if let Ok(r) = std::fs::read_to_string(dir.join("requests.txt")) {
            println!("{r}");
        }
    }
    if let Ok(summary) = std::fs::read_to_string(dir.join("summary.txt")) {
        print!("{summary}");
    }
    eprintln!(
        "ebrec: diagnose: wrote {} in {}",
        made.join(", "),
        dir.display()
    );
    Ok(())
}

/// The report set, by ebsym `exe`, of `trace` (symbolized into `sym` first) into the
/// folder: what was made, and whether `ebsym requests` was.
fn reports(a: &DiagnoseArgs, exe: &Path, trace: &Path, sym: &Path) -> (Vec<String>, bool) {
    let dir = &a.output;
    let mut made = vec!["trace.pb.zst".to_string()];
    let mut find: Vec<OsString> = Vec::new();
    for d in &a.debug_dir {
        find.push("--debug-dir".into());
        find.push(d.clone().into_os_string());
    }
    let os = |v: &[&str]| -> Vec<OsString> { v.iter().map(OsString::from).collect() };
    let t = trace.as_os_str().to_os_string();
    let s = sym.as_os_str().to_os_string();
    let mut sym_args = vec![t.clone(), "-o".into(), s.clone()];
    sym_args.extend(find.iter().cloned());
    let input = if ebsym(&exe, &sym_args, None, &mut made) {
        made.push("trace.sym.pb.zst".into());
        s
    } else {
        t
    };
    // The idle rules the reports classify waits with, and the wrapper rules (every report
    // takes them).
    let mut idle: Vec<OsString> = Vec::new();
    for p in &a.idle {
        idle.push("--idle".into());
        idle.push(p.into());
    }
    if a.no_idle_rules {
        idle.push("--no-idle-rules".into());
    }
    // And the allocator wrappers the alloc finding looks past.
    for p in &a.wrapper {
        idle.push("--wrapper".into());
        idle.push(p.into());
    }
    if a.no_wrapper_rules {
        idle.push("--no-wrapper-rules".into());
    }
    let with = |mut v: Vec<OsString>| {
        v.insert(1, input.clone());
        if v[0] != "info" {
            v.extend(idle.iter().cloned());
        }
        v
    };
    // With --request, why the slow requests were slow comes first.
    let requests = a.request.is_some()
        && ebsym(
            &exe,
            &with(os(&["requests"])),
            Some(&dir.join("requests.txt")),
            &mut made,
        );
    if a.request.is_some() {
        ebsym(
            &exe,
            &with(os(&["requests", "--json"])),
            Some(&dir.join("requests.json")),
            &mut made,
        );
    }
    ebsym(
        &exe,
        &with(os(&["summary"])),
        Some(&dir.join("summary.txt")),
        &mut made,
    );
    ebsym(
        &exe,
        &with(os(&["summary", "--json"])),
        Some(&dir.join("summary.json")),
        &mut made,
    );
    ebsym(
        &exe,
        &with(os(&["info"])),
        Some(&dir.join("info.txt")),
        &mut made,
    );
    for kind in STACK_KINDS {
        ebsym(
            &exe,
            &with(os(&["top", "--kind", kind, "-n", "20"])),
            Some(&dir.join(format!("top-{kind}.txt"))),
            &mut made,
        );
        let svg = dir.join(format!("flame-{kind}.svg"));
        let mut fa = with(os(&["flamegraph", "--kind", kind, "-o"]));
        fa.push(svg.clone().into_os_string());
        // A kind without events has no flame graph (ebsym says so): not an error here.
        let quiet = Command::new(&exe)
            .args(&fa)
            .output()
            .is_ok_and(|o| o.status.success());
        if quiet {
            made.push(format!("flame-{kind}.svg"));
        }
    }
    ebsym(
        &exe,
        &with(os(&["locks", "-n", "20"])),
        Some(&dir.join("locks.txt")),
        &mut made,
    );
    for kind in ["syscall", "bio", "runq"] {
        ebsym(
            &exe,
            &with(os(&["latency", "--kind", kind, "-n", "30"])),
            Some(&dir.join(format!("latency-{kind}.txt"))),
            &mut made,
        );
        let svg = dir.join(format!("heatmap-{kind}.svg"));
        let mut ha = with(os(&["heatmap", "--kind", kind, "-o"]));
        ha.push(svg.into_os_string());
        if Command::new(&exe)
            .args(&ha)
            .output()
            .is_ok_and(|o| o.status.success())
        {
            made.push(format!("heatmap-{kind}.svg"));
        }
    }
    ebsym(
        &exe,
        &with(os(&["tcp"])),
        Some(&dir.join("tcp.txt")),
        &mut made,
    );
    (made, requests)
}
