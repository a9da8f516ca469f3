//! Reports over ebtrace traces. Reports read a trace (raw or symbolized) through
//! `ebtrace-format` and return plain data that serializes to the documented JSON, plus a
//! text rendering for people.
//!
//! ```no_run
//! let info = ebtrace_analyze::info::summarize(std::path::Path::new("trace.pb.zst")).unwrap();
//! println!("{}", info.to_text());
//! ```

pub mod hash;
pub mod histogram;
pub mod info;
pub mod model;
pub mod pprof;
pub mod reports;
pub mod time;
