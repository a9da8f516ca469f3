//! `ebsym`: offline symbolization and reports of ebtrace traces.
use anyhow::Context;
use clap::{Parser, Subcommand};
use std::io::Write;
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "ebsym",
    version,
    about = "Symbolize and analyze ebtrace traces (trace.pb.zst) offline",
    after_help = "Examples:\n  ebsym info trace.pb.zst\n  ebsym info trace.pb.zst --json | jq .events"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// What is in a trace: host, time span, processes and binaries, events, losses, whether
    /// it ended cleanly and whether it is symbolized.
    ///
    /// Example: `ebsym info trace.pb.zst --json`
    Info {
        /// The trace file.
        trace: PathBuf,
        /// Print JSON (schema in the README) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Every record of a trace, one per line (Rust debug notation, events decoded), for
    /// debugging the recorder or the format.
    ///
    /// Example: `ebsym dump trace.pb.zst | grep Alloc`
    Dump {
        /// The trace file.
        trace: PathBuf,
    },
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match cli.command {
        Command::Info { trace, json } => {
            let info = ebtrace_analyze::info::summarize(&trace)
                .with_context(|| format!("cannot read {}", trace.display()))?;
            if json {
                serde_json::to_writer_pretty(&mut out, &info)?;
                writeln!(out)?;
            } else {
                out.write_all(info.to_text().as_bytes())?;
            }
        }
        Command::Dump { trace } => {
            use ebtrace_format::events::Family;
            use ebtrace_format::proto::record::Kind;
            let mut r = ebtrace_format::TraceReader::open(&trace)
                .with_context(|| format!("cannot read {}", trace.display()))?;
            for rec in r.by_ref() {
                match rec.kind {
                    Some(Kind::Allocs(b)) => b
                        .decode()?
                        .iter()
                        .try_for_each(|e| writeln!(out, "{e:?}"))?,
                    Some(Kind::Frees(b)) => b
                        .decode()?
                        .iter()
                        .try_for_each(|e| writeln!(out, "{e:?}"))?,
                    Some(Kind::Locks(b)) => b
                        .decode()?
                        .iter()
                        .try_for_each(|e| writeln!(out, "{e:?}"))?,
                    Some(Kind::Funcs(b)) => b
                        .decode()?
                        .iter()
                        .try_for_each(|e| writeln!(out, "{e:?}"))?,
                    Some(Kind::CpuSamples(b)) => b
                        .decode()?
                        .iter()
                        .try_for_each(|e| writeln!(out, "{e:?}"))?,
                    Some(Kind::Offcpu(b)) => b
                        .decode()?
                        .iter()
                        .try_for_each(|e| writeln!(out, "{e:?}"))?,
                    Some(Kind::MemGrowth(b)) => b
                        .decode()?
                        .iter()
                        .try_for_each(|e| writeln!(out, "{e:?}"))?,
                    Some(k) => writeln!(out, "{k:?}")?,
                    None => writeln!(out, "(unknown record kind)")?,
                }
            }
            for d in r.damage() {
                writeln!(out, "DAMAGE {d}")?;
            }
        }
    }
    out.flush()?;
    Ok(())
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        // A closed pipe (ebsym … | head) is not an error.
        if e.chain().any(|c| {
            c.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
        }) {
            std::process::exit(0);
        }
        let chain: Vec<String> = e.chain().map(|c| c.to_string()).collect();
        eprintln!("ebsym: {}", chain.join(": "));
        std::process::exit(1);
    }
}
