//! The ebtrace symbolizer: ELF virtual addresses of a binary (known by build-id and
//! recorded path) → function, file:line and inlined frames, from DWARF (4 and 5,
//! compressed sections, dwz supplementary files, split DWARF) or, failing that, the symbol
//! table. An address that cannot be resolved gets a [`Reason`]: that is an answer, not an
//! error, so one bad address never stops a batch.
//!
//! ```no_run
//! use ebtrace_symbolize::{Options, Symbolizer};
//! let sym = Symbolizer::new(Options::default());
//! let module = sym.open(Some(&[0x12, 0x34][..]), "/usr/bin/app".as_ref());
//! for addr in [0x1130, 0x1200] {
//!     match module.resolve(addr) {
//!         Ok(frames) => for f in frames { println!("{:?} {:?}:{}", f.function, f.file, f.line) },
//!         Err(why) => println!("{addr:#x}: {}", why.reason),
//!     }
//! }
//! ```
pub mod binutils;
mod data;
pub mod debuginfod;
pub mod dwarf;
pub mod elf;
pub mod find;
pub mod hint;
mod mapping;
pub mod progress;
pub mod resolve;
pub mod searched;
pub mod strip;
pub mod trace;
pub mod unwind;
pub mod vdso;

pub use binutils::addr2line_stream;
pub use data::TYPE_INFO_PROBES;
pub use resolve::{Frame, Lookup, Module, Options, Reason, Source, Symbolizer, Unresolved};
