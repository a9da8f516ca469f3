//! Generator of the scaling benchmark's traces (bench/scripts/scaling.sh; not a test): a
//! symbolized allocation trace of a synthetic C++ program whose distinct stacks and events
//! grow together with a scale factor, so that a report's time and memory can be seen to
//! follow them.
//!
//! At scale 1: 1,250 distinct stacks and 125,000 allocations (most freed soon, every 50th
//! call site leaking a little); scale 16 is 20,000 stacks and 2 M allocations, about the
//! size of a large code generator's trace. Stacks are deep (20-60 frames) and share their
//! outer frames the way a compiler's do: each new stack takes a prefix of an earlier one
//! (the driver, the pass manager, a visitor) and adds its own inner frames, from a pool of
//! functions with long templated names (the names a C++ program's symbols demangle to).
//! The symbolizer's records are those ebsym writes: one `SymbolizedAddress` per distinct
//! (build-id, file offset), a third of the callers with an inlined frame.
//!
//! `cargo run --release -p ebtrace-bench --bin scaling -- SCALE PATH` prints "EVENTS STACKS".
use ebtrace_format::events::{AllocEvent, FreeEvent};
use ebtrace_format::proto::{self as pb, record::Kind, AllocKind, Header, Record};
use ebtrace_format::{TraceWriter, WriterOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeSet, VecDeque};
use std::path::Path;

/// Distinct stacks and allocations at scale 1.
const STACKS: usize = 1250;
const ALLOCS_PER_STACK: usize = 100;
const BIN: u64 = 0x5555_5555_0000;
const LIBC: u64 = 0x7f12_3400_0000;
const SPAN: u64 = 0x1000_0000;
const THREADS: usize = 4;

fn rec(k: Kind) -> Record {
    Record { kind: Some(k) }
}

const NAMESPACES: &[&str] = &[
    "google::protobuf",
    "google::protobuf::compiler::cpp",
    "llvm",
    "clang::CodeGen",
    "std",
    "boost::spirit::qi",
    "absl::lts_20230802::container_internal",
];
const CLASSES: &[&str] = &[
    "DescriptorBuilder",
    "Printer",
    "FileGenerator",
    "MessageGenerator",
    "RecursiveASTVisitor",
    "DenseMap",
    "SmallVectorImpl",
    "raw_hash_set",
    "_Hashtable",
    "vector",
    "basic_string",
    "Parser",
    "Tokenizer",
    "SemaLookup",
    "PassManager",
];
const ARGS: &[&str] = &[
    "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >",
    "std::vector<int, std::allocator<int> >",
    "google::protobuf::FieldDescriptor const*",
    "llvm::StringRef",
    "std::unique_ptr<clang::Expr, std::default_delete<clang::Expr> >",
    "std::pair<std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const, int>",
    "absl::lts_20230802::hash_internal::Hash<std::basic_string_view<char, std::char_traits<char> > >",
    "unsigned long",
    "llvm::DenseMapInfo<llvm::Value*, void>",
];
const METHODS: &[&str] = &[
    "operator()",
    "Visit",
    "TraverseDecl",
    "Generate",
    "GenerateClassDefinition",
    "BuildFieldOrExtension",
    "_M_insert_unique_node",
    "emplace_back",
    "resize",
    "Print",
    "ParseMessageDefinition",
    "InternalSwap",
    "grow",
    "try_emplace",
];

/// A long templated C++ name, as a demangler prints it, unique by its number.
fn cxx_name(rng: &mut StdRng, i: usize) -> String {
    let ns = NAMESPACES[rng.random_range(0..NAMESPACES.len())];
    let class = CLASSES[rng.random_range(0..CLASSES.len())];
    let targs: Vec<&str> = (0..rng.random_range(1..=3))
        .map(|_| ARGS[rng.random_range(0..ARGS.len())])
        .collect();
    let method = METHODS[rng.random_range(0..METHODS.len())];
    let params: Vec<&str> = (0..rng.random_range(0..=3))
        .map(|_| ARGS[rng.random_range(0..ARGS.len())])
        .collect();
    format!(
        "{ns}::{class}{i}<{}>::{method}({}) const",
        targs.join(", "),
        params.join(", ")
    )
}

