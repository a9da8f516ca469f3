//! `ebrec man -o DIR`: the man pages, generated from the clap definitions (see
//! ebtrace-manpages). `docs/man/` holds the committed pages. `ebrec completions`: the shell
//! completions, from the same definitions.
use crate::cli::{Cli, CompletionsArgs, ManArgs};
use anyhow::{Context, Result};
use clap::CommandFactory;

pub fn run(a: ManArgs) -> Result<()> {
    ebtrace_manpages::write_all(&Cli::command(), &a.output, &["ebsym"])
        .with_context(|| format!("writing the man pages into {}", a.output.display()))?;
    Ok(())
}

pub fn completions(a: CompletionsArgs) -> Result<()> {
    let cmd = Cli::command();
    if let Some(dir) = a.output {
        ebtrace_manpages::write_completions(&cmd, &dir)
            .with_context(|| format!("writing the completions into {}", dir.display()))?;
    } else if let Some(shell) = a.shell {
        ebtrace_manpages::print_completions(&cmd, shell, &mut std::io::stdout().lock());
    }
    Ok(())
}
