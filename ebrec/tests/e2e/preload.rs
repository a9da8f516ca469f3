//! `--alloc-sampler preload`: the command runs with ebrec's shim preloaded, which samples
//! allocations by bytes inside the process; the reports scale the samples back. Against
//! sampled_heap (testdata), whose allocations are known: every 1 MiB block seen, the
//! estimates per function close to the truth, the leaks exact, the stacks the program's own
//! (no shim frame), in every stack mode; the program's behaviour unchanged, its forked child
//! and threads recorded. Needs root (skips loudly without it; fails when CI=true).

use crate::common;
use common::{ebsym_path, expect_line, root, run};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

const PRELOAD: &[&str] = &["--alloc", "--alloc-sampler", "preload"];

fn json(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

fn rows(report: &Value) -> &Vec<Value> {
    report["rows"].as_array().unwrap()
}

fn function(frame: &Value) -> &str {
    frame["function"].as_str().unwrap_or("")
}

/// Whether a row's stack has a frame of `name` (a function of sampled_heap).
fn has(row: &Value, name: &str) -> bool {
    row["frames"]
        .as_array()
        .is_some_and(|f| f.iter().any(|fr| function(fr).starts_with(name)))
}

/// (count, bytes) summed over the rows whose stack goes through `name`.
fn through(report: &Value, name: &str) -> (u64, u64) {
    rows(report)
        .iter()
        .filter(|r| has(r, name))
        .fold((0, 0), |(c, b), r| {
            (
                c + r["count"].as_u64().unwrap(),
                b + r["bytes"].as_u64().unwrap(),
            )
        })
}

fn top(trace: &Path) -> Value {
    json(&run(
        &ebsym_path(),
        &[
            "top",
            trace.to_str().unwrap(),
            "--kind",
            "alloc",
            "--by",
            "bytes",
            "-n",
            "100000",
            "--json",
        ],
    ))
}

/// No frame of the shim on top of any stack, and the leaf of every stack through
/// `direct` (a function that calls malloc itself) is that function.
fn assert_no_shim_on_top(report: &Value, direct: &str) {
    for r in rows(report) {
        let f0 = &r["frames"][0];
        let module = f0["module"].as_str().unwrap_or("");
        assert!(
            !module.contains("ebtrace-preload") && !function(f0).starts_with("ebtrace_sampled"),
            "a shim frame on top: {r:#}"
        );
        if has(r, direct) {
            assert!(
                function(f0).starts_with(direct),
                "the leaf of {direct}'s allocations is not {direct}: {r:#}"
            );
        }
    }
}

#[test]
fn preload_sampler_estimates_leaks_and_stacks_match_the_program() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.pb.zst");
    let mut flags = PRELOAD.to_vec();
    flags.extend(["--sample-bytes", "65536"]);
    let out = common::record_to(&trace, "sampled_heap", &flags, &[]);
    let want = expect_line(&out, "sampled_heap");
    let t = trace.to_str().unwrap();

    // The header says how allocations were recorded.
    let info = json(&run(&ebsym_path(), &["info", t, "--json"]));
    let text = info.to_string();
    assert!(
        text.contains(r#""alloc-sampler""#) && text.contains(r#""preload""#),
        "{info:#}"
    );
    assert!(text.contains(r#""sample-bytes""#) && text.contains(r#""65536""#));

    let top = top(&trace);
    // 1 MiB blocks at a 64 KiB period: kept with probability 1 - e^-16; all of them seen.
    let (count, bytes) = through(&top, "big_blocks");
    let truth = want["functions"]["big_blocks"]["bytes"].as_u64().unwrap();
    assert_eq!(count, 64, "{top:#}");
    assert!(
        (bytes as f64 - truth as f64).abs() <= truth as f64 * 0.01,
        "big_blocks: {bytes} estimated for {truth}"
    );
    for f in ["small_churn", "medium"] {
        let (_, est) = through(&top, f);
        let truth = want["functions"][f]["bytes"].as_u64().unwrap();
        let err = (est as f64 - truth as f64).abs() / truth as f64;
        assert!(
            err < 0.15,
            "{f}: {est} bytes estimated for {truth} ({err:.3})"
        );
    }
    // kinds(): one block of every allocating function, each at least 1 MiB: all seen.
    let kinds = rows(&top).iter().filter(|r| has(r, "kinds")).count();
    assert!(kinds >= 7, "kinds(): {kinds} stacks");
    assert_no_shim_on_top(&top, "big_blocks");
    assert_no_shim_on_top(&top, "small_churn");
    let big = rows(&top).iter().find(|r| has(r, "big_blocks")).unwrap();
    assert!(function(&big["frames"][1]).starts_with("run"), "{big:#}");
    let f0 = &big["frames"][0];
    assert!(
        f0["file"]
            .as_str()
            .unwrap_or("")
            .ends_with("sampled_heap.cpp"),
        "{f0}"
    );

    // The text report says its numbers are estimates.
    let text =
        String::from_utf8(run(&ebsym_path(), &["top", t, "--kind", "alloc"]).stdout).unwrap();
    assert!(text.contains("estimates:"), "{text}");

    // Leaks: big_blocks' 64 MiB, nothing of the churn (every one of its samples was freed).
    let leaks = json(&run(&ebsym_path(), &["leaks", t, "--json"]));
    let (lc, lb) = through(&leaks, "big_blocks");
    assert_eq!(lc, 64, "{leaks:#}");
    let truth = want["leaked_bytes"].as_u64().unwrap();
    assert!(
        (lb as f64 - truth as f64).abs() <= truth as f64 * 0.01,
        "leaks: {lb} for {truth}"
    );
    for f in ["small_churn", "medium", "kinds"] {
        assert!(
            !rows(&leaks).iter().any(|r| has(r, f)),
            "{f} in the leaks: {leaks:#}"
        );
    }
    let ltext = String::from_utf8(run(&ebsym_path(), &["leaks", t]).stdout).unwrap();
    assert!(ltext.contains("estimates:"), "{ltext}");
}

#[test]
fn preload_sampler_stacks_in_every_stack_mode() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for mode in ["fp", "cfi", "auto", "dwarf"] {
        let trace = dir.path().join(format!("{mode}.pb.zst"));
        let mut flags = PRELOAD.to_vec();
        flags.extend(["--sample-bytes", "65536", "--stack-mode", mode]);
        common::record_to(&trace, "sampled_heap", &flags, &["--churn", "200000"]);
        let top = top(&trace);
        assert_eq!(through(&top, "big_blocks").0, 64, "{mode}: {top:#}");
        assert_no_shim_on_top(&top, "big_blocks");
        assert_no_shim_on_top(&top, "small_churn");
        for r in rows(&top).iter().filter(|r| has(r, "big_blocks")) {
            let names: Vec<&str> = r["frames"]
                .as_array()
                .unwrap()
                .iter()
                .map(function)
                .collect();
            assert!(
                names.len() >= 3 && names[1].starts_with("run") && names[2] == "main",
                "{mode}: {names:?}"
            );
        }
    }
}

/// The EXPECT line without its pid.
fn without_pid(v: &Value) -> Value {
    let mut v = v.clone();
    v.as_object_mut().unwrap().remove("pid");
    v
}

#[test]
fn preload_keeps_the_program_behaviour_and_follows_forks_and_threads() {
    if !root() {
        return;
    }
    let args = [
        "--churn",
        "300000",
        "--threads",
        "3",
        "--fork",
        "--exit",
        "5",
    ];
    let prog =
        ebtrace_testdata::build("sampled_heap", ebtrace_testdata::Variant::FramePointer).unwrap();
    let plain = Command::new(&prog).args(args).output().unwrap();
    assert_eq!(plain.status.code(), Some(5));
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.pb.zst");
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ebrec"))
        .env("TMPDIR", &tmp)
        .args(["record", "-o", trace.to_str().unwrap()])
        .args(PRELOAD)
        .args(["--sample-bytes", "16384", "--"])
        .arg(&prog)
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("alloc: preload sampler, 1 per 16384 bytes"),
        "the start line names the mode: {stderr}"
    );
    // The same output, the same exit code (in the trace), the shim's file gone.
    let (a, b) = (
        expect_line(&plain, "sampled_heap"),
        expect_line(&out, "sampled_heap"),
    );
    assert_eq!(without_pid(&a), without_pid(&b));
    assert_eq!(b["child_status"], 7);
    let info = json(&run(
        &ebsym_path(),
        &["info", trace.to_str().unwrap(), "--json"],
    ));
    assert!(info.to_string().contains(r#""exit_code":5"#), "{info:#}");
    // ebrec wrote its shim under TMPDIR and removed it at exit.
    assert_eq!(
        std::fs::read_dir(&tmp).unwrap().count(),
        0,
        "left in {tmp:?}"
    );
    assert!(
        !stderr.contains("cannot be preloaded"),
        "ld.so did not load the shim: {stderr}"
    );

    let top = top(&trace);
    // The forked child's 16 x 1 MiB, and the threads' churn (3 x 100000 x 128 B).
    assert_eq!(through(&top, "child_blocks").0, 16, "{top:#}");
    let (_, est) = through(&top, "thread_churn");
    let truth = b["functions"]["thread_churn"]["bytes"].as_u64().unwrap();
    let err = (est as f64 - truth as f64).abs() / truth as f64;
    assert!(err < 0.2, "thread_churn: {est} for {truth}");
    let leaks = json(&run(
        &ebsym_path(),
        &["leaks", trace.to_str().unwrap(), "--json"],
    ));
    assert!(
        !rows(&leaks).iter().any(|r| has(r, "child_blocks")),
        "{leaks:#}"
    );
    assert_eq!(through(&leaks, "big_blocks").0, 64);
}

#[test]
fn preload_needs_a_command_to_start() {
    let out = Command::new(env!("CARGO_BIN_EXE_ebrec"))
        .args([
            "record",
            "-o",
            "/dev/null",
            "--alloc",
            "--alloc-sampler",
            "preload",
            "-p",
            "1",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("-- CMD"), "{err}");
}

/// The alloc line of the exit summary: (kept, lost).
fn alloc_kept_lost(stderr: &str) -> (u64, u64) {
    let l = stderr
        .lines()
        .find(|l| {
            l.trim_start_matches("ebrec:")
                .trim_start()
                .starts_with("alloc ")
        })
        .unwrap_or_else(|| panic!("no alloc line in: {stderr}"));
    let w: Vec<&str> = l.split_whitespace().collect();
    let at = |k: &str| {
        let i = w.iter().position(|x| *x == k).unwrap();
        w[i + 1].parse::<u64>().unwrap()
    };
    (at("kept"), at("lost"))
}

/// Issue 32: every allocation, lossless, at any rate. sampled_heap's 300,000 small
/// allocations and frees plus 2 threads of 100,000 more, each an event (--sample-bytes 1),
/// through 1 MiB (about ten thousand events) that ebrec reads every 10 ms at best: the shim
/// waits while it is full (back-pressure), so nothing is lost and every call of every
/// function is counted exactly. Both ways the shim sends: its channel (the stacks walked in
/// the process, the default) and its probe sites (EBTRACE_PRELOAD_PROBES=1, the sampler's
/// ring buffer, as in --stack-mode fp and dwarf). The same runs with the shim's waiting
/// turned off (EBTRACE_NO_BACKPRESSURE=1, a knob for measuring) lose events: 1 MiB is too
/// small for the rate.
#[test]
fn preload_every_allocation_is_kept_through_a_small_ring_buffer() {
    if !root() {
        return;
    }
    let mut flags = PRELOAD.to_vec();
    flags.extend(["--sample-bytes", "1", "--ringbuf-size", "1048576"]);
    let args = ["--churn", "300000", "--threads", "2"];
    for (path, env) in [
        ("channel", None),
        ("probes", Some(("EBTRACE_PRELOAD_PROBES", "1"))),
    ] {
        let env: Vec<(&str, &str)> = env.into_iter().collect();
        let r = common::record_loud_env("sampled_heap", &flags, &args, &env);
        let want = expect_line(&r.out, "sampled_heap");
        let err = String::from_utf8_lossy(&r.out.stderr).to_string();
        let (kept, lost) = alloc_kept_lost(&err);
        assert_eq!(lost, 0, "{path}: {err}");
        assert!(kept >= 520_000, "{path}: {kept}: {err}");
        assert_eq!(
            err.contains("the preloaded shim walked the stacks in the process"),
            path == "channel",
            "{path}: {err}"
        );
        let top = top(&r.trace);
        for f in ["small_churn", "medium", "thread_churn", "big_blocks"] {
            let (count, bytes) = through(&top, f);
            let calls = want["functions"][f]["calls"].as_u64().unwrap();
            let truth = want["functions"][f]["bytes"].as_u64().unwrap();
            assert_eq!((count, bytes), (calls, truth), "{path}: {f}: {top:#}");
        }
    }

    // Without the waiting, the same room loses, either way.
    let dir = tempfile::tempdir().unwrap();
    let prog =
        ebtrace_testdata::build("sampled_heap", ebtrace_testdata::Variant::FramePointer).unwrap();
    for probes in ["0", "1"] {
        let out = Command::new(env!("CARGO_BIN_EXE_ebrec"))
            .env("EBTRACE_NO_BACKPRESSURE", "1")
            .env("EBTRACE_PRELOAD_PROBES", probes)
            .args(["record", "-q", "-o"])
            .arg(dir.path().join("u.pb.zst"))
            .args(&flags)
            .arg("--")
            .arg(&prog)
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{err}");
        let (_, lost) = alloc_kept_lost(&err);
        assert!(
            lost > 0,
            "no loss without back-pressure (EBTRACE_PRELOAD_PROBES={probes}): the test shows nothing: {err}"
        );
    }
}
