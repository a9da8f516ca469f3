//! ebrec's end-to-end tests, one binary: each module records a real program (the testdata
//! C++ programs, compiled by the tests, or servers from Debian) with ebrec on the real
//! kernel and checks what ebsym reports, beside the reference tools. The root ones skip
//! loudly when not root and fail when CI=true. ebsym comes from the same build
//! (`cargo build -p ebtrace-ebsym`; scripts/test builds everything first).
mod common;

mod agent;
mod aggregate;
mod alloc_cost;
mod budget;
mod callers;
mod cfi;
mod chain;
mod containers;
mod docs_examples;
mod doctor;
mod export;
mod faults;
mod func_names;
mod funcs;
mod heap;
mod host_faults;
mod idle;
mod layout;
mod limits;
mod metrics;
mod named_frames;
mod offcpu;
mod packaging;
mod postgres;
mod preload;
mod profile;
mod push;
mod record;
mod report_html;
mod reports;
mod requests;
mod sched;
mod stack_memory;
mod stacks;
mod system;
mod usdt;
