//! ebtrace-record: the recorder behind `ebrec`. It loads the BPF programs (ebtrace-bpf),
//! attaches them to the targets, and writes the ring buffers and the side band into a trace
//! (ebtrace-format). It reads ELF symbol tables, notes and `.eh_frame`, never DWARF, and never
//! symbolizes; it links no command-line parser (its config derives clap's traits only under
//! the `cli` feature, ebrec's), no report code and no HTTP.
//!
//! `recorder::run(RecordConfig, Option<&mut dyn Hooks>)` is the whole recording;
//! `ebtrace-agent` runs it with its hooks.
pub mod budget;
pub mod cfi;
pub mod config;
pub mod elf;
pub mod features;
pub mod funcs;
pub mod header;
pub mod kallsyms;
pub mod pacer;
pub mod perf;
pub mod placement;
pub mod preload;
pub mod probes;
pub mod procfs;
pub mod recorder;
pub mod rotate;
pub mod session;
pub mod summary;
pub mod targets;

pub use config::RecordConfig;
pub use recorder::{record, run, Hooks};
