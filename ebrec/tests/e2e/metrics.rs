//! `ebrec agent --metrics`: the registry's text format (checked by Debian's `promtool check
//! metrics`), the histograms a window trace gives (a synthetic trace with known events and
//! kernel histogram rows), the HTTP server, the Grafana dashboard (JSON, and every metric it
//! queries is one the registry renders), and end to end as root: `ebrec agent` on two
//! testdata programs, scraped by a real `prometheus`, the values read back through its
//! query API and compared with the programs' known calls and with ebsym on the agent's
//! window files.
//!
//! The registry and the window reader are ebtrace-agent's.

use crate::common;
use ebtrace_agent::{latency, metrics};

use common::{ebsym_json, root, start_waiting};
use ebtrace_format::events::{FuncEvent, LockEvent, OffCpuEvent, SyscallEvent};
use ebtrace_format::proto::{FamilyStats, ProgramStats};
use ebtrace_format::{TraceWriter, WriterOptions};
use ebtrace_proto::v1::{self as pb, record::Kind, Record};
use metrics::Metrics;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

// ---------- helpers ----------

/// A tool of Debian's `prometheus` package; None (skipping loudly) when it is missing, a
/// failure when CI=true (scripts/setup test installs it).
fn tool(name: &str) -> Option<PathBuf> {
    for dir in std::env::var("PATH").unwrap_or_default().split(':') {
        let p = Path::new(dir).join(name);
        if p.is_file() {
            return Some(p);
        }
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!(
            "{name} is not installed (Debian package prometheus; scripts/setup test), and CI=true"
        );
    }
    eprintln!(
        "\n*** SKIPPED: {name} not found (apt-get install prometheus; scripts/setup test) ***\n"
    );
    None
}

/// The samples of a rendered page: `name{labels}` -> value.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            let v = match v {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                v => v.parse().unwrap(),
            };
            (k.to_string(), v)
        })
        .collect()
}

fn get(s: &BTreeMap<String, f64>, key: &str) -> f64 {
    *s.get(key).unwrap_or_else(|| {
        panic!(
            "no sample {key}; have:\n{}",
            s.keys().cloned().collect::<Vec<_>>().join("\n")
        )
    })
}

fn rec(k: Kind) -> Record {
    Record { kind: Some(k) }
}

const NANOSLEEP: u64 = 35; // x86_64
const GETPPID: u64 = 110;
const SDA: u32 = 8 << 20;

