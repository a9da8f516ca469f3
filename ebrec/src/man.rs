//! `ebrec man -o DIR`: the man pages, generated from the clap definitions (clap_mangen), so
//! that every flag and its help have one source. `docs/man/` holds the committed pages; a
//! test regenerates them and fails when they differ.
use crate::cli::{Cli, ManArgs};
use anyhow::{Context, Result};
use clap::CommandFactory;

pub fn run(a: ManArgs) -> Result<()> {
    std::fs::create_dir_all(&a.output)
        .with_context(|| format!("cannot create {}", a.output.display()))?;
    let cmd = Cli::command();
    write_all(&cmd, &a.output)
}

/// `NAME.1` for the command, and `NAME-SUB.1` for each visible subcommand, recursively.
fn write_all(cmd: &clap::Command, dir: &std::path::Path) -> Result<()> {
    let mut cmd = cmd.clone().disable_help_subcommand(true);
    cmd.build();
    write_page(&cmd, dir)?;
    let name = cmd.get_name().to_string();
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let sub = sub.clone().name(format!("{name}-{}", sub.get_name()));
        write_all(&sub, dir)?;
    }
    Ok(())
}

fn write_page(cmd: &clap::Command, dir: &std::path::Path) -> Result<()> {
    let path = dir.join(format!("{}.1", cmd.get_name()));
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .render(&mut buf)
        .with_context(|| format!("rendering {}", path.display()))?;
    std::fs::write(&path, buf).with_context(|| format!("cannot write {}", path.display()))
}
