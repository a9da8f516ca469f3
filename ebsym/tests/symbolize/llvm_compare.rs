//! ebsym's frames compared with llvm-symbolizer's, whole inline chains at a time, with
//! demangler formatting normalized and llvm-symbolizer's own habits accepted (each
//! reported as a class). Shared by the differential test and the symbolize benchmark
//! (`bench/src/bin/symbolize.rs` includes this file).
//!
//! Normalized (the same name, spelled two ways; ebsym uses libiberty's demangler, as
//! binutils and c++filt do, llvm-symbolizer LLVM's):
//! - libiberty writes `> >` where LLVM writes `>>`;
//! - a name LLVM's demangler (19) cannot demangle is printed mangled (e.g.
//!   `_ZSt14__relocate_a_1IN4shop7ProductES1_ENSt9enable_ifIXsrSt24__is_bitwise_relocatable…`):
//!   it is demangled with ebsym's demangler before comparing;
//! - otherwise, names that differ are equal if LLVM's demangler (`llvm-cxxfilt`) spells
//!   ebsym's mangled name as llvm-symbolizer did: libiberty names an inheriting
//!   constructor (`…C I4 St15__uniq_ptr_impl…`) after its base class,
//!   `__uniq_ptr_data<…>::__uniq_ptr_impl(…)`, LLVM after its class.
//!
//! Accepted: llvm-symbolizer replaces the containing (outermost) function's DWARF name by
//! the symbol table's, so a part that gcc split off (`foo.cold`, `foo.part.0`,
//! `foo.isra.0`, `foo.constprop.0`) reads `foo() (.cold)`, or `main.cold`; ebsym keeps
//! the name of the function the code belongs to. The names must be equal once LLVM's
//! suffix is removed. When gcc folded identical functions into one body (`-fipa-icf`,
//! on at -O2: leveldb's `EmptyIterator::key()` and `value()`), the symbol table has
//! several names at its address and llvm-symbolizer picks one of them, ebsym the one
//! DWARF describes: accepted when both names are symbols at one address. And a symbol
//! without a size (`_init`) covers, for llvm-symbolizer, everything up to the next
//! symbol, `.plt` included; ebsym ends it with its section and says `??` there.
#![allow(dead_code)]
use ebtrace_symbolize::Symbolizer;
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

/// The function symbols of a binary by demangled name (`> >` written `>>`): where each
/// starts.
#[derive(Debug, Default)]
pub struct Symbols {
    by_name: HashMap<String, Vec<u64>>,
    /// Symbols without a size (`_init`, assembly).
    sizeless: std::collections::HashSet<String>,
}

impl Symbols {
    /// From `nm --defined-only bin` (text symbols only), names demangled as ebsym does.
    pub fn of(bin: &Path) -> Symbols {
        let out = Command::new("nm")
            .args(["--defined-only", "-S"])
            .arg(bin)
            .output()
            .expect("cannot run nm");
        assert!(out.status.success(), "nm {}", bin.display());
        let mut symbols = Symbols::default();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            // "ADDR SIZE KIND NAME", or "ADDR KIND NAME" without a size.
            let fields: Vec<&str> = line.splitn(4, ' ').collect();
            let (addr, size, kind, name) = match fields[..] {
                [a, z, k, n] if k.len() == 1 => (a, Some(z), k, n),
                [a, k, n] | [a, k, n, _] if k.len() == 1 => (a, None, k, n),
                _ => continue,
            };
            let Ok(addr) = u64::from_str_radix(addr, 16) else {
                continue;
            };
            if matches!(kind, "t" | "T" | "W" | "w" | "i") {
                // Without the suffix of a split-off part or a local copy (`.cold`,
                // `.llvm.123`): such a symbol is found under the name of its function.
                let name = without_symbol_suffix(name);
                let name = without_space_in_brackets(&Symbolizer::demangle(name));
                if size.is_none() {
                    symbols.sizeless.insert(name.clone());
                }
                symbols.by_name.entry(name).or_default().push(addr);
            }
        }
        symbols
    }

    /// Whether functions `a` and `b` (as printed, normalized) are symbols at one address:
    /// gcc's identical code folding keeps one body and makes the others aliases of it.
    pub fn same_address(&self, a: &str, b: &str) -> bool {
        let (Some(x), Some(y)) = (self.by_name.get(a), self.by_name.get(b)) else {
            return false;
        };
        x.iter().any(|addr| y.contains(addr))
    }
}

/// One frame, as a tool told it: `None`/0 where the tool printed `??`/0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub function: Option<String>,
    pub file: Option<String>,
    pub line: u32,
    pub column: u32,
}

/// The frames of one address, innermost first; empty when the tool knew nothing.
pub type Chain = Vec<Frame>;

/// Symbol `name` without the suffix of a split-off part or local copy (`foo.cold`,
/// `_ZN3fooEv.part.0`, `….llvm.123`): from the first `.` that starts a word, so that
/// Rust's `..` path separators (`_ZN…$LT$alloc..vec..Vec…`) stay.
pub fn without_symbol_suffix(name: &str) -> &str {
    let b = name.as_bytes();
    let cut = (1..b.len()).find(|&i| {
        b[i] == b'.' && b[i - 1] != b'.' && b.get(i + 1).is_some_and(|c| c.is_ascii_alphabetic())
    });
    &name[..cut.unwrap_or(name.len())]
}

/// `name` as libiberty would spell it (see the module docs), and whether LLVM had left
/// it mangled.
pub fn normalize_llvm_name(name: &str) -> (String, bool) {
    let (name, mangled) = if name.starts_with("_Z") {
        (Symbolizer::demangle(name), true)
    } else {
        (name.to_string(), false)
    };
    (without_space_in_brackets(&name), mangled)
}

