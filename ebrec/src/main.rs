//! `ebrec`: records allocations, frees, lock contention, CPU and off-CPU time, system
//! latencies of C++ processes with eBPF into an ebtrace trace file. It never reads DWARF and
//! never symbolizes (the recorder is ebtrace-record; the agent, ebtrace-agent).
mod cli;
mod diagnose;
mod doctor;
mod man;
mod probes;

use clap::Parser;
use cli::{Cli, Command};

fn main() {
    let cli = Cli::parse();
    let r = match cli.command {
        Command::Record(a) => ebtrace_record::record(*a),
        Command::Probes(a) => probes::probes(a),
        Command::Doctor(a) => doctor::run(a),
        Command::Diagnose(a) => diagnose::run(a),
        Command::Agent(a) => ebtrace_agent::run(*a),
        Command::Push(a) => ebtrace_agent::push::run(*a),
        Command::Man(a) => man::run(a),
        Command::Completions(a) => man::completions(a),
    };
    if let Err(e) = r {
        let chain: Vec<String> = e.chain().map(|c| c.to_string()).collect();
        eprintln!("ebrec: {}", chain.join(": "));
        std::process::exit(1);
    }
}
