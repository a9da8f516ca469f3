//! The command line: `ebrec record`, `ebrec probes`, `ebrec doctor`.
pub mod probes;
