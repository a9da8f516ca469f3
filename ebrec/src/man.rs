//! `ebrec man -o DIR`: the man pages, generated from the clap definitions (see
//! ebtrace-manpages). `docs/man/` holds the committed pages.
use crate::cli::{Cli, ManArgs};
use anyhow::{Context, Result};
use clap::CommandFactory;

pub fn run(a: ManArgs) -> Result<()> {
    ebtrace_manpages::write_all(&Cli::command(), &a.output)
        .with_context(|| format!("writing the man pages into {}", a.output.display()))?;
    Ok(())
}
