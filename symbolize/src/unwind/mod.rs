//! Offline x86_64 stack unwinding with DWARF call frame information (CFI): the registers
//! and the raw top of the user stack that `ebrec --stack-mode dwarf` copies at an event
//! ([`UserStackCopy`](ebtrace_format::proto::UserStackCopy)) are walked back, frame by frame, with the `.eh_frame` rules of each
//! module (found through `.eh_frame_hdr`'s binary search table, or a sorted index of the
//! FDEs built once), `.debug_frame` of a debug file where `.eh_frame` has nothing, and the
//! frame-pointer chain where a module has no CFI at all.
//!
//! A stack that cannot be walked to its outermost frame is an answer, not an error: the
//! frames found so far come back with a [`Stop`] saying why the walk ended early (the
//! copy was too small, no CFI for an address, an address outside every mapping, a CFA
//! that does not move up the stack, …). Nothing here panics on garbage registers, stack
//! bytes or unwind tables: every read is bounds-checked and walks stop at
//! [`MAX_FRAMES`].
//!
//! ```no_run
//! use ebtrace_symbolize::unwind::{unwind, Mapped, UnwindInfo};
//! use ebtrace_format::proto::UserStackCopy;
//! let libc = UnwindInfo::from_elf(&std::fs::read("/usr/lib/x86_64-linux-gnu/libc.so.6").unwrap()).unwrap();
//! let copy = UserStackCopy::default(); // from a Stack record
//! let find = |addr: u64| {
//!     // One mapping of the process: runtime range, file offset of its start, tables.
//!     (0x7f00_0000_0000..0x7f00_0020_0000).contains(&addr).then_some(Mapped {
//!         start: 0x7f00_0000_0000, end: 0x7f00_0020_0000, file_offset: 0,
//!         info: Some(&libc), module: 1,
//!     })
//! };
//! let u = unwind(&copy, find, 128);
//! println!("{:x?} stopped: {:?}", u.ips, u.stop);
//! ```
//!
//! The rules, as libgcc's unwinder applies them: frame 0 is `rip`; every later frame is a
//! return address, looked up at `address - 1` (the call instruction) unless the frame
//! before it was a signal frame (CIE augmentation `S`, glibc's `__restore_rt`), whose
//! "return address" is the interrupted instruction itself. The CFA is a register plus an
//! offset or a DWARF expression (PLT entries, signal frames, realigned stacks), evaluated
//! with the registers known so far and the copied bytes as memory. The caller's `rsp` is
//! the CFA unless a rule says otherwise; callee-saved registers (`rbx`, `rbp`,
//! `r12`–`r15`) keep their value unless a rule restores them; the others are unknown past
//! frame 0. A return address whose rule is "undefined" (`_start`, `clone3`) or that is 0
//! ends the walk normally.
//!
//! A trace's stacks are unwound by [`TraceUnwinder`] (used by
//! [`crate::trace::symbolize_trace`], so also by the reports on a raw trace): tables from
//! the trace's `UnwindTables` records, else from the binaries found on disk; the results
//! become `UnwoundStack` records, whose user ips the reports use.
//!
//! Three parts, each below the next: `tables` (reading a module's CFI, [`UnwindInfo`]),
//! `walk` (stepping a copy with the tables it is given, [`unwind`]) and `driver` (a
//! trace's copies: mappings, files, caching, [`TraceUnwinder`]).
mod driver;
mod tables;
mod walk;

pub use driver::{stop_text, TraceUnwind, TraceUnwinder, UnwindSummary};
pub use tables::{Error, ErrorKind, Segment, UnwindInfo};
pub use walk::{unwind, Mapped, Stop, Unwound, MAX_FRAMES};
