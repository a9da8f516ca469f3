//! Whole stacks unwound in the kernel (--stack-mode cfi, and auto, the default): ebrec turns
//! each binary's .eh_frame into rows and the BPF programs walk the user stack with them, with
//! no stack memory copied. The same C++ program built with and without frame pointers gives
//! the same stacks, through libstdc++ and libc (which keep none); lock holders' stacks are
//! whole in every mode; signal frames, dlopened libraries, stacks deeper than the limit and
//! rows that do not fit are handled and counted. Needs root (skips loudly without it; fails
//! when CI=true).

use crate::common;
use common::{ebsym_json, record_variant_in as record, root};
use ebtrace_testdata::Variant;
use serde_json::Value;
use std::collections::BTreeMap;

/// A frame's function name without parameters.
fn name(f: &Value) -> String {
    let n = f["function"].as_str().unwrap_or("");
    let n = n.split('(').next().unwrap();
    n.strip_prefix("selfstack::").unwrap_or(n).to_string()
}

/// Function chains (leaf first, up to and including main) of `frames_key` and their counts.
fn chains_of(report: &Value, frames_key: &str) -> BTreeMap<Vec<String>, u64> {
    let mut m = BTreeMap::new();
    for r in report["rows"].as_array().unwrap() {
        let mut chain = Vec::new();
        for f in r[frames_key].as_array().into_iter().flatten() {
            let n = name(f);
            let stop = n == "main";
            chain.push(n);
            if stop {
                break;
            }
        }
        *m.entry(chain).or_default() += r["count"].as_u64().unwrap();
    }
    m
}

fn top(trace: &str, kind: &str) -> Value {
    match kind {
        "alloc" => ebsym_json(&[
            "top", trace, "--kind", kind, "--by", "count", "-n", "100000",
        ]),
        _ => ebsym_json(&["top", trace, "--kind", kind, "-n", "100000"]),
    }
}

/// Normalizes libc's internal names of malloc.
fn plain(c: &[String]) -> Vec<String> {
    c.iter()
        .map(|f| {
            if f.contains("malloc") {
                "malloc".into()
            } else {
                f.clone()
            }
        })
        .collect()
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn allocations_without_frame_pointers_equal_the_frame_pointer_build() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let args = ["--rounds", "2"];
    let want = strings(&[
        "malloc",
        "operator new",
        "reserve_block",
        "run_alloc",
        "main",
    ]);
    for mode in ["cfi", "auto"] {
        let flags = ["--alloc", "--stack-mode", mode];
        let nofp = record(
            dir.path(),
            &format!("nofp-{mode}"),
            "alloc_workload",
            Variant::NoFramePointer,
            &flags,
            &args,
        );
        let fp = record(
            dir.path(),
            &format!("fp-{mode}"),
            "alloc_workload",
            Variant::FramePointer,
            &flags,
            &args,
        );
        let (a, b) = (top(&nofp, "alloc"), top(&fp, "alloc"));
        for r in [&a, &b] {
            assert_eq!(
                r["losses"]["recorded"],
                serde_json::json!({}),
                "{mode}: {:#}",
                r["losses"]
            );
        }
        // The workload's allocations (under run_alloc; the EXPECT line's printing allocates
        // as its string grows, which depends on the pid and addresses printed: not the same
        // from run to run).
        let workload = |r: &Value| -> BTreeMap<Vec<String>, u64> {
            chains_of(r, "frames")
                .into_iter()
                .filter(|(c, _)| c.iter().any(|f| f == "run_alloc"))
                .collect()
        };
        let (ca, cb) = (workload(&a), workload(&b));
        assert_eq!(
            ca, cb,
            "{mode}: the nofp build's stacks differ from the fp build's"
        );
        let n: u64 = ca
            .iter()
            .filter(|(c, _)| plain(c) == want)
            .map(|(_, n)| n)
            .sum();
        assert_eq!(
            n,
            100,
            "{mode}: reserve_block's operator new[] calls over 2 rounds: {:#?}",
            ca.keys()
        );
        for c in chains_of(&a, "frames").keys() {
            if !c.iter().any(|f| f == "_dl_init") {
                assert_eq!(c.last().map(String::as_str), Some("main"), "{mode}: {c:?}");
            }
        }
    }
    // The frame-pointer walk of the same nofp build loses operator new and more (what the
    // rows are for): the comparison above can fail.
    let fp_mode = record(
        dir.path(),
        "nofp-fp",
        "alloc_workload",
        Variant::NoFramePointer,
        &["--alloc", "--stack-mode", "fp"],
        &args,
    );
    let c = chains_of(&top(&fp_mode, "alloc"), "frames");
    assert!(
        !c.keys().any(|c| plain(c) == want),
        "fp mode found {want:?} in a build without frame pointers"
    );
}

