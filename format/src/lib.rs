//! Streaming writer and reader of ebtrace trace files.
//!
//! A trace is a zstd skippable frame with the file magic, then independent chunks (a
//! skippable chunk descriptor + one zstd frame of whole length-delimited
//! [`Record`](ebtrace_proto::v1::Record)s). The layout is documented at the top of
//! `proto/trace.proto`. A crash loses at most the open chunk; the reader returns every
//! complete chunk and reports (never panics on) truncated or corrupt data.
//!
//! ```
//! use ebtrace_format::{TraceWriter, TraceReader, WriterOptions, events::AllocEvent};
//! use ebtrace_proto::v1::{AllocKind, Header};
//! let mut w = TraceWriter::new(Vec::new(), Header::default(), WriterOptions::default()).unwrap();
//! let stack = w.intern_stack(1, &[0x401000, 0x401234], &[], 0).unwrap();
//! w.alloc(&AllocEvent { time_ns: 10, generation: 1, tid: 7, stack, size: 4096,
//!                       address: 0x5000, kind: AllocKind::Malloc, sample_period: 0, allocator: 0 }).unwrap();
//! let bytes = w.finish(None).unwrap();
//! let mut r = TraceReader::new(&bytes[..]).unwrap();
//! let n = r.by_ref().count();
//! assert!(n >= 3 && r.damage().is_empty());
//! ```

pub mod error;
pub mod events;
pub mod family;
mod fastbatch;
pub mod frame;
pub mod hash;
pub mod latency;
pub mod reader;
pub mod tables;
pub mod writer;

pub use error::{Error, ErrorKind};
pub use reader::{Damage, DamageKind, TraceReader};
pub use tables::Tables;
pub use writer::{TraceWriter, WriterOptions};

pub use ebtrace_proto::v1 as proto;
pub use ebtrace_proto::FORMAT_VERSION;

/// The version of the JSON that `ebsym … --json` (`ebsym info`'s and every report's) and
/// `ebrec doctor --json` print, their first field `"schema_version"`. A field added keeps the version;
/// a field renamed or removed, or one whose meaning, unit or type changes, bumps it, so that
/// a script can check the one number it was written for. A bump adds a line to the table of
/// versions in docs/json.md.
///
/// 1: the first version (before it, `ebsym info --json` and the reports' loss keys spelled
/// the memgrowth family `mem_growth`).
pub const JSON_SCHEMA_VERSION: u32 = 1;
