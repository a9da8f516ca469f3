//! `ebsym report` in a real browser: ebrec records testdata programs whose functions the
//! test knows, ebsym writes the HTML page, and headless Chromium (Debian's `chromium`,
//! driven by the npm package `playwright-core`, installed once under the target directory)
//! opens it from disk with the network off, every request that is not for a file aborted
//! and counted (none may be made). ebrec/tests/e2e/report_html.js clicks through the page and
//! says what it saw; the checks are here. Screenshots are saved under
//! target/ebtrace-artifacts/report_html/ (their paths printed): look at them.
//! Needs root (skips loudly without it; fails when CI=true), and node, npm and chromium
//! (skipped loudly when missing, a failure when CI=true).

use crate::common;
use common::{ebsym_json, ebsym_path, expect_line, root, run};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the screenshots go.
fn artifacts() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("ebtrace-artifacts/report_html");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Opens `html` in the browser; what the page showed (see report_html.js). `env`: FRAME
/// (the flame-graph frame to click), SEARCH (a regexp to search), RANGE_TID (the thread
/// whose first blocks the range selection covers), THREAD_PART (`group/part` of the Threads
/// section to click).
fn browse(modules: &Path, html: &Path, name: &str, env: &[(&str, &str)]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/report_html.js");
    let out = Command::new("node")
        .arg(&script)
        .arg(html)
        .arg(modules)
        .arg(artifacts())
        .arg(name)
        .envs(env.iter().copied())
        .output()
        .expect("run node");
    assert!(
        out.status.success(),
        "report_html.js failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "report_html.js: not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    for s in v["screenshots"].as_array().unwrap() {
        eprintln!("screenshot: {}", s.as_str().unwrap());
    }
    eprintln!("{name}: loaded in {} ms", v["load_ms"]);
    // Self-contained: nothing asked of any host, no script error.
    assert_eq!(
        v["requests"],
        serde_json::json!([]),
        "requests off the disk"
    );
    assert_eq!(v["errors"], serde_json::json!([]), "errors in the page");
    assert!(v["error"].is_null(), "the viewer failed: {}", v["error"]);
    v
}

/// `ebsym report TRACE -o OUT [ARGS]`, its stderr line.
fn report(trace: &Path, out: &Path, args: &[&str]) -> String {
    let mut a = vec![
        "report",
        trace.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ];
    a.extend_from_slice(args);
    let o = run(&ebsym_path(), &a);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    eprintln!("{err}");
    let html = std::fs::read_to_string(out).unwrap();
    // One file, inline: no external script, style, font or image.
    for bad in ["<script src", "<link", "@import", "url(http", "src=\"http"] {
        assert!(!html.contains(bad), "the page has {bad}");
    }
    err
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap_or("").to_string())
        .collect()
}

fn starts_fn(name: &str, want: &str) -> bool {
    name == want || name.strip_prefix(want).is_some_and(|r| r.starts_with('('))
}

