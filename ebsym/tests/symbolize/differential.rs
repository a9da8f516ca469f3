//! Differential: ebsym against `llvm-symbolizer --inlines --demangle` and binutils
//! `addr2line -f -i -C`, all run in the same test on the same addresses: every
//! instruction boundary of `.text` (from `objdump -d`) of every testdata program, built
//! as a position-independent executable, a fixed-address executable (`-no-pie`) and a
//! shared library (`-fPIC -shared`), all `-O2 -g` (so with much inlining).
//!
//! What is compared, per address: the whole frame chain, innermost inlined frame first
//! and the containing function last, each frame's function name, file and line. ebsym is
//! asked through its library (`Module::resolve_many`, default options) for the
//! comparison with llvm-symbolizer, and through `ebsym addr2line -a -f -i -C` for the
//! one with binutils (whose output format it copies). Columns and discriminators are
//! counted on their own (llvm-symbolizer prints both, binutils only discriminators).
//!
//! Names are compared after demangler formatting is normalized, and llvm-symbolizer's
//! habit of naming the containing function after the symbol table is accepted: see
//! `llvm_compare.rs`. Every other difference is a disagreement, and at most 0.1% of
//! addresses may disagree.
//!
//! Accepted differences from binutils (counted and printed the same way; at most 0.1% of
//! addresses may differ otherwise in files and lines):
//! - `binutils: padding between functions`: an address outside every symbol's size and
//!   every DWARF range (the alignment `nop`s after a function) is named by binutils after
//!   the symbol before it, with that symbol's `STT_FILE` and no line (`main.cold`,
//!   `alloc_workload.cpp:?`), or with the line of a line-table row that covers the
//!   padding; ebsym and llvm-symbolizer name no function there (`??`, with that row's
//!   file and line if there is one). The lines must be equal. In a batch, binutils
//!   may even print there the file and line of the address asked before (its
//!   per-function state again, see `addr2line.rs`): such an address is asked again on
//!   its own, and must then get the symbol and no line.
//! - `binutils: in a batch, an answer that depends on the address asked before`: the
//!   per-function state of `addr2line.rs`'s module docs (the second address of the
//!   start of a `.cold` part gets another name and no file): asked again on its own,
//!   binutils must then give ebsym's answer exactly.
//! - `binutils: DWARF 5 file 1 taken for the primary source file`: binutils 2.40 reads
//!   entry 1 of a DWARF 5 line-table file list as the unit's own source file. gcc
//!   usually makes entry 1 a copy of entry 0, but not when it compiles an absolute
//!   source path in the source's directory (as testdata's `build` does): there entry 1
//!   is the first header (`common.h`, `std_thread.h`; see `llvm-dwarfdump --debug-line`),
//!   and binutils prints `memgrowth.cpp:57` for `common.h:57`. Accepted only where
//!   llvm-symbolizer agrees with ebsym, the lines and names are equal, and binutils'
//!   file is the program's own source.
use crate::common::*;
use crate::llvm_compare::{compare, Chain, Frame, Symbols};
use ebtrace_symbolize::{Options, Symbolizer};
use ebtrace_testdata::{programs, Variant};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Counts of each accepted difference class and of each disagreement, with examples.
#[derive(Default)]
pub(crate) struct Tally {
    classes: BTreeMap<String, (usize, String)>,
}

impl Tally {
    pub(crate) fn add(&mut self, class: &str, example: impl FnOnce() -> String) {
        let e = self
            .classes
            .entry(class.to_string())
            .or_insert_with(|| (0, example()));
        e.0 += 1;
    }

    pub(crate) fn print(&self, title: &str) {
        eprintln!("{title}:");
        for (class, (n, example)) in &self.classes {
            eprintln!("  {n:6}  {class}\n          e.g. {example}");
        }
    }
}

/// The llvm-symbolizer to run: `llvm-symbolizer-19` (Debian package `llvm-19`), else
/// any `llvm-symbolizer`. None (the test is skipped) when there is none, but under
/// CI=true that fails: scripts/test installs it.
pub(crate) fn llvm_symbolizer() -> Option<&'static str> {
    ["llvm-symbolizer-19", "llvm-symbolizer"]
        .into_iter()
        .find(|tool| {
            Command::new(tool)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .or_else(|| {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "llvm-symbolizer is not installed (Debian package `llvm-19`), and CI=true"
            );
            eprintln!("SKIPPED: llvm-symbolizer is not installed (Debian package `llvm-19`)");
            None
        })
}

