//! `ebrec probes`: what `--func` would attach to, one function a line.
use crate::funcs::{resolve_all, Binaries, FuncSpec};
use anyhow::{bail, Context, Result};
use std::ffi::OsString;
use std::io::Write;

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
            let exe = crate::targets::find_in_path(cmd)
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