#[test]
fn offcpu_report_renders_and_answers_clicks_in_a_browser() {
    if !root() {
        return;
    }
    let rec = common::record(
        "offcpu_blocks",
        &["--offcpu=5000", "--cpu"],
        &["--ms", "21", "--writer-ms", "25"],
    );
    let expect = expect_line(&rec.out, "offcpu_blocks");
    let sleeper = expect["sleeper"]["tid"].as_u64().unwrap();
    let reader = expect["reader"]["tid"].as_u64().unwrap();
    let writer = expect["writer"]["tid"].as_u64().unwrap();
    let naps = expect["sleeper"]["naps"].as_u64().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("report.html");
    report(&rec.trace, &html, &[]);
    let Some(modules) = common::playwright() else {
        return;
    };
    let v = browse(
        &modules,
        &html,
        "offcpu",
        &[
            ("FRAME", "offcpu::sleeper_a"),
            ("SEARCH", "sleeper_"),
            ("RANGE_TID", &sleeper.to_string()),
            ("THREAD_PART", "sleeper/off: sleep"),
        ],
    );

    // The summary: host, kernel, command, duration, the families and their counts.
    let kv = &v["summary"]["kv"];
    for k in [
        "host",
        "kernel",
        "command",
        "duration",
        "stack mode",
        "stack memory",
    ] {
        assert!(
            !kv[k].as_str().unwrap_or("").is_empty(),
            "summary {k}: {kv}"
        );
    }
    assert!(kv["command"].as_str().unwrap().contains("offcpu_blocks"));
    assert!(kv["stack memory"].as_str().unwrap().contains("none"));
    let events: Vec<(String, u64)> = v["summary"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let r = strs(r);
            (r[0].clone(), r[1].replace(',', "").parse().unwrap())
        })
        .collect();
    let count = |f: &str| events.iter().find(|e| e.0 == f).map(|e| e.1);
    assert!(count("offcpu").unwrap() >= naps, "{events:?}");
    assert!(count("cpu").unwrap() > 0, "{events:?}");
    let families: Vec<String> = v["summary"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f[0].as_str().unwrap().to_string())
        .collect();
    assert!(families.contains(&"offcpu".to_string()), "{families:?}");

    // The Threads section: the program's thread groups, each with its bar, the parts
    // `ebsym threads` gives; the sleeper's sleep clicked shows the stack it slept in.
    let rep = ebsym_json(&["threads", rec.trace.to_str().unwrap()]);
    let want = rep["groups"].as_array().unwrap();
    let drawn = v["threads"].as_array().unwrap();
    assert_eq!(drawn.len(), want.len(), "{:#}", v["threads"]);
    for (d, w) in drawn.iter().zip(want) {
        assert_eq!(d["thread"], w["thread"], "{d:#}");
        assert_eq!(d["process"], w["process"], "{d:#}");
        assert_eq!(d["threads"], w["threads"], "{d:#}");
        let bar = d["bar"].as_array().unwrap();
        assert!(!bar.is_empty(), "no bar: {d:#}");
        let widths: f64 = bar.iter().map(|p| p["width"].as_f64().unwrap()).sum();
        assert!((widths - 100.0).abs() < 0.1, "{widths}% of the bar: {d:#}");
        for c in w["offcpu"].as_array().unwrap() {
            let part = format!("off: {}", c["cause"].as_str().unwrap());
            let seg = bar
                .iter()
                .find(|p| p["part"] == part.as_str())
                .unwrap_or_else(|| panic!("no {part} in the bar: {d:#}"));
            assert_eq!(seg["ns"], c["ns"], "{d:#}");
        }
    }
    for name in ["sleeper", "reader", "writer"] {
        let d = drawn
            .iter()
            .find(|d| d["thread"] == name)
            .unwrap_or_else(|| panic!("no {name} group drawn: {:#}", v["threads"]));
        assert!(
            d["title"].as_str().unwrap().contains("offcpu_blocks"),
            "{d:#}"
        );
    }
    let clicked = &v["threads_clicked"];
    assert_eq!(clicked["visible"], true, "{clicked:#}");
    assert!(
        clicked["title"].as_str().unwrap().contains("sleeper"),
        "{clicked:#}"
    );
    assert!(
        strs(&clicked["frames"])
            .iter()
            .any(|f| starts_fn(f, "offcpu::sleeper_a")),
        "{clicked:#}"
    );

    // A flame graph per kind present; the off-CPU one has the sleeper's frame.
    assert!(v["flame"]["cpu"]["total"].as_u64().unwrap() > 0);
    let off = &v["flame"]["offcpu"];
    let names = strs(&off["names"]);
    assert!(
        names.iter().any(|n| starts_fn(n, "offcpu::sleeper_a")),
        "{names:?}"
    );
    let whole = off["total"].as_u64().unwrap();
    // Clicking it zooms (it spans the width) and lists its stack with file:line.
    assert!(starts_fn(
        v["clicked"].as_str().unwrap(),
        "offcpu::sleeper_a"
    ));
    assert!(
        v["zoom"]["after"].as_u64() < v["zoom"]["before"].as_u64(),
        "{}",
        v["zoom"]
    );
    let panel = &v["panel"];
    assert_eq!(panel["visible"], true);
    let frames = panel["frames"].as_array().unwrap();
    let sel = frames
        .iter()
        .find(|f| starts_fn(f["fn"].as_str().unwrap(), "offcpu::sleeper_a"))
        .unwrap_or_else(|| panic!("no sleeper_a in the panel: {panel}"));
    assert_eq!(sel["selected"], true, "{panel}");
    assert!(
        sel["loc"]
            .as_str()
            .is_some_and(|l| l.contains("offcpu_blocks.cpp:")),
        "{sel}"
    );
    let caller = frames
        .iter()
        .find(|f| starts_fn(f["fn"].as_str().unwrap(), "offcpu::sleeper_loop"))
        .unwrap_or_else(|| panic!("no sleeper_loop in the panel: {panel}"));
    assert!(caller["loc"]
        .as_str()
        .is_some_and(|l| l.contains("offcpu_blocks.cpp:")));
    // Search: the matching frames highlighted, their share said.
    assert!(v["search"]["highlighted"].as_u64().unwrap() >= 1);
    let matched = v["search"]["matched"].as_u64().unwrap();
    assert!(matched > 0 && matched <= whole, "{}", v["search"]);
    assert!(v["search"]["text"].as_str().unwrap().contains('%'));

    // The timeline: the sleeper's row with its blocks, the reader's with the writer's
    // arrows.
    let tl = &v["timeline"];
    let row = |tid: u64| {
        tl["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["tid"].as_u64() == Some(tid))
            .cloned()
            .unwrap_or_else(|| panic!("no row of tid {tid}: {tl}"))
    };
    assert!(row(sleeper)["counts"]["offcpu"].as_u64().unwrap() >= naps);
    assert!(row(reader)["counts"]["offcpu"].as_u64().unwrap() >= 1);
    assert!(
        tl["arrow_samples"].as_array().unwrap().iter().any(|a| {
            a["tid"].as_u64() == Some(reader) && a["waker_tid"].as_u64() == Some(writer)
        }),
        "no arrow from the writer to the reader: {tl}"
    );
    assert!(tl["cpu_cells"].as_u64().unwrap() > 0);

    // The heat map and the tables.
    let heat = v["heatmaps"].as_array().unwrap();
    assert!(
        heat.iter()
            .any(|h| h["kind"] == "offcpu" && h["total"].as_u64().unwrap() >= naps),
        "{heat:?}"
    );
    let tables = &v["tables"];
    for t in ["events", "latency", "top-offcpu", "top-cpu"] {
        assert!(
            !tables[t].as_array().unwrap().is_empty(),
            "table {t}: {tables}"
        );
    }
    assert!(tables["latency"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r[0] == "offcpu"));
    assert!(tables["top-offcpu"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r[0].as_str().unwrap().contains("offcpu::")));
    // Sorting by a header: descending, then ascending.
    let nums = |k: &str| -> Vec<u64> {
        v["sort"][k]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().replace(',', "").parse().unwrap())
            .collect()
    };
    let (desc, asc) = (nums("desc"), nums("asc"));
    assert!(desc.windows(2).all(|w| w[0] >= w[1]), "{desc:?}");
    assert!(asc.windows(2).all(|w| w[0] <= w[1]), "{asc:?}");

    // A range over the sleeper's first two naps: the flame graph shows less, not nothing;
    // clearing it gives the whole again.
    let r = &v["range"];
    assert_eq!(r["whole"].as_u64(), Some(whole));
    let selected = r["selected"].as_u64().unwrap();
    assert!(selected > 0 && selected < whole, "{r}");
    assert_eq!(r["cleared"].as_u64(), Some(whole));
    assert!(r["text"].as_str().unwrap().starts_with("range "));
    assert!(!r["range_table"].as_array().unwrap().is_empty());
}

