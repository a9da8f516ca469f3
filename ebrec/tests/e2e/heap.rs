//! `ebsym heap` (heaptrack's numbers) against heap_known (testdata), whose allocations,
//! temporaries, peak and leaks are known exactly: recorded with the preloaded shim at
//! `--sample-bytes 1` (every allocation, malloc(0) and 1-byte ones too), the program's own stacks
//! carry its numbers exactly, the totals are the rows' sums and the program's numbers plus
//! the C++ runtime's few blocks; the sorting by each measure puts the function that owns it
//! first. Sampled more coarsely, the report says it is not exact and gives no temporary
//! count. Needs root (skips loudly without it; fails when CI=true).

use crate::common;
use common::{ebsym_path, expect_line, record, root, run};
use serde_json::Value;
use std::collections::BTreeMap;

const FUNCTIONS: &[&str] = &[
    "leak_some",
    "temp_loop",
    "tiny",
    "pairs",
    "grow",
    "hold_peak",
    "hold_other",
];

fn heap(trace: &std::path::Path, extra: &[&str]) -> (String, Value) {
    let mut args = vec!["heap", trace.to_str().unwrap(), "--json", "-n", "100000"];
    args.extend_from_slice(extra);
    let out = run(&ebsym_path(), &args);
    let text = String::from_utf8(out.stdout).unwrap();
    let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    (text, v)
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// The first frame of `row` that is one of the program's functions ("other": the runtime).
fn owner(row: &Value) -> String {
    row["frames"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["function"].as_str())
        .map(|n| n.split('(').next().unwrap().to_string())
        .find(|n| FUNCTIONS.contains(&n.as_str()))
        .unwrap_or_else(|| "other".into())
}

fn sum(rows: &[Value], field: &str) -> u64 {
    rows.iter().map(|r| r[field].as_u64().unwrap_or(0)).sum()
}

#[test]
fn heap_counts_match_a_program_that_knows_them() {
    if !root() {
        return;
    }
    let rec = record(
        "heap_known",
        &[
            "--alloc",
            "--alloc-sampler",
            "preload",
            "--sample-bytes",
            "1",
        ],
        &[],
    );
    let expect = expect_line(&rec.out, "heap_known");
    let (text, r) = heap(&rec.trace, &[]);
    assert!(
        text.trim_start().starts_with("{\n  \"schema_version\""),
        "schema_version first: {text}"
    );
    assert_eq!(r["kind"], "heap");
    assert_eq!(r["by"], "allocations");
    // `--sample-bytes 1` keeps every allocation, tiny()'s 0- to 7-byte ones too: the
    // report is exact.
    assert_eq!(r["exact"], true, "{:#}", r["inexact"]);
    assert!(r["inexact"].as_array().unwrap().is_empty(), "{r:#}");
    let rows = r["rows"].as_array().unwrap();
    let t = &r["totals"];

    // Per function: exactly the program's numbers.
    let mut by: BTreeMap<String, [u64; 5]> = BTreeMap::new();
    for row in rows {
        let e = by.entry(owner(row)).or_default();
        for (i, f) in [
            "allocations",
            "bytes",
            "temporary",
            "peak_bytes",
            "leaked_bytes",
        ]
        .iter()
        .enumerate()
        {
            e[i] += u(&row[*f]);
        }
    }
    for f in FUNCTIONS {
        let w = &expect["functions"][f];
        let want = [
            u(&w["calls"]),
            u(&w["bytes"]),
            u(&w["temporary"]),
            u(&w["peak_bytes"]),
            u(&w["leaked_bytes"]),
        ];
        assert_eq!(
            by.get(*f).copied().unwrap_or_default(),
            want,
            "{f}: [allocations, bytes, temporary, peak_bytes, leaked_bytes]\n{r:#}"
        );
    }
    let runtime = by.get("other").copied().unwrap_or_default();
    assert!(
        runtime[0] < 100,
        "the runtime's allocations are few: {runtime:?}"
    );
    assert_eq!(runtime[4], 0, "the runtime's blocks are held, not leaked");

    // Totals: the rows' sums; the program's numbers plus the runtime's.
    assert_eq!(u(&t["calls"]), sum(rows, "allocations"));
    assert_eq!(u(&t["calls"]), u(&expect["calls"]) + runtime[0]);
    assert_eq!(u(&t["bytes"]), sum(rows, "bytes"));
    assert_eq!(u(&t["temporary"]), sum(rows, "temporary"));
    assert_eq!(u(&t["temporary"]), u(&expect["temporary"]) + runtime[2]);
    let peak = u(&t["peak_bytes"]);
    assert_eq!(
        peak,
        sum(rows, "peak_bytes"),
        "the stacks at the peak add up"
    );
    let program_peak = u(&expect["peak_program_bytes"]);
    assert!(
        (program_peak..program_peak + (256 << 10)).contains(&peak),
        "peak {peak}: the program's {program_peak} and the runtime's few blocks"
    );
    assert_eq!(u(&t["leaked_bytes"]), u(&expect["leaked_bytes"]));
    assert_eq!(u(&t["leaked_count"]), 3);
    assert!(
        u(&t["held_bytes"]) > 0,
        "libstdc++'s emergency pool is held"
    );
    assert_eq!(u(&t["leaked_bytes"]), sum(rows, "leaked_bytes"));
    assert_eq!(u(&t["held_bytes"]), sum(rows, "held_bytes"));
    let never_freed: u64 = rows.iter().map(|r| u(&r["lifetime"]["never_freed"])).sum();
    assert_eq!(u(&t["frees"]) + never_freed, u(&t["calls"]));
    assert!(u(&t["peak_time_ns"]) > 0);
    let processes = r["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 1);
    assert_eq!(u(&processes[0]["pid"]), u(&expect["pid"]));
    assert_eq!(u(&processes[0]["peak_bytes"]), peak);
    assert_eq!(u(&processes[0]["at_trace_peak_bytes"]), peak);

    // Lifetimes: every freed block in a bucket, the leaks never freed.
    for row in rows {
        let freed: u64 = row["lifetime"]["buckets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| u(&b["count"]))
            .sum();
        let nf = u(&row["lifetime"]["never_freed"]);
        if owner(row) != "other" {
            assert_eq!(freed + nf, u(&row["allocations"]), "{row:#}");
        }
        if owner(row) == "leak_some" {
            assert_eq!((freed, nf), (0, 3));
        }
    }

    // Each measure's first row is the function that owns it.
    for (measure, first) in [
        ("allocations", "temp_loop"),
        ("bytes", "hold_peak"),
        ("temporary", "temp_loop"),
        ("peak", "hold_peak"),
        ("leaked", "leak_some"),
    ] {
        let (_, s) = heap(&rec.trace, &["--by", measure]);
        assert_eq!(s["by"], measure);
        assert_eq!(owner(&s["rows"][0]), first, "--by {measure}: {s:#}");
    }

    // The folded stacks of each heap measure add up to its total, and its owner is there.
    for (measure, total, owner_fn) in [
        ("temporary", u(&t["temporary"]), "temp_loop"),
        ("peak", u(&t["peak_bytes"]), "hold_peak"),
        ("leaked", u(&t["leaked_bytes"]), "leak_some"),
    ] {
        let trace = rec.trace.to_str().unwrap();
        let out = run(
            &ebsym_path(),
            &["folded", trace, "--kind", "alloc", "--by", measure],
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let values = text
            .lines()
            .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap());
        assert_eq!(values.sum::<u64>(), total, "folded --by {measure}:\n{text}");
        assert!(text.contains(owner_fn), "folded --by {measure}:\n{text}");
    }

    // The text says the same.
    let out = run(&ebsym_path(), &["heap", rec.trace.to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(&format!("temporary allocations: {}", u(&t["temporary"]))),
        "{text}"
    );
    assert!(text.contains(&format!("({peak} bytes)")), "{text}");
    assert!(text.contains("temp_loop()"), "{text}");
}

/// Sampled by bytes, the numbers are estimates: the report says so, and gives no count of
/// temporary allocations (the allocations between are not seen).
#[test]
fn heap_of_a_sampled_trace_says_it_is_not_exact() {
    if !root() {
        return;
    }
    let rec = record(
        "heap_known",
        &[
            "--alloc",
            "--alloc-sampler",
            "preload",
            "--sample-bytes",
            "65536",
        ],
        &[],
    );
    let (_, r) = heap(&rec.trace, &[]);
    assert_eq!(r["exact"], false, "{r:#}");
    assert!(
        r["inexact"][0]
            .as_str()
            .unwrap()
            .contains("sampled by bytes"),
        "{r:#}"
    );
    assert!(r["totals"]["temporary"].is_null(), "{r:#}");
    assert!(r["rows"][0]["temporary"].is_null(), "{r:#}");
    // The 1 MiB blocks are always sampled: the peak is there, an estimate.
    assert!(u(&r["totals"]["peak_bytes"]) >= 8 << 20, "{r:#}");
    let out = run(&ebsym_path(), &["heap", rec.trace.to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("NOT exact"), "{text}");
    assert!(text.contains("temporary allocations: n/a"), "{text}");
}

/// `--alloc-fn`: arena_known's `pool::Arena` (a bump arena over malloc'd chunks) declared as
/// an allocator is profiled as malloc is: `ebsym heap` and `leaks` show its allocations,
/// temporaries and leaks exactly, under its callers, each row saying its allocator; the
/// chunks it takes from malloc are malloc's rows, freed, though the first block of each
/// chunk has the chunk's address (the arena's blocks are an address space of their own).
#[test]
fn a_custom_arena_is_profiled_as_malloc_is() {
    if !root() {
        return;
    }
    const ARENA: &str = "pool::Arena::Allocate";
    const FNS: &[&str] = &[
        "arena_leak",
        "arena_temp",
        "arena_keep",
        "pool::Arena::grow",
    ];
    let rec = record(
        "arena_known",
        &[
            "--alloc",
            "--alloc-fn",
            "pool::Arena::Allocate:1:pool::Arena::Free:1",
        ],
        &[],
    );
    let expect = expect_line(&rec.out, "arena_known");
    let (_, r) = heap(&rec.trace, &[]);
    let rows = r["rows"].as_array().unwrap();
    let caller = |row: &Value| -> String {
        row["frames"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|f| f["function"].as_str())
            .map(|n| n.split('(').next().unwrap().to_string())
            .find(|n| FNS.contains(&n.as_str()))
            .unwrap_or_else(|| "other".into())
    };
    let mut by: BTreeMap<(String, String), [u64; 4]> = BTreeMap::new();
    for row in rows {
        let alloc = row["allocator"].as_str().unwrap().to_string();
        let e = by.entry((alloc, caller(row))).or_default();
        for (i, f) in ["allocations", "bytes", "temporary", "leaked_bytes"]
            .iter()
            .enumerate()
        {
            e[i] += u(&row[*f]);
        }
    }
    for f in ["arena_leak", "arena_temp", "arena_keep"] {
        let w = &expect["functions"][f];
        let want = [
            u(&w["calls"]),
            u(&w["bytes"]),
            u(&w["temporary"]),
            u(&w["leaked_bytes"]),
        ];
        assert_eq!(
            by.get(&(ARENA.to_string(), f.to_string()))
                .copied()
                .unwrap_or_default(),
            want,
            "{f}: [allocations, bytes, temporary, leaked_bytes]\n{by:?}"
        );
    }
    let arena: Vec<&Value> = rows.iter().filter(|r| r["allocator"] == ARENA).collect();
    let arena_sum = |f: &str| arena.iter().map(|r| u(&r[f])).sum::<u64>();
    assert_eq!(arena_sum("allocations"), u(&expect["calls"]), "{by:?}");
    assert_eq!(arena_sum("bytes"), u(&expect["bytes"]));
    assert_eq!(arena_sum("temporary"), u(&expect["temporary"]));
    assert_eq!(arena_sum("leaked_bytes"), u(&expect["leaked_bytes"]));
    // The arena's leaf frame is its allocation function.
    for row in &arena {
        let leaf = row["frames"][0]["function"].as_str().unwrap();
        assert!(leaf.starts_with(ARENA), "{row:#}");
    }
    // The chunks: malloc's, from the arena's grow, every one freed.
    let chunks = by
        .get(&("malloc".to_string(), "pool::Arena::grow".to_string()))
        .copied()
        .unwrap_or_default();
    assert_eq!(chunks[0], u(&expect["chunks"]), "{by:?}");
    assert_eq!(chunks[3], 0, "the chunks are freed: {by:?}");
    assert_eq!(
        u(&r["totals"]["calls"]),
        rows.iter().map(|r| u(&r["allocations"])).sum::<u64>()
    );
    let allocators = r["allocators"].as_array().unwrap();
    assert_eq!(allocators[0]["name"], "malloc", "{r:#}");
    assert_eq!(allocators[1]["name"], ARENA, "{r:#}");
    assert_eq!(u(&allocators[1]["calls"]), u(&expect["calls"]), "{r:#}");

    // pprof of heap's measures: five sample types adding up to heap's totals, the arena's
    // samples labelled with it, its callers named.
    let pb = rec.trace.with_file_name("heap.pb.gz");
    run(
        &ebsym_path(),
        &[
            "pprof",
            rec.trace.to_str().unwrap(),
            "--kind",
            "alloc",
            "--by",
            "leaked",
            "-o",
            pb.to_str().unwrap(),
        ],
    );
    if let Some(raw) = common::go_pprof_raw(&pb) {
        assert_eq!(
            raw.types,
            [
                "alloc_objects/count",
                "alloc_space/bytes",
                "temporary_objects/count",
                "peak_space/bytes",
                "leaked_space/bytes"
            ]
        );
        let t = &r["totals"];
        let want =
            ["calls", "bytes", "temporary", "peak_bytes", "leaked_bytes"].map(|f| u(&t[f]) as i64);
        assert_eq!(raw.totals, want, "pprof totals against heap's");
        assert!(
            raw.labels.iter().any(|l| l.contains(ARENA)),
            "{:?}",
            raw.labels
        );
        for f in ["arena_leak()", "arena_temp()", "arena_keep()"] {
            assert!(raw.names.iter().any(|n| n == f), "{f}: {:?}", raw.names);
        }
    }

    // leaks: the two blocks of arena_leak, to act on, with the arena named.
    let out = run(
        &ebsym_path(),
        &["leaks", rec.trace.to_str().unwrap(), "--json"],
    );
    let l: Value = serde_json::from_slice(&out.stdout).unwrap();
    let arena_leaks: Vec<&Value> = l["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["allocator"] == ARENA)
        .collect();
    assert_eq!(arena_leaks.len(), 1, "{l:#}");
    assert_eq!(
        u(&arena_leaks[0]["count"]),
        u(&expect["leaked_count"]),
        "{l:#}"
    );
    assert_eq!(
        u(&arena_leaks[0]["bytes"]),
        u(&expect["leaked_bytes"]),
        "{l:#}"
    );
    assert_eq!(caller(arena_leaks[0]), "arena_leak", "{l:#}");
    assert!(arena_leaks[0]["held"] != true, "{l:#}");
    let text =
        String::from_utf8(run(&ebsym_path(), &["leaks", rec.trace.to_str().unwrap()]).stdout)
            .unwrap();
    assert!(text.contains("arena_leak()"), "{text}");
    assert!(text.contains(ARENA), "{text}");
}

/// A bad `--alloc-fn` is a one-line error before anything runs: an unknown name (with the
/// closest ones), an argument index past the six registers, no SIZE_ARG, no --alloc.
#[test]
fn a_bad_alloc_fn_is_a_one_line_error() {
    if !root() {
        return;
    }
    let prog =
        ebtrace_testdata::build("arena_known", ebtrace_testdata::Variant::FramePointer).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.pb.zst");
    for (flags, want) in [
        (
            vec!["--alloc", "--alloc-fn", "pool::Arena::Alocate:1"],
            "no function matches 'pool::Arena::Alocate'",
        ),
        (
            vec![
                "--alloc",
                "--alloc-fn",
                "pool::Arena::Allocate:1:pool::Arena::Fre:1",
            ],
            "no function matches 'pool::Arena::Fre'",
        ),
        (
            vec!["--alloc", "--alloc-fn", "pool::Arena::Allocate:6"],
            "SIZE_ARG 6 is not an argument index 0 to 5",
        ),
        (
            vec!["--alloc", "--alloc-fn", "pool::Arena::Allocate"],
            "no SIZE_ARG",
        ),
        (
            vec!["--cpu", "--alloc-fn", "pool::Arena::Allocate:1"],
            "add --alloc",
        ),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ebrec"))
            .args(["record", "-q", "-o"])
            .arg(&trace)
            .args(&flags)
            .arg("--")
            .arg(&prog)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{flags:?}");
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(
            e.starts_with("ebrec: ") && e.contains(want),
            "{flags:?}: {e}"
        );
        assert_eq!(e.trim_end().lines().count(), 1, "{flags:?}: {e}");
        if want.starts_with("no function") {
            assert!(e.contains("closest: pool::Arena::"), "{e}");
        }
    }
}

/// A real C++ program from Debian source beside heaptrack, on the same command: ninja 1.11
/// (built by scripts/test through bench/scripts/corpus.sh) printing the commands of a
/// generated manifest of 5,000 objects (`ninja -t commands`: one thread, the same
/// allocations at every run). heaptrack_print's totals and `ebsym heap`'s of a preload
/// recording at `--sample-bytes 1` agree within the bounds: calls within 1%,
/// temporary, peak and leaked bytes within 2% (measured by bench/scripts/heap.sh
/// PROGRAM=ninja at 100,000 objects: calls and peak equal, temporary one apart; heaptrack's
/// leaks are ebsym's to act on plus stdout's buffer, which ebsym holds as the runtime's).
#[test]
fn heap_of_ninja_agrees_with_heaptrack() {
    if !root() {
        return;
    }
    let ci = std::env::var("CI").as_deref() == Ok("true");
    let cache = std::env::var_os("EBTRACE_BENCH_CACHE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "/var/tmp/ebtrace-bench".into());
    let ninja = cache.join("corpus/ninja/build/ninja");
    let heaptrack = std::path::Path::new("/usr/bin/heaptrack");
    for (what, p) in [
        ("ninja (CORPUS=ninja bench/scripts/corpus.sh)", &*ninja),
        ("heaptrack (scripts/setup test)", heaptrack),
    ] {
        if !p.exists() {
            assert!(!ci, "{what} is missing at {}, and CI=true", p.display());
            eprintln!("*** SKIPPED: {what} is missing at {} ***", p.display());
            return;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let mut m = String::from(
        "rule cc\n  command = g++ -O2 -c $in -o $out\nrule ar\n  command = ar rcs $out $in\n\
         rule link\n  command = g++ -o $out $in\n",
    );
    let mut libs = Vec::new();
    for l in 0..50 {
        let mut objs = Vec::new();
        for i in 0..100 {
            let o = format!("obj/lib{l}/f{i}.o");
            m += &format!(
                "build {o}: cc src/lib{l}/f{i}.cc | include/h{l}.h include/h{}.h include/common.h\n",
                (l + 1) % 50
            );
            objs.push(o);
        }
        m += &format!("build lib/lib{l}.a: ar {}\n", objs.join(" "));
        libs.push(format!("lib/lib{l}.a"));
    }
    m += &format!("build app: link {}\ndefault app\n", libs.join(" "));
    std::fs::write(dir.path().join("build.ninja"), m).unwrap();
    let ninja_args = ["-C", dir.path().to_str().unwrap(), "-t", "commands"];

    // heaptrack
    let ht = dir.path().join("ht");
    let mut args = vec!["-o", ht.to_str().unwrap(), ninja.to_str().unwrap()];
    args.extend(ninja_args);
    run(heaptrack, &args);
    let file = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("ht."))
        .expect("heaptrack wrote its file");
    let out = run(
        std::path::Path::new("/usr/bin/heaptrack_print"),
        &["-f", file.to_str().unwrap()],
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    // "calls to allocation functions: 4980016 (872921/s)", "peak heap memory consumption:
    // 73.75M" (4 significant digits, powers of 1000)
    let total = |label: &str| -> f64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("no '{label}' in heaptrack_print's output:\n{text}"));
        let v = line[label.len()..]
            .trim_start_matches(':')
            .split_whitespace()
            .next()
            .unwrap();
        let (num, mul) = match v.chars().last().unwrap() {
            'K' => (&v[..v.len() - 1], 1e3),
            'M' => (&v[..v.len() - 1], 1e6),
            'G' => (&v[..v.len() - 1], 1e9),
            'B' => (&v[..v.len() - 1], 1.0),
            _ => (v, 1.0),
        };
        num.parse::<f64>().unwrap() * mul
    };
    let ht_calls = total("calls to allocation functions");
    let ht_temp = total("temporary memory allocations");
    let ht_peak = total("peak heap memory consumption");
    let ht_leaked = total("total memory leaked");

    // ebrec, every allocation in process
    let trace = dir.path().join("t.pb.zst");
    let mut args = vec!["record", "-q", "-o", trace.to_str().unwrap()];
    args.extend([
        "--alloc",
        "--alloc-sampler",
        "preload",
        "--sample-bytes",
        "1",
        "--",
    ]);
    args.push(ninja.to_str().unwrap());
    args.extend(ninja_args);
    run(std::path::Path::new(env!("CARGO_BIN_EXE_ebrec")), &args);
    let (_, r) = heap(&trace, &[]);
    assert_eq!(r["exact"], true, "{r:#}");
    let t = &r["totals"];
    let ours = |f: &str| u(&t[f]) as f64;
    let near = |what: &str, ours: f64, theirs: f64, within: f64| {
        let d = (ours - theirs).abs() / theirs.max(1.0);
        assert!(
            d <= within,
            "{what}: ebsym {ours} against heaptrack {theirs} ({:.2}% apart, more than {:.0}%)\n\
             heaptrack_print:\n{text}\nebsym heap: {t:#}",
            d * 100.0,
            within * 100.0
        );
    };
    assert!(ht_calls > 50_000.0, "ninja allocated little: {text}");
    near("calls", ours("calls"), ht_calls, 0.01);
    near("temporary", ours("temporary"), ht_temp, 0.02);
    near("peak bytes", ours("peak_bytes"), ht_peak, 0.02);
    near("leaked bytes", ours("leaked_bytes"), ht_leaked, 0.02);
}

/// `--alloc-fn` on a GCC clone: testdata's isra_pool frees through
/// `store::(anonymous namespace)::Pool::drop(void*)`, whose only copy is a
/// `.constprop` clone without `this` (the pointer comes in the first register, not the
/// second). The source's index 1 is refused before anything runs, in one line that names
/// the clone and --clone-args; with --clone-args and the clone's own index 0 every block
/// grabbed is freed: none leaked, the calls and bytes exact.
#[test]
fn alloc_fn_on_a_clone_needs_clone_args() {
    if !root() {
        return;
    }
    let prog =
        ebtrace_testdata::build("isra_pool", ebtrace_testdata::Variant::FramePointer).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.pb.zst");
    const POOL: &str = "store::(anonymous namespace)::Pool";
    let spec = |free_arg: u32| format!("{POOL}::grab:1:{POOL}::drop:{free_arg}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ebrec"))
        .args(["record", "-q", "-o"])
        .arg(&trace)
        .args(["--alloc", "--alloc-fn", &spec(1), "--"])
        .arg(&prog)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    assert!(
        e.contains("[clone .constprop.0] is a GCC clone") && e.contains("--clone-args"),
        "{e}"
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("EXPECT"),
        "the program ran"
    );

    let rec = common::record(
        "isra_pool",
        &["--alloc", "--clone-args", "--alloc-fn", &spec(0)],
        &[],
    );
    let x = expect_line(&rec.out, "isra_pool");
    let t = rec.trace.to_str().unwrap();
    let leaks = common::ebsym_json(&["leaks", t]);
    assert_eq!(leaks["totals"]["count"].as_u64(), Some(0), "{leaks:#}");
    let top = common::ebsym_json(&["top", t, "--kind", "alloc", "-n", "50"]);
    // the pool's own row: its allocation function is the leaf
    let grab = top["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| {
            r["frames"][0]["function"]
                .as_str()
                .is_some_and(|f| f.starts_with(&format!("{POOL}::grab(")))
        })
        .unwrap_or_else(|| panic!("no grab row: {top:#}"));
    assert_eq!(grab["count"], x["grabs"], "{grab:#}");
    assert_eq!(grab["bytes"], x["bytes"], "{grab:#}");
}
