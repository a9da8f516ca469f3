//! ebsym's integration tests: `ebsym addr2line` against binutils on test programs built
//! in every DWARF variant, and whole traces symbolized end to end.
mod addr2line;
mod common;
mod corpus;
mod debuginfod;
mod differential;
mod llvm_compare;
mod named_frames;
mod names;
mod trace;
mod unwind;