#[test]
fn alloc_and_lock_reports_with_a_base_render_the_diff() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let t5 = dir.path().join("r5.pb.zst");
    let t10 = dir.path().join("r10.pb.zst");
    common::record_to(&t5, "alloc_workload", &["--alloc=4096"], &["--rounds", "5"]);
    common::record_to(
        &t10,
        "alloc_workload",
        &["--alloc=4096"],
        &["--rounds", "10"],
    );
    let html = dir.path().join("diff.html");
    report(&t10, &html, &["--base", t5.to_str().unwrap()]);
    let Some(modules) = common::playwright() else {
        return;
    };
    let v = browse(
        &modules,
        &html,
        "alloc-diff",
        &[("FRAME", "Warehouse::restock")],
    );
    let names = strs(&v["flame"]["alloc"]["names"]);
    for f in ["Warehouse::restock", "make_table", "leak_some"] {
        assert!(names.iter().any(|n| starts_fn(n, f)), "{f}: {names:?}");
    }
    let panel = &v["panel"];
    assert!(
        panel["frames"].as_array().unwrap().iter().any(|f| {
            starts_fn(f["fn"].as_str().unwrap(), "Warehouse::restock")
                && f["loc"]
                    .as_str()
                    .is_some_and(|l| l.contains("alloc_workload.cpp:"))
        }),
        "{panel}"
    );
    // Leaks: the program's leaking functions.
    let leaks = v["tables"]["leaks"].as_array().unwrap();
    assert!(
        leaks
            .iter()
            .any(|r| r[0].as_str().unwrap().contains("leak_")),
        "{leaks:?}"
    );
    // The differential view: 10 rounds against 5, so the workload's stacks grew (red).
    let d = &v["diff"];
    assert!(d["text"].as_str().unwrap().contains("before"), "{d}");
    assert!(d["red"].as_u64().unwrap() > 0, "{d}");
    assert!(strs(&d["names"])
        .iter()
        .any(|n| starts_fn(n, "Warehouse::restock")));

    // Locks: waiters with the thread that released the lock.
    let t = dir.path().join("lock.pb.zst");
    common::record_to(&t, "lock_workload", &["--lock", "--cpu"], &[]);
    let html = dir.path().join("lock.html");
    report(&t, &html, &[]);
    let v = browse(&modules, &html, "lock", &[("FRAME", "Ledger::post")]);
    let locks = v["tables"]["locks"].as_array().unwrap();
    assert!(
        locks
            .iter()
            .any(|r| r[0].as_str().unwrap().contains("Ledger::post")),
        "{locks:?}"
    );
    assert!(
        locks.iter().any(|r| !r[8].as_str().unwrap().is_empty()),
        "no holder stack: {locks:?}"
    );
    assert!(v["heatmaps"]
        .as_array()
        .unwrap()
        .iter()
        .any(|h| h["kind"] == "lock"));
    assert!(strs(&v["flame"]["lock"]["names"])
        .iter()
        .any(|n| starts_fn(n, "Ledger::post")));
}

