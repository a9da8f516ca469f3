//! `ebrec`: records allocations, frees and lock contention of C++ processes with eBPF into
//! an ebtrace trace file. It never reads DWARF and never symbolizes.
mod agent;
mod budget;
mod cfi;
mod cli;
mod diagnose;
mod doctor;
mod elf;
mod funcs;
mod kallsyms;
mod perf;
mod placement;
mod preload;
mod probes;
mod procfs;
mod record;
mod rotate;
mod session;
mod summary;
mod targets;

use clap::Parser;
use cli::{Cli, Command};

fn main() {
    let cli = Cli::parse();
    let r = match cli.command {
        Command::Record(a) => record::record(*a),
        Command::Probes(a) => cli::probes::probes(a),
        Command::Doctor(a) => doctor::run(a),
        Command::Diagnose(a) => diagnose::run(a),
        Command::Agent(a) => agent::run(*a),
        Command::Push(a) => agent::push::run(*a),
    };
    if let Err(e) = r {
        let chain: Vec<String> = e.chain().map(|c| c.to_string()).collect();
        eprintln!("ebrec: {}", chain.join(": "));
        std::process::exit(1);
    }
}
