//! The wrong-name bug, on a small program that reproduces it: an inlined frame must carry
//! its own function's name, never the name of the function it is inlined into.
//!
//! Found on protobuf's protoc (81 MB): llvm-symbolizer said `BuildLookupTable
//! (stringpiece.cc:144)` inlined into `StringPiece::find_first_not_of
//! (stringpiece.cc:174)`, `ebsym addr2line` named both frames `find_first_not_of`, as
//! binutils does: a `static` function has no linkage name in gcc's DWARF, and binutils
//! names such an innermost frame after the symbol that contains the address. Likewise the
//! `__static_initialization_and_destruction_0` that gcc inlines into `_GLOBAL__sub_I_…`,
//! and a static helper in an anonymous namespace.
use crate::common::*;
use std::path::Path;
use std::process::Command;

const SOURCE: &str = r#"
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>

struct StringPiece {
  const char* p;
  size_t n;
  size_t find_first_not_of(StringPiece s) const;
};

static inline void BuildLookupTable(StringPiece s, bool* table) {
  for (size_t i = 0; i < s.n; ++i)
    table[static_cast<unsigned char>(s.p[i])] = true;  // line 15
}

size_t StringPiece::find_first_not_of(StringPiece s) const {
  bool lookup[256] = {false};
  BuildLookupTable(s, lookup);
  for (size_t i = 0; i < n; ++i)
    if (!lookup[static_cast<unsigned char>(p[i])]) return i;
  return static_cast<size_t>(-1);
}

namespace {
template <typename T>
struct Plan {
  T* items;
  int count;
  void Fill(int k) {
    for (int i = 0; i < count; ++i) items[i] = static_cast<T>(i * k + 1);  // line 31
  }
};
}  // namespace

__attribute__((noinline)) long NewPlaceholderFile(int k) {
  long buf[64];
  Plan<long> plan{buf, 64};
  plan.Fill(k);
  long sum = 0;
  for (long v : buf) sum += v;
  return sum;
}

std::string global_name = std::string("placeholder") + std::to_string(sizeof(Plan<long>));

int main(int argc, char** argv) {
  StringPiece a{argv[0], strlen(argv[0])}, b{"/.", 2};
  printf("%zu %ld %s\n", a.find_first_not_of(b), NewPlaceholderFile(argc), global_name.c_str());
  return 0;
}
"#;

/// The function symbols of `bin` (mangled name → [start, end)).
fn symbol_range(bin: &Path, name: &str) -> (u64, u64) {
    let (addr, size, _) = functions(bin)
        .into_iter()
        .find(|(_, _, n)| n == name)
        .unwrap_or_else(|| panic!("no symbol {name} in {}", bin.display()));
    (addr, addr + size)
}

/// The (function, line) chains of llvm-symbolizer for `addrs`, innermost first.
fn llvm(bin: &Path, addrs: &[u64]) -> Vec<Vec<(String, u32)>> {
    let tool = ["llvm-symbolizer-19", "llvm-symbolizer"]
        .into_iter()
        .find(|t| Command::new(t).arg("--version").output().is_ok())
        .expect("llvm-symbolizer (Debian package llvm-19)");
    let input: String = addrs.iter().map(|a| format!("{a:#x}\n")).collect();
    let out = run_with_stdin(
        Command::new(tool)
            .arg(format!("--obj={}", bin.display()))
            .arg("--demangle"),
        &input,
    );
    out.split("\n\n")
        .filter(|b| !b.trim().is_empty())
        .map(|block| {
            let lines: Vec<&str> = block.lines().collect();
            lines
                .chunks(2)
                .map(|c| {
                    let line = c[1].rsplit(':').nth(1).unwrap_or("0");
                    (c[0].to_string(), line.parse().unwrap_or(0))
                })
                .collect()
        })
        .collect()
}

/// `ebsym addr2line -f -i -C` chains for `addrs`, innermost first.
fn ebsym_cli(bin: &Path, addrs: &[u64]) -> Vec<Vec<(String, u32)>> {
    let input: String = addrs.iter().map(|a| format!("{a:#x}\n")).collect();
    let out = run_with_stdin(
        ebsym()
            .arg("addr2line")
            .arg("-e")
            .arg(bin)
            .args(["-a", "-f", "-i", "-C"]),
        &input,
    );
    let mut chains: Vec<Vec<(String, u32)>> = Vec::new();
    let mut lines = out.lines().peekable();
    while let Some(l) = lines.next() {
        if l.starts_with("0x") {
            chains.push(Vec::new());
            continue;
        }
        let loc = lines.next().unwrap_or("??:0");
        let line = loc.rsplit(':').next().unwrap_or("0");
        let line = line.split(' ').next().unwrap_or("0").parse().unwrap_or(0);
        chains.last_mut().unwrap().push((l.to_string(), line));
    }
    chains
}

