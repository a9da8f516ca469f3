//! Whole stacks without frame pointers (--stack-mode dwarf): ebrec copies the top of each
//! user stack in BPF, ebsym unwinds it offline with the binaries' CFI. The same program
//! built with and without frame pointers must give the same stacks, through libstdc++'s
//! operator new and libc's malloc (which have none). Needs root (skips loudly without it;
//! fails when CI=true).

use crate::common;
use common::{ebsym_json, record_variant_in as record, root};
use ebtrace_testdata::Variant;
use serde_json::Value;
use std::collections::BTreeMap;

/// Function chains (leaf first, names without parameters, up to main) and their counts.
fn chains(report: &Value) -> BTreeMap<Vec<String>, u64> {
    let mut m = BTreeMap::new();
    for r in report["rows"].as_array().unwrap() {
        let mut chain = Vec::new();
        for f in r["frames"].as_array().unwrap() {
            let name = f["function"].as_str().unwrap_or("");
            let name = name.split('(').next().unwrap().to_string();
            let stop = name == "main";
            chain.push(name);
            if stop {
                break;
            }
        }
        *m.entry(chain).or_default() += r["count"].as_u64().unwrap();
    }
    m
}

#[test]
fn allocations_unwind_through_operator_new_and_malloc_without_frame_pointers() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let args = ["--rounds", "2"];
    let flags = ["--alloc", "--stack-mode", "dwarf"];
    let nofp = record(
        dir.path(),
        "nofp.pb.zst",
        "alloc_workload",
        Variant::NoFramePointer,
        &flags,
        &args,
    );
    let fp = record(
        dir.path(),
        "fp.pb.zst",
        "alloc_workload",
        Variant::FramePointer,
        &flags,
        &args,
    );
    let top = |t: &str| ebsym_json(&["top", t, "--kind", "alloc", "--by", "count", "-n", "1000"]);
    let (a, b) = (top(&nofp), top(&fp));
    for r in [&a, &b] {
        assert_eq!(
            r["losses"]["recorded"],
            serde_json::json!({}),
            "{:#}",
            r["losses"]
        );
    }
    // The same chains with the same counts, whichever way the program was built: those of
    // the workload (under run_alloc; the EXPECT line's printing allocates as its string
    // grows, which depends on the pid and addresses printed).
    let workload = |r: &Value| -> BTreeMap<Vec<String>, u64> {
        chains(r)
            .into_iter()
            .filter(|(c, _)| c.iter().any(|f| f == "run_alloc"))
            .collect()
    };
    let (ca, cb) = (workload(&a), workload(&b));
    assert_eq!(ca, cb);
    // And the frames a frame-pointer walk cannot see are there: operator new between
    // reserve_block and malloc (libstdc++ and libc have no frame pointers).
    let want: Vec<String> = [
        "malloc",
        "operator new",
        "reserve_block",
        "run_alloc",
        "main",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let found = ca.iter().find(|(c, _)| {
        let c: Vec<String> = c
            .iter()
            .map(|f| {
                if f.contains("malloc") {
                    "malloc".to_string()
                } else {
                    f.clone()
                }
            })
            .collect();
        c == want
    });
    let (_, n) = found.unwrap_or_else(|| panic!("no {want:?} among {:#?}", ca.keys()));
    assert_eq!(
        *n, 100,
        "operator new[] calls of reserve_block over 2 rounds"
    );
    // Every stack reached main, but those of the libraries' initializers, which run from
    // the dynamic loader before main.
    for c in ca.keys() {
        if !c.iter().any(|f| f == "_dl_init") {
            assert_eq!(c.last().map(String::as_str), Some("main"), "{c:?}");
        }
    }
}

#[test]
fn cpu_samples_unwind_to_main_without_frame_pointers() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let t = record(
        dir.path(),
        "cpu.pb.zst",
        "cpu_split",
        Variant::NoFramePointer,
        &["--cpu=499", "--stack-mode", "dwarf"],
        &["--seconds", "1"],
    );
    let top = ebsym_json(&["top", &t, "--kind", "cpu", "-n", "100000"]);
    let (mut hot, mut whole) = (0, 0);
    for (c, n) in chains(&top) {
        if c.iter().any(|f| f.starts_with("split::hot_")) {
            hot += n;
            if c.iter().any(|f| f == "run_split") && c.last().map(String::as_str) == Some("main") {
                whole += n;
            }
        }
    }
    assert!(hot > 100, "{hot} samples in the hot functions");
    // A sample on the first instruction of a frame-less leaf may miss nothing now: all but
    // a handful go leaf -> run_split -> main.
    assert!(
        whole * 100 >= hot * 98,
        "{whole} of {hot} hot samples unwound to main"
    );
}

#[test]
fn a_stack_deeper_than_the_copy_is_marked_cut() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let t = record(
        dir.path(),
        "small.pb.zst",
        "sleeper",
        Variant::NoFramePointer,
        &["--func", "sleeper::recurse", "--stack-mode", "dwarf:512"],
        &[
            "--calls",
            "1",
            "--ms",
            "1",
            "--threads",
            "1",
            "--depth",
            "30",
        ],
    );
    let lat = ebsym_json(&["latency", &t, "-n", "1000"]);
    let cut = &lat["losses"]["stacks_cut"];
    let n = cut["copy too small"].as_u64().unwrap_or(0);
    assert!(n > 0, "no stack marked cut: {:#}", lat["losses"]);
    // The text report says so too.
    let out = common::run(&common::ebsym_path(), &["latency", &t]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("stacks cut short: copy too small"), "{text}");
}

#[test]
fn off_cpu_blocks_unwind_to_the_waiting_function() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("off.pb.zst");
    let out = common::record_variant_to(
        &trace,
        "condvar_block",
        Variant::NoFramePointer,
        &["--offcpu=1000", "--stack-mode", "dwarf"],
        &["--ms", "200", "--rounds", "2"],
    );
    let expect = common::expect_line(&out, "condvar_block");
    let waiter = expect["waiter_tid"].as_u64().unwrap().to_string();
    let t = trace.to_str().unwrap();
    let top = ebsym_json(&["top", t, "--kind", "offcpu", "--tid", &waiter, "-n", "100"]);
    // The whole blocking stack: the kernel's futex wait, libc's condition variable, and on
    // to the function that waits (no frame pointers anywhere on the way).
    let mut total = 0.0;
    for r in top["rows"].as_array().unwrap() {
        let f: Vec<String> = r["frames"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["function"].as_str().unwrap_or("").to_string())
            .collect();
        if f.iter().any(|x| x == "futex_wait") {
            assert!(
                f.iter().any(|x| x.starts_with("cv::wait_for_signal")),
                "{f:?}"
            );
            assert!(f.iter().any(|x| x.starts_with("cv::waiter_loop")), "{f:?}");
            total += r["total_ns"].as_f64().unwrap();
        }
    }
    let blocked = expect["total_blocked_ns"].as_f64().unwrap();
    assert!((total / blocked - 1.0).abs() < 0.10, "{total} vs {blocked}");
}
