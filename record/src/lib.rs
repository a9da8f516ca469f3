//! ebtrace-record: the recorder behind `ebrec`. It loads the BPF programs (ebtrace-bpf),
//! attaches them to the targets, and writes the ring buffers and the side band into a trace
//! (ebtrace-format). It reads ELF symbol tables, notes and `.eh_frame`, never DWARF, and never
//! symbolizes; it links no command-line parser (its config derives clap's traits only under
//! the `cli` feature, ebrec's), no report code and no HTTP.
//!
//! [`run`]`(RecordConfig, Option<&mut dyn Hooks>)` is the whole recording; `ebtrace-agent`
//! runs it with its [`Hooks`], which get the [`Recording`] at each pass (to follow new
//! targets, close windows and read its health). What else is public is the configuration
//! ([`config`]) and two narrow doors for `ebrec`'s other commands: [`host`] (what this
//! machine and kernel can do) and [`lookup`] (`ebrec probes`: the functions a spec matches
//! and where their probes would go). Every other module is the crate's own.
pub(crate) mod budget;
pub(crate) mod cfi;
pub mod config;
pub(crate) mod elf;
pub(crate) mod faults;
pub(crate) mod features;
pub(crate) mod funcs;
pub(crate) mod header;
pub(crate) mod kallsyms;
pub(crate) mod memlimit;
pub(crate) mod pacer;
pub(crate) mod perf;
pub(crate) mod placement;
pub(crate) mod preload;
pub(crate) mod probes;
pub(crate) mod procfs;
pub(crate) mod recorder;
pub(crate) mod recording;
pub(crate) mod reqslow;
pub(crate) mod rotate;
pub(crate) mod sched;
pub(crate) mod session;
pub(crate) mod summary;
pub(crate) mod targets;

pub use config::RecordConfig;
pub use recorder::{record, run, take_hangup, Hooks};
pub use recording::{Followed, Health, Recording, Unseen};
pub use rotate::WindowClosed;

/// What this machine and its kernel can do, for `ebrec doctor` and the agent.
pub mod host {
    pub use crate::features::{
        has_btf_type, kernel_version, rseq_update, running_version, uprobe_sessions, MIN_KERNEL,
        UPROBE_SESSIONS,
    };
    pub use crate::perf::open_cpu_clock;
    pub use crate::procfs::{
        clock_ns, clock_ticks, comm_and_start, maps, online_cpus, path_in, uname,
    };
}

/// `ebrec probes`: the functions a `--func` spec matches in a program, and where their
/// probes would go.
pub mod lookup {
    pub use crate::funcs::usdt::glob;
    pub use crate::funcs::{resolve_all, Binaries, FuncSpec};
    pub use crate::placement::ARGS;
    pub use crate::probes::place_in_file;
    pub use crate::targets::find_in_path;
}
