//! The allocator probes' cost features (issue 16): uprobe sessions (the return probe only
//! for calls kept at entry), sampling by bytes in BPF (`--sample-bytes`) and the CPU budget
//! (`--max-cpu`), on `sampled_heap`, whose EXPECT line says exactly what it allocated where.
use crate::common;

use common::*;
use serde_json::Value;
use std::collections::BTreeMap;

/// The functions of sampled_heap that allocate.
const FUNCTIONS: &[&str] = &[
    "big_blocks",
    "small_churn",
    "medium",
    "kinds",
    "thread_churn",
];

fn by_function(report: &Value) -> BTreeMap<String, (u64, u64)> {
    common::by_function(report, FUNCTIONS)
}

/// The (kept, probe hits) of `family` and the runs of `program` in ebrec's exit summary.
fn summary(stderr: &str, family: &str, program: &str) -> (u64, u64, u64) {
    let mut kept = 0;
    let mut hits = 0;
    let mut runs = 0;
    for line in stderr.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.len() > 9 && w[1] == family && w[2] == "kept" {
            kept = w[3].parse().unwrap();
            hits = w[w.len() - 1].parse().unwrap();
        }
        if w.len() > 3 && w[1] == program && w[3] == "runs" {
            runs = w[2].parse().unwrap();
        }
    }
    (kept, hits, runs)
}