#[test]
fn the_lock_holder_stack_names_the_function_that_held_it_in_every_mode() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let args = ["--threads", "4", "--iters", "20"];
    for (mode, v) in [
        ("fp", Variant::FramePointer),
        ("dwarf", Variant::FramePointer),
        ("cfi", Variant::NoFramePointer),
        ("auto", Variant::NoFramePointer),
        ("auto", Variant::FramePointer),
    ] {
        let t = record(
            dir.path(),
            &format!("{mode}-{}", v.suffix()),
            "lock_workload",
            v,
            &["--lock=100", "--stack-mode", mode],
            &args,
        );
        let locks = ebsym_json(&["locks", &t]);
        let rows = locks["rows"].as_array().unwrap();
        let mutex: Vec<&Value> = rows.iter().filter(|r| r["kind"] == "mutex").collect();
        assert!(!mutex.is_empty(), "{mode}/{v:?}: no mutex waits: {locks:#}");
        let mut held = 0;
        let mut total = 0;
        for r in &mutex {
            let n = r["count"].as_u64().unwrap();
            total += n;
            let w: Vec<String> = r["waker_frames"]
                .as_array()
                .into_iter()
                .flatten()
                .map(name)
                .collect();
            // unlock in libc, std::mutex::unlock inlined into Ledger::post, its caller
            let at = w.iter().position(|f| f == "Ledger::post");
            if let Some(i) = at {
                assert!(
                    w[..i].iter().any(|f| f.contains("lll_lock_wake")),
                    "{mode}: {w:?}"
                );
                assert_eq!(
                    w.get(i + 1).map(String::as_str),
                    Some("ledger_worker"),
                    "{mode}: {w:?}"
                );
                held += n;
            }
        }
        // A wake whose waker left before the waiter woke has no holder stack; nearly all have.
        assert!(
            held * 10 >= total * 9,
            "{mode}/{v:?}: {held} of {total} waits name Ledger::post as the holder: {locks:#}"
        );
        // and the waiter's own stack in the rows modes
        if mode == "cfi" || mode == "auto" {
            let c = chains_of(&locks, "frames");
            let whole = c
                .iter()
                .filter(|(c, _)| {
                    let i = c.iter().position(|f| f == "Ledger::post");
                    i.is_some_and(|i| c[..i].iter().any(|f| f.contains("pthread_mutex_lock")))
                })
                .map(|(_, n)| n)
                .sum::<u64>();
            assert!(
                whole * 10 >= total * 9,
                "{mode}: waiter stacks through pthread_mutex_lock: {c:#?}"
            );
        }
    }
}

#[test]
fn cpu_samples_without_frame_pointers_reach_main() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for mode in ["cfi", "auto"] {
        let t = record(
            dir.path(),
            mode,
            "cpu_split",
            Variant::NoFramePointer,
            &["--cpu=499", "--stack-mode", mode],
            &["--seconds", "1"],
        );
        let c = chains_of(&top(&t, "cpu"), "frames");
        let total: u64 = c.values().sum();
        let hot: u64 = c
            .iter()
            .filter(|(k, _)| k.iter().any(|f| f == "split::hot_a" || f == "split::hot_b"))
            .map(|(_, n)| n)
            .sum();
        assert!(
            hot * 10 >= total * 8,
            "{mode}: {hot} of {total} samples in the hot functions"
        );
        for (k, n) in &c {
            if k.iter().any(|f| f == "split::hot_a" || f == "split::hot_b") {
                assert_eq!(
                    k.iter().rev().take(2).cloned().collect::<Vec<_>>(),
                    strings(&["main", "run_split"]),
                    "{mode}: {n} samples: {k:?}"
                );
            }
        }
        let whole: u64 = c
            .iter()
            .filter(|(k, _)| k.last().is_some_and(|f| f == "main"))
            .map(|(_, n)| n)
            .sum();
        // Samples in the loader before main or in exit after it cannot reach main: at most
        // 1% of them, or three when the program got little CPU (beside another test, 194
        // samples in the second instead of ~500; 2 were outside main).
        assert!(
            whole * 100 >= total * 99 || total - whole <= 3,
            "{mode}: {whole} of {total} samples reach main"
        );
    }
}

