//! `--aggregate` (issue 16): allocations counted per stack in the kernel, no event per call.
//! The same reports must give the same numbers as the program's EXPECT line: calls and bytes
//! per allocating function, exactly, across threads and a forked child; live blocks for the
//! leak report; a full map a counted loss. Needs root (skips loudly without it; fails when
//! CI=true).
use crate::common;

use common::*;
use serde_json::Value;
use std::collections::BTreeMap;

/// The functions of sampled_heap that allocate (child_blocks: in the forked child).
const FUNCTIONS: &[&str] = &[
    "big_blocks",
    "small_churn",
    "medium",
    "kinds",
    "thread_churn",
    "child_blocks",
];

fn by_function(report: &Value) -> BTreeMap<String, (u64, u64)> {
    common::by_function(report, FUNCTIONS)
}

fn expected(want: &Value, f: &str) -> (u64, u64) {
    let w = &want["functions"][f];
    (w["calls"].as_u64().unwrap(), w["bytes"].as_u64().unwrap())
}

/// Every call of every function, in two threads and a forked child, counted in the kernel:
/// the top report's calls and bytes per function are the program's own, exactly; the leak
/// report has big_blocks' 64 MiB and nothing else of the program's; the trace holds no
/// allocation event, only Aggregate records.
#[test]
fn aggregated_counts_and_leaks_are_exact_across_threads_and_a_fork() {
    if !root() {
        return;
    }
    let r = record(
        "sampled_heap",
        &["--alloc", "--aggregate=1"],
        &["--churn", "300000", "--threads", "2", "--fork"],
    );
    let want = expect_line(&r.out, "sampled_heap");
    assert_eq!(want["child_status"], 7);
    let t = r.trace.to_str().unwrap();
    let top = ebsym_json(&["top", t, "--kind", "alloc", "-n", "1000"]);
    let got = by_function(&top);
    for f in ["big_blocks", "small_churn", "medium", "thread_churn"] {
        assert_eq!(
            got.get(f).copied(),
            Some(expected(&want, f)),
            "{f}: {got:?}"
        );
    }
    // kinds(): calloc, two reallocs, posix_memalign, aligned_alloc, memalign, valloc,
    // reallocarray, each 1 MiB but the second realloc's 2 MiB.
    assert_eq!(got.get("kinds").copied(), Some((8, 9 << 20)), "{got:?}");
    // The child's 16 x 1 MiB, counted under the child (held at its fork until its probes
    // were attached, so none is missed).
    assert_eq!(
        got.get("child_blocks").copied(),
        Some((16, 16 << 20)),
        "{got:?}"
    );
    assert!(
        top["losses"]["recorded"].as_object().unwrap().is_empty(),
        "{:#}",
        top["losses"]
    );
    assert!(top["losses"]["aggregated"]["alloc"].as_u64().unwrap() >= 520_088);

    let leaks = ebsym_json(&["leaks", t, "-n", "1000"]);
    let leaked = by_function(&leaks);
    assert_eq!(
        leaked.get("big_blocks").copied(),
        Some((64, 64 << 20)),
        "{leaked:?}"
    );
    for f in [
        "small_churn",
        "medium",
        "kinds",
        "thread_churn",
        "child_blocks",
    ] {
        assert!(
            !leaked.contains_key(f),
            "{f} freed all it allocated: {leaked:?}"
        );
    }

    let info = ebsym_json(&["info", t]);
    assert_eq!(info["events"]["alloc"], 0, "{:#}", info["events"]);
    assert_eq!(info["events"]["free"], 0, "{:#}", info["events"]);
    let agg = &info["aggregated"]["alloc"];
    assert_eq!(agg["count"], top["totals"]["count"], "{agg}");
    assert_eq!(agg["sum"], top["totals"]["bytes"], "{agg}");
    // The child's counts are its own (its generation), the parent's are not among them.
    let pid = want["pid"].as_u64().unwrap();
    let child = info["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["ppid"].as_u64() == Some(pid))
        .unwrap_or_else(|| panic!("no child of {pid}: {:#}", info["processes"]));
    let cpid = child["pid"].as_u64().unwrap().to_string();
    let of_child = by_function(&ebsym_json(&[
        "top", t, "--kind", "alloc", "-n", "1000", "--pid", &cpid,
    ]));
    assert_eq!(of_child.get("child_blocks").copied(), Some((16, 16 << 20)));
    assert!(!of_child.contains_key("big_blocks"), "{of_child:?}");
}

/// Without free probes the counts are the same, and the leak report says it has nothing
/// to go by instead of calling every block a leak.
#[test]
fn aggregated_without_frees_counts_and_refuses_a_leak_report() {
    if !root() {
        return;
    }
    let r = record(
        "sampled_heap",
        &["--alloc", "--aggregate", "--no-free"],
        &["--churn", "100000"],
    );
    let want = expect_line(&r.out, "sampled_heap");
    let t = r.trace.to_str().unwrap();
    let got = by_function(&ebsym_json(&["top", t, "--kind", "alloc", "-n", "1000"]));
    for f in ["big_blocks", "small_churn", "medium"] {
        assert_eq!(
            got.get(f).copied(),
            Some(expected(&want, f)),
            "{f}: {got:?}"
        );
    }
    let leaks = ebsym_json(&["leaks", t]);
    assert!(leaks["rows"].as_array().unwrap().is_empty(), "{leaks:#}");
    assert!(
        leaks["note"].as_str().unwrap().contains("--no-free"),
        "{leaks:#}"
    );
}

/// A map too small for the stacks: the calls under stacks that found no room are counted
/// as lost (alloc/map_full), and counted plus lost is every call a full map counted.
#[test]
fn a_full_aggregation_map_is_a_counted_loss() {
    if !root() {
        return;
    }
    let args = ["--churn", "100000"];
    let full = record("sampled_heap", &["--alloc", "--aggregate"], &args);
    let small = record(
        "sampled_heap",
        &["--alloc", "--aggregate", "--aggregate-stacks", "3"],
        &args,
    );
    let all = ebsym_json(&["top", full.trace.to_str().unwrap(), "--kind", "alloc"]);
    let some = ebsym_json(&["top", small.trace.to_str().unwrap(), "--kind", "alloc"]);
    let total = all["totals"]["count"].as_u64().unwrap();
    let counted = some["totals"]["count"].as_u64().unwrap();
    let lost = some["losses"]["recorded"]["alloc/map_full"]
        .as_u64()
        .unwrap_or_else(|| panic!("no map_full loss: {:#}", some["losses"]));
    assert!(counted < total && lost > 0, "{counted} + {lost} of {total}");
    assert_eq!(counted + lost, total, "counted {counted} + lost {lost}");
    assert!(some["rows"].as_array().unwrap().len() <= 3);
}

/// Options that cannot be aggregated are refused with one line.
#[test]
fn aggregate_refuses_what_it_cannot_count() {
    let ebrec = std::path::Path::new(env!("CARGO_BIN_EXE_ebrec"));
    for (args, says) in [
        (&["--aggregate", "--memgrowth"][..], "add one of them"),
        (
            &["--aggregate", "--alloc", "--sample-bytes", "4096"][..],
            "--sample-bytes",
        ),
        (
            &["--aggregate", "--alloc", "--stack-mode", "dwarf"][..],
            "dwarf",
        ),
    ] {
        let out = std::process::Command::new(ebrec)
            .arg("record")
            .arg("-o")
            .arg("/dev/null")
            .args(args)
            .args(["--", "true"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(err.contains(says), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
}

/// `ebsym top --json` rows: the first frame whose function starts with one of `names`,
/// summed: (count, the row's `key` value).
fn by_frame(report: &Value, names: &[&str], key: &str) -> BTreeMap<String, (u64, u64)> {
    let mut out: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for row in report["rows"].as_array().unwrap() {
        let Some(f) = row["frames"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|f| f["function"].as_str())
            .find_map(|n| names.iter().find(|w| n.starts_with(*w)))
        else {
            continue;
        };
        let e = out.entry(f.to_string()).or_default();
        e.0 += row["count"].as_u64().unwrap();
        e.1 += row[key].as_u64().unwrap_or(0);
    }
    out
}

/// CPU samples counted per stack in the kernel split between hot_a and hot_b as the
/// program measured its own CPU time, at about the asked rate, with no sample event.
#[test]
fn aggregated_cpu_samples_split_like_the_program() {
    if !root() {
        return;
    }
    let r = record(
        "cpu_split",
        &["--cpu=999", "--aggregate=1"],
        &["--seconds", "2"],
    );
    let want = expect_line(&r.out, "cpu_split");
    let t = r.trace.to_str().unwrap();
    let top = ebsym_json(&["top", t, "--kind", "cpu", "-n", "100000"]);
    let got = by_frame(&top, &["split::hot_a", "split::hot_b"], "count");
    let a = got.get("split::hot_a").map_or(0, |x| x.0) as f64;
    let b = got.get("split::hot_b").map_or(0, |x| x.0) as f64;
    let measured = want["measured_share_a"].as_f64().unwrap();
    assert!(
        (a / (a + b) - measured).abs() <= 0.05,
        "hot_a {a} hot_b {b}: share {:.3}, the program measured {measured:.3}",
        a / (a + b)
    );
    let cpu_s = want["total_cpu_ns"].as_f64().unwrap() / 1e9;
    let samples = top["totals"]["count"].as_f64().unwrap();
    assert!(
        (samples / (999.0 * cpu_s) - 1.0).abs() < 0.25,
        "{samples} samples for {cpu_s:.2} s of CPU at 999 Hz"
    );
    let info = ebsym_json(&["info", t]);
    assert_eq!(info["events"]["cpu"], 0);
    assert_eq!(info["aggregated"]["cpu"]["count"], top["totals"]["count"]);
    // Counted every second: more than one interval for a 2 s run.
    assert!(info["aggregated"]["cpu"]["records"].as_u64().unwrap() >= 2);
}

/// Off-CPU blocks counted per blocked stack: sleeper_a's naps and reader_b's reads, each as
/// many and as long as the program timed them; the microsecond ping-pong below the
/// threshold is (nearly all) not there.
#[test]
fn aggregated_off_cpu_blocks_match_the_program() {
    if !root() {
        return;
    }
    let r = record("offcpu_blocks", &["--offcpu=1000", "--aggregate"], &[]);
    let want = expect_line(&r.out, "offcpu_blocks");
    let t = r.trace.to_str().unwrap();
    let top = ebsym_json(&["top", t, "--kind", "offcpu", "-n", "1000"]);
    let got = by_frame(
        &top,
        &["offcpu::sleeper_a", "offcpu::reader_b", "offcpu::pingpong_"],
        "total_ns",
    );
    for (f, w) in [
        ("offcpu::sleeper_a", "sleeper"),
        ("offcpu::reader_b", "reader"),
    ] {
        let durations: Vec<u64> = want[w]["durations_ns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        let (count, ns) = got.get(f).copied().unwrap_or_default();
        assert_eq!(count, durations.len() as u64, "{f}: {got:?}");
        let timed: u64 = durations.iter().sum();
        // The program times around the call; the block is inside it.
        assert!(
            ns <= timed && ns as f64 >= timed as f64 * 0.9,
            "{f}: {ns} ns off CPU, the program timed {timed} ns"
        );
    }
    // Nearly all of the ping-pong's blocks are microseconds long: dropped (a busy machine
    // may stretch a few past the threshold).
    let trips = want["pingpong"]["round_trips"].as_u64().unwrap();
    let pp = got.get("offcpu::pingpong_").map_or(0, |x| x.0);
    assert!(
        pp * 100 < 2 * trips,
        "{pp} ping-pong blocks kept of ~{}",
        2 * trips
    );
}

/// Lock waits counted per waiter stack and lock, in both modes: every contended
/// acquisition of the ledger's mutex, waits (and holds) adding up to the program's own
/// clock; no percentiles are claimed (null), as there are no per-wait values.
#[test]
fn aggregated_lock_waits_and_holds_match_the_program() {
    if !root() {
        return;
    }
    for mode in ["uprobe", "futex"] {
        let r = record(
            "lock_workload",
            &["--lock", "--lock-mode", mode, "--aggregate"],
            &[],
        );
        let want = expect_line(&r.out, "lock_workload");
        let t = r.trace.to_str().unwrap();
        let top = ebsym_json(&["top", t, "--kind", "lock", "-n", "1000"]);
        let rows: Vec<&Value> = top["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["mutex"] == want["mutex"])
            .collect();
        assert!(
            !rows.is_empty(),
            "{mode}: no row of {}: {top:#}",
            want["mutex"]
        );
        let count: u64 = rows.iter().map(|r| r["count"].as_u64().unwrap()).sum();
        let wait: u64 = rows.iter().map(|r| r["wait_ns"].as_u64().unwrap()).sum();
        let acq = want["acquisitions"].as_u64().unwrap();
        let wait_us = want["total_wait_us"].as_f64().unwrap();
        // The program's wait is around lock(); ours is inside it.
        assert!(
            wait as f64 / 1e3 <= wait_us * 1.02 && wait as f64 / 1e3 >= wait_us * 0.9,
            "{mode}: {wait} ns waited, the program measured {wait_us} us"
        );
        assert!(rows.iter().all(|r| r["wait_p99_ns"].is_null()), "{rows:?}");
        if mode == "uprobe" {
            // Every acquisition, with its hold.
            assert_eq!(count, acq, "{mode}");
            let hold: u64 = rows.iter().map(|r| r["hold_ns"].as_u64().unwrap()).sum();
            let hold_us = want["total_hold_us"].as_f64().unwrap();
            assert!(
                (hold as f64 / 1e3 / hold_us - 1.0).abs() < 0.05,
                "{hold} ns held, the program measured {hold_us} us"
            );
        } else {
            // Contended acquisitions only (a futex wait each).
            assert!(count > 0 && count < acq, "{mode}: {count} of {acq}");
        }
    }
}

/// Under a CPU budget, allocations counted in the kernel are never sampled (the counts stay
/// exact where the probes ran): the budget can only pause them, and the reports say so.
#[test]
fn a_cpu_budget_pauses_aggregated_allocations_without_sampling_them() {
    if !root() {
        return;
    }
    // It measures or budgets ebrec's own cost: no other recording beside it.
    let _alone = common::exclusive();
    let r = record(
        "sampled_heap",
        &["--alloc", "--aggregate=1", "--max-cpu", "1"],
        &["--churn", "3000000"],
    );
    let t = r.trace.to_str().unwrap();
    let info = ebsym_json(&["info", t]);
    let changes = info["probe_changes"].as_array().unwrap();
    assert!(
        !changes.iter().any(|c| c["setting"] == "sample-bytes"),
        "aggregated allocations were sampled: {changes:?}"
    );
    let paused = changes
        .iter()
        .any(|c| c["family"] == "alloc" && c["kind"] == "paused");
    // Three million malloc/free pairs at about two traps each are far over 1% of a CPU.
    assert!(paused, "no pause: {changes:?}");
    let top = run(&ebsym_path(), &["top", t, "--kind", "alloc"]);
    let text = String::from_utf8_lossy(&top.stdout);
    assert!(text.contains("paused"), "{text}");
    assert!(!text.contains("estimates"), "{text}");
    let counted = info["aggregated"]["alloc"]["count"].as_u64().unwrap();
    assert!(
        counted < 3_000_000,
        "paused, yet {counted} allocations counted"
    );
}
