//! `ebrec probes`: what `--func` would attach to, one function a line.
use crate::cli::ProbesArgs;
use anyhow::{bail, Context, Result};
use ebtrace_record::lookup::{resolve_all, Binaries};
use std::io::Write;

/// Runs `ebrec probes`.
pub fn probes(a: ProbesArgs) -> Result<()> {
    let bins = match (a.pid, a.command.first()) {
        (Some(pid), None) => Binaries::of_pid(pid)?,
        (None, Some(cmd)) => {
            let exe = ebtrace_record::lookup::find_in_path(cmd)
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
