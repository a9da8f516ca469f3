//! Every report subcommand of ebsym on an empty trace (header and trailer only) and on a
//! trace with only losses: a clear message ("no alloc events in this trace (but N events
//! were lost: …)"), never an empty table. The traces are raw, so each run also symbolizes
//! them on the fly.
use ebtrace_format::{TraceWriter, WriterOptions};
use ebtrace_proto::v1::{self as pb, record::Kind, Record};
use std::path::Path;
use std::process::Command;

fn write(path: &Path, lost: &[(pb::EventFamily, u64)]) {
    let opts = WriterOptions {
        chunk_interval: None,
        ..Default::default()
    };
    let mut w = TraceWriter::new(Vec::new(), pb::Header::default(), opts).unwrap();
    for &(family, count) in lost {
        w.write_record(&Record {
            kind: Some(Kind::Lost(pb::Lost {
                family: family as i32,
                reason: pb::LossReason::RingbufFull as i32,
                count,
                ..Default::default()
            })),
        })
        .unwrap();
    }
    std::fs::write(path, w.finish(Some(pb::Trailer::default())).unwrap()).unwrap();
}

/// (success, stdout, stderr) of ebsym with `args`.
fn ebsym(args: &[&str]) -> (bool, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_ebsym"))
        .args(args)
        .arg("--no-debuginfod")
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn every_report_says_there_is_nothing_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.pb.zst");
    write(&empty, &[]);
    let lost = dir.path().join("lost.pb.zst");
    write(
        &lost,
        &[(pb::EventFamily::Alloc, 7), (pb::EventFamily::Lock, 2)],
    );
    let but =
        " (but 9 events were lost while recording: alloc/ringbuf_full 7, lock/ringbuf_full 2)";
    let out = dir.path().join("out");
    let o = out.to_str().unwrap();
    for (trace, tail) in [(&empty, ""), (&lost, but)] {
        let t = trace.to_str().unwrap();
        let no = |kind: &str| format!("no {kind} events in this trace{tail}");
        for (args, kind) in [
            (vec!["top", t], "alloc"),
            (vec!["top", t, "--kind", "cpu"], "cpu"),
            (vec!["leaks", t], "alloc"),
            (vec!["locks", t], "lock"),
            (vec!["latency", t], "func"),
        ] {
            let (ok, stdout, stderr) = ebsym(&args);
            assert!(ok, "{args:?}: {stderr}");
            assert!(stdout.contains(&no(kind)), "{args:?}: {stdout}");
            assert!(!stdout.contains("#1"), "{args:?}: {stdout}");
            let mut json = args.clone();
            json.push("--json");
            let (ok, stdout, _) = ebsym(&json);
            assert!(ok);
            let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
            assert_eq!(v["note"], no(kind).as_str(), "{json:?}");
        }
        let (ok, stdout, stderr) = ebsym(&["folded", t, "--kind", "alloc"]);
        assert!(ok && stdout.is_empty(), "{stdout}");
        assert!(stderr.contains(&no("alloc")), "{stderr}");
        let (ok, _, stderr) = ebsym(&["flamegraph", t, "-o", o]);
        assert!(!ok && stderr.contains(&no("alloc")), "{stderr}");
        let (ok, _, stderr) = ebsym(&["pprof", t, "--kind", "lock", "-o", o]);
        assert!(ok && stderr.contains(&no("lock")), "{stderr}");
        let (ok, stdout, _) = ebsym(&["diff", t, t]);
        assert!(
            ok && stdout.contains(&format!("after: {}", no("alloc"))),
            "{stdout}"
        );
    }
}

/// Every report's `--json` is an object whose first field is the schema's version (`ebsym
/// info --json`'s: tests/info.rs), and spells a family by its registry name.
#[test]
fn every_json_output_starts_with_the_schema_version() {
    let dir = tempfile::tempdir().unwrap();
    let lost = dir.path().join("lost.pb.zst");
    write(&lost, &[(pb::EventFamily::MemGrowth, 3)]);
    let t = lost.to_str().unwrap();
    let first = format!(
        "{{\n  \"schema_version\": {},\n",
        ebtrace_analyze::JSON_SCHEMA_VERSION
    );
    for args in [
        vec!["top", t],
        vec!["top", t, "--kind", "mem"],
        vec!["leaks", t],
        vec!["locks", t],
        vec!["latency", t],
        vec!["latency", t, "--kind", "syscall"],
        vec!["tcp", t],
        vec!["summary", t],
        vec!["diff", t, t],
    ] {
        let mut json = args.clone();
        json.push("--json");
        let (ok, stdout, stderr) = ebsym(&json);
        assert!(ok, "{json:?}: {stderr}");
        assert!(stdout.starts_with(&first), "{json:?}: {stdout}");
        let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        let losses = match args[0] {
            "summary" => continue,
            "diff" => &v["losses_before"],
            _ => &v["losses"],
        };
        assert_eq!(
            losses["recorded"],
            serde_json::json!({"memgrowth/ringbuf_full": 3}),
            "{json:?}"
        );
    }
    let o = Command::new(env!("CARGO_BIN_EXE_ebsym"))
        .args(["info", "--json", t])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["losses"],
        serde_json::json!([{"family": "memgrowth", "reason": "ringbuf_full", "count": 3}])
    );
    assert_eq!(v["events"]["memgrowth"], 0, "{v:#}");
}
