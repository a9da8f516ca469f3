//! From recording to report: ebrec records a testdata program, ebsym symbolizes it and
//! reports, and the numbers are what the program did. Needs root (skips loudly without it;
//! fails when CI=true).

use crate::common;
use common::{ebsym_path, expect_line, go_pprof_raw, root, run};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Records `program` (a testdata program, frame-pointer build) with `ebrec_args`, passing it
/// `program_args`; returns the trace and the program's EXPECT line.
fn record(
    dir: &Path,
    name: &str,
    program: &str,
    ebrec_args: &[&str],
    program_args: &[&str],
) -> (PathBuf, Value) {
    let trace = dir.join(name);
    let out = common::record_to(&trace, program, ebrec_args, program_args);
    (trace, expect_line(&out, program))
}

/// The `pprof-format` npm package (an independent reader of profile.proto), installed once
/// under the target directory; None (after saying so) when node or npm are missing, a
/// failure when CI=true.
fn pprof_format() -> Option<PathBuf> {
    common::npm_package("pprof-format", "pprof-format@2", "the pprof decoding")
}

/// `ebsym pprof` of `trace`, decoded by pprof-format (ebrec/tests/e2e/pprof_decode.js).
fn pprof_decoded(trace: &Path, kind: &str, out: &Path) -> Option<Value> {
    let modules = pprof_format()?;
    run(
        &ebsym_path(),
        &[
            "pprof",
            trace.to_str().unwrap(),
            "--kind",
            kind,
            "-o",
            out.to_str().unwrap(),
        ],
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/pprof_decode.js");
    let o = run(
        Path::new("node"),
        &[
            script.to_str().unwrap(),
            out.to_str().unwrap(),
            modules.to_str().unwrap(),
        ],
    );
    let v = json(&o);
    assert_eq!(v["string0"], "", "string_table[0] must be \"\"");
    assert_eq!(
        v["distinct_location_keys"].as_u64().unwrap() as usize,
        v["locations"].as_array().unwrap().len(),
        "one Location per (mapping, address)"
    );
    assert_eq!(
        v["distinct_functions"], v["functions"],
        "functions deduplicated"
    );
    Some(v)
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap()
}

fn function(frame: &Value) -> &str {
    frame["function"].as_str().unwrap_or("")
}

/// The row whose direct caller (frame 1) starts with `caller`.
fn row_by_caller<'a>(report: &'a Value, caller: &str) -> &'a Value {
    report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| {
            r["frames"]
                .as_array()
                .is_some_and(|f| f.len() > 1 && function(&f[1]).starts_with(caller))
        })
        .unwrap_or_else(|| panic!("no row called from {caller}: {report:#}"))
}

