//! `ebsym export`: ebrec records testdata programs whose threads block, wake each other and
//! contend for a mutex in known functions, and the Perfetto (Chrome JSON trace-event) and
//! Firefox Profiler exports show what a user looks for: a track per thread, a slice or a
//! marker per block named after the function that blocked, a flow from the waker to each
//! block it ended, the lock waits with their mutex, CPU samples with named stacks.
//!
//! The checks are structural, on the JSON parsed with serde_json (and Python's json module
//! when python3 is there): no offline validator of either format exists here (Perfetto's
//! trace_processor, from the `perfetto` PyPI package, downloads its binary at run time, and
//! the Firefox Profiler is a web application), so the fields the viewers read are checked
//! by hand against their documented shapes. Needs root (skips loudly without it; fails when
//! CI=true), except the error test.

use crate::common;
use common::{ebsym_path, expect_line, root, run};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::Command;

const MS: f64 = 1000.0; // µs, Perfetto's unit

/// `ebsym export TRACE --format FORMAT -o OUT EXTRA…`, and the file it wrote, parsed.
fn export(trace: &Path, format: &str, out: &Path, extra: &[&str]) -> Value {
    let mut args = vec![
        "export",
        trace.to_str().unwrap(),
        "--format",
        format,
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = run(&ebsym_path(), &args);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("ebsym: wrote"), "{stderr}");
    let bytes = std::fs::read(out).unwrap();
    python_json_check(out);
    serde_json::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("{format} export is not JSON ({e}): {stderr}"))
}

/// Python's json module reads the file too (an independent parser), when python3 is there.
fn python_json_check(path: &Path) {
    let Ok(o) = Command::new("python3")
        .args([
            "-c",
            "import json,sys; json.load(open(sys.argv[1])); print('ok')",
            path.to_str().unwrap(),
        ])
        .output()
    else {
        eprintln!("python3 not found: the JSON is checked with serde_json only");
        return;
    };
    assert!(
        o.status.success(),
        "python's json rejects {}: {}",
        path.display(),
        String::from_utf8_lossy(&o.stderr)
    );
}

fn events(p: &Value) -> &Vec<Value> {
    p["traceEvents"].as_array().expect("traceEvents")
}

fn tid_of(e: &Value) -> u64 {
    e["tid"].as_u64().unwrap()
}

/// What the Chrome trace-event format requires of every event (the fields Perfetto's JSON
/// importer and chrome://tracing read): a phase, a name, pid and tid, a time; slices a
/// duration; instants a scope; flows an id.
fn check_perfetto_shape(p: &Value) {
    assert_eq!(p["displayTimeUnit"], "ns");
    assert!(p["otherData"].is_object(), "{}", p["otherData"]);
    for e in events(p) {
        let ph = e["ph"].as_str().unwrap_or_else(|| panic!("no ph: {e}"));
        assert!(e["name"].is_string(), "{e}");
        assert!(e["pid"].is_u64() && e["tid"].is_u64(), "{e}");
        let ts = e["ts"].as_f64().unwrap_or_else(|| panic!("no ts: {e}"));
        assert!(ts >= 0.0, "{e}");
        match ph {
            "M" => assert!(e["args"]["name"].is_string() || e["args"]["sort_index"].is_u64()),
            "X" => assert!(e["dur"].as_f64().is_some_and(|d| d >= 0.0), "{e}"),
            "i" => assert_eq!(e["s"], "t", "{e}"),
            "s" | "f" => assert!(e["id"].is_u64() && e["cat"].is_string(), "{e}"),
            _ => panic!("unexpected phase: {e}"),
        }
        if let Some(stack) = e["args"].get("stack") {
            // Frames as text, never memory: "function (file:line)" or "lib+0x…".
            assert!(
                stack
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|f| f.as_str().is_some_and(|s| !s.is_empty())),
                "{e}"
            );
        }
    }
}

/// The X slices of family `cat` on thread `tid`.
fn slices<'a>(p: &'a Value, tid: u64, cat: &str) -> Vec<&'a Value> {
    events(p)
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == cat && tid_of(e) == tid)
        .collect()
}

