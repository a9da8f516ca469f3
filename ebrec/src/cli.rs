//! Every clap type of ebrec: the commands and their arguments. The command modules
//! (probes, doctor, diagnose) take their arguments from here; this module imports none of
//! them. `ebrec record`'s flags are the recorder's `RecordConfig` (its `cli` feature).

use clap::{Parser, Subcommand};
use ebtrace_record::lookup::FuncSpec;
use std::ffi::OsString;
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "ebrec",
    version,
    about = "Record allocations, leaks and lock contention of C++ processes with eBPF"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Record events of running processes (-p), of a command it starts (-- CMD), or of all.
    #[command(after_help = "Examples:
  ebrec record -o trace.pb.zst --alloc=4096 -p 1234
  ebrec record -o trace.pb.zst --alloc --lock=100 -- ./server --port 8080
  ebrec record -o trace.pb.zst --alloc=1024 --sample 10 --all --duration 30
  ebrec record -o trace.pb.zst --lock=50 --lock-mode uprobe -p 1234")]
    Record(Box<RecordArgs>),
    /// List the functions `--func` would attach to (symbol tables), or the USDT probes of a
    /// process, a command or a binary (.note.stapsdt).
    Probes(ProbesArgs),
    /// Check that this machine (and with -p, that process) can be recorded: each check one
    /// line, `ok`, `warn` or `FAIL`, with the fix. Exits 1 when a check FAILs.
    #[command(after_help = "Examples:
  ebrec doctor
  ebrec doctor -p 1234            # also its binaries: frame pointers, symbols, --stack-mode
  ebrec doctor -p 1234 --json")]
    Doctor(DoctorArgs),
    /// The one command to run when paged: cpu, offcpu, lock, memgrowth, syscalls, bio, runq
    /// and tcp at once for DURATION under a CPU budget, then (with ebsym) the symbolized
    /// trace, a flame graph and a top report per kind, the latency reports and heat maps,
    /// and summary.txt/summary.json with the top finding of each family and where the
    /// busiest thread groups' time goes.
    #[command(after_help = "Examples:
  ebrec diagnose -p 1234 --duration 30 -o diag/
  ebrec diagnose --all --duration 10 -o diag/
  ebrec diagnose -o diag/ -- ./server --port 8080")]
    Diagnose(DiagnoseArgs),
    /// Run continuously (for systemd): record the targets in windows of --window seconds,
    /// keep the newest --keep window files, push one profile per window and kind to the
    /// profiling backends (--push), serve Prometheus metrics (--metrics).
    #[command(after_help = "Examples:
  ebrec agent --cpu --offcpu --lock --comm '^db_bench$' --push pyroscope+http://127.0.0.1:4040 --service db
  ebrec agent --cpu --all --window 10 --keep 6 --max-size 512M -o /var/lib/ebrec/agent.pb.zst
  ebrec agent --cpu --cgroup system.slice/nginx.service --push parca+http://parca:7070 --metrics 127.0.0.1:9464")]
    Agent(Box<ebtrace_agent::AgentArgs>),
    /// Push a trace's profiles (one per kind) to profiling backends, as `ebrec agent
    /// --push` pushes each window: Pyroscope, Parca (gRPC-Web), OTLP/HTTP. Exits 1 with
    /// the reason when a backend did not take them.
    #[command(after_help = "Examples:
  ebrec push trace.pb.zst --push pyroscope+http://127.0.0.1:4040 --service db
  ebrec push trace.pb.zst --push parca+http://parca:7070 --label env=prod
  ebrec push trace.pb.zst --push otlp+https://otel:4318 --auth-file /etc/ebrec/auth --symbolize")]
    Push(Box<ebtrace_agent::push::PushArgs>),
    /// Write ebrec's man pages (ebrec.1 and one per command, from these definitions).
    #[command(hide = true)]
    Man(ManArgs),
    /// Write ebrec's shell completions (bash, zsh, fish), from these definitions.
    #[command(hide = true)]
    Completions(CompletionsArgs),
}

