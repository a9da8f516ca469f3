//! Man pages generated from a program's clap definitions, so that every flag and its help
//! have one source: `NAME.1` for the program and `NAME-SUB.1` for each visible subcommand
//! (recursively). `ebrec man -o docs/man` and `ebsym man -o docs/man` write them; a test
//! regenerates them and fails when `docs/man` differs.
use std::io;
use std::path::Path;

/// Writes the pages of `cmd` into `dir` (created); returns how many.
pub fn write_all(cmd: &clap::Command, dir: &Path) -> io::Result<usize> {
    std::fs::create_dir_all(dir)?;
    let mut cmd = cmd.clone().disable_help_subcommand(true);
    cmd.build();
    let mut n = 0;
    write_tree(&cmd, dir, &mut n)?;
    Ok(n)
}

fn write_tree(cmd: &clap::Command, dir: &Path, n: &mut usize) -> io::Result<()> {
    let path = dir.join(format!("{}.1", cmd.get_name()));
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut buf)?;
    std::fs::write(&path, buf)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    *n += 1;
    let name = cmd.get_name().to_string();
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let sub = sub.clone().name(format!("{name}-{}", sub.get_name()));
        write_tree(&sub, dir, n)?;
    }
    Ok(())
}