/// The heap over time of heap_known (every allocation, `--sample-bytes 1`): the chart has the
/// peak `ebsym heap` reports, and who held it — from the button (the report's rows at the
/// peak) and from a click on the chart at the peak's time — are hold_peak's 8 MiB first and
/// hold_other's 1 MiB next; a holder's row opens its stack.
#[test]
fn heap_over_time_shows_the_peak_and_who_held_it() {
    if !root() {
        return;
    }
    // The program lingers after its peak (its leaks and the runtime's blocks live), so that
    // the chart has bytes live clear of the peak's line however fast it ran: once its
    // whole life fell within the 8 pixels around the peak and no other time could be
    // clicked.
    let rec = common::record(
        "heap_known",
        &[
            "--alloc",
            "--alloc-sampler",
            "preload",
            "--sample-bytes",
            "1",
        ],
        &["--linger-ms", "200"],
    );
    let heap: Value = serde_json::from_slice(
        &run(
            &ebsym_path(),
            &["heap", rec.trace.to_str().unwrap(), "--json"],
        )
        .stdout,
    )
    .unwrap();
    let peak = heap["totals"]["peak_bytes"].as_u64().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("report.html");
    report(&rec.trace, &html, &[]);
    let Some(modules) = common::playwright() else {
        return;
    };
    let v = browse(&modules, &html, "heap", &[]);
    let h = &v["heap"];
    assert!(h.is_object(), "no heap section: {v}");
    assert!(h["drawn"]["series"].as_u64().unwrap() >= 2, "{h}");
    assert!(h["drawn"]["peak_x"].as_f64().is_some(), "{h}");
    let info = h["info"].as_str().unwrap();
    assert!(
        info.contains(&format!("({} bytes)", thousands(peak))),
        "{info}"
    );
    let legend = strs(&h["legend"]);
    assert!(legend.iter().any(|l| l.contains("hold_peak")), "{legend:?}");
    // Who held the peak: the report's rows at that moment, largest first.
    let rows = h["peak"]["rows"].as_array().unwrap();
    let row = |i: usize| strs(&rows[i]);
    assert!(row(0)[0].contains("hold_peak"), "{rows:?}");
    assert_eq!(row(0)[1], "8.0 MiB", "{rows:?}");
    assert!(row(1)[0].contains("hold_other"), "{rows:?}");
    assert_eq!(row(1)[1], "1.0 MiB", "{rows:?}");
    // A click on the chart at the peak's line: the same.
    assert_eq!(h["at_peak"]["what"], "peak", "{h}");
    assert_eq!(h["at_peak"]["rows"], h["peak"]["rows"], "{h}");
    // A click at another time (the last one with bytes live, off the peak's line): the
    // stacks holding them at that bucket's end.
    let at_end = &h["at_end"];
    assert_eq!(
        at_end["what"],
        format!("bucket {}", at_end["bucket"]),
        "{h}"
    );
    let end = at_end["rows"].as_array().unwrap();
    assert_eq!(
        end.len() as u64,
        at_end["holders"].as_u64().unwrap(),
        "{at_end}"
    );
    assert!(!end.is_empty(), "{at_end}");
    // The chart's bytes then are what the holders hold (heap_known has fewer than 10
    // stacks live at once).
    assert_eq!(at_end["held"], at_end["total"], "{at_end}");
    let total = at_end["total"].as_u64().unwrap();
    assert!(
        at_end["title"]
            .as_str()
            .unwrap()
            .contains(&format!(": {} (", human(total))),
        "{at_end}"
    );
    let panel = strs(&h["panel"]);
    assert!(panel.iter().any(|f| starts_fn(f, "hold_peak")), "{panel:?}");
}