/// `ebrec completions`: `--shell SHELL` prints one script on stdout; `-o DIR` writes all
/// three into DIR under the names the shells look up (ebrec, _ebrec, ebrec.fish).
#[derive(clap::Args, Debug)]
#[command(group = clap::ArgGroup::new("where").required(true))]
pub struct CompletionsArgs {
    /// Print the script of this shell on stdout.
    #[arg(long, value_enum, group = "where")]
    pub shell: Option<clap_complete::Shell>,
    /// Write bash, zsh and fish scripts into this directory (created).
    #[arg(short, long, group = "where")]
    pub output: Option<PathBuf>,
}

/// `ebrec man`.
#[derive(clap::Args, Debug)]
pub struct ManArgs {
    /// The directory to write the pages into (created).
    #[arg(short, long, default_value = "docs/man")]
    pub output: PathBuf,
}

/// `ebrec record`'s flags: the recorder's own configuration (its clap derive is the `cli`
/// feature of ebtrace-record).
pub use ebtrace_record::config::RecordConfig as RecordArgs;

/// `ebrec probes`: what `--func` would attach to, one function a line; or the USDT probes of
/// a process, a command or a binary, one probe a line.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Functions (PATTERNs as --func takes them), each line: demangled name, binary, ELF
address, size, where the uprobe goes (entry, +0xN past single-stepped instructions, or
single-step); tab-separated.

USDT probes (no PATTERN, or usdt: PATTERNs), each line: the probe as bpftrace names it
(usdt:BINARY:PROVIDER:NAME; for -p, BINARY is /proc/PID/root/FILE), its arguments as the
note writes them (SIZE@OPERAND each, - for none), `semaphore` when it is guarded by one
(else -), its ELF address; tab-separated.

Examples:
  ebrec probes -p 1234 'shop::*lookup*'
  ebrec probes -p 1234 shop::Catalog::slow_lookup libc.so.6:malloc
  ebrec probes 'operator new(unsigned long)' -- ./server --port 8080
  ebrec probes ./server:0x4011d6 _ZN4shop7Catalog6lookupEm -- ./server
  ebrec probes -p 1234                             # every USDT probe of the process
  ebrec probes -p 1234 'usdt:postgresql:query*'
  ebrec probes /usr/lib/postgresql/15/bin/postgres # the USDT probes of a binary
  ebrec probes ./server 'usdt:shop:request__*'
  ebrec probes -p 1234 'usdt:libstdc++*:libstdcxx:*'"
)]
pub struct ProbesArgs {
    /// Search the binaries this running process maps.
    #[arg(short, long = "pid")]
    pub pid: Option<u32>,
    /// What `--func` takes: NAME, GLOB, MANGLED, LIB:SYMBOL or BINARY:0xADDR, each with an
    /// optional :MIN_US; or usdt:[BINARY:]PROVIDER:NAME (globs: * and ?) for USDT probes.
    /// Without -p or a command: BINARY, a file whose USDT probes to list, then usdt:
    /// patterns.
    #[arg(value_name = "PATTERN")]
    pub patterns: Vec<ProbePattern>,
    /// Search this command's executable and the libraries it needs, without starting it.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// One PATTERN of `ebrec probes`.
#[derive(Debug, Clone)]
pub enum ProbePattern {
    /// A function, as `--func` takes it (also what a BINARY alone parses as).
    Func(FuncSpec),
    /// `usdt:…`.
    Usdt(UsdtPattern),
    /// A file that does not parse as a function spec: only a BINARY.
    File(PathBuf),
}

impl std::str::FromStr for ProbePattern {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<Self> {
        if s.starts_with("usdt:") {
            return s.parse().map(ProbePattern::Usdt);
        }
        match s.parse() {
            Ok(f) => Ok(ProbePattern::Func(f)),
            Err(_) if std::path::Path::new(s).is_file() => Ok(ProbePattern::File(s.into())),
            Err(e) => Err(e),
        }
    }
}

/// `usdt:[BINARY:]PROVIDER:NAME`, or `usdt:PROVIDER` (every name): globs (`*`, `?`) on
/// each part; BINARY matches the path as listed, as the process sees it, or its file name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsdtPattern {
    /// As written.
    pub text: String,
    pub binary: Option<String>,
    pub provider: String,
    pub name: String,
}