/// The distinct stacks, leaf first: each shares the outer frames of an earlier one.
fn stacks(rng: &mut StdRng, n: usize, sites: u64) -> Vec<Vec<u64>> {
    let mut out: Vec<Vec<u64>> = Vec::with_capacity(n);
    let libc: Vec<u64> = (0..8).map(|i| LIBC + 0x9_0000 + i * 0x130).collect();
    let mut seen = BTreeSet::new();
    while out.len() < n {
        let depth = rng.random_range(20..=60usize);
        // Outermost first while building: a prefix of an earlier stack's outer frames.
        let mut outer: Vec<u64> = match out.len() {
            0 => Vec::new(),
            k => {
                let base = &out[rng.random_range(0..k)];
                let keep = rng.random_range(0..base.len() - 1).min(depth - 2);
                base.iter().rev().take(keep).copied().collect()
            }
        };
        while outer.len() < depth - 1 {
            // A call site: a return address inside the program, 16-byte aligned plus 5.
            outer.push(BIN + 0x1000 + rng.random_range(0..sites) * 0x40 + 5);
        }
        outer.push(libc[rng.random_range(0..libc.len())]);
        outer.reverse();
        if seen.insert(outer.clone()) {
            out.push(outer);
        }
    }
    out
}

/// Writes the trace; returns (events, distinct stacks).
fn write(scale: usize, path: &Path) -> anyhow::Result<(u64, usize)> {
    let mut rng = StdRng::seed_from_u64(50);
    let n_stacks = STACKS * scale;
    // Call sites grow with the program: 8 per distinct stack, 1 function per 4 sites.
    let sites = (n_stacks * 8) as u64;
    let names: Vec<String> = (0..sites as usize / 4)
        .map(|i| cxx_name(&mut rng, i))
        .collect();
    let stacks = stacks(&mut rng, n_stacks, sites);
    let mut w = TraceWriter::create(path, Header::default(), WriterOptions::default())?;
    let comm = w.intern_string(b"codegen")?;
    w.write_record(&rec(Kind::Process(pb::Process {
        generation: 1,
        pid: 5050,
        comm,
        event: pb::ProcessEvent::Existing as i32,
        ..Default::default()
    })))?;
    let bin_path = w.intern_string(b"/usr/bin/codegen")?;
    let bin_id = w.intern_build_id(&[0x50; 20])?;
    let libc_path = w.intern_string(b"/usr/lib/x86_64-linux-gnu/libc.so.6")?;
    let libc_id = w.intern_build_id(&[0x1c; 20])?;
    for (start, path, build_id) in [(BIN, bin_path, bin_id), (LIBC, libc_path, libc_id)] {
        w.write_record(&rec(Kind::Mapping(pb::Mapping {
            generation: 1,
            start,
            end: start + SPAN,
            path,
            build_id,
            perms: 5,
            source: pb::MappingSource::Snapshot as i32,
            ..Default::default()
        })))?;
    }
    // Zipf(1.1)-like popularity of the stacks.
    let mut acc = 0.0;
    let cumulative: Vec<f64> = (0..n_stacks)
        .map(|i| {
            acc += 1.0 / ((i + 1) as f64).powf(1.1);
            acc
        })
        .collect();
    let sizes = [16u64, 24, 32, 48, 64, 96, 128, 256, 512, 4096];
    let mut live: Vec<VecDeque<u64>> = vec![VecDeque::new(); THREADS];
    let mut free_list: Vec<Vec<u64>> = vec![Vec::new(); THREADS];
    let mut bump: Vec<u64> = (0..THREADS as u64)
        .map(|t| 0x6000_0000_0000 + (t << 36))
        .collect();
    let (mut time, mut events) = (1_000_000_000u64, 0u64);
    // Every stack allocates at least once, then the popular ones most.
    for i in 0..n_stacks * ALLOCS_PER_STACK {
        let site = if i < n_stacks {
            i
        } else {
            let x = rng.random::<f64>() * acc;
            cumulative.partition_point(|&c| c < x).min(n_stacks - 1)
        };
        let t = rng.random_range(0..THREADS);
        time += rng.random_range(50..500);
        let stack = w.intern_stack(1, &stacks[site], &[], 0)?;
        let address = free_list[t].pop().unwrap_or_else(|| {
            bump[t] += 0x1000;
            bump[t]
        });
        w.alloc(&AllocEvent {
            time_ns: time,
            generation: 1,
            tid: 5050 + t as u32,
            stack,
            size: sizes[(site * 7 + i % 3) % sizes.len()],
            address,
            kind: AllocKind::Malloc,
            sample_period: 0,
            allocator: 0,
        })?;
        events += 1;
        // Every 50th stack leaks; the others' blocks live for up to 500 allocations.
        if site % 50 != 49 {
            live[t].push_back(address);
        }
        if live[t].len() > rng.random_range(1..500) {
            let old = live[t].pop_front().unwrap();
            w.free(&FreeEvent {
                time_ns: time + 1,
                generation: 1,
                tid: 5050 + t as u32,
                address: old,
                allocator: 0,
            })?;
            events += 1;
            free_list[t].push(old);
        }
    }
    // The events' batches first, as the symbolizer's output has them: its records last.
    w.flush()?;
    symbolize(&mut w, &stacks, &names, (bin_id, libc_id))?;
    w.finish(Some(pb::Trailer {
        stop_reason: "bench".into(),
        ..Default::default()
    }))?;
    Ok((events, n_stacks))
}

