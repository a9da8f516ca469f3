//! The ebtrace trace schema, generated from `proto/trace.proto` by prost at build time.
//!
//! Every type lives in [`v1`]; the file layout around the records is described at the top of
//! `trace.proto` and implemented by the `ebtrace-format` crate.
//!
//! ```
//! use ebtrace_proto::v1::{record::Kind, Record, ClockSync};
//! let r = Record { kind: Some(Kind::ClockSync(ClockSync { boottime_ns: 1, ..Default::default() })) };
//! assert!(matches!(r.kind, Some(Kind::ClockSync(_))));
//! ```

/// Version 1 of the schema.
#[allow(missing_debug_implementations, clippy::all)]
pub mod v1 {
    include!(concat!(env!("OUT_DIR"), "/ebtrace.v1.rs"));
}

/// pprof's `profile.proto` (package `perftools.profiles`, Google's Apache-2.0 schema in
/// `proto/profile.proto`), what `ebsym pprof` writes (gzip-compressed).
#[allow(missing_debug_implementations, clippy::all)]
pub mod pprof {
    include!(concat!(env!("OUT_DIR"), "/perftools.profiles.rs"));
}

/// The format version this crate reads and writes.
pub const FORMAT_VERSION: u32 = 1;