/// libiberty's `> >` as LLVM's `>>`.
pub fn without_space_in_brackets(name: &str) -> String {
    let mut s = name.to_string();
    while s.contains("> >") {
        s = s.replace("> >", ">>");
    }
    s
}

/// `name` without the clone suffixes of gcc's split-off parts, as LLVM prints them:
/// `foo() (.cold)`, `foo() (.part.0)` for C++, `main.cold` for a name that is not
/// mangled (and `foo() [clone .cold]`, libiberty's spelling).
pub fn without_llvm_clone_suffix(name: &str) -> &str {
    let mut s = name;
    // ` (.cold)` as LLVM writes it, ` [clone .cold]` as libiberty does (for a name LLVM
    // left mangled and ebsym's demangler demangled, see `normalize_llvm_name`).
    loop {
        let cut = match (s.rfind(" (."), s.rfind(" [clone .")) {
            (Some(i), _) if s.ends_with(')') => i,
            (_, Some(i)) if s.ends_with(']') => i,
            _ => break,
        };
        s = &s[..cut];
    }
    // A C name: `main.cold`, `foo.part.0` (not Rust's `serde_json..error`).
    let plain = s.len() == name.len() && !s.contains([':', '(', '$']);
    if plain {
        if let Some(i) = s.find('.') {
            s = &s[..i];
        }
    }
    s
}

/// Compares llvm-symbolizer's chain with ebsym's for one address (`raw`: ebsym's, with
/// names not demangled; `llvm_demangled`: LLVM's demangling of those names), after
/// normalization: Ok with the accepted difference classes met, or Err with both chains,
/// normalized.
pub fn compare(
    llvm: &Chain,
    ours: &Chain,
    raw: &Chain,
    llvm_demangled: &HashMap<String, String>,
    symbols: &Symbols,
) -> Result<Vec<&'static str>, (Chain, Chain)> {
    let mut classes: Vec<&'static str> = Vec::new();
    let mut theirs_n = llvm.clone();
    let mut ours_n = ours.clone();
    for f in &mut ours_n {
        f.function = f.function.as_deref().map(without_space_in_brackets);
    }
    for f in &mut theirs_n {
        if let Some(name) = &f.function {
            let (name, mangled) = normalize_llvm_name(name);
            if mangled {
                classes.push("normalized: llvm left a name mangled (demangled with libiberty)");
            }
            f.function = Some(name);
        }
    }
    // llvm-symbolizer stretches a symbol without a size over the sections after it
    // (`_init` over `.plt`); ebsym stops it at the end of its section.
    if let ([l], []) = (&theirs_n[..], &ours_n[..]) {
        if l.file.is_none()
            && l.function
                .as_ref()
                .is_some_and(|f| symbols.sizeless.contains(f))
        {
            classes.push("llvm: an address past a symbol without a size, in another section");
            theirs_n.clear();
        }
    }
    let n = ours_n.len();
    if theirs_n.len() == n {
        for (i, (l, o)) in theirs_n.iter_mut().zip(&ours_n).enumerate() {
            if l.function != o.function && i + 1 == n {
                let unsuffixed = l.function.as_deref().map(without_llvm_clone_suffix);
                if unsuffixed.is_some() && unsuffixed == o.function.as_deref() {
                    classes.push("llvm: outermost frame named after the symbol (clone suffix)");
                    l.function = o.function.clone();
                }
            }
            if l.function != o.function && i + 1 == n {
                if let (Some(a), Some(b)) = (&l.function, &o.function) {
                    if symbols.same_address(without_llvm_clone_suffix(a), b) {
                        classes.push(
                            "llvm: outermost frame named after another symbol at the same \
                             address (identical code folded by gcc -fipa-icf)",
                        );
                        l.function = o.function.clone();
                    }
                }
            }
            if l.function != o.function {
                // The same mangled name, spelled differently by the two demanglers (of
                // the outermost frame: after llvm's clone suffix).
                let ours_by_llvm = raw[i].function.as_ref().and_then(|r| llvm_demangled.get(r));
                let theirs = l.function.as_deref().map(|f| {
                    if i + 1 == n {
                        without_llvm_clone_suffix(f)
                    } else {
                        f
                    }
                });
                if ours_by_llvm.is_some() && ours_by_llvm.map(String::as_str) == theirs {
                    classes.push(
                        "normalized: demangler formatting of the same mangled name \
                         (libiberty names an inheriting constructor after its base class, \
                         and spells lambdas `{lambda(…)#1}` where LLVM writes `'lambda'(…)`)",
                    );
                    l.function = o.function.clone();
                }
            }
            // No line-table row covers the address (the first bytes of a `.cold` part,
            // before its first row): llvm-symbolizer gives the function's declaration
            // file, by its base name, with line 0; ebsym (and binutils) `??:0`.
            if l.function == o.function
                && (l.line, o.line) == (0, 0)
                && o.file.is_none()
                && l.file.as_deref().is_some_and(|f| !f.contains('/'))
            {
                classes.push(
                    "llvm: an address before the first line-table row of its function \
                     named with the declaration file's base name and line 0 (ebsym: ??:0)",
                );
                l.file = None;
            }
        }
    }
    let key = |c: &Chain| -> Vec<(Option<String>, Option<String>, u32)> {
        c.iter()
            .map(|f| (f.function.clone(), f.file.clone(), f.line))
            .collect()
    };
    if key(&theirs_n) != key(&ours_n) {
        return Err((theirs_n, ours_n));
    }
    classes.sort_unstable();
    classes.dedup();
    Ok(classes)
}