fn stack_has(e: &Value, func: &str) -> bool {
    e["args"]["stack"]
        .as_array()
        .is_some_and(|s| s.iter().any(|f| f.as_str().unwrap().starts_with(func)))
}

/// Whether `ts` is within slice `s`.
fn within(s: &Value, ts: f64) -> bool {
    let t0 = s["ts"].as_f64().unwrap();
    ts >= t0 && ts <= t0 + s["dur"].as_f64().unwrap()
}

/// A Firefox thread's string.
fn string(thread: &Value, i: &Value) -> String {
    thread["stringArray"][i.as_u64().unwrap() as usize]
        .as_str()
        .unwrap()
        .to_string()
}

/// The function names of a Firefox stack (a stackTable index), leaf first.
fn ff_stack(thread: &Value, stack: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut s = stack.as_u64();
    while let Some(i) = s {
        let frame = thread["stackTable"]["frame"][i as usize].as_u64().unwrap() as usize;
        let func = &thread["frameTable"]["func"][frame];
        out.push(string(
            thread,
            &thread["funcTable"]["name"][func.as_u64().unwrap() as usize],
        ));
        s = thread["stackTable"]["prefix"][i as usize].as_u64();
    }
    out
}

fn ff_thread(p: &Value, tid: u64) -> &Value {
    p["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tid"].as_str() == Some(tid.to_string().as_str()) || t["tid"] == tid)
        .unwrap_or_else(|| panic!("no Firefox thread {tid}"))
}

/// The processed profile's documented top level, and each thread's tables.
fn check_firefox_shape(p: &Value) {
    let meta = &p["meta"];
    assert!(meta["version"].is_u64(), "{meta}");
    assert!(meta["preprocessedProfileVersion"].is_u64(), "{meta}");
    assert!(
        meta["startTime"].as_f64().is_some_and(|t| t > 1e12),
        "{meta}"
    );
    assert!(meta["interval"].as_f64().is_some_and(|i| i > 0.0), "{meta}");
    assert!(meta["categories"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["name"] == "Kernel")));
    assert!(meta["markerSchema"].is_array(), "{meta}");
    assert_eq!(meta["symbolicated"], true);
    for t in p["threads"].as_array().unwrap() {
        for table in [
            "samples",
            "markers",
            "stackTable",
            "frameTable",
            "funcTable",
        ] {
            assert!(t[table]["length"].is_u64(), "{table} of {}", t["name"]);
        }
        assert!(t["stringArray"].is_array());
        assert!(t["name"].is_string() && t["pid"].is_string());
        let n = t["samples"]["length"].as_u64().unwrap() as usize;
        assert_eq!(t["samples"]["stack"].as_array().unwrap().len(), n);
        let m = t["markers"]["length"].as_u64().unwrap() as usize;
        for col in ["name", "startTime", "endTime", "phase", "data", "category"] {
            assert_eq!(t["markers"][col].as_array().unwrap().len(), m, "{col}");
        }
    }
}