/// Bytes as the page prints them (fmtBytes).
fn human(b: u64) -> String {
    let u = ["B", "KiB", "MiB", "GiB"];
    let (mut v, mut i) = (b as f64, 0);
    while v >= 1024.0 && i < u.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", u[i])
    }
}

/// `n` with thousands separators, as the page prints counts.
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A trace recorded with --request: the page's Requests section shows what `ebsym requests`
/// says: every request counted and split by the kernel, the lock wait first in what the
/// tail spends more on (a mutex a thread named "holder" holds for 20 ms, testdata's
/// request_server), the slowest one by one; the slowest clicked names its cause and the
/// holder that woke it.
#[test]
fn requests_section_shows_the_slow_requests_causes() {
    if !root() {
        return;
    }
    let rec = common::record(
        "request_server",
        &[
            "--request",
            "usdt:rsrv:request__start,request__done",
            "--cpu=999",
            "--offcpu=100",
            "--runq=1000",
        ],
        &["--requests", "800"],
    );
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("report.html");
    report(&rec.trace, &html, &[]);
    let Some(modules) = common::playwright() else {
        return;
    };
    let v = browse(&modules, &html, "requests", &[]);
    let r = &v["requests_section"];
    let latency = r["latency"].as_str().unwrap();
    assert!(
        latency.starts_with("800 requests (usdt:rsrv:request__start,request__done): p50 "),
        "{r:#}"
    );
    let parts: Vec<&str> = r["split"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["part"].as_str().unwrap())
        .collect();
    assert!(
        parts.contains(&"on CPU") && parts.contains(&"off CPU: interruptible"),
        "{r:#}"
    );
    let tail = r["tail"].as_array().unwrap();
    assert_eq!(tail[0][0], "off CPU: lock", "{r:#}");
    assert!(
        tail[0][4]
            .as_str()
            .unwrap()
            .starts_with("rsrv::wait_for_ledger"),
        "{r:#}"
    );
    let slowest = r["slowest"].as_array().unwrap();
    assert_eq!(slowest.len(), 10, "{r:#}");
    assert!(
        slowest[0][5].as_str().unwrap().starts_with("off CPU: lock"),
        "{r:#}"
    );
    let clicked = &r["clicked"];
    assert_eq!(clicked["visible"], true, "{clicked:#}");
    let parts = strs(&clicked["parts"]);
    assert!(
        parts
            .iter()
            .any(|p| p.contains("off CPU: lock") && p.contains("rsrv::wait_for_ledger")),
        "{parts:?}"
    );
    assert!(
        parts
            .iter()
            .any(|p| p.contains("woken by holder in rsrv::holder_loop")
                || p.contains("woken by worker-")),
        "{parts:?}"
    );
}