/// Every instruction address in `.text` of `bin`, from `objdump -d`.
fn instruction_addresses(bin: &Path) -> Vec<u64> {
    let out = run_ok(
        Command::new("objdump")
            .args(["-d", "--no-show-raw-insn", "-j", ".text"])
            .arg(bin),
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut addrs: Vec<u64> = text
        .lines()
        .filter_map(|l| {
            // "    1234:\tmov ..." (labels are "0000000000001234 <name>:").
            let (addr, rest) = l.trim_start().split_once(':')?;
            if !l.starts_with(' ') || rest.is_empty() {
                return None;
            }
            u64::from_str_radix(addr, 16).ok()
        })
        .collect();
    addrs.sort_unstable();
    addrs.dedup();
    addrs
}

/// llvm-symbolizer's answers for `addrs` in `bin` (its JSON output).
pub(crate) fn llvm_chains(tool: &str, bin: &Path, addrs: &[u64]) -> Vec<Chain> {
    let input: String = addrs.iter().map(|a| format!("{a:#x}\n")).collect();
    let out = run_with_stdin(
        Command::new(tool)
            .arg(format!("--obj={}", bin.display()))
            .args(["--inlines", "--demangle", "--output-style=JSON"]),
        &input,
    );
    let chains: Vec<Chain> = out
        .lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let known = |s: &str| (!s.is_empty() && s != "??").then(|| s.to_string());
            v["Symbol"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| Frame {
                    function: known(f["FunctionName"].as_str().unwrap()),
                    file: known(f["FileName"].as_str().unwrap()),
                    line: f["Line"].as_u64().unwrap() as u32,
                    column: f["Column"].as_u64().unwrap() as u32,
                })
                .filter(|f| f.function.is_some() || f.file.is_some())
                .collect()
        })
        .collect();
    assert_eq!(chains.len(), addrs.len(), "{}", bin.display());
    chains
}

/// ebsym's answers for `addrs` in `bin`, through the library, names demangled or not.
pub(crate) fn ebsym_chains(bin: &Path, addrs: &[u64], demangle: bool) -> Vec<Chain> {
    let options = Options {
        demangle,
        ..Default::default()
    };
    let module = Symbolizer::new(options).open_binary(bin);
    module
        .resolve_many(addrs)
        .iter()
        .map(|lookup| match &**lookup {
            Ok(frames) => frames
                .iter()
                .map(|f| Frame {
                    function: f.function.clone(),
                    file: f.file.clone(),
                    line: f.line,
                    column: f.column,
                })
                .collect(),
            Err(_) => Vec::new(),
        })
        .collect()
}

/// Every mangled name among `chains`, demangled by LLVM's demangler
/// (`llvm-cxxfilt`, next to `llvm-symbolizer`).
pub(crate) fn demangle_with_llvm(symbolizer: &str, chains: &[Chain]) -> HashMap<String, String> {
    let mut names: Vec<&String> = chains
        .iter()
        .flatten()
        .filter_map(|f| f.function.as_ref())
        .filter(|n| n.starts_with("_Z"))
        .collect();
    names.sort_unstable();
    names.dedup();
    let cxxfilt = symbolizer.replace("llvm-symbolizer", "llvm-cxxfilt");
    let input: String = names.iter().map(|n| format!("{n}\n")).collect();
    let out = run_with_stdin(&mut Command::new(cxxfilt), &input);
    let demangled: Vec<&str> = out.lines().collect();
    assert_eq!(demangled.len(), names.len());
    names
        .into_iter()
        .cloned()
        .zip(demangled.into_iter().map(str::to_string))
        .collect()
}

/// The chains in binutils `addr2line -a -f -i` output (as printed by binutils or
/// `ebsym addr2line`), one per address, and the discriminator of each.
fn parse_addr2line(out: &str) -> Vec<(Chain, u32)> {
    let mut chains: Vec<(Chain, u32)> = Vec::new();
    let mut lines = out.lines().peekable();
    while let Some(addr) = lines.next() {
        assert!(addr.starts_with("0x"), "not an address line: {addr}");
        let mut chain = Vec::new();
        let mut discriminator = 0;
        while lines.peek().is_some_and(|l| !l.starts_with("0x")) {
            let function = lines.next().unwrap();
            let location = lines.next().expect("a location after each function");
            let (location, d) = match location.split_once(" (discriminator ") {
                Some((l, d)) => (l, d.trim_end_matches(')').parse().unwrap()),
                None => (location, 0),
            };
            discriminator = discriminator.max(d);
            let (file, line) = location.rsplit_once(':').unwrap();
            let frame = Frame {
                function: (function != "??").then(|| function.to_string()),
                file: (file != "??").then(|| file.to_string()),
                line: line.parse().unwrap_or(0),
                column: 0,
            };
            if frame.function.is_some() || frame.file.is_some() {
                chain.push(frame);
            }
        }
        chains.push((chain, discriminator));
    }
    chains
}