#[test]
fn offcpu_blocks_export_to_perfetto_and_firefox() {
    if !root() {
        return;
    }
    let rec = common::record(
        "offcpu_blocks",
        &["--offcpu=5000", "--cpu=499"],
        &["--ms", "21", "--writer-ms", "25", "--pingpong", "60000"],
    );
    let expect = expect_line(&rec.out, "offcpu_blocks");
    let pid = expect["pid"].as_u64().unwrap();
    let sleeper = expect["sleeper"]["tid"].as_u64().unwrap();
    let reader = expect["reader"]["tid"].as_u64().unwrap();
    let writer = expect["writer"]["tid"].as_u64().unwrap();
    let naps = expect["sleeper"]["naps"].as_u64().unwrap() as usize;
    let rounds = expect["reader"]["rounds"].as_u64().unwrap() as usize;
    let dir = tempfile::tempdir().unwrap();

    // Perfetto.
    let p = export(&rec.trace, "perfetto", &dir.path().join("t.json"), &[]);
    check_perfetto_shape(&p);
    let named: HashMap<u64, &str> = events(&p)
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| (tid_of(e), e["args"]["name"].as_str().unwrap()))
        .collect();
    // Each thread by the name it gave itself (pthread_setname_np), then its tid.
    for (tid, name) in [(sleeper, "sleeper"), (reader, "reader"), (writer, "writer")] {
        assert_eq!(
            named.get(&tid).copied(),
            Some(format!("{name} {tid}").as_str()),
            "{named:?}"
        );
    }
    assert!(events(&p).iter().any(|e| e["ph"] == "M"
        && e["name"] == "process_name"
        && e["pid"] == pid
        && e["args"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("offcpu_blocks"))));
    // Every nap is one slice of at least 20 ms, named after sleeper_a, its stack there.
    let naps_seen: Vec<&Value> = slices(&p, sleeper, "offcpu")
        .into_iter()
        .filter(|e| e["dur"].as_f64().unwrap() >= 20.0 * MS)
        .collect();
    assert_eq!(naps_seen.len(), naps, "{naps_seen:#?}");
    for e in &naps_seen {
        // Named after the first user frame: sleeper_a, or raw_sleep_ms inlined into it
        // (always_inline, in the program's own file: not the runtime's).
        let name = e["name"].as_str().unwrap();
        assert!(
            ["offcpu::sleeper_a", "offcpu::raw_sleep_ms"].contains(&name),
            "{e}"
        );
        assert!(stack_has(e, "offcpu::sleeper_a"), "{e}");
        // A timer's wake (an interrupt) is no thread's: no flow comes from it.
        assert_eq!(e["args"]["woken_by"], "interrupt", "{e}");
        assert_eq!(e["pid"], pid);
        assert!(e["args"]["state"].as_str().unwrap().starts_with('S'), "{e}");
    }
    // Each read round: a block of reader_b woken by writer_c's thread, and a flow from the
    // writer's thread (starting in a wakeup slice there) to the block.
    let reads: Vec<&Value> = slices(&p, reader, "offcpu")
        .into_iter()
        .filter(|e| e["dur"].as_f64().unwrap() >= 20.0 * MS)
        .collect();
    assert_eq!(reads.len(), rounds, "{reads:#?}");
    for e in &reads {
        assert_eq!(e["name"], "offcpu::reader_b", "{e}");
        assert_eq!(e["args"]["woken_by"], "thread", "{e}");
        assert_eq!(e["args"]["waker_tid"], writer, "{e}");
        assert!(
            e["args"]["waker_stack"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f.as_str().unwrap().starts_with("offcpu::writer_c")),
            "{e}"
        );
    }
    let starts: HashMap<u64, &Value> = events(&p)
        .iter()
        .filter(|e| e["ph"] == "s")
        .map(|e| (e["id"].as_u64().unwrap(), e))
        .collect();
    let ends: Vec<&Value> = events(&p).iter().filter(|e| e["ph"] == "f").collect();
    assert_eq!(starts.len(), ends.len());
    let wakeups = slices(&p, writer, "wakeup");
    let mut flows_into_reads = 0;
    for f in &ends {
        let s = starts[&f["id"].as_u64().unwrap()];
        assert_eq!(s["cat"], f["cat"]);
        assert_eq!(s["name"], f["name"]);
        assert_eq!(f["bp"], "e");
        let fts = f["ts"].as_f64().unwrap();
        if tid_of(f) == reader && reads.iter().any(|r| within(r, fts)) {
            assert_eq!(tid_of(s), writer, "{s} -> {f}");
            let sts = s["ts"].as_f64().unwrap();
            assert!(
                wakeups.iter().any(|w| within(w, sts)),
                "flow start {s} is in no wakeup slice of the writer"
            );
            flows_into_reads += 1;
        }
    }
    assert_eq!(flows_into_reads, rounds);
    // Each read's wakeup slice ends at the wake the recorder measured: the block's end less
    // its wait for a CPU after the wake (`runnable_ns`), and the writer was running then,
    // never inside one of its own blocks.
    let writer_blocks = slices(&p, writer, "offcpu");
    for e in &reads {
        let runnable = e["args"]["runnable_ns"]
            .as_u64()
            .unwrap_or_else(|| panic!("no runnable_ns: {e}"));
        let wake = e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap() - runnable as f64 / MS;
        let w = wakeups
            .iter()
            .find(|w| (w["ts"].as_f64().unwrap() + w["dur"].as_f64().unwrap() - wake).abs() < 0.01)
            .unwrap_or_else(|| panic!("no wakeup slice ends at the wake of {e}: {wakeups:#?}"));
        let inside = writer_blocks.iter().find(|b| {
            let t0 = b["ts"].as_f64().unwrap();
            wake > t0 + 1.0 && wake < t0 + b["dur"].as_f64().unwrap() - 1.0
        });
        assert!(
            inside.is_none(),
            "the wake {w} is inside the writer's block {inside:?}"
        );
    }
    // CPU samples are instants (the ping-pong phase runs on the CPU).
    let cpu: Vec<&Value> = events(&p)
        .iter()
        .filter(|e| e["ph"] == "i" && e["cat"] == "cpu")
        .collect();
    assert!(!cpu.is_empty());
    assert_eq!(p["otherData"]["dropped_offcpu"], 0);
    assert_eq!(p["otherData"]["max_instants"], 200_000);

    // The instants' cap: a uniform sample of N, the rest counted as dropped.
    let capped = export(
        &rec.trace,
        "perfetto",
        &dir.path().join("capped.json"),
        &["--max-instants", "3"],
    );
    let n = events(&capped)
        .iter()
        .filter(|e| e["ph"] == "i" && e["cat"] == "cpu")
        .count() as u64;
    let all = capped["otherData"]["events_cpu"].as_u64().unwrap();
    assert_eq!(n, all.min(3));
    assert_eq!(capped["otherData"]["dropped_cpu"], all - n);
    // Filters: --tid keeps that thread's events only.
    let one = export(
        &rec.trace,
        "perfetto",
        &dir.path().join("one.json"),
        &["--tid", &sleeper.to_string()],
    );
    assert!(events(&one)
        .iter()
        .filter(|e| e["ph"] != "M")
        .all(|e| tid_of(e) == sleeper));
    assert_eq!(slices(&one, sleeper, "offcpu").len(), naps_seen.len());

    // Firefox.
    let f = export(&rec.trace, "firefox", &dir.path().join("t.ff.json"), &[]);
    check_firefox_shape(&f);
    let t = ff_thread(&f, sleeper);
    assert_eq!(t["pid"], pid.to_string());
    let markers = &t["markers"];
    let long_naps: Vec<usize> = (0..markers["length"].as_u64().unwrap() as usize)
        .filter(|&i| {
            markers["data"][i]["type"] == "EbtraceOffCpu"
                && markers["endTime"][i].as_f64().unwrap()
                    - markers["startTime"][i].as_f64().unwrap()
                    >= 20.0
        })
        .collect();
    assert_eq!(long_naps.len(), naps);
    for &i in &long_naps {
        let name = string(t, &markers["name"][i]);
        assert!(
            ["offcpu::sleeper_a", "offcpu::raw_sleep_ms"].contains(&name.as_str()),
            "{name}"
        );
        // A string field is an index into the thread's strings ("unique-string").
        assert_eq!(string(t, &markers["data"][i]["place"]), name);
        assert_eq!(string(t, &markers["data"][i]["woken_by"]), "interrupt");
        // The marker's stack (its "cause"), from the kernel's nanosleep to sleeper_a.
        let stack = ff_stack(t, &markers["data"][i]["cause"]["stack"]);
        assert!(
            stack.iter().any(|f| f.starts_with("offcpu::sleeper_a(")),
            "{stack:?}"
        );
        assert!(stack[0].ends_with("nanosleep"), "{stack:?}");
    }
    let schemas: HashSet<&str> = f["meta"]["markerSchema"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert!(schemas.contains("EbtraceOffCpu"), "{schemas:?}");
    // CPU samples with stacks whose functions are named: the ping-pong's.
    let mut samples = 0;
    let mut funcs: HashSet<String> = HashSet::new();
    let mut kernel_frames = 0;
    for t in f["threads"].as_array().unwrap() {
        samples += t["samples"]["length"].as_u64().unwrap();
        for n in t["funcTable"]["name"].as_array().unwrap() {
            funcs.insert(string(t, n));
        }
        let kernel = f["meta"]["categories"]
            .as_array()
            .unwrap()
            .iter()
            .position(|c| c["name"] == "Kernel")
            .unwrap() as u64;
        kernel_frames += t["frameTable"]["category"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c.as_u64() == Some(kernel))
            .count();
    }
    assert!(samples > 0);
    assert!(
        funcs.iter().any(|f| f.starts_with("offcpu::pingpong_")),
        "{funcs:?}"
    );
    assert!(
        funcs.iter().any(|f| f.starts_with("run_offcpu")),
        "{funcs:?}"
    );
    assert!(kernel_frames > 0, "kernel frames in the Kernel category");

    // A name ending in .gz is gzip: gzip -dc gives the same JSON.
    let gz = dir.path().join("t.ff.json.gz");
    run(
        &ebsym_path(),
        &[
            "export",
            rec.trace.to_str().unwrap(),
            "--format",
            "firefox",
            "-o",
            gz.to_str().unwrap(),
        ],
    );
    let bytes = std::fs::read(&gz).unwrap();
    assert_eq!(&bytes[..2], &[0x1f, 0x8b]);
    let unzipped = Command::new("gzip")
        .arg("-dc")
        .arg(&gz)
        .output()
        .expect("gzip");
    let v: Value = serde_json::from_slice(&unzipped.stdout).unwrap();
    assert_eq!(
        v["threads"].as_array().unwrap().len(),
        f["threads"].as_array().unwrap().len()
    );
}

