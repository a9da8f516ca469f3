//! `ebsym addr2line` against binutils `addr2line` (run in the same test), byte for byte,
//! on C++ programs built with `g++ -O2 -g` (so with inlining) in each DWARF variant.
//!
//! Accepted difference (a binutils bug, checked and not just tolerated): binutils names
//! the innermost frame of a C++ function that DWARF names without a linkage name (e.g. the
//! `static inline` `__gthread_mutex_unlock`) after the symbol table, but caches that
//! choice in its per-function state, so the *second* address of the same inlined instance
//! gets the DWARF name instead: its answer depends on the addresses asked before. ebsym
//! always gives binutils' first answer. Where a block differs, binutils is run again on
//! that one address alone and must then agree with ebsym.
//!
//! Accepted difference (binutils' names, which ebsym does not copy): binutils names the
//! innermost frame of a C++ function without a linkage name (a `static` helper inlined
//! into its caller) after the symbol that contains the address, that is after its caller,
//! and a containing function in an anonymous namespace by DWARF's short name (`~Counters`).
//! ebsym gives DWARF's name to inlined frames and the symbol's qualified name to the
//! containing one, as llvm-symbolizer does. Checked, not tolerated: the blocks differ in
//! function names only, and each of ebsym's names there is llvm-symbolizer's.
use crate::common::*;
use std::path::Path;
use std::process::Command;

const FLAG_SETS: &[&[&str]] = &[
    &["-a"],
    &["-a", "-f"],
    &["-a", "-f", "-i"],
    &["-a", "-f", "-i", "-C"],
    &["-a", "-i", "-C"],
];

/// Output blocks, one per address (each starts with the `-a` line).
fn blocks(s: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in s.split_inclusive('\n') {
        if line.starts_with("0x") || out.is_empty() {
            out.push(String::new());
        }
        out.last_mut().unwrap().push_str(line);
    }
    out
}

/// Compares binutils on `reference` with ebsym on `bin` (plus `ebsym_args`).
pub(crate) fn compare(reference: &Path, bin: &Path, ebsym_args: &[&str], addrs: &[u64]) {
    compare_env(reference, bin, ebsym_args, &[], addrs)
}

/// [`compare`], with `env` set for ebsym.
pub(crate) fn compare_env(
    reference: &Path,
    bin: &Path,
    ebsym_args: &[&str],
    env: &[(&str, &Path)],
    addrs: &[u64],
) {
    assert!(addrs.len() > 200, "too few addresses: {}", addrs.len());
    let input: String = addrs.iter().map(|a| format!("{a:#x}\n")).collect();
    for flags in FLAG_SETS {
        let theirs = run_with_stdin(
            Command::new("addr2line")
                .arg("-e")
                .arg(reference)
                .args(*flags),
            &input,
        );
        let ours = run_with_stdin(
            ebsym()
                .arg("addr2line")
                .arg("-e")
                .arg(bin)
                .args(ebsym_args)
                .envs(env.iter().copied())
                .args(*flags),
            &input,
        );
        let (t, o) = (blocks(&theirs), blocks(&ours));
        assert_eq!(t.len(), o.len(), "{flags:?}");
        assert_eq!(t.len(), addrs.len(), "{flags:?}");
        let mut rechecked = 0;
        for ((tb, ob), addr) in t.iter().zip(&o).zip(addrs) {
            if tb == ob {
                continue;
            }
            // See the module docs: binutils' answer depends on earlier questions.
            let alone = String::from_utf8(
                run_ok(
                    Command::new("addr2line")
                        .arg("-e")
                        .arg(reference)
                        .args(*flags)
                        .arg(format!("{addr:#x}")),
                )
                .stdout,
            )
            .unwrap();
            if &alone != ob {
                assert!(
                    names_as_llvm_gives_them(reference, flags, &alone, ob, *addr),
                    "{flags:?} at {addr:#x}: binutils said\n{alone}ebsym\n{ob}"
                );
            }
            rechecked += 1;
        }
        // Each difference was checked above; many would still mean something else is off.
        assert!(
            rechecked * 5 < addrs.len(),
            "{flags:?}: {rechecked} of {} differ",
            addrs.len()
        );
    }
    // Without -a the output is exactly binutils' too (no stateful names without -f).
    let theirs = run_with_stdin(
        Command::new("addr2line").arg("-e").arg(reference).arg("-i"),
        &input,
    );
    let ours = run_with_stdin(
        ebsym()
            .arg("addr2line")
            .arg("-e")
            .arg(bin)
            .args(ebsym_args)
            .envs(env.iter().copied())
            .arg("-i"),
        &input,
    );
    assert_eq!(theirs, ours);
}