/// `ebsym addr2line` or binutils `addr2line` (`cmd`) on `addrs`, with `-a -f -i -C`.
fn addr2line_chains(cmd: &mut Command, bin: &Path, addrs: &[u64]) -> Vec<(Chain, u32)> {
    let input: String = addrs.iter().map(|a| format!("{a:#x}\n")).collect();
    let out = run_with_stdin(
        cmd.arg("-e").arg(bin).args(["-a", "-f", "-i", "-C"]),
        &input,
    );
    let chains = parse_addr2line(&out);
    assert_eq!(chains.len(), addrs.len(), "{}", bin.display());
    chains
}

/// Where two chains first differ, briefly.
pub(crate) fn first_difference(a: &Chain, b: &Chain) -> String {
    let i = a
        .iter()
        .zip(b)
        .take_while(|(x, y)| (&x.function, &x.file, x.line) == (&y.function, &y.file, y.line))
        .count();
    let one = |c: &Chain| match c.get(i) {
        Some(f) => format!(
            "{} {}:{}",
            f.function.as_deref().unwrap_or("??"),
            f.file.as_deref().unwrap_or("??"),
            f.line
        ),
        None => "(no frame)".into(),
    };
    format!(
        "frame {i} of {}/{}: {} | {}",
        a.len(),
        b.len(),
        one(a),
        one(b)
    )
}

pub(crate) fn show(chain: &Chain) -> String {
    let frames: Vec<String> = chain
        .iter()
        .map(|f| {
            format!(
                "{} {}:{}",
                f.function.as_deref().unwrap_or("??"),
                f.file.as_deref().unwrap_or("??"),
                f.line
            )
        })
        .collect();
    format!("[{}]", frames.join(" <- "))
}

/// [`compare`], with the classes met tallied.
pub(crate) fn agree_with_llvm(
    llvm: &Chain,
    ours: &Chain,
    raw: &Chain,
    llvm_demangled: &HashMap<String, String>,
    symbols: &Symbols,
    tally: &mut Tally,
) -> Result<(), (Chain, Chain)> {
    for class in compare(llvm, ours, raw, llvm_demangled, symbols)? {
        tally.add(class, || {
            format!("llvm {} / ebsym {}", show(llvm), show(ours))
        });
    }
    Ok(())
}

/// Whether an address of `bin` is outside every symbol (`nm -S`): the alignment
/// padding between functions, which no DWARF range covers either.
fn padding(bin: &Path) -> impl Fn(u64) -> bool {
    let mut symbols: Vec<(u64, u64)> = functions(bin)
        .into_iter()
        .map(|(addr, size, _)| (addr, addr + size))
        .collect();
    symbols.sort_unstable();
    move |addr| {
        let i = symbols.partition_point(|&(start, _)| start <= addr);
        !symbols[..i].iter().any(|&(_, end)| addr < end)
    }
}

/// The binaries of the test: (label, program, path).
fn binaries() -> Vec<(String, &'static str, PathBuf)> {
    let mut out = Vec::new();
    for program in programs() {
        for variant in Variant::LAYOUTS {
            let bin = ebtrace_testdata::build(program, variant).unwrap();
            out.push((variant.file_name(program), *program, bin));
        }
    }
    out
}