#[test]
fn lock_waits_export_with_their_mutex_and_waker() {
    if !root() {
        return;
    }
    let rec = common::record("lock_workload", &["--lock"], &[]);
    let want = expect_line(&rec.out, "lock_workload");
    let mutex = want["mutex"].as_str().unwrap();
    let pid = want["pid"].as_u64().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let p = export(&rec.trace, "perfetto", &dir.path().join("l.json"), &[]);
    check_perfetto_shape(&p);
    let ours: Vec<&Value> = events(&p)
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "lock" && e["args"]["mutex"] == mutex)
        .collect();
    assert!(!ours.is_empty(), "no lock wait on {mutex}");
    for e in &ours {
        assert_eq!(e["pid"], pid);
        assert_eq!(e["name"], "lock wait in Ledger::post", "{e}");
        assert!(stack_has(e, "Ledger::post"), "{e}");
        assert_eq!(e["args"]["source"], "futex");
    }
    // A futex wait ended by a wake names the thread that released the mutex, and its stack
    // (the unlock in Ledger::post).
    let woken: Vec<&&Value> = ours
        .iter()
        .filter(|e| e["args"]["waker_tid"].is_u64())
        .collect();
    assert!(!woken.is_empty());
    assert!(woken
        .iter()
        .any(|e| e["args"]["waker_stack"].as_array().is_some_and(|s| s
            .iter()
            .any(|f| f.as_str().unwrap().starts_with("Ledger::post")))));

    let f = export(&rec.trace, "firefox", &dir.path().join("l.ff.json"), &[]);
    check_firefox_shape(&f);
    let mut lock_markers = 0;
    for t in f["threads"].as_array().unwrap() {
        let m = &t["markers"];
        for i in 0..m["length"].as_u64().unwrap() as usize {
            if m["data"][i]["type"] == "EbtraceLock" && string(t, &m["data"][i]["mutex"]) == mutex {
                assert_eq!(string(t, &m["name"][i]), "lock wait in Ledger::post");
                lock_markers += 1;
            }
        }
    }
    assert_eq!(lock_markers, ours.len());
}

/// A missing or corrupt trace is one line on stderr and exit status 1, never a panic.
#[test]
fn a_bad_trace_is_a_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.pb.zst");
    std::fs::write(&junk, b"this is not a trace at all, just some bytes\n").unwrap();
    for (trace, format) in [
        (dir.path().join("missing.pb.zst"), "perfetto"),
        (junk.clone(), "perfetto"),
        (junk, "firefox"),
    ] {
        let out = Command::new(ebsym_path())
            .args(["export", trace.to_str().unwrap(), "--format", format, "-o"])
            .arg(dir.path().join("out.json"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.starts_with("ebsym: cannot "), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    // An unknown format is clap's usage error.
    let out = Command::new(ebsym_path())
        .args(["export", "t.pb.zst", "--format", "speedscope", "-o", "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("perfetto"));
}
