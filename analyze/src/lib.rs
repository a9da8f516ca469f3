//! Reports over ebtrace traces. Reports read a trace (raw or symbolized) through
//! `ebtrace-format` and return plain data that serializes to the documented JSON, plus a
//! text rendering for people.
//!
//! ```no_run
//! let info = ebtrace_analyze::info::summarize(std::path::Path::new("trace.pb.zst")).unwrap();
//! println!("{}", info.to_text());
//! ```
//!
//! Every report also reads an open trace (`reports::Trace`: a `TraceReader` over a file or
//! over bytes in memory, or decoded `Records`), so a trace symbolized into memory needs no
//! temporary file:
//!
//! ```no_run
//! use ebtrace_analyze::reports::{self, EventKind, Measure};
//! let bytes: Vec<u8> = std::fs::read("trace.pb.zst").unwrap();
//! let trace = ebtrace_format::TraceReader::new(bytes.as_slice()).unwrap();
//! let filter = ebtrace_analyze::model::Filter::default();
//! let top = reports::top_from(trace, EventKind::Alloc, Measure::Bytes, &filter, 20);
//! println!("{}", top.to_text());
//! ```

pub mod hash;
pub mod histogram;
pub mod info;
pub mod model;
pub mod pprof;
pub mod reports;
pub mod time;
