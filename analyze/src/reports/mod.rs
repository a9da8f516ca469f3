//! The reports: top stacks, leaks, locks, folded stacks and flame graphs.
//!
//! JSON (`--json`), the same shape for every report:
//! `{"schema_version", "kind", "by", "totals": {…}, "losses": {…}, "rows": [{…values…,
//! "frames": [{"function", "file", "line", "inlined", "module", "address"}]}]}`, frames leaf
//! first. `schema_version` is [`crate::JSON_SCHEMA_VERSION`], which `ebsym` puts first in
//! every `--json` ([`crate::Versioned`]); the report types themselves do not carry it.
//! Families (loss keys `family/reason`, `kind`) are spelled by their registry name
//! (`ebtrace_format::family`).
//!
//! Values: alloc `count`, `bytes`; leaks `count`, `bytes`, `oldest_ns`, `alive`; locks `count`,
//! `wait_ns`, `wait_p99_ns`, `hold_ns`, `hold_p99_ns`, `mutex`, `kind`, `wait_kind`,
//! `contention`, `idle`, `idle_reason`, `waker_frames`; func
//! `count`, `total_ns`, `p50_ns`, `p90_ns`, `p99_ns`, `max_ns`, `function` (the probed
//! function's demangled name, null if the trace does not say), `function_id`; cpu `count`;
//! offcpu `count`, `total_ns`, `idle`, `idle_reason` (see [`idle`]), `waker_frames` (the stack of the thread that most often ended
//! these blocks; empty when woken by an interrupt); memgrowth `count`, `bytes` (brk, mmap and
//! first-touch growth; releases — munmap, a shrinking brk — are not counted).
//!
//! Percentiles (`wait_p99_ns`, `hold_p99_ns`, `p50_ns`, `p90_ns`, `p99_ns`) are nearest-rank
//! percentiles read from a log-linear histogram ([`crate::histogram`]), not from every
//! value: each is within 1/64 (1.6%) of the exact one, exact below 64 ns, and exact when
//! the rank is the highest (p99 of fewer than 100 events is the maximum). `count`,
//!
//! One file per report: `kind.rs` (event kinds and measures), `stacks.rs` (the per-stack
//! aggregation that `top`, folded stacks, pprof and diffs share), `top.rs` (the
//! [`Report`] and its typed [`Row`]s), `leaks.rs`, `folded.rs`, `flamegraph.rs`,
//! `diff.rs` and `text.rs` (the renderings for people); everything is used from here.
//! Each report reads an open trace ([`Trace`]: a `TraceReader`, or [`Records`] in memory)
//! in its `…_from` function ([`top_from`], [`leaks_from`], [`stacks_from`],
//! [`folded_from`], [`diff_from`]); the functions named after the reports take a path
//! (and `--by` as a string) and are thin wrappers over them.
mod budget;
mod describe;
mod diff;
pub mod exceptions;
pub mod export;
mod flamegraph;
mod folded;
pub mod heap;
pub mod heatmap;
pub mod html;
pub mod idle;
mod kind;
mod leaks;
mod live;
mod names;
mod pass;
mod places;
pub mod requests;
mod stacks;
pub mod summary;
pub mod suppress;
pub mod system;
mod text;
pub mod threads;
mod time_buckets;
mod top;
pub mod usdt;
pub mod wrappers;

pub use crate::model::{Records, Trace};
pub use diff::{diff, diff_from, diff_stacks, DiffOptions, DiffReport, DiffRow};
pub use exceptions::{exceptions_from, ExceptionReport, ExceptionRow};
pub use flamegraph::{diff_flamegraph, flamegraph, flamegraph_by};
pub use folded::{folded, folded_from, folded_key, Folded};
pub use heap::{heap_from, heap_with, HeapAllocator, HeapMeasure, HeapReport, HeapRow, HeapTotals};
pub use kind::{EventKind, Measure};
pub use leaks::{leaks, leaks_from, leaks_grouped, leaks_with, LeakOptions};
pub use pass::tops_from;
pub use requests::{requests_from, RequestOptions, RequestsReport, NO_REQUEST};
pub use stacks::{
    stacks, stacks_by_thread_from, stacks_from, stacks_with_inuse_from, StackValues, Stacks,
    ThreadSplit,
};
pub use system::{system_latency_from, tcp_from, SystemLatencyReport, TcpReport};
pub use text::{empty_note, losses_text};
pub use threads::{threads_from, ThreadsReport};
pub use top::{
    top, top_from, top_grouped, top_with, BioRow, BytesRow, CpuRow, FuncRow, Group, LeakRow,
    LockRow, OffCpuRow, Report, Row, RunqRow, SyscallRow, TcpStackRow, TopOptions, UsdtRow,
};
pub use usdt::{usdt_latency_from, UsdtLatencyReport};
pub use wrappers::{Site, WrapperRules};
