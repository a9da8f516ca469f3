//! Faults a recorder meets in production: it is killed (kill -9) mid-recording, and its
//! targets load and unload libraries while it records. Nothing may be lost that is not
//! counted, the target must go on unharmed, and what was written must read back.
//! Needs root (skips loudly without it; fails when CI=true).

use crate::common;
use common::{ebsym_json, expect_line, root};
use ebtrace_format::TraceReader;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

/// ebrec_<pid> probes left in tracefs.
fn stale_probes(pid: u32) -> bool {
    [
        "/sys/kernel/tracing/uprobe_events",
        "/sys/kernel/debug/tracing/uprobe_events",
    ]
    .iter()
    .filter_map(|p| std::fs::read_to_string(p).ok())
    .any(|s| s.contains(&format!("ebrec_{pid}/")))
}

#[test]
fn kill_9_leaves_a_readable_trace_and_a_healthy_target() {
    if !root() {
        return;
    }
    let prog = ebtrace_testdata::build("shop", ebtrace_testdata::Variant::FramePointer).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (i, after_ms) in [150u64, 700, 1600].into_iter().enumerate() {
        let trace = dir.path().join(format!("k{i}.pb.zst"));
        let mut target = Command::new(&prog)
            .args(["--seconds", "2.5", "--wait"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(target.stdout.take().unwrap()).lines();
        assert!(lines.next().unwrap().unwrap().starts_with("READY"));
        let pid = target.id().to_string();
        let mut rec = Command::new(env!("CARGO_BIN_EXE_ebrec"))
            .args(["record", "-q", "-o", trace.to_str().unwrap()])
            .args([
                "--alloc=1024",
                "--lock",
                "--cpu=499",
                "--func",
                "shop::Catalog::slow_lookup",
            ])
            .args(["-p", &pid])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(rec.stderr.take().unwrap()).lines();
        for l in err.by_ref() {
            if l.unwrap().starts_with("ebrec: recording") {
                break;
            }
        }
        // SAFETY: plain kill(2).
        unsafe { libc::kill(target.id() as i32, libc::SIGUSR1) };
        std::thread::sleep(Duration::from_millis(after_ms));
        rec.kill().unwrap(); // SIGKILL
        rec.wait().unwrap();
        // The target goes on and ends normally: the probes went away with the recorder.
        let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
        let status = target.wait().unwrap();
        assert!(
            status.success(),
            "target after kill -9 at {after_ms} ms: {status}"
        );
        assert!(rest.iter().any(|l| l.starts_with("EXPECT ")), "{rest:?}");

        // Every completed chunk reads back; only the end may be cut.
        let mut r = TraceReader::open(&trace).unwrap();
        let records = r.by_ref().count();
        assert!(records > 0, "kill at {after_ms} ms: empty trace");
        for d in r.damage() {
            assert!(
                d.to_string().contains("truncat"),
                "kill at {after_ms} ms: {d}"
            );
        }
        let info = ebsym_json(&["info", trace.to_str().unwrap()]);
        assert_eq!(info["ended"], "cut", "kill at {after_ms} ms: {info:#}");
        // Reports work on what is there.
        let top = ebsym_json(&["top", trace.to_str().unwrap(), "--kind", "alloc"]);
        assert!(top["rows"].is_array());
        assert_eq!(top["losses"]["cut"], true, "{top:#}");

        // The probes the killed recorder defined in tracefs are gone after the next run.
        let killed = rec.id();
        let next = dir.path().join("next.pb.zst");
        let out = common::record_to(&next, "memgrowth", &["--alloc=1000000"], &[]);
        assert!(out.status.success());
        assert!(
            !stale_probes(killed),
            "probes of the killed ebrec {killed} left in tracefs"
        );
    }
}

#[test]
fn a_library_loaded_while_recording_is_attributed() {
    if !root() {
        return;
    }
    let lib = ebtrace_testdata::build("alloc_workload", ebtrace_testdata::Variant::SharedLibrary)
        .unwrap();
    let lib = lib.to_str().unwrap();
    let rec = common::record(
        "dlopener",
        &["--alloc"],
        &[lib, "--times", "2", "--", "--rounds", "1"],
    );
    // The library's own EXPECT after the second cycle holds the totals of both.
    let stdout = String::from_utf8_lossy(&rec.out.stdout);
    let last: serde_json::Value = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("EXPECT "))
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .rfind(|v| v["program"] == "alloc_workload")
        .unwrap();
    let _ = expect_line(&rec.out, "dlopener");
    let calls = last["functions"]["Warehouse::restock"]["malloc"]["calls"]
        .as_u64()
        .unwrap();
    let top = ebsym_json(&[
        "top",
        rec.trace.to_str().unwrap(),
        "--kind",
        "alloc",
        "--by",
        "count",
        "-n",
        "1000",
    ]);
    let mut n = 0;
    for row in top["rows"].as_array().unwrap() {
        let frames = row["frames"].as_array().unwrap();
        let Some(f) = frames.iter().find(|f| {
            f["function"]
                .as_str()
                .unwrap_or("")
                .starts_with("Warehouse::restock")
        }) else {
            continue;
        };
        assert!(
            f["module"]
                .as_str()
                .unwrap()
                .ends_with("liballoc_workload.so"),
            "{f}"
        );
        assert!(
            frames[0]["function"].as_str().unwrap().contains("malloc"),
            "{row}"
        );
        n += row["count"].as_u64().unwrap();
    }
    assert_eq!(n, calls, "{top:#}");
}

#[test]
fn a_reused_pid_is_a_new_generation() {
    if !root() {
        return;
    }
    use ebtrace_format::events::Family;
    use ebtrace_format::proto::record::Kind;
    let rec = common::record("forker", &["--alloc"], &["--children", "1", "--reuse-pid"]);
    let expect = expect_line(&rec.out, "forker");
    let pid = expect["reused_pid"].as_u64().unwrap() as u32;
    assert_ne!(pid, 0, "the kernel never gave the pid back: {expect}");
    assert_eq!(u64::from(pid), expect["child_pids"][0].as_u64().unwrap());
    let mut r = TraceReader::open(&rec.trace).unwrap();
    let mut tables = ebtrace_format::Tables::default();
    let mut gens = Vec::new();
    let mut allocs = Vec::new();
    for rec in r.by_ref() {
        if let Some(Kind::Process(p)) = &rec.kind {
            if p.pid == pid && p.event == ebtrace_format::proto::ProcessEvent::Fork as i32 {
                gens.push(p.generation);
            }
        }
        if tables.observe(&rec) {
            continue;
        }
        if let Some(Kind::Allocs(b)) = rec.kind {
            allocs.extend(b.decode().unwrap());
        }
    }
    // Two processes with the same pid, one after the other: two generations, each with
    // its own allocations and nothing of the other's.
    assert_eq!(gens.len(), 2, "generations of pid {pid}: {gens:?}");
    let sizes = |g: u32| -> Vec<u64> {
        allocs
            .iter()
            .filter(|a| a.generation == g && (a.size == 6000 || a.size == 9000))
            .map(|a| a.size)
            .collect()
    };
    assert_eq!(sizes(gens[0]), vec![6000; 25]);
    assert_eq!(sizes(gens[1]), vec![9000; 15]);
    // And the report names each one's function.
    let top = ebsym_json(&[
        "top",
        rec.trace.to_str().unwrap(),
        "--kind",
        "alloc",
        "--by",
        "count",
        "--pid",
        &pid.to_string(),
    ]);
    let names: Vec<String> = top["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["frames"].to_string())
        .collect();
    assert!(names.iter().any(|f| f.contains("child_work")), "{names:?}");
    assert!(names.iter().any(|f| f.contains("reused_work")), "{names:?}");
}

/// A SIGINT that comes while ebrec is still loading and attaching (the diagnose set: a
/// second or more on a busy machine) stops the recording as soon as it starts, with a
/// readable trace. ebrec runs with SIGINT ignored, as a script's background job starts:
/// its handler was installed only after the attaching, so such a SIGINT was lost and the
/// recording went on until a second one.
#[test]
fn a_sigint_while_attaching_stops_the_recording() {
    use std::os::unix::process::CommandExt;
    if !root() {
        return;
    }
    let mut target = Command::new("sleep").arg("60").spawn().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.pb.zst");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ebrec"));
    cmd.args(["record", "-q", "-o", trace.to_str().unwrap()])
        .args([
            "--cpu",
            "--offcpu",
            "--lock",
            "--memgrowth",
            "--syscalls",
            "--bio",
            "--runq",
            "--tcp",
            "-p",
            &target.id().to_string(),
        ])
        .stderr(Stdio::piped());
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut rec = cmd.spawn().unwrap();
    std::thread::sleep(Duration::from_millis(150));
    // SAFETY: plain kill(2) of our child.
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    let mut exited = None;
    for _ in 0..150 {
        if let Some(st) = rec.try_wait().unwrap() {
            exited = Some(st);
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = target.kill();
    let _ = target.wait();
    let Some(st) = exited else {
        // SAFETY: as above.
        unsafe { libc::kill(rec.id() as i32, libc::SIGTERM) };
        let _ = rec.wait();
        panic!("ebrec still recording 15 s after a SIGINT sent while it attached");
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut rec.stderr.take().unwrap(), &mut err).unwrap();
    assert!(st.success(), "{st}: {err}");
    let info = ebsym_json(&["info", trace.to_str().unwrap()]);
    assert!(
        info.to_string().contains("signal SIGINT"),
        "the trace's stop reason: {info}"
    );
}
