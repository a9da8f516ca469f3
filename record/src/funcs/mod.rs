//! Which functions `--func SPEC[:MIN_US]` names: specs resolved against the ELF symbol
//! tables (`.symtab`, then `.dynsym`) of a target's binaries. Never DWARF: a stripped
//! service with only `.dynsym` still resolves its exported functions.
//!
//! ```text
//! shop::Catalog::slow_lookup            a demangled C++ name, without parameters
//! shop::Catalog::lookup(unsigned long)  ... or with them, to pick one overload
//! shop::*::get*   *_lookup   'm?lloc'   a glob: `*` is any text, `::` included; `?` one byte
//! _ZN4shop7Catalog6lookupEm             a mangled name (or any raw symbol name: `malloc`)
//! libc.so.6:malloc  /opt/x/libfoo.so:foo::bar   LIB:SYMBOL, LIB a path or a file name
//! ./server:0x4011d6                     BINARY:0xADDR, an ELF virtual address in it: a
//!                                       function's entry (inside a known function is refused)
//! shop::Catalog::slow_lookup:500        any of these + `:MIN_US`: calls ≥ 500 µs are kept
//! ```
//!
//! ```ignore
//! let spec: FuncSpec = "libc.so.6:malloc:50".parse()?;
//! let bins = Binaries::of_pid(1234)?;
//! for m in resolve_all(&bins, &[spec])? {
//!     attach_uprobe(&m.path, m.file_offset); // and the uretprobe; keep calls ≥ m.min_ns
//! }
//! ```
//!
//! Matching rules, and why:
//! - Names are compared without whitespace (`operator new(unsigned long)` ==
//!   `operator new(unsignedlong)`), against the demangled name without return type, without
//!   parameters and without the member function's cv/ref qualifiers
//!   (`shop::Catalog::slow_lookup(std::string const&) const` is `shop::Catalog::slow_lookup`);
//!   a name with `(` is compared with the parameters (and qualifiers) instead, with or
//!   without the return type a template function's name starts with (`void foo<int>(int)`).
//!   Names are demangled by `ebtrace_demangle`, the demangler ebsym prints with, so a name
//!   copied from a report is a name `--func` takes.
//! - A name is one function: every symbol it matches must be the same source function in one
//!   binary (same signature), else it is refused as ambiguous with the list (overloads, or the
//!   same function in two files: use the signature, the mangled name or `LIB:SYMBOL`).
//!   The compiler's entry-point copies of that one function are all attached: GCC clones
//!   (`.constprop.N`, `.isra.N`, `.lto_priv.N`: a caller may call the clone instead of the
//!   original, so leaving them out would miss calls; `.isra` clones take other arguments, so
//!   `--args` of a clone is not the source's) and constructor/destructor variants (C1/C2,
//!   D0/D1/D2; a deleting destructor calls the complete one, so a `delete` shows as two nested
//!   calls).
//! - Fragments are never attached by name or glob: `.cold` (a function's unlikely code, no
//!   entry) and `.part.N` (its body after a partially inlined head, so only some calls) would
//!   give wrong counts and durations. Named exactly by their raw symbol
//!   (`_ZN...Em.part.0`), they are attached as asked. A name that only matches fragments is
//!   refused with that explanation.
//! - GNU indirect functions (`memcpy`, `strlen` in glibc) are refused: the symbol is the
//!   resolver, which runs once at load; the code that runs is an implementation such as
//!   `__memcpy_avx_unaligned_erms`, which can be asked for.
//! - Aliases (several symbols at one address, `malloc` and `__libc_malloc`) count once.
//! - A glob is every match, but more than [`resolve::GLOB_LIMIT`] functions is refused (each is a
//!   uprobe pair).
//!
//! The ELF files are read with [`ebtrace_elf::Elf`]: the symbol type (indirect functions),
//! binding (which alias to show), the executable flag of segments (for `BINARY:0xADDR`) and
//! `DT_NEEDED` (for a command not started yet).
//!
//! The pieces: [`spec`] parses a SPEC (and globs), [`symbols`] reads a binary's function
//! symbols and the names they are matched by, [`resolve`] finds the target's binaries and what
//! a spec names in them, [`libsearch`] finds a command's libraries as ld.so would, and
//! [`suggest`] the names closest to an unknown one.
pub mod allocfn;
mod libsearch;
mod resolve;
mod spec;
mod suggest;
mod symbols;
pub mod usdt;

pub use allocfn::AllocFnSpec;
pub use resolve::{resolve_all, Binaries, FuncMatch};
pub use spec::FuncSpec;

/// Names compared without whitespace.
pub(super) fn norm(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}