#[test]
fn alloc_top_leaks_folded_and_flamegraph_match_the_program() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (trace, want) = record(
        dir.path(),
        "t.pb.zst",
        "alloc_workload",
        &["--alloc=4096"],
        &[],
    );
    let ebsym = ebsym_path();
    let t = trace.to_str().unwrap();

    // top, on the raw trace (symbolized on the fly)
    let top = json(&run(
        &ebsym,
        &[
            "top", t, "--kind", "alloc", "--by", "bytes", "-n", "100", "--json",
        ],
    ));
    assert_eq!(top["kind"], "alloc");
    assert_eq!(top["by"], "bytes");
    let restock = row_by_caller(&top, "Warehouse::restock");
    assert_eq!(
        restock["count"],
        want["functions"]["Warehouse::restock"]["malloc"]["calls"]
    );
    assert_eq!(
        restock["bytes"],
        want["functions"]["Warehouse::restock"]["malloc"]["bytes"]
    );
    let f1 = &restock["frames"][1];
    assert!(
        f1["file"].as_str().unwrap().ends_with("alloc_workload.cpp"),
        "{f1}"
    );
    assert!(f1["line"].as_u64().unwrap() > 0);
    assert!(f1["module"]
        .as_str()
        .unwrap()
        .ends_with("alloc_workload-fp"));
    let table = row_by_caller(&top, "make_table");
    assert_eq!(
        table["bytes"],
        want["functions"]["make_table"]["calloc"]["bytes"]
    );
    // Rows are sorted by bytes, largest first.
    let bytes: Vec<u64> = top["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["bytes"].as_u64().unwrap())
        .collect();
    assert!(bytes.windows(2).all(|w| w[0] >= w[1]));
    assert_eq!(
        top["totals"]["count"].as_u64().unwrap(),
        top["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["count"].as_u64().unwrap())
            .sum::<u64>()
    );

    // Symbolize once, then the reports read the symbolized trace as is.
    run(&ebsym, &[t]);
    let sym = dir.path().join("t.sym.pb.zst");
    let s = sym.to_str().unwrap();
    let leaks = json(&run(&ebsym, &["leaks", s, "--json"]));
    let leak = row_by_caller(&leaks, "leak_some");
    assert_eq!(
        leak["count"],
        want["functions"]["leak_some"]["malloc"]["leaked"]
    );
    assert_eq!(leak["bytes"].as_u64().unwrap(), 7 * 5000);
    assert_eq!(leak["alive"], false, "the program had exited");
    assert!(leak["oldest_ns"].as_u64().unwrap() > 0);
    // The leaks to act on are the program's own, in the totals; libstdc++'s emergency
    // exception pool (72,704 B at load, in every C++ program with GCC 12's libstdc++) is
    // shown after them, held by the runtime, out of the totals.
    let leaked: u64 = want["functions"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|f| f.as_object().unwrap().values())
        .map(|a| a["leaked"].as_u64().unwrap_or(0) * a["size"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(leaked, 7 * 5000 + 3 * 12000, "{want:#}");
    assert_eq!(leaks["totals"]["bytes"].as_u64(), Some(leaked), "{leaks:#}");
    let rows = leaks["rows"].as_array().unwrap();
    let pool = rows
        .iter()
        .position(|r| r["bytes"] == 72704 && r["count"] == 1)
        .unwrap_or_else(|| panic!("no exception pool block: {leaks:#}"));
    assert!(
        rows[pool]["held_by"]
            .as_str()
            .is_some_and(|h| h.starts_with("runtime: ")),
        "{leaks:#}"
    );
    assert!(
        rows[..pool].iter().all(|r| r.get("held_by").is_none())
            && rows[pool..].iter().all(|r| r.get("held_by").is_some()),
        "held rows come last: {leaks:#}"
    );
    assert!(leaks["totals"]["held_bytes"].as_u64().unwrap() >= 72704);
    // The user's suppressions set theirs apart the same way.
    let supp = dir.path().join("leaks.supp");
    std::fs::write(&supp, "# known: the table of leak_more\nleak:leak_more*\n").unwrap();
    let suppressed = json(&run(
        &ebsym,
        &["leaks", s, "--json", "--suppress", supp.to_str().unwrap()],
    ));
    assert_eq!(
        suppressed["totals"]["bytes"].as_u64(),
        Some(7 * 5000),
        "{suppressed:#}"
    );
    let more = suppressed["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| {
            r["frames"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| function(f).starts_with("leak_more"))
        })
        .unwrap_or_else(|| panic!("{suppressed:#}"));
    assert_eq!(
        more["held_by"].as_str(),
        Some(format!("suppressed: {}:2 leak:leak_more*", supp.display()).as_str()),
    );
    let bad = dir.path().join("bad.supp");
    std::fs::write(&bad, "race:foo\n").unwrap();
    let out = Command::new(&ebsym)
        .args(["leaks", s, "--suppress", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.supp:1"), "{err}");
    // Nothing of Warehouse::restock leaked: all its blocks were freed.
    assert!(!leaks["rows"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| function(&r["frames"][1]).starts_with("Warehouse::restock")));

    let folded = String::from_utf8(run(&ebsym, &["folded", s, "--kind", "alloc"]).stdout).unwrap();
    let line = folded
        .lines()
        .find(|l| l.contains("Warehouse::restock"))
        .expect("folded line");
    assert!(
        line.contains(";main;run_alloc(long);Warehouse::restock();"),
        "{line}"
    );
    assert!(
        line.ends_with(&format!(
            " {}",
            want["functions"]["Warehouse::restock"]["malloc"]["bytes"]
        )),
        "{line}"
    );

    let svg = dir.path().join("alloc.svg");
    run(
        &ebsym,
        &[
            "flamegraph",
            s,
            "--kind",
            "alloc",
            "--by",
            "bytes",
            "-o",
            svg.to_str().unwrap(),
        ],
    );
    let svg = std::fs::read_to_string(svg).unwrap();
    assert!(
        svg.starts_with("<?xml")
            && svg.contains("Warehouse::restock")
            && svg.contains("Allocated bytes")
    );

    // Filters: another pid gives an empty report that says so.
    let none = String::from_utf8(run(&ebsym, &["top", s, "--kind", "alloc", "--pid", "1"]).stdout)
        .unwrap();
    assert!(none.contains("no alloc events"), "{none}");
}

#[test]
fn lock_report_matches_the_hold_times() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (trace, want) = record(
        dir.path(),
        "t.pb.zst",
        "lock_workload",
        &["--lock", "--lock-mode", "uprobe"],
        &[],
    );
    let locks = json(&run(
        &ebsym_path(),
        &["locks", trace.to_str().unwrap(), "--json", "-n", "100"],
    ));
    let ours: Vec<&Value> = locks["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["mutex"] == want["mutex"])
        .collect();
    assert!(!ours.is_empty(), "{locks:#}");
    let count: u64 = ours.iter().map(|r| r["count"].as_u64().unwrap()).sum();
    assert_eq!(count, want["acquisitions"].as_u64().unwrap());
    let hold_us: u64 = ours
        .iter()
        .map(|r| r["hold_ns"].as_u64().unwrap())
        .sum::<u64>()
        / 1000;
    let want_hold = want["total_hold_us"].as_u64().unwrap();
    assert!(
        hold_us.abs_diff(want_hold) * 100 <= want_hold * 5,
        "{hold_us} vs {want_hold}"
    );
    for r in &ours {
        assert_eq!(r["kind"], "mutex");
        assert!(
            r["hold_p99_ns"].as_u64().unwrap() >= 2_000_000,
            "each hold is >= 2 ms: {r}"
        );
        // std::mutex::lock and __gthread_mutex_lock are inlined into Ledger::post: the
        // frames show them, marked inlined, between pthread_mutex_lock and Ledger::post.
        let frames = r["frames"].as_array().unwrap();
        let post = frames
            .iter()
            .position(|f| function(f).starts_with("Ledger::post"))
            .expect("Ledger::post");
        assert_eq!(frames[post]["inlined"], false);
        assert!(
            frames[1..post].iter().all(|f| f["inlined"] == true),
            "{frames:#?}"
        );
    }

    // pprof: the inlined functions are several Lines of one Location, innermost first and
    // Ledger::post last; the totals are those of the report.
    let Some(p) = pprof_decoded(&trace, "lock", &dir.path().join("lock.pb.gz")) else {
        return;
    };
    assert_eq!(p["default_sample_type"], "delay");
    assert_eq!(p["totals"]["contentions"], locks["totals"]["count"]);
    assert_eq!(p["totals"]["delay"], locks["totals"]["wait_ns"]);
    assert_eq!(p["totals"]["hold"], locks["totals"]["hold_ns"]);
    let inlined = p["locations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| {
            let lines = l["lines"].as_array().unwrap();
            lines.len() > 1
                && lines
                    .last()
                    .is_some_and(|x| function(x).starts_with("Ledger::post"))
        })
        .unwrap_or_else(|| panic!("no location with Ledger::post's inlined lines: {p:#}"));
    assert!(
        inlined["lines"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| function(x).contains("mutex")),
        "{inlined}"
    );
    assert!(!inlined["mapping"]["build_id"].as_str().unwrap().is_empty());
}

#[test]
fn pprof_decodes_with_an_independent_reader_and_matches_top() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (trace, _) = record(
        dir.path(),
        "t.pb.zst",
        "alloc_workload",
        &["--alloc=4096"],
        &[],
    );
    let ebsym = ebsym_path();
    run(&ebsym, &[trace.to_str().unwrap()]);
    let sym = dir.path().join("t.sym.pb.zst");
    let s = sym.to_str().unwrap();
    let top = json(&run(
        &ebsym,
        &["top", s, "--kind", "alloc", "-n", "1000", "--json"],
    ));
    let Some(p) = pprof_decoded(&sym, "alloc", &dir.path().join("alloc.pb.gz")) else {
        return;
    };
    assert_eq!(
        p["sample_types"],
        serde_json::json!([
            ["alloc_objects", "count"],
            ["alloc_space", "bytes"],
            ["inuse_objects", "count"],
            ["inuse_space", "bytes"]
        ])
    );
    assert_eq!(p["default_sample_type"], "alloc_space");
    assert_eq!(p["totals"]["alloc_objects"], top["totals"]["count"]);
    assert_eq!(p["totals"]["alloc_space"], top["totals"]["bytes"]);
    // In use: every block outstanding at the end, the leaks and what the runtime holds.
    let leaks = json(&run(&ebsym, &["leaks", s, "-n", "1000", "--json"]));
    let lt = |k: &str| leaks["totals"][k].as_u64().unwrap_or(0);
    assert_eq!(
        p["totals"]["inuse_space"].as_u64(),
        Some(lt("bytes") + lt("held_bytes")),
        "{leaks:#}"
    );
    assert_eq!(
        p["totals"]["inuse_objects"].as_u64(),
        Some(lt("count") + lt("held_count"))
    );
    assert!(lt("bytes") >= 7 * 5000 + 3 * 12000);
    // Mapping 1 is the main executable, as in Go's profiles.
    let first = &p["mappings"][0];
    assert_eq!(first["id"], 1);
    assert!(
        first["filename"]
            .as_str()
            .unwrap()
            .ends_with("alloc_workload-fp"),
        "{:#}",
        p["mappings"]
    );
    assert_eq!(
        p["samples"].as_u64().unwrap() as usize,
        top["rows"].as_array().unwrap().len()
    );
    for l in p["locations"].as_array().unwrap() {
        let m = &l["mapping"];
        assert!(
            m.is_object() && !m["build_id"].as_str().unwrap().is_empty(),
            "location without a mapping with a build-id: {l}"
        );
    }
    let restock = p["locations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["lines"][0]["function"] == "Warehouse::restock()")
        .expect("a location in Warehouse::restock");
    // speedscope (npm) opens it in headless Chromium, offline: its sandwich view lists the
    // program's allocating functions.
    if let (Some(pw), Some(ss)) = (
        common::playwright(),
        common::npm_package("speedscope", "speedscope@1", "the speedscope check"),
    ) {
        let shot = dir.path().join("speedscope.png");
        let out = Command::new("node")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/speedscope.js"))
            .arg(dir.path().join("alloc.pb.gz"))
            .args([&pw, &ss, &shot])
            .output()
            .expect("node");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "speedscope.js: {e}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        assert_eq!(v["errors"], serde_json::json!([]), "{v:#}");
        assert_eq!(
            v["requests"],
            serde_json::json!([]),
            "no request leaves the page"
        );
        assert_eq!(v["title"], "alloc.pb.gz - speedscope");
        let text = v["text"].as_str().unwrap();
        for f in ["Warehouse::restock()", "make_table(Round&)", "leak_some()"] {
            assert!(
                text.contains(f),
                "speedscope's sandwich view lacks {f}: {text}"
            );
        }
    }
    assert!(restock["mapping"]["filename"]
        .as_str()
        .unwrap()
        .ends_with("alloc_workload-fp"));
    assert!(restock["lines"][0]["line"].as_u64().unwrap() > 0);
}

#[test]
fn diff_of_5_and_10_rounds_is_the_difference_of_the_expected_numbers() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (t5, want5) = record(
        dir.path(),
        "r5.pb.zst",
        "alloc_workload",
        &["--alloc=4096"],
        &["--rounds", "5"],
    );
    let (t10, want10) = record(
        dir.path(),
        "r10.pb.zst",
        "alloc_workload",
        &["--alloc=4096"],
        &["--rounds", "10"],
    );
    let ebsym = ebsym_path();
    let svg = dir.path().join("diff.svg");
    let d = json(&run(
        &ebsym,
        &[
            "diff",
            t5.to_str().unwrap(),
            t10.to_str().unwrap(),
            "--kind",
            "alloc",
            "-n",
            "1000",
            "--json",
            "-o",
            svg.to_str().unwrap(),
        ],
    ));
    assert_eq!(d["kind"], "alloc");
    assert_eq!(d["by"], "bytes");
    let bytes = |w: &Value| {
        w["functions"]["Warehouse::restock"]["malloc"]["bytes"]
            .as_i64()
            .unwrap()
    };
    let restock = row_by_caller(&d, "Warehouse::restock");
    assert_eq!(restock["before"].as_i64().unwrap(), bytes(&want5));
    assert_eq!(restock["after"].as_i64().unwrap(), bytes(&want10));
    assert_eq!(
        restock["delta"].as_i64().unwrap(),
        bytes(&want10) - bytes(&want5)
    );
    let deltas: Vec<u64> = d["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["delta"].as_i64().unwrap().unsigned_abs())
        .collect();
    assert!(deltas.windows(2).all(|w| w[0] >= w[1]), "{deltas:?}");
    let svg = std::fs::read_to_string(svg).unwrap();
    assert!(
        svg.starts_with("<?xml")
            && svg.contains("Warehouse::restock")
            && svg.contains("Differential"),
        "{}",
        &svg[..svg.len().min(500)]
    );
    // The text form names the same numbers.
    let text = String::from_utf8(
        run(
            &ebsym,
            &[
                "diff",
                t5.to_str().unwrap(),
                t10.to_str().unwrap(),
                "--kind",
                "alloc",
            ],
        )
        .stdout,
    )
    .unwrap();
    assert!(
        text.contains(&format!(
            "delta +{}  before {}  after {}",
            bytes(&want10) - bytes(&want5),
            bytes(&want5),
            bytes(&want10)
        )),
        "{text}"
    );
}

#[test]
fn reports_are_the_same_at_1_and_4_threads() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (trace, _) = record(
        dir.path(),
        "t.pb.zst",
        "alloc_workload",
        &["--alloc=4096"],
        &[],
    );
    let t = trace.to_str().unwrap();
    let ebsym = ebsym_path();
    // The raw trace: each run symbolizes it on the fly, with that many threads.
    let at = |threads: &str, args: &[&str]| -> String {
        let out = Command::new(&ebsym)
            .args(args)
            .env("RAYON_NUM_THREADS", threads)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    for args in [
        &["top", t, "--kind", "alloc", "-n", "100"][..],
        &["leaks", t][..],
        &["folded", t, "--kind", "alloc", "--by", "count"][..],
    ] {
        let one = at("1", args);
        assert!(one.contains("run_alloc"), "{args:?}: {one}");
        assert_eq!(one, at("4", args), "{args:?}");
    }
}

/// A non-PIE executable: its code is mapped at 0x401000 from file offset 0x1000, so the
/// symbolized addresses' key (file offset) and the ELF address differ; both paths must agree.
#[test]
fn non_pie_executable_resolves_to_the_right_lines() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("alloc_workload-nopie");
    let st = Command::new("g++")
        .args([
            "-O2",
            "-g",
            "-fno-omit-frame-pointer",
            "-no-pie",
            "-pthread",
            "-std=c++17",
            "-Wl,--build-id",
            "-o",
        ])
        .arg(&bin)
        .arg(ebtrace_testdata::source_path("alloc_workload"))
        .status()
        .unwrap();
    assert!(st.success());
    let trace = dir.path().join("t.pb.zst");
    let out = run(
        Path::new(env!("CARGO_BIN_EXE_ebrec")),
        &[
            "record",
            "-q",
            "-o",
            trace.to_str().unwrap(),
            "--alloc=4096",
            "--",
            bin.to_str().unwrap(),
        ],
    );
    let want = expect_line(&out, "alloc_workload");
    let top = json(&run(
        &ebsym_path(),
        &[
            "top",
            trace.to_str().unwrap(),
            "--kind",
            "alloc",
            "-n",
            "100",
            "--json",
        ],
    ));
    let restock = row_by_caller(&top, "Warehouse::restock");
    assert_eq!(
        restock["count"],
        want["functions"]["Warehouse::restock"]["malloc"]["calls"]
    );
    let f1 = &restock["frames"][1];
    assert!(
        f1["file"].as_str().unwrap().ends_with("alloc_workload.cpp"),
        "{f1}"
    );
    assert!(
        u64::from_str_radix(f1["address"].as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
            < 0x1000000,
        "non-PIE code is low: {f1}"
    );
}

/// Every kind's pprof profile decodes with Go's reader and with pprof-format, the two agree
/// on the sample types and totals, the totals are `top`'s, and mapping 1 is the program.
#[test]
fn every_pprof_decodes_with_go_tool_pprof_and_pprof_format() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ebsym = ebsym_path();
    let recordings = [
        (
            "alloc_workload",
            vec!["--alloc", "--cpu", "--syscalls=0", "--syscalls-sample=0"],
            vec![],
            vec!["alloc", "cpu", "syscall"],
        ),
        (
            "offcpu_blocks",
            vec!["--offcpu=5000", "--runq=0", "--runq-sample=0"],
            vec!["--ms", "21"],
            vec!["offcpu", "runq"],
        ),
        ("lock_workload", vec!["--lock"], vec![], vec!["lock"]),
    ];
    let mut checked = Vec::new();
    for (program, flags, args, kinds) in recordings {
        let (trace, _) = record(
            dir.path(),
            &format!("{program}.pb.zst"),
            program,
            &flags,
            &args,
        );
        run(&ebsym, &[trace.to_str().unwrap()]);
        let sym = dir.path().join(format!("{program}.sym.pb.zst"));
        for kind in kinds {
            let top = json(&run(
                &ebsym,
                &[
                    "top",
                    sym.to_str().unwrap(),
                    "--kind",
                    kind,
                    "-n",
                    "100000",
                    "--json",
                ],
            ));
            let out = dir.path().join(format!("{program}-{kind}.pb.gz"));
            let Some(p) = pprof_decoded(&sym, kind, &out) else {
                return;
            };
            let Some(raw) = go_pprof_raw(&out) else {
                return;
            };
            let (types, totals) = (&raw.types, &raw.totals);
            let js_types: Vec<String> = p["sample_types"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| format!("{}/{}", t[0].as_str().unwrap(), t[1].as_str().unwrap()))
                .collect();
            assert_eq!(types, &js_types, "{program} {kind}");
            for (t, total) in types.iter().zip(totals) {
                let name = t.split('/').next().unwrap();
                assert_eq!(
                    p["totals"][name].as_i64(),
                    Some(*total),
                    "{program} {kind} {t}"
                );
            }
            // The first sample type is top's count of events, or (offcpu: time) its total.
            let top_key = if types[0].ends_with("/count") {
                "count"
            } else {
                "total_ns"
            };
            assert_eq!(
                Some(totals[0] as u64),
                top["totals"][top_key].as_u64(),
                "{program} {kind} {}: {:#}",
                types[0],
                top["totals"]
            );
            assert!(totals[0] > 0, "{program} {kind}: no samples");
            assert!(
                raw.mappings
                    .first()
                    .is_some_and(|(m, _)| m.ends_with(&format!("{program}-fp"))),
                "{program} {kind}: mapping 1 is not the program: {:?}",
                raw.mappings
            );
            checked.push(format!("{program}/{kind}"));
        }
    }
    assert_eq!(checked.len(), 6, "{checked:?}");
}