#[test]
fn off_cpu_blocks_and_their_wakers_unwind_whole_without_frame_pointers() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rounds = 5;
    let t = record(
        dir.path(),
        "t",
        "condvar_block",
        Variant::NoFramePointer,
        &["--offcpu=1000", "--stack-mode", "cfi"],
        &["--ms", "30", "--rounds", &rounds.to_string()],
    );
    let r = top(&t, "offcpu");
    let (mut whole, mut blocks) = (0, 0);
    for row in r["rows"].as_array().unwrap() {
        let f: Vec<String> = row["frames"].as_array().unwrap().iter().map(name).collect();
        let Some(i) = f.iter().position(|x| x == "cv::wait_for_signal") else {
            continue;
        };
        let n = row["count"].as_u64().unwrap();
        blocks += n;
        // through libc's pthread_cond_wait (libstdc++'s wait tail-calls it)
        assert!(
            f[..i].iter().any(|x| x.contains("pthread_cond_wait")),
            "{f:?}"
        );
        let w: Vec<String> = row["waker_frames"]
            .as_array()
            .into_iter()
            .flatten()
            .map(name)
            .collect();
        if f.get(i + 1).map(String::as_str) == Some("cv::waiter_loop")
            && f.iter().any(|x| x == "start_thread")
            && w.iter().any(|x| x.contains("pthread_cond_signal"))
            && w.iter()
                .skip_while(|x| *x != "cv::signal_after")
                .nth(1)
                .map(String::as_str)
                == Some("cv::waker_loop")
        {
            whole += n;
        }
    }
    // A block in the first milliseconds, before ebrec has read the process's mappings, may
    // stop early (counted: "a pc in a mapping not known yet"); the others are whole.
    assert!(
        blocks >= rounds - 1 && whole >= rounds - 2,
        "{whole} of {blocks} blocks whole with their waker: {r:#}"
    );
}

#[test]
fn signal_frames_and_callbacks_through_libc_unwind() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let t = record(
        dir.path(),
        "t",
        "selfstack",
        Variant::NoFramePointer,
        &["--func", "selfstack::capture", "--stack-mode", "cfi"],
        &[],
    );
    let c = chains_of(&top(&t, "func"), "frames");
    let has = |seq: &[&str]| {
        c.keys().any(|k| {
            let mut it = k.iter();
            seq.iter().all(|s| it.any(|f| f == s))
        })
    };
    for seq in [
        &[
            "capture",
            "on_signal",
            "via_signal",
            "run_scenarios",
            "main",
        ][..],
        // the faulting instruction is the first of selfstack_fault_first: looked up at
        // its own address, not at the byte before (another function)
        &[
            "capture",
            "on_segv",
            "selfstack_fault_first",
            "via_fault",
            "run_scenarios",
            "main",
        ][..],
        &[
            "capture",
            "compare",
            "via_qsort",
            "level_lambda",
            "via_function",
            "run_scenarios",
            "main",
        ][..],
        &["capture", "deep", "deep", "thread_main"][..],
    ] {
        assert!(has(seq), "no stack with {seq:?} in order: {:#?}", c.keys());
    }
}

