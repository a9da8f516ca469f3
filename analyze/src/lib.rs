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
//!
//! `ebsym … --json` prints a report wrapped in [`Versioned`]: its fields after
//! `"schema_version": JSON_SCHEMA_VERSION`.

pub mod classes;
pub mod error;
pub mod event;
pub mod glob;
/// The fast hasher of the per-event maps (shared with the recorder).
pub use ebtrace_format::hash;
pub mod histogram;
pub mod info;
pub mod interned;
pub mod model;
pub mod pprof;
pub mod reports;
pub mod time;

pub use error::{Error, ErrorKind};

use serde::Serialize;

/// The version of every `--json` object (`ebsym`'s and `ebrec doctor`'s), first field
/// `"schema_version"` (see [`Versioned`]); defined once in ebtrace-format.
pub use ebtrace_format::JSON_SCHEMA_VERSION;

/// A report as `--json` prints it: `{"schema_version": JSON_SCHEMA_VERSION, …the report's
/// own fields…}`. Only for what serializes as a JSON object (a struct or a map): anything
/// else fails to serialize.
///
/// ```
/// # use serde::Serialize;
/// #[derive(Serialize)]
/// struct Report { kind: &'static str }
/// let json = serde_json::to_string(&ebtrace_analyze::Versioned::new(&Report { kind: "cpu" })).unwrap();
/// assert_eq!(json, r#"{"schema_version":1,"kind":"cpu"}"#);
/// ```
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Versioned<'a, T: ?Sized> {
    schema_version: u32,
    #[serde(flatten)]
    report: &'a T,
}

impl<'a, T: ?Sized + Serialize> Versioned<'a, T> {
    /// `report` with [`JSON_SCHEMA_VERSION`] first.
    pub fn new(report: &'a T) -> Self {
        Versioned {
            schema_version: JSON_SCHEMA_VERSION,
            report,
        }
    }
}