/// A window trace with known contents:
/// - pid 42, comm `shop"x\y` (a quote and a backslash, escaped in the labels): lock waits
///   of 500 ns, 3000 ns and 1 ms; two calls of 2 ms of `shop::Catalog::slow_lookup(int)`;
///   off-CPU blocks of 5 ms and 20 s (past the last bound: +Inf); the kernel's syscall
///   histograms: 8 nanosleeps in [2^22, 2^23) ns (5 ms each), 100 getppids (60 in
///   [2^9, 2^10), 40 in [2^10, 2^11)); and 2 slow nanosleep events, which the histogram
///   counts already (not added again).
/// - pid 43, comm `worker`: one lock wait of exactly 2^20 ns; the kernel's run-queue
///   histogram: 5 waits in [2^12, 2^13) ns and one in the open-ended last bucket.
/// - block I/O on sda: 3 writes in [2^20, 2^21) ns.
/// - Lost records: lock ringbuf_full 4 (in two records of 1 and 3), syscall unmatched 2.
fn write_window(path: &Path) {
    let opts = WriterOptions {
        chunk_interval: None,
        ..Default::default()
    };
    let header = pb::Header {
        recorder_version: "test".into(),
        hostname: "host".into(),
        arch: "x86_64".into(),
        start_time_ns: 1_000_000_000,
        start_realtime_ns: 1_700_000_000_000_000_000,
        ..Default::default()
    };
    let mut w = TraceWriter::new(Vec::new(), header, opts).unwrap();
    for (generation, pid, comm) in [(1u32, 42u32, &b"shop\"x\\y"[..]), (2, 43, b"worker")] {
        let comm = w.intern_string(comm).unwrap();
        w.write_record(&rec(Kind::Process(pb::Process {
            generation,
            pid,
            comm,
            event: pb::ProcessEvent::Existing as i32,
            time_ns: 1_000_000_000,
            ..Default::default()
        })))
        .unwrap();
    }
    let name = w.intern_string(b"shop::Catalog::slow_lookup(int)").unwrap();
    w.write_record(&rec(Kind::ProbedFunction(pb::ProbedFunction {
        id: 7,
        name,
        ..Default::default()
    })))
    .unwrap();
    w.write_record(&rec(Kind::BlockDevice(pb::BlockDevice {
        dev: SDA,
        major: 8,
        minor: 0,
        name: "sda".into(),
    })))
    .unwrap();
    let stack = w.intern_stack(1, &[0x1000, 0x2000], &[], 0).unwrap();
    let mut t = 1_100_000_000;
    for (generation, wait_ns) in [(1, 500), (1, 3000), (1, 1_000_000), (2, 1 << 20)] {
        t += 1000;
        w.lock(&LockEvent {
            time_ns: t,
            generation,
            tid: 42,
            stack,
            mutex: 0xdead,
            wait_ns,
            ..Default::default()
        })
        .unwrap();
    }
    for _ in 0..2 {
        t += 1000;
        w.func(&FuncEvent {
            time_ns: t,
            generation: 1,
            tid: 42,
            stack,
            function: 7,
            duration_ns: 2_000_000,
            args: vec![],
            ret: 0,
            request: None,
        })
        .unwrap();
    }
    for d in [5_000_000, 20_000_000_000] {
        t += 1000;
        w.offcpu(&OffCpuEvent {
            time_ns: t,
            generation: 1,
            tid: 42,
            stack,
            duration_ns: d,
            ..Default::default()
        })
        .unwrap();
    }
    for _ in 0..2 {
        t += 1000;
        w.syscall(&SyscallEvent {
            time_ns: t,
            generation: 1,
            tid: 42,
            stack,
            nr: NANOSLEEP as u32,
            duration_ns: 5_000_000,
            ret: 0,
            weight_ns: 0,
        })
        .unwrap();
    }
    // (family, generation, key, count, sum, [(bucket, count)])
    type Row<'a> = (pb::EventFamily, u32, u64, u64, u64, &'a [(u32, u64)]);
    let rows: [Row; 5] = [
        (
            pb::EventFamily::Syscall,
            1,
            NANOSLEEP,
            8,
            40_000_000,
            &[(22, 8)],
        ),
        (
            pb::EventFamily::Syscall,
            1,
            GETPPID,
            100,
            100_000,
            &[(9, 60), (10, 40)],
        ),
        (
            pb::EventFamily::Bio,
            1,
            (u64::from(SDA) << 8) | 1,
            3,
            3 << 20,
            &[(20, 3)],
        ),
        (
            pb::EventFamily::Runq,
            2,
            0,
            6,
            5 * 5000 + (1 << 40),
            &[(12, 5), (39, 1)],
        ),
        (pb::EventFamily::Syscall, 1, 9999, 0, 0, &[]),
    ];
    for fam in [
        pb::EventFamily::Syscall,
        pb::EventFamily::Bio,
        pb::EventFamily::Runq,
    ] {
        let mut h = pb::LatencyHistogram {
            time_ns: t + 1_000_000,
            since_ns: 1_000_000_000,
            family: fam as i32,
            ..Default::default()
        };
        for &(f, g, key, count, sum, buckets) in rows.iter().filter(|r| r.0 == fam && r.3 > 0) {
            assert_eq!(f, fam);
            h.generation.push(g);
            h.key.push(key);
            h.count.push(count);
            h.sum_ns.push(sum);
            h.max_ns.push(sum);
            h.nbuckets.push(buckets.len() as u32);
            for &(b, c) in buckets {
                h.bucket.push(b);
                h.bucket_count.push(c);
            }
        }
        w.write_record(&rec(Kind::Histogram(h))).unwrap();
    }
    for (family, reason, count) in [
        (pb::EventFamily::Lock, pb::LossReason::RingbufFull, 1),
        (pb::EventFamily::Lock, pb::LossReason::RingbufFull, 3),
        (pb::EventFamily::Syscall, pb::LossReason::Unmatched, 2),
    ] {
        w.write_record(&rec(Kind::Lost(pb::Lost {
            time_ns: t,
            family: family as i32,
            reason: reason as i32,
            count,
            cpu: 0,
        })))
        .unwrap();
    }
    let bytes = w.finish(Some(pb::Trailer::default())).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// A registry with every metric the agent sets: health, pushes, a window.
fn populated() -> std::sync::Arc<Metrics> {
    let m = Metrics::new();
    let families = [
        FamilyStats {
            family: pb::EventFamily::Lock as i32,
            kept: 120,
            lost: 4,
            filtered: 3,
            hits: 127,
        },
        FamilyStats {
            family: pb::EventFamily::Syscall as i32,
            kept: 10,
            lost: 0,
            filtered: 5000,
            hits: 5010,
        },
    ];
    let programs = [ProgramStats {
        name: "futex_enter".into(),
        run_time_ns: 1_500_000_000,
        run_count: 1000,
        recursion_misses: 0,
    }];
    metrics::health(&m, &families, &programs);
    metrics::ringbuf_fill(&m, "events", 0.25);
    metrics::targets(&m, 2);
    metrics::windows(&m, 5, 1, 2);
    metrics::push_done(&m, "pyroscope", true, 0.05);
    metrics::push_done(&m, "pyroscope", false, 3.0);
    metrics::push_queue(&m, "pyroscope", 1, 2);
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("w.pb.zst");
    write_window(&trace);
    latency::observe_window(&m, &trace).unwrap();
    m
}

// ---------- the registry ----------