impl std::str::FromStr for UsdtPattern {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> anyhow::Result<Self> {
        let rest = text.strip_prefix("usdt:").unwrap_or(text);
        let mut parts = rest.rsplitn(3, ':');
        let last = parts.next().unwrap_or_default();
        let (binary, provider, name) = match (parts.next(), parts.next()) {
            (None, _) => (None, last, "*"),
            (Some(p), None) => (None, p, last),
            (Some(p), Some(b)) => (Some(b.to_string()), p, last),
        };
        if provider.is_empty() || name.is_empty() || binary.as_deref() == Some("") {
            anyhow::bail!(
                "'{text}': an empty part (usdt:PROVIDER:NAME or usdt:BINARY:PROVIDER:NAME)"
            );
        }
        Ok(UsdtPattern {
            text: text.to_string(),
            binary,
            provider: provider.to_string(),
            name: name.to_string(),
        })
    }
}

/// Arguments of `ebrec doctor`.
#[derive(clap::Args, Debug)]
pub struct DoctorArgs {
    /// Also check this process: that it is readable and, for each binary it maps, frame
    /// pointers, symbols, debug info, and the --stack-mode it needs.
    #[arg(short, long = "pid")]
    pub pid: Option<u32>,
    /// One JSON object on stdout: {"checks":[{"check","status","finding","fix"}],
    /// "binaries":[…], "stack_mode"}.
    #[arg(long)]
    pub json: bool,
}

/// `ebrec diagnose`.
#[derive(clap::Args, Debug)]
pub struct DiagnoseArgs {
    /// The folder to write (created; files of an earlier diagnose in it are replaced).
    #[arg(short, long, default_value = "diag")]
    pub output: PathBuf,
    /// Diagnose this running process (repeatable).
    #[arg(short, long = "pid")]
    pub pid: Vec<u32>,
    /// Diagnose every process.
    #[arg(long)]
    pub all: bool,
    /// Seconds to record.
    #[arg(long, default_value_t = 30.0)]
    pub duration: f64,
    /// The budget for the recording, percent of one CPU (ebrec record --max-cpu).
    #[arg(long, value_name = "PCT", default_value_t = 5.0)]
    pub max_cpu: f64,
    /// The ebsym to make the reports with (default: next to ebrec, else on PATH).
    #[arg(long)]
    pub ebsym: Option<PathBuf>,
    /// Debug files for ebsym (as `ebsym --debug-dir`; repeatable).
    #[arg(long)]
    pub debug_dir: Vec<PathBuf>,
    /// One more idle wait shape for the reports (as `ebsym --idle`: a glob on a frame's
    /// function; repeatable): waits under it are shown apart from the findings.
    #[arg(long, value_name = "PATTERN")]
    pub idle: Vec<String>,
    /// No default idle rules in the reports (as `ebsym --no-idle-rules`): every wait is a
    /// finding but the --idle patterns'.
    #[arg(long)]
    pub no_idle_rules: bool,
    /// One more allocator wrapper for the reports (as `ebsym --wrapper`: a glob on a
    /// frame's function; repeatable): the alloc finding and `--by site` name the caller
    /// past it.
    #[arg(long, value_name = "PATTERN")]
    pub wrapper: Vec<String>,
    /// No default wrapper rules in the reports (as `ebsym --no-wrapper-rules`): only the
    /// C/C++ runtime's frames and the --wrapper patterns are folded.
    #[arg(long)]
    pub no_wrapper_rules: bool,
    /// The service's request boundaries (as `ebrec record --request`:
    /// `usdt:[BINARY_OR_LIB:]PROVIDER:START,DONE` or `func:SPEC`): the recording marks
    /// them, the kernel splits each request's time, and `ebsym requests` (why the slow
    /// requests were slow) comes first in the folder and the output.
    #[arg(long, value_name = "usdt:PROVIDER:START,DONE|func:SPEC")]
    pub request: Option<String>,
    /// The command to start and diagnose.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}
