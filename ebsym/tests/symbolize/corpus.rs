//! The differential test on large real C++ programs built from Debian source packages
//! with their own build systems (`bench/scripts/corpus.sh`: protobuf's protoc, 81 MB;
//! cppcheck, 104 MB; ninja, 8 MB; leveldb's db_bench when built), not only on ours: whole
//! inline chains (function, file and line of every frame) equal llvm-symbolizer's on at
//! least 99.9% of addresses sampled over each binary's `.text`, every difference
//! classified as in `differential.rs` (`llvm_compare.rs` lists the accepted classes).
//!
//! The binaries: `EBTRACE_CORPUS` (paths separated by `:`), else what `corpus.sh` left in
//! `$EBTRACE_BENCH_CACHE/corpus` (default `/var/tmp/ebtrace-bench`). `scripts/test` builds
//! ninja there (a minute) so that CI always checks one real program; the large ones take
//! 10 minutes each to build and are checked where they are built. With none, the test is
//! skipped, loudly, and fails under CI=true. Each binary is also checked with its DWARF
//! compressed (`objcopy --compress-debug-sections=zlib`), as distributions ship it.
use crate::common::*;
use crate::differential::{
    agree_with_llvm, demangle_with_llvm, ebsym_chains, first_difference, llvm_chains,
    llvm_symbolizer, Tally,
};
use crate::llvm_compare::Symbols;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Addresses per binary.
const N: usize = 20_000;

fn corpus() -> Vec<PathBuf> {
    if let Some(list) = std::env::var_os("EBTRACE_CORPUS") {
        return std::env::split_paths(&list)
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
    }
    let cache = std::env::var_os("EBTRACE_BENCH_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp/ebtrace-bench"));
    let candidates = [
        "corpus/protoc/build/protoc",
        "corpus/cppcheck/build/bin/cppcheck",
        "corpus/ninja/build/ninja",
        "leveldb/build/db_bench",
    ];
    candidates
        .iter()
        .map(|c| cache.join(c))
        .filter(|p| p.is_file())
        .map(|p| std::fs::canonicalize(&p).unwrap_or(p))
        .collect()
}

/// The `[lo, hi)` of the executable sections of `bin` (`readelf -SW`).
fn text_range(bin: &Path) -> (u64, u64) {
    let out = run_ok(Command::new("readelf").arg("-SW").arg(bin));
    let (mut lo, mut hi) = (u64::MAX, 0);
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // "  [14] .text  PROGBITS  0000000000001100 001100 000af2 00  AX  0   0 16"
        let Some(rest) = line.split_once(']').map(|(_, r)| r) else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.len() < 7 || f[1] != "PROGBITS" || !f[6].contains('X') {
            continue;
        }
        let (Ok(a), Ok(z)) = (u64::from_str_radix(f[2], 16), u64::from_str_radix(f[4], 16)) else {
            continue;
        };
        lo = lo.min(a);
        hi = hi.max(a + z);
    }
    assert!(lo < hi, "no executable section in {}", bin.display());
    (lo, hi)
}

/// `n` addresses of `bin`, as `bench/scripts/symbolize.sh` draws them (fixed seed): 2/5
/// function starts, 2/5 random offsets inside functions, 1/5 uniform in the text.
fn sample(bin: &Path, n: usize) -> Vec<u64> {
    let (lo, hi) = text_range(bin);
    let functions: Vec<(u64, u64)> = functions(bin)
        .into_iter()
        .filter(|&(a, z, _)| z > 0 && a >= lo && a < hi)
        .map(|(a, z, _)| (a, z))
        .collect();
    assert!(!functions.is_empty(), "no functions in {}", bin.display());
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..n)
        .map(|i| {
            let (a, z) = functions[(next() % functions.len() as u64) as usize];
            match i % 5 {
                0 | 1 => a,
                2 | 3 => a + next() % z,
                _ => lo + next() % (hi - lo),
            }
        })
        .collect()
}

/// Whole chains of `bin` against llvm-symbolizer: (agreeing, total).
fn check(
    llvm: &str,
    label: &str,
    bin: &Path,
    tally: &mut Tally,
    differ: &mut Tally,
) -> (usize, usize) {
    let addrs = sample(bin, N);
    let theirs = llvm_chains(llvm, bin, &addrs);
    let ours = ebsym_chains(bin, &addrs, true);
    let raw = ebsym_chains(bin, &addrs, false);
    let llvm_demangled = demangle_with_llvm(llvm, &raw);
    let symbols = Symbols::of(bin);
    let mut same = 0;
    let mut inlined = 0;
    for (i, addr) in addrs.iter().enumerate() {
        inlined += usize::from(ours[i].len() > 1);
        match agree_with_llvm(
            &theirs[i],
            &ours[i],
            &raw[i],
            &llvm_demangled,
            &symbols,
            tally,
        ) {
            Ok(()) => same += 1,
            Err((l, o)) => differ.add(label, || {
                format!("{addr:#x}: llvm | ebsym: {}", first_difference(&l, &o))
            }),
        }
    }
    // A binary without inlining or without DWARF would prove nothing.
    assert!(
        inlined * 10 > addrs.len(),
        "{label}: only {inlined} addresses with inlined frames"
    );
    eprintln!(
        "{label}: {same} of {} whole chains equal to llvm-symbolizer's ({:.3}%), {inlined} with inlined frames",
        addrs.len(),
        100.0 * same as f64 / addrs.len() as f64
    );
    (same, addrs.len())
}

#[test]
fn corpus_against_llvm_symbolizer() {
    let Some(llvm) = llvm_symbolizer() else {
        return;
    };
    let bins = corpus();
    if bins.is_empty() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "no corpus binary (bench/scripts/corpus.sh builds them; scripts/test builds ninja), and CI=true"
        );
        eprintln!("SKIPPED: no corpus binary: run bench/scripts/corpus.sh (or set EBTRACE_CORPUS)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (mut tally, mut differ) = (Tally::default(), Tally::default());
    let mut worst = (f64::MAX, String::new());
    for bin in &bins {
        let name = bin.file_name().unwrap().to_string_lossy().into_owned();
        let compressed = dir.path().join(format!("{name}.zlib"));
        run_ok(
            Command::new("objcopy")
                .arg("--compress-debug-sections=zlib")
                .arg(bin)
                .arg(&compressed),
        );
        for (label, path) in [
            (name.clone(), bin.clone()),
            (format!("{name} (zlib)"), compressed),
        ] {
            let (same, total) = check(llvm, &label, &path, &mut tally, &mut differ);
            let pct = 100.0 * same as f64 / total as f64;
            if pct < worst.0 {
                worst = (pct, label);
            }
        }
    }
    tally.print("accepted differences from llvm-symbolizer (addresses)");
    differ.print("disagreements with llvm-symbolizer (addresses, by binary)");
    assert!(
        worst.0 >= 99.9,
        "{}: whole inline chains agree with llvm-symbolizer on only {:.3}%",
        worst.1,
        worst.0
    );
}