#[test]
fn render_is_the_text_format() {
    let m = Metrics::new();
    m.add_counter(
        "ebrec_b_total",
        "B.",
        &[("z", "1"), ("a", "x\"y\\z\nw")],
        2.0,
    );
    m.add_counter(
        "ebrec_b_total",
        "B.",
        &[("a", "x\"y\\z\nw"), ("z", "1")],
        0.5,
    );
    m.set_gauge("ebrec_a", "A with \\ and\nnewline.", &[], 1.5);
    m.set_counter("ebrec_c_total", "C.", &[("k", "v")], 7.0);
    m.set_counter("ebrec_c_total", "C.", &[("k", "v")], 9.0);
    m.observe("ebrec_h_seconds", "H.", &[("p", "1")], &[0.1, 1.0], 0.1);
    m.observe("ebrec_h_seconds", "H.", &[("p", "1")], &[0.1, 1.0], 0.5);
    m.add_histogram(
        "ebrec_h_seconds",
        "H.",
        &[("p", "1")],
        metrics::Observations {
            bounds: &[0.1, 1.0],
            counts: &[1, 0, 2],
            sum: 30.0,
        },
    );
    let want = "\
# HELP ebrec_a A with \\\\ and\\nnewline.
# TYPE ebrec_a gauge
ebrec_a 1.5
# HELP ebrec_b_total B.
# TYPE ebrec_b_total counter
ebrec_b_total{a=\"x\\\"y\\\\z\\nw\",z=\"1\"} 2.5
# HELP ebrec_c_total C.
# TYPE ebrec_c_total counter
ebrec_c_total{k=\"v\"} 9
# HELP ebrec_h_seconds H.
# TYPE ebrec_h_seconds histogram
ebrec_h_seconds_bucket{p=\"1\",le=\"0.1\"} 2
ebrec_h_seconds_bucket{p=\"1\",le=\"1\"} 3
ebrec_h_seconds_bucket{p=\"1\",le=\"+Inf\"} 5
ebrec_h_seconds_sum{p=\"1\"} 30.6
ebrec_h_seconds_count{p=\"1\"} 5
";
    assert_eq!(m.render(), want);
    // Retain: the series of pid 1 go, the family with none left is not rendered.
    m.retain(|l| !l.iter().any(|(k, v)| k == "p" && v == "1"));
    assert!(!m.render().contains("ebrec_h_seconds"), "{}", m.render());
    assert!(m.render().contains("ebrec_a 1.5"));
}

#[test]
fn render_passes_promtool_check_metrics() {
    let Some(promtool) = tool("promtool") else {
        return;
    };
    promtool_check(&promtool, &populated().render());
}

/// `promtool check metrics` on `text`: exit 0 and no lint complaint (promtool prints one
/// per problem, and exits 3).
fn promtool_check(promtool: &Path, text: &str) {
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool: {said}\n{text}"
    );
}

#[test]
fn a_window_trace_fills_the_histograms() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("w.pb.zst");
    write_window(&trace);
    let m = Metrics::new();
    latency::observe_window(&m, &trace).unwrap();
    let s = samples(&m.render());
    let shop = r#"comm="shop\"x\\y",pid="42""#;
    let le = |bucket: u32| {
        let v = (1u64 << bucket) as f64 / 1e9;
        format!("{v}")
    };
    // Lock waits: 500 and 3000 ns, 1 ms; pid 43: 2^20 ns exactly (le 2^20: `<=`).
    let lock = |labels: &str, le: &str| {
        get(
            &s,
            &format!("ebrec_lock_wait_seconds_bucket{{{labels},le=\"{le}\"}}"),
        )
    };
    assert_eq!(lock(shop, &le(10)), 1.0);
    assert_eq!(lock(shop, &le(11)), 1.0);
    assert_eq!(lock(shop, &le(12)), 2.0);
    assert_eq!(lock(shop, &le(19)), 2.0);
    assert_eq!(lock(shop, &le(20)), 3.0);
    assert_eq!(lock(shop, "+Inf"), 3.0);
    assert_eq!(
        get(&s, &format!("ebrec_lock_wait_seconds_count{{{shop}}}")),
        3.0
    );
    assert!((get(&s, &format!("ebrec_lock_wait_seconds_sum{{{shop}}}")) - 0.0010035).abs() < 1e-12);
    let worker = r#"comm="worker",pid="43""#;
    assert_eq!(lock(worker, &le(19)), 0.0);
    assert_eq!(lock(worker, &le(20)), 1.0);
    // Function calls, named.
    // Labels sorted by name.
    let f = r#"comm="shop\"x\\y",function="shop::Catalog::slow_lookup(int)",pid="42""#;
    assert_eq!(
        get(&s, &format!("ebrec_func_latency_seconds_count{{{f}}}")),
        2.0
    );
    assert_eq!(
        get(
            &s,
            &format!("ebrec_func_latency_seconds_bucket{{{f},le=\"{}\"}}", le(20))
        ),
        0.0
    );
    assert_eq!(
        get(
            &s,
            &format!("ebrec_func_latency_seconds_bucket{{{f},le=\"{}\"}}", le(21))
        ),
        2.0
    );
    // Off-CPU: 5 ms, and 20 s past the last bound (2^34 ns).
    let off = |le: &str| {
        get(
            &s,
            &format!("ebrec_offcpu_seconds_bucket{{{shop},le=\"{le}\"}}"),
        )
    };
    assert_eq!(off(&le(34)), 1.0);
    assert_eq!(off("+Inf"), 2.0);
    assert!((get(&s, &format!("ebrec_offcpu_seconds_sum{{{shop}}}")) - 20.005).abs() < 1e-9);
    // Syscalls from the kernel's rows only (the 2 slow events are among the 8).
    let sys = |name: &str, le: &str| {
        get(
            &s,
            &format!(
                "ebrec_syscall_latency_seconds_bucket{{{shop},syscall=\"{name}\",le=\"{le}\"}}"
            ),
        )
    };
    assert_eq!(
        get(
            &s,
            &format!("ebrec_syscall_latency_seconds_count{{{shop},syscall=\"nanosleep\"}}")
        ),
        8.0
    );
    assert_eq!(sys("nanosleep", &le(22)), 0.0);
    assert_eq!(sys("nanosleep", &le(23)), 8.0);
    assert!(
        (get(
            &s,
            &format!("ebrec_syscall_latency_seconds_sum{{{shop},syscall=\"nanosleep\"}}")
        ) - 0.04)
            .abs()
            < 1e-12
    );
    assert_eq!(sys("getppid", &le(10)), 60.0);
    assert_eq!(sys("getppid", &le(11)), 100.0);
    // Block I/O by device and op; run-queue waits, the kernel's last bucket in +Inf.
    assert_eq!(
        get(
            &s,
            &format!(
                "ebrec_bio_latency_seconds_bucket{{device=\"sda\",op=\"write\",le=\"{}\"}}",
                le(20)
            )
        ),
        0.0
    );
    assert_eq!(
        get(
            &s,
            &format!(
                "ebrec_bio_latency_seconds_bucket{{device=\"sda\",op=\"write\",le=\"{}\"}}",
                le(21)
            )
        ),
        3.0
    );
    assert_eq!(
        get(
            &s,
            &format!(
                "ebrec_runq_latency_seconds_bucket{{{worker},le=\"{}\"}}",
                le(13)
            )
        ),
        5.0
    );
    assert_eq!(
        get(
            &s,
            &format!(
                "ebrec_runq_latency_seconds_bucket{{{worker},le=\"{}\"}}",
                le(34)
            )
        ),
        5.0
    );
    assert_eq!(
        get(&s, &format!("ebrec_runq_latency_seconds_count{{{worker}}}")),
        6.0
    );
    // Losses by family and reason; one window.
    assert_eq!(
        get(
            &s,
            r#"ebrec_lost_events_total{family="lock",reason="ringbuf_full"}"#
        ),
        4.0
    );
    assert_eq!(
        get(
            &s,
            r#"ebrec_lost_events_total{family="syscall",reason="unmatched"}"#
        ),
        2.0
    );
    // Cumulative: a second window adds.
    latency::observe_window(&m, &trace).unwrap();
    let s = samples(&m.render());
    assert_eq!(
        get(
            &s,
            &format!("ebrec_syscall_latency_seconds_count{{{shop},syscall=\"nanosleep\"}}")
        ),
        16.0
    );
    assert_eq!(
        get(
            &s,
            r#"ebrec_lost_events_total{family="lock",reason="ringbuf_full"}"#
        ),
        8.0
    );
    // A file that is no trace: an error naming it.
    let bad = dir.path().join("bad.pb.zst");
    std::fs::write(&bad, b"not a trace").unwrap();
    let e = latency::observe_window(&m, &bad).unwrap_err().to_string();
    assert!(e.contains("bad.pb.zst"), "{e}");
}

#[test]
fn health_metrics() {
    let s = samples(&populated().render());
    assert_eq!(get(&s, r#"ebrec_events_total{family="lock"}"#), 120.0);
    assert_eq!(
        get(&s, r#"ebrec_probe_hits_total{family="syscall"}"#),
        5010.0
    );
    assert_eq!(
        get(&s, r#"ebrec_filtered_events_total{family="syscall"}"#),
        5000.0
    );
    assert_eq!(
        get(&s, r#"ebrec_bpf_run_seconds_total{program="futex_enter"}"#),
        1.5
    );
    assert_eq!(
        get(&s, r#"ebrec_bpf_runs_total{program="futex_enter"}"#),
        1000.0
    );
    assert!(get(&s, "ebrec_cpu_seconds_total") > 0.0);
    let rss = get(&s, "ebrec_rss_bytes");
    assert!(rss > 1e6 && rss < 1e11, "{rss}");
    assert_eq!(
        get(&s, r#"ebrec_ringbuf_fill_ratio{ringbuf="events"}"#),
        0.25
    );
    assert_eq!(get(&s, "ebrec_targets"), 2.0);
    assert_eq!(
        get(&s, r#"ebrec_pushes_total{backend="pyroscope",result="ok"}"#),
        1.0
    );
    assert_eq!(
        get(
            &s,
            r#"ebrec_pushes_total{backend="pyroscope",result="error"}"#
        ),
        1.0
    );
    assert_eq!(
        get(
            &s,
            r#"ebrec_push_duration_seconds_count{backend="pyroscope"}"#
        ),
        2.0
    );
    assert_eq!(
        get(
            &s,
            r#"ebrec_push_duration_seconds_bucket{backend="pyroscope",le="0.08"}"#
        ),
        1.0
    );
    assert_eq!(
        get(&s, r#"ebrec_push_queue_length{backend="pyroscope"}"#),
        1.0
    );
    assert_eq!(
        get(&s, r#"ebrec_push_dropped_total{backend="pyroscope"}"#),
        2.0
    );
}

/// `GET path` over HTTP/1.0: (status code, body).
fn http_get(addr: &str, path: &str) -> std::io::Result<(u32, String)> {
    let mut c = std::net::TcpStream::connect(addr)?;
    c.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(c, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut buf = Vec::new();
    c.read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((code, body.to_string()))
}

#[test]
fn the_server_serves_metrics_and_says_when_the_address_is_taken() {
    let m = populated();
    let addr = m.serve("127.0.0.1:0").unwrap().to_string();
    let (code, body) = http_get(&addr, "/metrics").unwrap();
    assert_eq!(code, 200);
    assert_eq!(body, m.render());
    let (code, body) = http_get(&addr, "/").unwrap();
    assert_eq!(code, 200);
    assert!(body.contains("href=\"/metrics\""), "{body}");
    assert_eq!(http_get(&addr, "/nope").unwrap().0, 404);
    // Many scrapes at once.
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let a = addr.clone();
            std::thread::spawn(move || http_get(&a, "/metrics?x=1").unwrap().0)
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), 200);
    }
    // A client that never sends its request does not stop the others.
    let _stuck = std::net::TcpStream::connect(&addr).unwrap();
    assert_eq!(http_get(&addr, "/metrics").unwrap().0, 200);
    let e = m.serve(&addr).unwrap_err().to_string();
    assert!(
        e.contains("already in use") && e.contains(&addr) && !e.contains('\n'),
        "{e}"
    );
    let e = m.serve("no-such-host.invalid:x").unwrap_err().to_string();
    assert!(e.contains("--metrics"), "{e}");
}

// ---------- the Grafana dashboard ----------

/// Every `ebrec_…` name in a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let b = expr.as_bytes();
    let mut i = 0;
    while let Some(at) = expr[i..].find("ebrec_") {
        let start = i + at;
        let mut end = start;
        while end < b.len() && (b[end].is_ascii_alphanumeric() || b[end] == b'_') {
            end += 1;
        }
        out.push(expr[start..end].to_string());
        i = end;
    }
    out
}

fn exprs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(o) => {
            for (k, x) in o {
                match (k.as_str(), x) {
                    ("expr", Value::String(s)) => out.push(s.clone()),
                    _ => exprs(x, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| exprs(x, out)),
        _ => {}
    }
}

#[test]
fn the_grafana_dashboard_queries_metrics_that_exist() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/grafana-dashboard.json");
    let d: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: not JSON: {e}", path.display()));
    assert!(d["schemaVersion"].as_u64().unwrap() >= 36);
    assert!(
        d["__inputs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["name"] == "DS_PROMETHEUS" && i["pluginId"] == "prometheus"),
        "no DS_PROMETHEUS input"
    );
    let rendered = populated().render();
    let names: std::collections::BTreeSet<&str> = rendered
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(['{', ' ']).next().unwrap())
        .collect();
    let mut all = Vec::new();
    exprs(&d, &mut all);
    assert!(all.len() >= 15, "{} queries", all.len());
    let mut used = std::collections::BTreeSet::new();
    for e in &all {
        let ns = metric_names(e);
        assert!(!ns.is_empty(), "a query of no ebrec metric: {e}");
        for n in ns {
            assert!(
                names.contains(n.as_str()),
                "the dashboard queries {n}, which ebrec does not export: {e}"
            );
            used.insert(n);
        }
    }
    // Every panel has a datasource of the input, and the families the brief asks for.
    for want in [
        "ebrec_events_total",
        "ebrec_lost_events_total",
        "ebrec_ringbuf_fill_ratio",
        "ebrec_cpu_seconds_total",
        "ebrec_rss_bytes",
        "ebrec_pushes_total",
        "ebrec_push_dropped_total",
        "ebrec_push_duration_seconds_bucket",
        "ebrec_lock_wait_seconds_bucket",
        "ebrec_syscall_latency_seconds_bucket",
        "ebrec_runq_latency_seconds_bucket",
        "ebrec_offcpu_seconds_bucket",
        "ebrec_func_latency_seconds_bucket",
    ] {
        assert!(used.contains(want), "no panel shows {want}");
    }
    for p in d["panels"].as_array().unwrap() {
        if p["type"] != "row" {
            assert_eq!(p["datasource"]["uid"], "${DS_PROMETHEUS}", "{}", p["title"]);
        }
    }
}

// ---------- end to end: ebrec agent, scraped by prometheus ----------

/// A free TCP port on 127.0.0.1.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Kills and reaps a child when dropped (a failed assertion leaves nothing running).
struct Reaped(Child);
impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An instant query's single value (None: no series; panics on several).
fn prom_value(prom: &str, q: &str) -> Option<f64> {
    let (code, body) = http_get(prom, &format!("/api/v1/query?query={}", urlencode(q))).ok()?;
    assert_eq!(code, 200, "{q}: {body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"], "success", "{q}: {body}");
    let r = v["data"]["result"].as_array().unwrap();
    assert!(r.len() <= 1, "{q}: several series: {body}");
    r.first()
        .map(|s| s["value"][1].as_str().unwrap().parse().unwrap())
}

/// `ebsym latency --kind syscall` per closed window: (file, calls of `syscall` by `pid`).
fn per_window(dir: &Path, output: &Path, pid: u32, syscall: &str) -> Vec<(String, u64)> {
    closed_windows(dir, output)
        .iter()
        .map(|w| {
            let v = ebsym_json(&[
                "latency",
                w.to_str().unwrap(),
                "--kind",
                "syscall",
                "--pid",
                &pid.to_string(),
                "-n",
                "1000",
            ]);
            let n = v["rows"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| r["name"] == syscall)
                .map(|r| r["count"].as_u64().unwrap())
                .sum();
            (w.file_name().unwrap().to_string_lossy().into_owned(), n)
        })
        .collect()
}

/// An instant query's whole answer, for the messages.
fn prom_raw(prom: &str, q: &str) -> String {
    http_get(prom, &format!("/api/v1/query?query={}", urlencode(q)))
        .map(|r| r.1)
        .unwrap_or_else(|e| e.to_string())
}

/// Polls `f` until it returns Some, for at most `secs`.
fn wait_for<T>(secs: u64, what: impl Fn() -> String, mut f: impl FnMut() -> Option<T>) -> T {
    let t = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            t.elapsed() < Duration::from_secs(secs),
            "timed out waiting for {}",
            what()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The window files the agent closed in `dir` (not OUTPUT, the open one).
fn closed_windows(dir: &Path, output: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p != output && p.to_string_lossy().ends_with(".pb.zst"))
        .collect();
    v.sort();
    v
}

/// Where the scraped metrics come from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Served {
    /// `ebrec agent --metrics ADDR` itself.
    ByAgent,
    /// This test: the agent writes its windows (no --metrics), the test reads each closed
    /// one with `latency::observe_window` and serves the registry with `Metrics::serve`.
    ByTest,
}

#[test]
fn agent_metrics_scraped_by_prometheus_match_the_programs_and_ebsym() {
    end_to_end(Served::ByAgent);
}

#[test]
fn agent_windows_read_by_the_registry_scraped_by_prometheus() {
    end_to_end(Served::ByTest);
}

/// ebrec agent on lock_workload (4 threads contending) and syscalls (8 nanosleeps of 5 ms,
/// 3000 getppids), 1 s windows; Prometheus scrapes every second; the values read back with
/// its query API.
fn end_to_end(served: Served) {
    if !root() {
        return;
    }
    let Some(prometheus) = tool("prometheus") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("agent.pb.zst");
    let (agent_port, prom_port) = (free_port(), free_port());
    let metrics_addr = format!("127.0.0.1:{agent_port}");
    let prom_addr = format!("127.0.0.1:{prom_port}");

    let lock = start_waiting(
        "lock_workload",
        &["--threads", "4", "--iters", "25", "--hold-us", "1000"],
    );
    let sys = start_waiting(
        "syscalls",
        &["--fast", "3000", "--sleeps", "8", "--sleep-ms", "5"],
    );
    let (lock_pid, lock_comm) = (lock.pid, lock.comm());
    let (sys_pid, sys_comm) = (sys.pid, sys.comm());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ebrec"));
    cmd.args(["agent", "--window", "1", "--keep", "1000"]);
    match served {
        // Targets by comm: the agent goes on after they exit (with -p it would stop with
        // them, and its metrics with it, maybe before the last scrape).
        Served::ByAgent => cmd
            .args(["--metrics", &metrics_addr])
            .args(["--comm", &format!("^({sys_comm}|{lock_comm})$")]),
        Served::ByTest => cmd.args(["-p", &lock_pid.to_string(), "-p", &sys_pid.to_string()]),
    };
    let mut agent = cmd
        // every off-CPU block (the 5 ms naps are under --offcpu-sample's 10 ms unit: a
        // sample of them would make the count below a random one)
        .args([
            "--lock",
            "--offcpu",
            "--offcpu-sample=0",
            "--syscalls",
            "--duration",
            "120",
        ])
        .arg("-o")
        .arg(&output)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let agent_err = agent.stderr.take().unwrap();
    let agent = Reaped(agent);
    // The agent's stderr, kept for the failure messages.
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let log2 = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(agent_err).lines().map_while(Result::ok) {
            let mut l = log2.lock().unwrap();
            l.push_str(&line);
            l.push('\n');
        }
    });
    let agent_log = || log.lock().unwrap().clone();
    wait_for(
        30,
        || "ebrec agent to record".to_string(),
        || {
            let l = agent_log();
            assert!(!l.contains("Error:"), "ebrec agent: {l}");
            l.contains("ebrec: recording").then_some(())
        },
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut reader = None;
    match served {
        Served::ByAgent => {
            let t = Instant::now();
            while http_get(&metrics_addr, "/metrics").is_err() {
                assert!(
                    t.elapsed() < Duration::from_secs(10),
                    "ebrec agent records but serves no metrics on {metrics_addr} (--metrics not wired?): {}",
                    agent_log()
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Served::ByTest => {
            let m = Metrics::new();
            m.serve(&metrics_addr).unwrap();
            let (d, out, stop) = (dir.path().to_path_buf(), output.clone(), stop.clone());
            reader = Some(std::thread::spawn(move || {
                let mut seen = std::collections::BTreeSet::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for w in closed_windows(&d, &out) {
                        if seen.insert(w.clone()) {
                            latency::observe_window(&m, &w).unwrap();
                        }
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
            }));
        }
    }

    let cfg = dir.path().join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: ebrec\n    static_configs:\n      - targets: ['{metrics_addr}']\n"
        ),
    )
    .unwrap();
    let prom_log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
    let _prom = Reaped(
        Command::new(prometheus)
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("tsdb").display()
            ))
            .arg(format!("--web.listen-address={prom_addr}"))
            .stdout(Stdio::null())
            .stderr(prom_log)
            .spawn()
            .unwrap(),
    );
    let prom_log =
        || std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default();
    wait_for(
        60,
        || "prometheus to be ready".to_string(),
        || matches!(http_get(&prom_addr, "/-/ready"), Ok((200, _))).then_some(()),
    );
    // Scraping: the target is up.
    let t = Instant::now();
    while prom_value(&prom_addr, "up{job=\"ebrec\"}") != Some(1.0) {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "prometheus does not scrape {metrics_addr}: {}",
            prom_log()
        );
        std::thread::sleep(Duration::from_millis(250));
    }

    let _ = lock.finish("lock_workload");
    let sys_expect = sys.finish("syscalls");
    let sleeps = sys_expect["sleeps"].as_u64().unwrap();
    assert_eq!(sleeps, 8);

    // Every nanosleep of the program, counted by the kernel, as Prometheus scraped it.
    let q = format!(
        "sum(ebrec_syscall_latency_seconds_count{{pid=\"{sys_pid}\",syscall=\"nanosleep\"}})"
    );
    let got = wait_for(
        60,
        || "the nanosleeps in prometheus".to_string(),
        || prom_value(&prom_addr, &q).filter(|&v| v >= sleeps as f64),
    );
    assert_eq!(
        got,
        sleeps as f64,
        "{q}: windows {:?}: {}",
        per_window(dir.path(), &output, sys_pid, "nanosleep"),
        prom_raw(
            &prom_addr,
            &format!("ebrec_syscall_latency_seconds_count{{pid=\"{sys_pid}\"}}")
        )
    );
    // The 5 ms sleeps: none at or under 2^22 ns (4.2 ms; a loaded host may make some
    // longer than 2^23 ns), every one in +Inf.
    let le = |b: u32| {
        format!(
            "sum(ebrec_syscall_latency_seconds_bucket{{pid=\"{sys_pid}\",syscall=\"nanosleep\",le=\"{}\"}})",
            (1u64 << b) as f64 / 1e9
        )
    };
    assert_eq!(prom_value(&prom_addr, &le(22)), Some(0.0), "{}", le(22));
    let inf = format!(
        "sum(ebrec_syscall_latency_seconds_bucket{{pid=\"{sys_pid}\",syscall=\"nanosleep\",le=\"+Inf\"}})"
    );
    assert_eq!(prom_value(&prom_addr, &inf), Some(sleeps as f64), "{inf}");
    let q_get = format!(
        "sum(ebrec_syscall_latency_seconds_count{{pid=\"{sys_pid}\",syscall=\"getppid\"}})"
    );
    let getppid = wait_for(
        30,
        || "the getppids".to_string(),
        || prom_value(&prom_addr, &q_get).filter(|&v| v >= 3000.0),
    );
    assert_eq!(getppid, 3000.0, "{q_get}");
    // comm from the trace's Process records.
    let q_comm = format!(
        "count(ebrec_syscall_latency_seconds_count{{pid=\"{sys_pid}\",comm=\"{sys_comm}\"}})"
    );
    assert!(
        prom_value(&prom_addr, &q_comm).unwrap_or(0.0) >= 2.0,
        "{q_comm}: {}",
        prom_raw(
            &prom_addr,
            &format!("ebrec_syscall_latency_seconds_count{{pid=\"{sys_pid}\"}}")
        )
    );

    // The lock waits: their count equals what ebsym counts on the windows the agent
    // closed (polled: the last waits may be in a window not closed, or not scraped, yet).
    let lock_q =
        format!("sum(ebrec_lock_wait_seconds_count{{pid=\"{lock_pid}\",comm=\"{lock_comm}\"}})");
    let last = std::cell::Cell::new((0.0, 0u64));
    let what = || {
        format!(
            "the lock waits in prometheus to match ebsym: (prometheus, ebsym) {:?}; agent: {}",
            last.get(),
            agent_log()
        )
    };
    let (_, waits) = wait_for(60, what, || {
        let mut n = 0;
        for w in closed_windows(dir.path(), &output) {
            let v = ebsym_json(&[
                "locks",
                w.to_str().unwrap(),
                "--pid",
                &lock_pid.to_string(),
                "-n",
                "100000",
            ]);
            n += v["totals"]["count"].as_u64().unwrap_or_else(|| {
                v["rows"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| r["count"].as_u64().unwrap())
                    .sum()
            });
        }
        let p = prom_value(&prom_addr, &lock_q).unwrap_or(0.0);
        last.set((p, n));
        (n > 0 && p == n as f64).then_some((p, n))
    });
    assert!(waits > 0);
    // Off-CPU blocks: the nanosleeps at least (5 ms, over the 100 us threshold), but one:
    // on a loaded 2-CPU machine the off-CPU family misses a block now and then, uncounted
    // (a known defect, docs/kernels.md: 1-3 naps in 800).
    let q_off = format!("sum(ebrec_offcpu_seconds_count{{pid=\"{sys_pid}\"}})");
    // Polled, as the lock waits above: the last window may not be closed or scraped yet.
    wait_for(
        30,
        || {
            format!(
                "{q_off} >= {} of {sleeps}; agent: {}",
                sleeps - 1,
                agent_log()
            )
        },
        || prom_value(&prom_addr, &q_off).filter(|&v| v >= (sleeps - 1) as f64),
    );

    if served == Served::ByAgent {
        // The agent's health: its windows, events, CPU and RSS.
        assert!(prom_value(&prom_addr, "ebrec_windows_total").unwrap_or(0.0) >= 1.0);
        // The agent's own page, as promtool reads it.
        if let Some(promtool) = tool("promtool") {
            let (code, page) = http_get(&metrics_addr, "/metrics").unwrap();
            assert_eq!(code, 200);
            promtool_check(&promtool, &page);
        }
        let events = prom_value(&prom_addr, "sum(ebrec_events_total{family=\"lock\"})");
        assert!(
            events.unwrap_or(0.0) >= waits as f64,
            "ebrec_events_total{{family=\"lock\"}} {events:?} < {waits} waits"
        );
        // One fill gauge per ring buffer: --lock's, --offcpu's (profile.bpf.c),
        // --syscalls' (system.bpf.c) and the hub's (thread renames), nothing else.
        assert_eq!(
            prom_value(&prom_addr, "count(ebrec_ringbuf_fill_ratio)"),
            Some(4.0)
        );
        for ring in ["lock", "profile", "system", "hub"] {
            let q = format!("ebrec_ringbuf_fill_ratio{{ringbuf=\"{ring}\"}}");
            let v = prom_value(&prom_addr, &q);
            assert!(v.is_some_and(|v| (0.0..=1.0).contains(&v)), "{q}: {v:?}");
        }
        assert!(prom_value(&prom_addr, "ebrec_rss_bytes").unwrap_or(0.0) > 1e6);
        assert!(prom_value(&prom_addr, "ebrec_cpu_seconds_total").unwrap_or(0.0) > 0.0);
    }
    // Every query of the Grafana dashboard is PromQL this Prometheus accepts, with the
    // dashboard's variables as Grafana expands them.
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/grafana-dashboard.json");
    let d: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut all = Vec::new();
    exprs(&d, &mut all);
    for e in &all {
        let q = e
            .replace("$__rate_interval", "1m")
            .replace("$instance", ".*")
            .replace("$comm", ".*");
        let (code, body) = http_get(
            &prom_addr,
            &format!("/api/v1/query?query={}", urlencode(&q)),
        )
        .unwrap();
        assert!(
            code == 200 && body.contains("\"status\":\"success\""),
            "dashboard query {q}: {body}"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(r) = reader {
        r.join().unwrap();
    }
    drop(agent);
}

/// `ebrec agent --bpf-stats --alloc`: the agent exports what the BPF stats do not see, the
/// uprobe trap around each run of the allocator's programs, as those runs times one trap
/// timed here (`ebrec_bpf_unseen_seconds_total{kind="uprobe_traps"}`), beside their run time.
#[test]
fn agent_exports_the_uprobe_traps_the_bpf_stats_do_not_see() {
    if !root() {
        return;
    }
    let w = start_waiting("sampled_heap", &["--churn", "200000"]);
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let agent = Command::new(env!("CARGO_BIN_EXE_ebrec"))
        .args(["agent", "--window", "1", "--bpf-stats", "--alloc=4096"])
        // by comm: with -p the agent stops when its target exits, maybe before the scrape
        .args([
            "--metrics",
            &addr,
            "--comm",
            &format!("^{}$", w.comm()),
            "--duration",
            "60",
        ])
        .arg("-o")
        .arg(dir.path().join("a.pb.zst"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut agent = Reaped(agent);
    let mut err = BufReader::new(agent.0.stderr.take().unwrap());
    let mut log = String::new();
    loop {
        let mut l = String::new();
        assert!(
            err.read_line(&mut l).unwrap() > 0,
            "ebrec agent ended: {log}"
        );
        log.push_str(&l);
        if l.contains("ebrec: recording") {
            break;
        }
    }
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    // The workload found and probed before it runs.
    wait_for(
        30,
        || "the agent's target".to_string(),
        || {
            let s = samples(&http_get(&addr, "/metrics").ok()?.1);
            (s.get("ebrec_targets").copied()? >= 1.0).then_some(())
        },
    );
    w.go();
    // The workload's calls: 200,000 small and 20,000 medium allocations and their frees.
    let s = wait_for(
        30,
        || format!("the allocator's runs in the metrics: {log}"),
        || {
            let s = samples(&http_get(&addr, "/metrics").ok()?.1);
            let runs = s
                .get(r#"ebrec_bpf_runs_total{program="alloc_session"}"#)
                .or_else(|| s.get(r#"ebrec_bpf_runs_total{program="malloc_enter"}"#))
                .copied()?;
            let traps = s
                .get(r#"ebrec_bpf_unseen_seconds_total{kind="uprobe_traps"}"#)
                .copied()?;
            (runs >= 200_000.0 && traps > 0.0).then_some(s)
        },
    );
    let runs: f64 = s
        .iter()
        .filter(|(k, _)| k.starts_with("ebrec_bpf_runs_total{"))
        .map(|(_, v)| v)
        .sum();
    let traps = get(&s, r#"ebrec_bpf_unseen_seconds_total{kind="uprobe_traps"}"#);
    // At least one trap a uprobe program's run, at 50 ns to 100 us a trap (the tracepoint
    // programs' runs, fork and exit, are few here).
    let per_run = traps * 1e9 / runs;
    assert!(
        (50.0..100_000.0).contains(&per_run),
        "{per_run} ns a run: {s:?}"
    );
    assert!(
        get(
            &s,
            r#"ebrec_bpf_unseen_seconds_total{kind="tracepoint_dispatch"}"#
        ) >= 0.0,
        "{s:?}"
    );
}
