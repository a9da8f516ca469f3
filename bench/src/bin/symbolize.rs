//! `ebsym addr2line` through the library's batched, parallel path
//! ([`ebtrace_symbolize::addr2line_stream`]), and ebsym's agreement with llvm-symbolizer,
//! for `bench/scripts/symbolize.sh` (not a test).
//!
//! `symbolize -e BINARY [-f] [-i] [-C] [-a] < addresses`: the same flags and output as
//! binutils `addr2line` reading stdin. Threads: `RAYON_NUM_THREADS`.
//!
//! `symbolize --vs-llvm LLVM_SYMBOLIZER -e BINARY < addresses`: resolves the addresses
//! with the library (the options `ebsym TRACE` uses), runs `LLVM_SYMBOLIZER --inlines
//! --demangle` on them, and prints on how many addresses the whole inline chains
//! (function, file and line of every frame) are equal, names compared after demangler
//! formatting (see `ebsym/tests/symbolize/llvm_compare.rs`, shared with the
//! differential test), then the accepted difference classes and a few disagreements.
use ebtrace_symbolize::binutils::{parse_address, Flags};
use ebtrace_symbolize::{addr2line_stream, Options, Symbolizer};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

#[path = "../../../ebsym/tests/symbolize/llvm_compare.rs"]
mod llvm_compare;
use llvm_compare::{Chain, Frame, Symbols};

fn main() -> anyhow::Result<()> {
    let mut exe = PathBuf::from("a.out");
    let mut flags = Flags::default();
    let mut demangle = false;
    let mut vs_llvm = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "-e" => {
                exe = args
                    .next()
                    .ok_or_else(|| anyhow::anyhow!("-e needs a file"))?
                    .into()
            }
            "--vs-llvm" => {
                vs_llvm = Some(
                    args.next()
                        .ok_or_else(|| anyhow::anyhow!("--vs-llvm needs llvm-symbolizer"))?,
                )
            }
            "-f" => flags.functions = true,
            "-i" => flags.inlines = true,
            "-a" => flags.addresses = true,
            "-C" => demangle = true,
            "-fiC" | "-fCi" => {
                flags.functions = true;
                flags.inlines = true;
                demangle = true;
            }
            _ => anyhow::bail!(
                "usage: symbolize -e BINARY [-f] [-i] [-C] [-a] < addresses\n       \
                 symbolize --vs-llvm LLVM_SYMBOLIZER -e BINARY < addresses"
            ),
        }
    }
    if let Some(llvm) = vs_llvm {
        return agreement(&llvm, &exe);
    }
    let sym = Symbolizer::new(Options {
        demangle,
        binutils_files: true,
        ..Default::default()
    });
    let module = sym.open_binary(&exe);
    let mut input = BufReader::with_capacity(1 << 16, std::io::stdin().lock());
    let mut out = BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    addr2line_stream(&module, flags, &mut input, &mut out)?;
    Ok(())
}

/// Runs `program args` with `input` on stdin; its stdout.
fn run(program: &str, args: &[String], input: String) -> anyhow::Result<String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot run {program}: {e}"))?;
    let mut stdin = child.stdin.take().expect("piped");
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output()?;
    writer
        .join()
        .map_err(|_| anyhow::anyhow!("writer panicked"))??;
    anyhow::ensure!(out.status.success(), "{program} failed: {}", out.status);
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// llvm-symbolizer's text output: one block per address, ended by an empty line, of
/// `function` and `file:line:column` lines.
fn parse_llvm(out: &str) -> Vec<Chain> {
    let mut chains = Vec::new();
    let mut chain = Vec::new();
    let mut lines = out.lines();
    while let Some(function) = lines.next() {
        if function.is_empty() {
            chains.push(std::mem::take(&mut chain));
            continue;
        }
        let location = lines.next().unwrap_or("??:0:0");
        let mut parts = location.rsplitn(3, ':');
        let column = parts.next().and_then(|c| c.parse().ok()).unwrap_or(0);
        let line = parts.next().and_then(|l| l.parse().ok()).unwrap_or(0);
        let file = parts.next().unwrap_or("??");
        let known = |s: &str| (!s.is_empty() && s != "??").then(|| s.to_string());
        let frame = Frame {
            function: known(function),
            file: known(file),
            line,
            column,
        };
        if frame.function.is_some() || frame.file.is_some() {
            chain.push(frame);
        }
    }
    chains
}

fn chains(bin: &Path, addrs: &[u64], demangle: bool) -> Vec<Chain> {
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

fn agreement(llvm: &str, bin: &Path) -> anyhow::Result<()> {
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input)?;
    let addrs: Vec<u64> = input
        .lines()
        .map(|l| parse_address(l).unwrap_or(0))
        .collect();
    let text: String = addrs.iter().map(|a| format!("{a:#x}\n")).collect();
    let obj = format!("--obj={}", bin.display());
    let theirs = parse_llvm(&run(
        llvm,
        &[obj, "--inlines".into(), "--demangle".into()],
        text,
    )?);
    anyhow::ensure!(
        theirs.len() == addrs.len(),
        "llvm-symbolizer answered {} of {} addresses",
        theirs.len(),
        addrs.len()
    );
    let ours = chains(bin, &addrs, true);
    let raw = chains(bin, &addrs, false);
    let mut mangled: Vec<&String> = raw
        .iter()
        .flatten()
        .filter_map(|f| f.function.as_ref())
        .filter(|n| n.starts_with("_Z"))
        .collect();
    mangled.sort_unstable();
    mangled.dedup();
    let cxxfilt = llvm.replace("llvm-symbolizer", "llvm-cxxfilt");
    let names: String = mangled.iter().map(|n| format!("{n}\n")).collect();
    let demangled = run(&cxxfilt, &[], names)?;
    let llvm_demangled: HashMap<String, String> = mangled
        .into_iter()
        .cloned()
        .zip(demangled.lines().map(str::to_string))
        .collect();
    let symbols = Symbols::of(bin);
    let mut same = 0usize;
    let mut classes: BTreeMap<&str, usize> = BTreeMap::new();
    // EXAMPLES=N: how many disagreements to print (default 10).
    let max_examples: usize = std::env::var("EXAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let mut examples = Vec::new();
    for (i, addr) in addrs.iter().enumerate() {
        match llvm_compare::compare(&theirs[i], &ours[i], &raw[i], &llvm_demangled, &symbols) {
            Ok(met) => {
                same += 1;
                for c in met {
                    *classes.entry(c).or_default() += 1;
                }
            }
            Err((l, o)) if examples.len() < max_examples => {
                examples.push(first_difference(*addr, &l, &o))
            }
            Err(_) => {}
        }
    }
    let n = addrs.len();
    let mut text = format!(
        "whole inline chains equal to llvm-symbolizer's: {same} of {n} addresses ({:.2}%)\n",
        100.0 * same as f64 / n.max(1) as f64
    );
    for (class, count) in classes {
        text += &format!("  accepted: {count} {class}\n");
    }
    for e in examples {
        text += &format!("{e}\n");
    }
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

/// Where llvm-symbolizer's chain `l` and ebsym's `o` first differ, on one line each.
fn first_difference(addr: u64, l: &Chain, o: &Chain) -> String {
    let i = l
        .iter()
        .zip(o)
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
        "  {addr:#x}, frame {i} of {}/{}:\n    llvm-symbolizer {}\n    ebsym           {}",
        l.len(),
        o.len(),
        one(l),
        one(o)
    )
}