/// The symbolizer's records for every distinct looked-up address of `stacks`.
fn symbolize(
    w: &mut TraceWriter<std::io::BufWriter<std::fs::File>>,
    stacks: &[Vec<u64>],
    names: &[String],
    (bin_id, libc_id): (u64, u64),
) -> anyhow::Result<()> {
    w.write_record(&rec(Kind::SymbolizerInfo(pb::SymbolizerInfo {
        symbolizer_version: "bench".into(),
        ..Default::default()
    })))?;
    let mut wanted: BTreeSet<(u64, u64)> = BTreeSet::new();
    for s in stacks {
        for (i, &ip) in s.iter().enumerate() {
            let look = if i == 0 { ip } else { ip - 1 };
            if ip >= LIBC {
                wanted.insert((libc_id, look - LIBC));
            } else {
                wanted.insert((bin_id, look - BIN));
            }
        }
    }
    let libc_fns = ["malloc", "operator new(unsigned long)", "calloc", "realloc"];
    for (build_id, offset) in wanted {
        let mut frames = Vec::new();
        if build_id == libc_id {
            frames.push(pb::SymbolFrame {
                function: w.intern_string(libc_fns[(offset as usize >> 4) % 4].as_bytes())?,
                file: w.intern_string(b"./malloc/malloc.c")?,
                line: 3000 + (offset % 300) as u32,
                ..Default::default()
            });
        } else {
            let site = (offset - 0x1000) / 0x40;
            let function = (site / 4) as usize % names.len();
            if site % 3 == 0 {
                let inl = (function * 31 + 7) % names.len();
                frames.push(pb::SymbolFrame {
                    function: w.intern_string(names[inl].as_bytes())?,
                    file: w.intern_string(format!("include/gen/h{}.h", inl % 97).as_bytes())?,
                    line: 10 + (site % 400) as u32,
                    inlined: true,
                    ..Default::default()
                });
            }
            frames.push(pb::SymbolFrame {
                function: w.intern_string(names[function].as_bytes())?,
                file: w.intern_string(format!("src/gen/f{}.cc", function / 16).as_bytes())?,
                line: 20 + (site % 900) as u32,
                ..Default::default()
            });
        }
        w.write_record(&rec(Kind::SymbolizedAddress(pb::SymbolizedAddress {
            build_id,
            address: offset,
            frames,
            reason: 0,
        })))?;
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    anyhow::ensure!(args.len() == 3, "usage: scaling SCALE PATH");
    let (events, stacks) = write(args[1].parse()?, Path::new(&args[2]))?;
    println!("{events} {stacks}");
    Ok(())
}
