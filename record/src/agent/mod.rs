//! `ebrec agent`: a long-running recorder for systemd. It records the targets (by pid,
//! command name, cgroup, or all; processes that start later are picked up) in time
//! windows: each window is a trace file of its own, kept on bounded disk, and/or pushed to
//! the profiling backends (Pyroscope, Parca, OTLP) as one profile per window and kind;
//! `--metrics ADDR` serves ebrec's health and per-target latency histograms to Prometheus.
use crate::cli::RecordArgs;
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct AgentArgs {
    /// Record processes whose command name (comm, or the executable's file name) matches
    /// this regular expression, including ones that start later. Repeatable.
    #[arg(long, value_name = "REGEX")]
    pub comm: Vec<String>,
    /// Record the processes of this cgroup (v2; a path under /sys/fs/cgroup or relative to
    /// it: a systemd service like system.slice/nginx.service, or a container's), including
    /// ones that start later. Repeatable.
    #[arg(long, value_name = "PATH")]
    pub cgroup: Vec<PathBuf>,
    /// One trace file per window of this many seconds (and one push per window and kind).
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    pub window: u64,
    /// Window files kept on disk (the newest; 0: each is deleted once pushed).
    #[arg(long, value_name = "N", default_value_t = 6)]
    pub keep: u32,
    /// Push each window's profiles: pyroscope+http(s)://HOST:PORT, parca+http(s)://HOST:PORT,
    /// otlp+http(s)://HOST:PORT. Repeatable.
    #[arg(long, value_name = "URL")]
    pub push: Vec<String>,
    /// The service name of the pushed profiles (default: the first target's comm).
    #[arg(long, value_name = "NAME")]
    pub service: Option<String>,
    /// A file with the push credentials and headers (never on the command line: it shows in
    /// ps). Lines `basic USER:PASSWORD`, `bearer TOKEN`, `tenant ID` (X-Scope-OrgID),
    /// `header NAME: VALUE`.
    #[arg(long, value_name = "FILE")]
    pub auth_file: Option<PathBuf>,
    /// Symbolize on this host before pushing (default: profiles go with build-ids and
    /// mappings, and the backend symbolizes).
    #[arg(long)]
    pub symbolize: bool,
    /// Debug files for --symbolize (as ebsym's --debug-dir). Repeatable.
    #[arg(long, value_name = "DIR", requires = "symbolize")]
    pub debug_dir: Vec<PathBuf>,
    /// Serve Prometheus metrics on ADDR (e.g. 127.0.0.1:9464): ebrec's health, pushes and
    /// drops, per-target latency histograms.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    #[command(flatten)]
    pub record: RecordArgs,
}

pub fn run(_a: AgentArgs) -> Result<()> {
    anyhow::bail!("ebrec agent: not built yet")
}
