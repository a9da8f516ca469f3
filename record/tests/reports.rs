//! From recording to report: ebrec records a testdata program, ebsym symbolizes it and
//! reports, and the numbers are what the program did. Needs root (skips loudly without it;
//! fails when CI=true).
use ebtrace_testdata::{build, Variant};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("this test needs root (eBPF), and CI=true: failing instead of skipping");
    }
    eprintln!("\n*** SKIPPED: needs root for eBPF (run the tests as root) ***\n");
    false
}

/// ebsym from the same build (cargo builds every binary of the workspace for its tests).
fn ebsym_path() -> PathBuf {
    let dir = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let p = dir.join("ebsym");
    assert!(
        p.exists(),
        "{} is not built: run `cargo build -p ebtrace-symbolize` (scripts/test does)",
        p.display()
    );
    p
}

fn run(cmd: &Path, args: &[&str]) -> Output {
    let out = Command::new(cmd).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{} {args:?}: {}",
        cmd.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn expect_line(out: &Output, program: &str) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("EXPECT "))
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["program"] == program)
        .expect("EXPECT line")
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
    let trace = dir.path().join("t.pb.zst");
    let prog = build("alloc_workload", Variant::FramePointer).unwrap();
    let out = run(
        Path::new(env!("CARGO_BIN_EXE_ebrec")),
        &[
            "record",
            "-q",
            "-o",
            trace.to_str().unwrap(),
            "--alloc=4096",
            "--",
            prog.to_str().unwrap(),
        ],
    );
    let want = expect_line(&out, "alloc_workload");
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
    let trace = dir.path().join("t.pb.zst");
    let prog = build("lock_workload", Variant::FramePointer).unwrap();
    let out = run(
        Path::new(env!("CARGO_BIN_EXE_ebrec")),
        &[
            "record",
            "-q",
            "-o",
            trace.to_str().unwrap(),
            "--lock",
            "--lock-mode",
            "uprobe",
            "--",
            prog.to_str().unwrap(),
        ],
    );
    let want = expect_line(&out, "lock_workload");
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
}