/// Each allocated byte had a 1/65536 chance of making its allocation an event: the 1 MiB
/// blocks are all seen, the small and medium ones in proportion, and the reports scale them
/// back to within a few percent of what the program allocated, saying they are estimates.
#[test]
fn sampling_by_bytes_estimates_what_was_allocated() {
    if !root() {
        return;
    }
    let r = record(
        "sampled_heap",
        &["--alloc", "--sample-bytes", "65536"],
        &["--churn", "1000000"],
    );
    let want = expect_line(&r.out, "sampled_heap");
    let t = r.trace.to_str().unwrap();
    let top = ebsym_json(&["top", t, "--kind", "alloc", "-n", "100000"]);
    let got = by_function(&top);
    let sampled = &top["losses"]["sampled"];
    assert!(
        sampled["sampled_allocs"].as_u64().unwrap() > 1000,
        "{sampled}"
    );
    assert_eq!(sampled["min_period"], 65536);
    for (function, tolerance) in [
        ("big_blocks", 0.01),
        ("medium", 0.15),
        ("small_churn", 0.15),
    ] {
        let w = &want["functions"][function];
        let (calls, bytes) = (w["calls"].as_u64().unwrap(), w["bytes"].as_u64().unwrap());
        let (c, b) = got
            .get(function)
            .copied()
            .unwrap_or_else(|| panic!("no {function} in {got:?}"));
        let err = (b as f64 - bytes as f64).abs() / bytes as f64;
        assert!(
            err <= tolerance,
            "{function}: estimated {b} B for {bytes} B ({err:.3}); all: {got:?}"
        );
        let cerr = (c as f64 - calls as f64).abs() / calls as f64;
        assert!(
            cerr <= tolerance,
            "{function}: estimated {c} calls for {calls} ({cerr:.3})"
        );
    }
    // Every 1 MiB block was kept (p = 1 - e^-16), and stands for itself.
    assert_eq!(got["big_blocks"].0, 64, "{got:?}");
    // Far fewer events than calls (1,000,000 small calls make about 1,000 samples), and the
    // estimate of all calls lands near what the program made.
    let sampled_events = sampled["sampled_allocs"].as_u64().unwrap();
    assert!(sampled_events < 20_000, "{sampled_events} events");
    let calls: u64 = ["big_blocks", "medium", "small_churn"]
        .iter()
        .map(|f| want["functions"][*f]["calls"].as_u64().unwrap())
        .sum();
    let estimated = top["totals"]["count"].as_u64().unwrap();
    let err = (estimated as f64 - calls as f64).abs() / calls as f64;
    assert!(
        err < 0.15,
        "estimated {estimated} calls in all for {calls} ({err:.3})"
    );
    // The text says they are estimates.
    let text = run(&ebsym_path(), &["top", t, "--kind", "alloc"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("estimates: allocations were sampled by bytes (1 sample per 65536 B"),
        "{text}"
    );
    // Leaks: the 64 MiB that big_blocks never freed, nothing of the freed ones.
    let leaks = ebsym_json(&["leaks", t, "-n", "1000"]);
    let leaked = by_function(&leaks);
    let want_leak = want["leaked_bytes"].as_u64().unwrap();
    let b = leaked.get("big_blocks").map_or(0, |v| v.1);
    assert!(
        (b as f64 - want_leak as f64).abs() / (want_leak as f64) < 0.01,
        "{leaked:?}"
    );
    assert!(!leaked.contains_key("small_churn"), "{leaked:?}");
    assert!(!leaked.contains_key("medium"), "{leaked:?}");
}

/// With uprobe sessions (kernel >= 6.13), a call that is not kept costs its entry only:
/// the one session program runs once per allocator call, plus once per kept allocation's
/// return, and free's own program (no session, no return) once per free. With `--alloc-probes classic` every allocation also runs the
/// return program. Both keep exactly the allocations of at least 4096 bytes.
#[test]
fn session_probes_return_only_for_kept_calls() {
    if !root() {
        return;
    }
    if !kernel_at_least(6, 13) {
        eprintln!("*** SKIPPED: this kernel has no uprobe sessions (6.13) ***");
        return;
    }
    let args = ["--churn", "100000"];
    let s = record_loud("sampled_heap", &["--alloc=4096", "--bpf-stats"], &args);
    let err = String::from_utf8_lossy(&s.out.stderr).to_string();
    assert!(err.contains("(uprobe session)"), "{err}");
    let want = expect_line(&s.out, "sampled_heap");
    assert!(err.contains("(uprobe_multi, no return probe)"), "{err}");
    let (kept, alloc_hits, runs) = summary(&err, "alloc", "alloc_session");
    let (_, free_hits, free_runs) = summary(&err, "free", "free_multi");
    // Kept: medium's, big_blocks', kinds' and what the C++ runtime allocated past 4 KiB.
    assert!((20_064..20_100).contains(&kept), "kept {kept}: {err}");
    assert!(alloc_hits >= 120_064, "{err}");
    let floor = alloc_hits + kept;
    assert!(
        runs >= floor && runs < floor + 100,
        "runs {runs}, hits and returns {floor}: {err}"
    );
    // (free(NULL) runs the program but is no hit: a few at start and exit. realloc's frees
    // of kept blocks are hits of the free family without a run of free's program.)
    assert!(
        free_runs + kept >= free_hits && free_runs < free_hits + 100,
        "free runs {free_runs}, hits {free_hits}: {err}"
    );
    // The summary counts a trap around each uprobe program run (the stats do not see it),
    // timed on a uprobe of ebrec's own, and puts it in the cost beside BPF and ebrec's own.
    let traps = err
        .lines()
        .find(|l| l.starts_with("ebrec:   uprobe traps "))
        .unwrap_or_else(|| panic!("no uprobe traps line: {err}"));
    let num_before = |what: &str| -> f64 {
        let i = traps
            .find(what)
            .unwrap_or_else(|| panic!("{what}: {traps}"));
        let w = traps[..i].split_whitespace().last().unwrap();
        w.trim_start_matches('(').parse().unwrap()
    };
    assert_eq!(
        num_before(" runs of uprobe programs") as u64,
        runs + free_runs,
        "{traps}"
    );
    let ns = num_before(" ns each beyond");
    assert!((50.0..100_000.0).contains(&ns), "{traps}");
    let ms = num_before(" ms more");
    let want_ms = (runs + free_runs) as f64 * ns / 1e6;
    assert!((ms - want_ms).abs() <= 0.1 + want_ms * 0.01, "{traps}");
    let cost = err
        .lines()
        .find(|l| l.starts_with("ebrec:   cost "))
        .unwrap_or_else(|| panic!("no cost line: {err}"));
    assert!(
        cost.contains("uprobe traps ") && cost.contains("ebrec's process "),
        "{cost}"
    );
    let top = ebsym_json(&["top", s.trace.to_str().unwrap(), "--kind", "alloc"]);
    let got = by_function(&top);
    assert_eq!(got["medium"], (20_000, 20_000 * 16384), "{got:?}");
    assert_eq!(got["big_blocks"], (64, 64 << 20), "{got:?}");
    assert!(!got.contains_key("small_churn"), "{got:?}");
    assert!(top["losses"].get("sampled").is_none());
    assert_eq!(want["functions"]["big_blocks"]["calls"], 64);

    let c = record_loud(
        "sampled_heap",
        &["--alloc=4096", "--alloc-probes", "classic", "--bpf-stats"],
        &args,
    );
    let err = String::from_utf8_lossy(&c.out.stderr).to_string();
    assert!(!err.contains("(uprobe session)"), "{err}");
    let (kept_c, hits_c, returns) = summary(&err, "alloc", "alloc_return");
    assert_eq!(kept_c, kept, "{err}");
    // Every allocation's return ran, kept or not.
    assert_eq!(returns, hits_c, "{err}");
    let top = ebsym_json(&["top", c.trace.to_str().unwrap(), "--kind", "alloc"]);
    assert_eq!(by_function(&top)["big_blocks"], (64, 64 << 20));
}

/// `--max-cpu 1`: 3,000,000 allocator calls in a few seconds cost far more than 1% of a CPU
/// in traps alone, so the budget pauses the allocator probes within its first seconds; the
/// trace says so (the calibrated trap cost, the pause and why), the reports say allocations
/// made while paused are not counted, and far fewer calls were seen than were made.
#[test]
fn a_cpu_budget_pauses_what_costs_too_much() {
    if !root() {
        return;
    }
    // It measures or budgets ebrec's own cost: no other recording beside it.
    let _alone = common::exclusive();
    let r = record_loud(
        "sampled_heap",
        &["--alloc", "--max-cpu", "1"],
        &["--churn", "3000000"],
    );
    let err = String::from_utf8_lossy(&r.out.stderr).to_string();
    assert!(err.contains("--max-cpu 1%: a uprobe trap costs"), "{err}");
    assert!(err.contains("ebrec cost"), "{err}");
    let t = r.trace.to_str().unwrap();
    let info = ebsym_json(&["info", t]);
    let changes = info["probe_changes"].as_array().unwrap();
    let trap = changes
        .iter()
        .find(|c| c["setting"] == "trap-ns")
        .expect("the calibrated trap cost is in the trace");
    let trap_ns = trap["value"].as_u64().unwrap();
    assert!((100..100_000).contains(&trap_ns), "{trap}");
    let acted: Vec<&Value> = changes
        .iter()
        .filter(|c| c["family"] == "alloc" && (c["kind"] == "paused" || c["kind"] == "rate"))
        .collect();
    assert!(!acted.is_empty(), "no budget change: {changes:?}\n{err}");
    assert!(
        acted
            .iter()
            .all(|c| c["reason"].as_str().unwrap().contains("--max-cpu 1.000%")),
        "{acted:?}"
    );
    if acted.iter().any(|c| c["kind"] == "paused") {
        let seen = info["events"]["alloc"].as_u64().unwrap();
        assert!(seen < 3_000_000, "paused, yet {seen} allocations seen");
        let top = run(&ebsym_path(), &["top", t, "--kind", "alloc"]);
        let text = String::from_utf8_lossy(&top.stdout);
        assert!(text.contains("paused"), "{text}");
    }
}