#[test]
fn against_llvm_symbolizer_and_binutils() {
    let Some(llvm) = llvm_symbolizer() else {
        return;
    };
    let mut total = 0usize;
    let (mut llvm_same, mut llvm_columns, mut llvm_columns_same) = (0usize, 0usize, 0usize);
    let (mut binutils_lines, mut binutils_whole, mut binutils_discriminators) =
        (0usize, 0usize, 0usize);
    let mut binutils_lines_raw = 0usize;
    let (mut llvm_tally, mut llvm_differ) = (Tally::default(), Tally::default());
    let (mut binutils_tally, mut binutils_differ) = (Tally::default(), Tally::default());
    let mut inlined = 0usize;
    for (label, program, bin) in binaries() {
        let own_source = format!("/{program}.cpp");
        let addrs = instruction_addresses(&bin);
        assert!(addrs.len() > 1000, "{label}: {} instructions", addrs.len());
        let theirs = llvm_chains(llvm, &bin, &addrs);
        let ours = ebsym_chains(&bin, &addrs, true);
        let raw = ebsym_chains(&bin, &addrs, false);
        let llvm_demangled = demangle_with_llvm(llvm, &raw);
        let padding = padding(&bin);
        let symbols = Symbols::of(&bin);
        let binutils = addr2line_chains(&mut Command::new("addr2line"), &bin, &addrs);
        let ours_cli = addr2line_chains(ebsym().arg("addr2line"), &bin, &addrs);
        for (i, addr) in addrs.iter().enumerate() {
            total += 1;
            let (l, o) = (&theirs[i], &ours[i]);
            inlined += usize::from(o.len() > 1);
            let agreement =
                agree_with_llvm(l, o, &raw[i], &llvm_demangled, &symbols, &mut llvm_tally);
            let llvm_agrees = agreement.is_ok();
            match agreement {
                Ok(()) => {
                    llvm_same += 1;
                    for (lf, of) in l.iter().zip(o) {
                        llvm_columns += 1;
                        llvm_columns_same += usize::from(lf.column == of.column);
                    }
                }
                Err((l, o)) => llvm_differ.add(&label, || {
                    format!("{addr:#x}: llvm | ebsym: {}", first_difference(&l, &o))
                }),
            }
            // The command line and the library give the same files and lines, but for
            // binutils' file of the local symbol where no line-table row covers the
            // address (the start of a `.cold` part), which only the command line copies.
            let (cli, cli_discriminator) = &ours_cli[i];
            let files_lines = |c: &Chain| -> Vec<(Option<String>, u32)> {
                c.iter().map(|f| (f.file.clone(), f.line)).collect()
            };
            let mut library = files_lines(o);
            if let (Some(first), Some(c)) = (library.first_mut(), cli.first()) {
                if *first == (None, 0) && c.line == 0 {
                    first.0 = c.file.clone();
                }
            }
            assert_eq!(files_lines(cli), library, "{label} {addr:#x}");
            let (b, b_discriminator) = &binutils[i];
            let unnamed = cli.len() <= 1 && cli.iter().all(|f| f.function.is_none());
            let asked_alone_agrees = || {
                let alone = addr2line_chains(&mut Command::new("addr2line"), &bin, &[*addr]);
                alone[0].0 == *cli
            };
            if files_lines(b) == files_lines(cli) {
                binutils_lines += 1;
                binutils_lines_raw += 1;
                if b == cli && b_discriminator == cli_discriminator {
                    binutils_whole += 1;
                }
                binutils_discriminators += usize::from(b_discriminator == cli_discriminator);
            } else if unnamed && padding(*addr) && b.len() == 1 && b[0].function.is_some() {
                let ours_line = cli.first().map_or(0, |f| f.line);
                let class = if b[0].line == ours_line {
                    "binutils: padding between functions, named after the symbol before it"
                } else {
                    let alone = addr2line_chains(&mut Command::new("addr2line"), &bin, &[*addr]);
                    let (a, _) = &alone[0];
                    assert!(
                        a.len() == 1 && a[0].line == ours_line && a[0].function == b[0].function,
                        "{label} {addr:#x}: binutils says {} in a batch, {} alone",
                        show(b),
                        show(a)
                    );
                    "binutils: padding between functions, with the line asked before (batch)"
                };
                binutils_tally.add(class, || {
                    format!(
                        "{label} {addr:#x}: binutils {} / ebsym {}",
                        show(b),
                        show(cli)
                    )
                });
                binutils_lines += 1;
            } else if llvm_agrees
                && b.len() == cli.len()
                && b.iter().zip(cli.iter()).all(|(bf, cf)| {
                    bf.line == cf.line
                        && bf.function == cf.function
                        && (bf.file == cf.file
                            || bf.file.as_deref().is_some_and(|f| f.ends_with(&own_source)))
                })
            {
                binutils_tally.add(
                    "binutils: DWARF 5 file 1 taken for the primary source file",
                    || {
                        format!(
                            "{label} {addr:#x}: binutils | ebsym: {}",
                            first_difference(b, cli)
                        )
                    },
                );
                binutils_lines += 1;
            } else if asked_alone_agrees() {
                binutils_tally.add(
                    "binutils: in a batch, an answer that depends on the address asked before",
                    || {
                        format!(
                            "{label} {addr:#x}: binutils | ebsym: {}",
                            first_difference(b, cli)
                        )
                    },
                );
                binutils_lines += 1;
            } else {
                binutils_differ.add(&label, || {
                    format!("{addr:#x}: binutils | ebsym: {}", first_difference(b, cli))
                });
            }
        }
    }
    let pct = |n: usize, d: usize| 100.0 * n as f64 / d.max(1) as f64;
    eprintln!(
        "{total} addresses ({inlined} with inlined frames)\n\
         llvm-symbolizer: whole inline chains (function, file, line) agree on {llvm_same} \
         ({:.3}%, after normalization and the accepted differences below); the columns of \
         their frames on {:.2}%\n\
         binutils: the files and lines of whole chains agree on {binutils_lines_raw} \
         ({:.3}%), {binutils_lines} ({:.3}%) with the accepted differences below; with names \
         and discriminators too on {binutils_whole} ({:.3}%); discriminators on {:.3}%",
        pct(llvm_same, total),
        pct(llvm_columns_same, llvm_columns),
        pct(binutils_lines_raw, total),
        pct(binutils_lines, total),
        pct(binutils_whole, total),
        pct(binutils_discriminators, total),
    );
    llvm_tally.print("accepted differences from llvm-symbolizer (addresses)");
    llvm_differ.print("disagreements with llvm-symbolizer (addresses, by binary)");
    binutils_tally.print("accepted differences from binutils (addresses)");
    binutils_differ.print("disagreements with binutils on files and lines (by binary)");
    assert!(total > 20_000, "only {total} addresses");
    assert!(inlined * 5 > total, "too few inlined frames: {inlined}");
    assert!(
        llvm_same * 1000 >= total * 999,
        "whole inline chains agree with llvm-symbolizer on only {llvm_same} of {total}"
    );
    assert!(
        binutils_lines * 1000 >= total * 999,
        "files and lines agree with binutils on only {binutils_lines} of {total}"
    );
    // The lower bar for binutils as it is: its two bugs above (DWARF 5 file 1, padding)
    // cost about 2% of the instructions here.
    assert!(
        binutils_lines_raw * 100 >= total * 95,
        "files and lines agree with binutils as it is on only {binutils_lines_raw} of {total}"
    );
}