/// The library's chains (the options of `ebsym TRACE`).
fn ebsym_lib(bin: &Path, addrs: &[u64]) -> Vec<Vec<(String, u32)>> {
    let module = ebtrace_symbolize::Symbolizer::default().open_binary(bin);
    addrs
        .iter()
        .map(|&a| match module.resolve(a) {
            Ok(frames) => frames
                .into_iter()
                .map(|f| (f.function.unwrap_or_default(), f.line))
                .collect(),
            Err(_) => Vec::new(),
        })
        .collect()
}

#[test]
fn inlined_frames_keep_their_own_names() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("stringpiece.cc");
    std::fs::write(&src, SOURCE).unwrap();
    let bin = dir.path().join("stringpiece");
    run_ok(
        Command::new("g++")
            .args(["-O2", "-g", "-Wl,--build-id", "-o"])
            .arg(&bin)
            .arg(&src),
    );
    // Every byte of the functions that have the helpers inlined into them.
    let mut addrs = Vec::new();
    for name in [
        "_ZNK11StringPiece17find_first_not_ofES_",
        "_Z18NewPlaceholderFilei",
    ] {
        let (lo, hi) = symbol_range(&bin, name);
        addrs.extend(lo..hi);
    }
    let statics: Vec<_> = functions(&bin)
        .into_iter()
        .filter(|(_, _, n)| n.starts_with("_GLOBAL__sub_I_"))
        .collect();
    // The constructor of the globals, and its `.cold` part (the exception path).
    assert!(!statics.is_empty());
    for (addr, size, _) in statics {
        addrs.extend(addr..addr + size);
    }

    let theirs = llvm(&bin, &addrs);
    assert_eq!(theirs.len(), addrs.len());
    let (cli, lib) = (ebsym_cli(&bin, &addrs), ebsym_lib(&bin, &addrs));
    // The helpers the bug renamed, each met inlined (llvm-symbolizer's innermost frame).
    let mut seen = std::collections::BTreeMap::<&str, usize>::new();
    for (i, addr) in addrs.iter().enumerate() {
        let Some(inner) = theirs[i].first().filter(|_| theirs[i].len() > 1) else {
            continue;
        };
        let helper = [
            "BuildLookupTable",
            "Fill",
            "__static_initialization_and_destruction_0",
        ]
        .into_iter()
        .find(|h| inner.0.contains(h));
        let Some(helper) = helper else { continue };
        *seen.entry(helper).or_default() += 1;
        for (tool, ours) in [("ebsym addr2line", &cli[i]), ("library", &lib[i])] {
            let first = ours.first().map(|f| f.0.as_str()).unwrap_or("??");
            assert!(
                first.contains(helper),
                "{tool} at {addr:#x}: innermost frame {first:?}, llvm-symbolizer {inner:?} \
                 (whole chain: ebsym {ours:?}, llvm {:?})",
                theirs[i]
            );
            assert_eq!(
                ours.iter().map(|f| f.1).collect::<Vec<_>>(),
                theirs[i].iter().map(|f| f.1).collect::<Vec<_>>(),
                "{tool} at {addr:#x}: lines"
            );
            assert_eq!(ours.len(), theirs[i].len(), "{tool} at {addr:#x}: depth");
        }
    }
    for helper in [
        "BuildLookupTable",
        "Fill",
        "__static_initialization_and_destruction_0",
    ] {
        assert!(
            seen.get(helper).copied().unwrap_or(0) > 0,
            "{helper} never inlined: {seen:?} (the test would prove nothing)"
        );
    }
    // The line of the helper's own body is the innermost frame's.
    let lookup_line = theirs
        .iter()
        .filter(|c| c.len() > 1 && c[0].0.contains("BuildLookupTable"))
        .any(|c| c[0].1 == 15);
    assert!(
        lookup_line,
        "no address at stringpiece.cc:15 in BuildLookupTable"
    );
}