#[test]
fn a_dlopened_library_unwinds() {
    if !root() {
        return;
    }
    let lib = ebtrace_testdata::build("alloc_workload", Variant::SharedLibrary).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (times, rounds) = (4, 10);
    let t = record(
        dir.path(),
        "t",
        "dlopener",
        Variant::NoFramePointer,
        &["--alloc=4096", "--stack-mode", "cfi"],
        &[
            "--times",
            &times.to_string(),
            lib.to_str().unwrap(),
            "--",
            "--rounds",
            &rounds.to_string(),
        ],
    );
    // whole chains: the library's own main is not the end
    let report = top(&t, "alloc");
    let mut c: BTreeMap<Vec<String>, u64> = BTreeMap::new();
    for r in report["rows"].as_array().unwrap() {
        let k = r["frames"].as_array().unwrap().iter().map(name).collect();
        *c.entry(k).or_default() += r["count"].as_u64().unwrap();
    }
    let in_lib = |k: &Vec<String>| {
        let i = k.iter().position(|f| f == "reserve_block");
        i.filter(|&i| k[..i].iter().any(|f| f == "operator new"))
    };
    let (mut whole, mut cut) = (0, 0);
    for (k, n) in &c {
        if let Some(i) = in_lib(k) {
            if k[i..].iter().any(|f| f == "dl::cycle") {
                whole += n;
            } else if k.last().is_some_and(|f| f == "reserve_block") {
                cut += n;
            }
        }
    }
    // The library's rows are loaded when ebrec reads its mapping from the side band: a
    // cycle's first milliseconds before that stop in the library, and each such stack is
    // counted with its reason ("a binary without rows loaded" or "a mapping not known
    // yet"); the later cycles find the rows cached. How many cycles the load takes depends
    // on the machine's load, so: every call is there, whole or cut-and-counted, and at least
    // one cycle is whole.
    let calls = 50 * rounds * times;
    let losses = &report["losses"]["stacks_cut"];
    let marked: u64 = [
        "unwind by rows: a binary without rows loaded",
        "unwind by rows: a pc in a mapping not known yet",
    ]
    .iter()
    .map(|r| losses[r].as_u64().unwrap_or(0))
    .sum();
    let keys = || format!("{:#?}", c.keys());
    assert_eq!(
        whole + cut,
        calls,
        "reserve_block's 50 operator new[] calls per round inside the library, {rounds} rounds, {times} cycles: {whole} whole + {cut} cut: {}",
        keys()
    );
    // (losses count distinct stacks, not events)
    assert!(
        cut == 0 || marked > 0,
        "{cut} allocations' stacks cut in the library, none counted: {losses:#}"
    );
    assert!(
        whole >= 50 * rounds,
        "not one cycle unwound whole through the library: {whole} of {calls}: {}",
        keys()
    );
}

#[test]
fn a_recursion_deeper_than_the_frame_limit_is_marked_truncated() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let t = record(
        dir.path(),
        "t",
        "sleeper",
        Variant::NoFramePointer,
        &[
            "--func",
            "sleeper::recurse",
            "--stack-mode",
            "cfi",
            "--stack-depth",
            "6",
        ],
        &[
            "--depth",
            "12",
            "--ms",
            "1",
            "--calls",
            "1",
            "--threads",
            "1",
        ],
    );
    let r = top(&t, "func");
    let cut = &r["losses"]["stacks_cut"];
    assert!(
        cut["longer than --stack-depth"].as_u64().unwrap_or(0) > 0,
        "{:#}",
        r["losses"]
    );
    for row in r["rows"].as_array().unwrap() {
        assert!(
            row["frames"].as_array().unwrap().len() <= 6 + 8,
            "inline frames aside, at most 6: {row:#}"
        );
    }
}

#[test]
fn rows_that_do_not_fit_are_counted_and_auto_falls_back_to_frame_pointers() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t");
    let flags = ["--alloc=4096", "--stack-mode", "cfi", "--cfi-memory", "64k"];
    let out = common::record_variant_to(
        &trace,
        "alloc_workload",
        Variant::FramePointer,
        &flags,
        &["--rounds", "1"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("did not fit"), "{err}");
    let r = top(trace.to_str().unwrap(), "alloc");
    let cut = &r["losses"]["stacks_cut"];
    assert!(
        cut["unwind by rows: a binary without rows loaded"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "{:#}",
        r["losses"]
    );
    // auto walks on with the frame pointer there: the fp build still reaches main
    let t2 = dir.path().join("t2");
    let flags = [
        "--alloc=4096",
        "--stack-mode",
        "auto",
        "--cfi-memory",
        "64k",
    ];
    common::record_variant_to(
        &t2,
        "alloc_workload",
        Variant::FramePointer,
        &flags,
        &["--rounds", "1"],
    );
    let c = chains_of(&top(t2.to_str().unwrap(), "alloc"), "frames");
    let n: u64 = c
        .iter()
        .filter(|(k, _)| {
            k.iter().any(|f| f == "Warehouse::restock") && k.last().is_some_and(|f| f == "main")
        })
        .map(|(_, n)| n)
        .sum();
    assert_eq!(n, 100, "{:#?}", c.keys());
}