/// A function's address in `lib<program>.so` resolves, with `ebsym addr2line -e
/// lib<program>.so`, to the same function, file and line as in the executable, and as
/// llvm-symbolizer says.
#[test]
fn shared_library_resolves_like_the_executable() {
    let llvm = llvm_symbolizer();
    let lib = ebtrace_testdata::build("shop", Variant::SharedLibrary).unwrap();
    let exe = ebtrace_testdata::build("shop", Variant::Pie).unwrap();
    let named = |bin: &Path| -> HashMap<String, u64> {
        functions(bin)
            .into_iter()
            .map(|(addr, _, name)| (Symbolizer::demangle(&name), addr))
            .collect()
    };
    let (in_lib, in_exe) = (named(&lib), named(&exe));
    let wanted = [
        "shop::Catalog::lookup(unsigned long)",
        "shop::Catalog::slow_lookup(unsigned long)",
        "shop::Cart::add_item(unsigned long, unsigned long, unsigned long)",
        "shop::Session::open(unsigned long)",
        "shop::Pricing::compute(shop::Cart const&)",
        "shop::Server::handle_request(unsigned long, shop::WorkerStats&)",
    ];
    let ask = |bin: &Path, addr: u64| -> String {
        let out = run_ok(ebsym().arg("addr2line").arg("-e").arg(bin).args([
            "-f",
            "-C",
            &format!("{addr:#x}"),
        ]));
        String::from_utf8(out.stdout).unwrap()
    };
    for function in wanted {
        let (a_lib, a_exe) = (in_lib[function], in_exe[function]);
        let from_lib = ask(&lib, a_lib);
        assert_eq!(from_lib, ask(&exe, a_exe), "{function}");
        let (name, location) = from_lib.trim_end().split_once('\n').unwrap();
        assert_eq!(name, function);
        let (file, line) = location.rsplit_once(':').unwrap();
        assert!(file.ends_with("/shop.cpp"), "{function}: {location}");
        let line: u32 = line
            .parse()
            .unwrap_or_else(|_| panic!("{function}: no line in {location}"));
        assert!(line > 0, "{function}: {location}");
        if let Some(llvm) = llvm {
            let theirs = llvm_chains(llvm, &lib, &[a_lib]);
            let f = theirs[0].last().expect("llvm-symbolizer resolves it");
            assert_eq!(
                (f.file.as_deref(), f.line),
                (Some(file), line),
                "{function}"
            );
        }
    }
    // The shared library really is one: its code is at addresses near 0, not 0x400000.
    assert!(in_lib.values().all(|a| *a < 0x100000));
}