/// llvm-symbolizer's function names for `addr` in `bin`, innermost first.
fn llvm_names(bin: &Path, addr: u64, demangle: bool) -> Vec<String> {
    let tool = ["llvm-symbolizer-19", "llvm-symbolizer"]
        .into_iter()
        .find(|t| Command::new(t).arg("--version").output().is_ok())
        .expect("llvm-symbolizer (Debian package llvm-19) checks binutils' names");
    let out = run_ok(
        Command::new(tool)
            .arg(format!("--obj={}", bin.display()))
            .arg(if demangle {
                "--demangle"
            } else {
                "--no-demangle"
            })
            .arg(format!("{addr:#x}")),
    );
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines()
        .filter(|l| !l.is_empty())
        .step_by(2)
        .map(|l| l.replace("> >", ">>"))
        .collect()
}

/// The accepted difference of the module docs: `theirs` (binutils) and `ours` differ only
/// in function names, and there each of ebsym's names is llvm-symbolizer's for that frame.
fn names_as_llvm_gives_them(
    bin: &Path,
    flags: &[&str],
    theirs: &str,
    ours: &str,
    addr: u64,
) -> bool {
    if !flags.contains(&"-f") {
        return false;
    }
    let (t, o): (Vec<&str>, Vec<&str>) = (theirs.lines().collect(), ours.lines().collect());
    // Name lines: from the first (after the address line of -a), every other line.
    let first = usize::from(flags.contains(&"-a"));
    if t.len() != o.len() {
        return false;
    }
    let llvm = llvm_names(bin, addr, flags.contains(&"-C"));
    let norm = |s: &str| s.replace("> >", ">>");
    let symbols = std::cell::OnceCell::new();
    // gcc's aliases of one body (`D1Ev` and `D2Ev`): llvm-symbolizer picks one symbol,
    // ebsym the one DWARF describes.
    let aliases = |a: &str, b: &str| {
        let d = |n: &str| norm(&ebtrace_symbolize::Symbolizer::demangle(n));
        symbols
            .get_or_init(|| crate::llvm_compare::Symbols::of(bin))
            .same_address(&d(a), &d(b))
    };
    (0..t.len()).filter(|&i| t[i] != o[i]).all(|i| {
        i >= first
            && (i - first) % 2 == 0
            && llvm
                .get((i - first) / 2)
                .is_some_and(|l| *l == norm(o[i]) || aliases(l, o[i]))
    })
}

fn check_variant(program: &str, flags: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let bin = build(program, dir.path(), program, flags);
    let addrs = sample_addresses(&bin, 25);
    compare(&bin, &bin, &[], &addrs);
}

#[test]
fn plain_shop() {
    check_variant("shop", &[]);
}

#[test]
fn plain_alloc_workload() {
    check_variant("alloc_workload", &[]);
}

#[test]
fn dwarf4() {
    check_variant("shop", &["-gdwarf-4"]);
}

#[test]
fn dwarf5() {
    check_variant("lock_workload", &["-gdwarf-5"]);
}

#[test]
fn zlib_compressed_sections() {
    check_variant("shop", &["-gz=zlib"]);
}

#[test]
fn zstd_compressed_sections() {
    // gcc 12 has no -gz=zstd: compress afterwards.
    let dir = tempfile::tempdir().unwrap();
    let bin = build("shop", dir.path(), "shop", &[]);
    let zst = dir.path().join("shop.zst");
    run_ok(
        Command::new("objcopy")
            .arg("--compress-debug-sections=zstd")
            .arg(&bin)
            .arg(&zst),
    );
    let out = run_ok(Command::new("readelf").arg("-SW").arg(&zst));
    let sections = String::from_utf8_lossy(&out.stdout).into_owned();
    let info = sections
        .lines()
        .find(|l| l.contains(".debug_info"))
        .unwrap();
    assert!(info.contains(" C "), "not compressed: {info}");
    let addrs = sample_addresses(&bin, 25);
    compare(&bin, &zst, &[], &addrs);
}

#[test]
fn separate_debug_file_by_debuglink() {
    let dir = tempfile::tempdir().unwrap();
    let bin = build("shop", dir.path(), "shop", &[]);
    let addrs = sample_addresses(&bin, 25);
    let full = dir.path().join("shop.full");
    std::fs::copy(&bin, &full).unwrap();
    let debug = dir.path().join("shop.debug");
    split_debug(&bin, &debug);
    run_ok(
        Command::new("objcopy")
            .arg(format!("--add-gnu-debuglink={}", debug.display()))
            .arg(&bin),
    );
    // binutils follows the debuglink too: compare on the stripped binary itself.
    compare(&bin, &bin, &[], &addrs);
    // And it gives the same as the unstripped binary.
    compare(&full, &bin, &[], &addrs);
}

#[test]
fn build_id_tree_in_debug_dir() {
    let dir = tempfile::tempdir().unwrap();
    let bin = build("alloc_workload", dir.path(), "alloc_workload", &[]);
    let addrs = sample_addresses(&bin, 25);
    let full = dir.path().join("full");
    std::fs::copy(&bin, &full).unwrap();
    let dbg = dir.path().join("dbg");
    let target = build_id_path(&dbg, &build_id(&bin));
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    split_debug(&bin, &target);
    let dbg_arg = dbg.to_str().unwrap();
    compare(&full, &bin, &["--debug-dir", dbg_arg], &addrs);
}

#[test]
fn addresses_from_arguments_and_unknown_ones() {
    let dir = tempfile::tempdir().unwrap();
    let bin = build("forker", dir.path(), "forker", &[]);
    let args = ["-f", "-a", "-C", "0", "ffffffffff", "0x1", "zz"];
    let theirs = run_ok(Command::new("addr2line").arg("-e").arg(&bin).args(args)).stdout;
    let ours = run_ok(ebsym().arg("addr2line").arg("-e").arg(&bin).args(args)).stdout;
    assert_eq!(
        String::from_utf8(theirs).unwrap(),
        String::from_utf8(ours).unwrap()
    );
}

/// Whether section `name` is in `bin`.
fn has_section(bin: &Path, name: &str) -> bool {
    let out = run_ok(Command::new("readelf").arg("-SW").arg(bin));
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .any(|w| w == name)
}

#[test]
fn dwz_supplementary_file() {
    let dir = tempfile::tempdir().unwrap();
    let a = build("shop", dir.path(), "shop", &[]);
    let b = build(
        "shop",
        dir.path(),
        "shop-other",
        &["-DEBTRACE_OTHER_BUILD=1"],
    );
    let (a_ref, b_ref) = (
        dir.path().join("shop.ref"),
        dir.path().join("shop-other.ref"),
    );
    std::fs::copy(&a, &a_ref).unwrap();
    std::fs::copy(&b, &b_ref).unwrap();
    // Relative names, as distributions ship them (`.gnu_debugaltlink` = "common.debug").
    run_ok(
        Command::new("dwz")
            .args(["-m", "common.debug", "shop", "shop-other"])
            .current_dir(dir.path()),
    );
    for (bin, reference) in [(&a, &a_ref), (&b, &b_ref)] {
        assert!(has_section(bin, ".gnu_debugaltlink"), "dwz did not run");
        compare(reference, bin, &[], &sample_addresses(reference, 25));
    }
}

/// Builds `shop` with `-gsplit-dwarf` (and `flags`) and the same without, in `dir`:
/// (split binary, reference binary). The code is the same; only the DWARF moves.
fn split_dwarf_pair(dir: &Path, flags: &[&str]) -> (std::path::PathBuf, std::path::PathBuf) {
    let reference = build("shop", dir, "shop.ref", flags);
    let split_flags: Vec<&str> = flags.iter().copied().chain(["-gsplit-dwarf"]).collect();
    let bin = build("shop", dir, "shop", &split_flags);
    assert_eq!(functions(&bin), functions(&reference), "same code");
    (bin, reference)
}

fn dwo_files(dir: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "dwo"))
        .collect()
}

#[test]
fn split_dwarf_dwo_files() {
    // binutils cannot read split DWARF: compare with the same program built without it.
    for flags in [&["-gdwarf-5"][..], &["-gdwarf-4"][..]] {
        let dir = tempfile::tempdir().unwrap();
        let (bin, reference) = split_dwarf_pair(dir.path(), flags);
        assert!(!dwo_files(dir.path()).is_empty(), "{flags:?}: no .dwo");
        compare(&reference, &bin, &[], &sample_addresses(&reference, 25));
    }
}

#[test]
fn split_dwarf_dwp_package() {
    // GNU dwp handles gcc's DWARF 4 split units (it crashes on DWARF 5 ones).
    let dir = tempfile::tempdir().unwrap();
    let (bin, reference) = split_dwarf_pair(dir.path(), &["-gdwarf-4"]);
    let dwp = dir.path().join("shop.dwp");
    run_ok(
        Command::new("timeout")
            .arg("120")
            .arg("dwp")
            .arg("-e")
            .arg(&bin)
            .arg("-o")
            .arg(&dwp),
    );
    for dwo in dwo_files(dir.path()) {
        std::fs::remove_file(dwo).unwrap();
    }
    compare(&reference, &bin, &[], &sample_addresses(&reference, 25));
}

/// A `thorin::Session` that keeps what it is given for the life of the process: the
/// test packs one small program once, so leaking is simpler than arenas and costs a few
/// MiB.
struct LeakingSession;

impl<T> thorin::Session<T> for LeakingSession {
    fn alloc_data(&self, data: Vec<u8>) -> &[u8] {
        Box::leak(data.into_boxed_slice())
    }

    fn alloc_relocation(&self, data: T) -> &T {
        Box::leak(Box::new(data))
    }

    fn read_input(&self, path: &Path) -> std::io::Result<&[u8]> {
        Ok(Box::leak(std::fs::read(path)?.into_boxed_slice()))
    }
}

#[test]
fn split_dwarf_dwp_package_dwarf5() {
    // gcc's DWARF 5 .dwo files, packed by thorin (the library behind `thorin`, as rustc
    // uses it) into shop.dwp: functions, lines and inline chains as in the unsplit build.
    let dir = tempfile::tempdir().unwrap();
    let (bin, reference) = split_dwarf_pair(dir.path(), &["-gdwarf-5"]);
    let session = LeakingSession;
    let mut package = thorin::DwarfPackage::new(&session);
    package
        .add_executable(&bin, thorin::MissingReferencedObjectBehaviour::Error)
        .unwrap();
    let bytes = package.finish().unwrap().write().unwrap();
    let dwp = dir.path().join("shop.dwp");
    std::fs::write(&dwp, bytes).unwrap();
    assert!(has_section(&dwp, ".debug_cu_index"), "not a package");
    let dwos = dwo_files(dir.path());
    assert!(!dwos.is_empty());
    for dwo in dwos {
        std::fs::remove_file(dwo).unwrap();
    }
    compare(&reference, &bin, &[], &sample_addresses(&reference, 25));
}
