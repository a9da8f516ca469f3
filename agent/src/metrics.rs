//! `ebrec agent --metrics ADDR`: a registry of gauges, counters and histograms, rendered in
//! the Prometheus text exposition format 0.0.4 and served over HTTP (`GET /metrics`).
//!
//! Why hand-written and not the `prometheus-client` crate: that crate encodes OpenMetrics
//! only (a counter family `x` with samples `x_total`, `x_created`, `# UNIT`, `# EOF`), which
//! Prometheus scrapes, but which `promtool check metrics` of Debian 12's prometheus (2.42)
//! rejects (it reads the 0.0.4 text format: each `_total` sample is a family of its own with
//! no help, exit 3; measured). Its histograms cannot take a whole kernel log2 histogram at
//! once (only one `observe` per value: the kernel counts millions of calls per window), its
//! counters cannot be set to an absolute value (the BPF counters are cumulative), and its
//! label families cannot be iterated to drop the series of processes gone (`retain`). The
//! 0.0.4 format is a page of rules (HELP/TYPE once per family, escaping, `_bucket{le}`
//! cumulative with `+Inf`, `_sum`, `_count`), which this module keeps, and
//! ebrec/tests/e2e/metrics.rs checks the output with promtool and a real Prometheus scrape.
//!
//! Metric and label names are sanitized (anything outside `[a-zA-Z0-9_:]` becomes `_`), so
//! a caller's mistake never makes the whole page unparsable; a name used with two types
//! keeps its first type and the other calls are ignored (a bug, asserted in debug builds).
#![allow(dead_code)] // the agent loop calls what it needs of it

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The type of a metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Type {
    Gauge,
    Counter,
    Histogram,
}

impl Type {
    fn name(self) -> &'static str {
        match self {
            Type::Gauge => "gauge",
            Type::Counter => "counter",
            Type::Histogram => "histogram",
        }
    }
}

/// One series' value.
#[derive(Debug, Clone)]
enum Value {
    Scalar(f64),
    /// Per-bucket (not cumulative) counts, `bounds.len() + 1` of them (the last: +Inf).
    Histogram {
        bounds: Vec<f64>,
        counts: Vec<u64>,
        sum: f64,
    },
}

/// Labels of a series, sorted by name.
type Labels = Vec<(String, String)>;

#[derive(Debug)]
struct Family {
    help: String,
    kind: Type,
    series: BTreeMap<Labels, Value>,
}

/// Observations added to a histogram series at once (`Metrics::add_histogram`).
#[derive(Debug, Clone, Copy)]
pub struct Observations<'a> {
    /// The buckets' upper bounds, increasing (the +Inf bucket is implicit).
    pub bounds: &'a [f64],
    /// Observations per bucket (not cumulative), `bounds.len() + 1` of them (the last:
    /// +Inf).
    pub counts: &'a [u64],
    /// The sum of the observed values.
    pub sum: f64,
}

/// The registry: every family by name. Send + Sync (one mutex; a scrape holds it while it
/// renders, a few hundred microseconds for thousands of series).
#[derive(Debug, Default)]
pub struct Metrics {
    families: Mutex<BTreeMap<String, Family>>,
}

/// `[a-zA-Z_:][a-zA-Z0-9_:]*` (labels: without `:`), other characters replaced by `_`.
fn sanitize(name: &str, colon: bool) -> String {
    let mut s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || (colon && c == ':') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.as_bytes()[0].is_ascii_digit() {
        s.insert(0, '_');
    }
    s
}

fn labels_of(labels: &[(&str, &str)]) -> Labels {
    let mut v: Labels = labels
        .iter()
        .map(|(k, v)| {
            let mut k = sanitize(k, false);
            // `le` is the histograms' own label, names starting with `__` are Prometheus'.
            if k == "le" || k.starts_with("__") {
                k.insert_str(0, "label_");
            }
            (k, v.to_string())
        })
        .collect();
    v.sort();
    v.dedup_by(|a, b| a.0 == b.0);
    v
}

/// A label value or HELP text escaped: `\` `"` (label values only) and newlines.
fn escape(s: &str, quote: bool, out: &mut String) {
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quote => out.push_str("\\\""),
            c => out.push(c),
        }
    }
}

/// A sample value as Prometheus writes it (Go's strconv: NaN, +Inf, -Inf).
fn number(v: f64, out: &mut String) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else {
        let _ = write!(out, "{v}");
    }
}

/// `name{a="x",b="y"[,le="…"]} value\n`.
fn sample(out: &mut String, name: &str, labels: &Labels, le: Option<f64>, v: f64) {
    out.push_str(name);
    if !labels.is_empty() || le.is_some() {
        out.push('{');
        let mut first = true;
        for (k, val) in labels {
            if !first {
                out.push(',');
            }
            first = false;
            out.push_str(k);
            out.push_str("=\"");
            escape(val, true, out);
            out.push('"');
        }
        if let Some(le) = le {
            if !first {
                out.push(',');
            }
            out.push_str("le=\"");
            number(le, out);
            out.push('"');
        }
        out.push('}');
    }
    out.push(' ');
    number(v, out);
    out.push('\n');
}

impl Metrics {
    pub fn new() -> Arc<Metrics> {
        Arc::new(Metrics::default())
    }

    /// The series `labels` of family `name` (made with `help` and `kind` when new); None
    /// when the family exists with another type.
    fn with(
        &self,
        name: &str,
        help: &str,
        kind: Type,
        labels: &[(&str, &str)],
        f: impl FnOnce(Option<&mut Value>) -> Option<Value>,
    ) {
        let name = sanitize(name, true);
        let mut fams = self.families.lock().unwrap_or_else(|e| e.into_inner());
        let fam = fams.entry(name).or_insert_with(|| Family {
            help: help.to_string(),
            kind,
            series: BTreeMap::new(),
        });
        if fam.kind != kind {
            debug_assert!(
                false,
                "metric used as {} and {}",
                fam.kind.name(),
                kind.name()
            );
            return;
        }
        let key = labels_of(labels);
        match fam.series.get_mut(&key) {
            Some(v) => {
                if let Some(new) = f(Some(v)) {
                    *v = new;
                }
            }
            None => {
                if let Some(new) = f(None) {
                    fam.series.insert(key, new);
                }
            }
        }
    }

    pub fn set_gauge(&self, name: &str, help: &str, labels: &[(&str, &str)], v: f64) {
        self.with(name, help, Type::Gauge, labels, |_| Some(Value::Scalar(v)));
    }

    /// Sets a counter to its absolute cumulative value (e.g. a BPF counter read back).
    pub fn set_counter(&self, name: &str, help: &str, labels: &[(&str, &str)], v: f64) {
        self.with(name, help, Type::Counter, labels, |_| {
            Some(Value::Scalar(v))
        });
    }

    pub fn add_counter(&self, name: &str, help: &str, labels: &[(&str, &str)], delta: f64) {
        self.with(name, help, Type::Counter, labels, |old| match old {
            Some(Value::Scalar(x)) => {
                *x += delta;
                None
            }
            _ => Some(Value::Scalar(delta)),
        });
    }

    /// Cumulative histogram: adds one observation.
    pub fn observe(&self, name: &str, help: &str, labels: &[(&str, &str)], bounds: &[f64], v: f64) {
        let mut counts = vec![0u64; bounds.len() + 1];
        counts[bucket_of(bounds, v)] = 1;
        self.add_histogram(
            name,
            help,
            labels,
            Observations {
                bounds,
                counts: &counts,
                sum: v,
            },
        );
    }

    /// Adds many at once: counts[i] observations in bucket i (bounds.len()+1 buckets, the
    /// last +Inf), their sum. Bounds must be increasing and the same for every call on a
    /// series (calls with other bounds are ignored: a bug, asserted in debug builds).
    pub fn add_histogram(
        &self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        o: Observations<'_>,
    ) {
        let Observations {
            bounds,
            counts,
            sum,
        } = o;
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]), "unsorted bounds");
        debug_assert_eq!(counts.len(), bounds.len() + 1, "one count per bucket");
        // Extra counts go to +Inf, missing ones are 0.
        let mut c = vec![0u64; bounds.len() + 1];
        for (i, &n) in counts.iter().enumerate() {
            c[i.min(bounds.len())] += n;
        }
        self.with(name, help, Type::Histogram, labels, |old| match old {
            Some(Value::Histogram {
                bounds: b,
                counts: have,
                sum: s,
            }) => {
                if b.as_slice() != bounds {
                    debug_assert!(false, "histogram bounds changed");
                    return None;
                }
                for (h, n) in have.iter_mut().zip(&c) {
                    *h += n;
                }
                *s += sum;
                None
            }
            _ => Some(Value::Histogram {
                bounds: bounds.to_vec(),
                counts: c,
                sum,
            }),
        });
    }

    /// Prometheus text exposition format 0.0.4: families sorted by name, HELP and TYPE once
    /// each, series sorted by labels, label values and help escaped. Families without a
    /// series are left out.
    pub fn render(&self) -> String {
        let fams = self.families.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = String::with_capacity(4096);
        for (name, fam) in fams.iter() {
            if fam.series.is_empty() {
                continue;
            }
            out.push_str("# HELP ");
            out.push_str(name);
            out.push(' ');
            escape(&fam.help, false, &mut out);
            out.push('\n');
            let _ = writeln!(out, "# TYPE {name} {}", fam.kind.name());
            for (labels, v) in &fam.series {
                match v {
                    Value::Scalar(x) => sample(&mut out, name, labels, None, *x),
                    Value::Histogram {
                        bounds,
                        counts,
                        sum,
                    } => {
                        let bucket = format!("{name}_bucket");
                        let mut cum = 0u64;
                        for (i, n) in counts.iter().enumerate() {
                            cum += n;
                            let le = bounds.get(i).copied().unwrap_or(f64::INFINITY);
                            sample(&mut out, &bucket, labels, Some(le), cum as f64);
                        }
                        sample(&mut out, &format!("{name}_sum"), labels, None, *sum);
                        sample(&mut out, &format!("{name}_count"), labels, None, cum as f64);
                    }
                }
            }
        }
        out
    }

    /// Removes the series for which `keep(labels)` is false (labels sorted by name), e.g.
    /// those of targets gone for a while (a `pid` label of a process that exited), so that
    /// the cardinality stays bounded on a host whose processes come and go.
    pub fn retain(&self, keep: impl Fn(&[(String, String)]) -> bool) {
        let mut fams = self.families.lock().unwrap_or_else(|e| e.into_inner());
        for fam in fams.values_mut() {
            fam.series.retain(|labels, _| keep(labels));
        }
    }

    /// Serves `GET /metrics` (and `/`, a page with a link to it; 404 for other paths) on
    /// `addr` (HOST:PORT; port 0 picks one) from a thread of its own; returns the address
    /// bound. Never blocks the caller: each connection is answered on a short-lived thread
    /// (at most 16 at once, with 10 s timeouts), so a stuck client cannot stop the scrapes.
    pub fn serve(self: &Arc<Self>, addr: &str) -> anyhow::Result<SocketAddr> {
        let listener = TcpListener::bind(addr).map_err(|e| match e.kind() {
            std::io::ErrorKind::AddrInUse => anyhow::anyhow!(
                "--metrics {addr}: the address is already in use (another ebrec agent or exporter?)"
            ),
            std::io::ErrorKind::AddrNotAvailable => {
                anyhow::anyhow!("--metrics {addr}: not an address of this host")
            }
            std::io::ErrorKind::PermissionDenied => {
                anyhow::anyhow!("--metrics {addr}: permission denied (a port below 1024?)")
            }
            _ => anyhow::anyhow!("--metrics {addr}: {e} (want HOST:PORT, e.g. 127.0.0.1:9464)"),
        })?;
        let bound = listener.local_addr()?;
        let me = Arc::clone(self);
        std::thread::Builder::new()
            .name("ebrec-metrics".into())
            .spawn(move || {
                let busy = Arc::new(AtomicUsize::new(0));
                for conn in listener.incoming() {
                    let Ok(mut conn) = conn else {
                        // EMFILE and the like: do not spin.
                        std::thread::sleep(Duration::from_millis(50));
                        continue;
                    };
                    if busy.load(Ordering::Relaxed) >= 16 {
                        let _ = respond(
                            &mut conn,
                            "503 Service Unavailable",
                            "text/plain",
                            b"busy\n",
                            false,
                        );
                        continue;
                    }
                    busy.fetch_add(1, Ordering::Relaxed);
                    let (m, b) = (Arc::clone(&me), Arc::clone(&busy));
                    let spawned = std::thread::Builder::new()
                        .name("ebrec-metrics-conn".into())
                        .spawn(move || {
                            let _ = m.answer(conn);
                            b.fetch_sub(1, Ordering::Relaxed);
                        });
                    if spawned.is_err() {
                        busy.fetch_sub(1, Ordering::Relaxed);
                    }
                }
            })?;
        Ok(bound)
    }

    /// Reads one request and answers it; the connection closes after.
    fn answer(&self, mut conn: TcpStream) -> std::io::Result<()> {
        conn.set_read_timeout(Some(Duration::from_secs(10)))?;
        conn.set_write_timeout(Some(Duration::from_secs(10)))?;
        let mut buf = Vec::with_capacity(1024);
        let mut chunk = [0u8; 1024];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") && !buf.windows(2).any(|w| w == b"\n\n") {
            let n = conn.read(&mut chunk)?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            if buf.len() > 16 * 1024 {
                return respond(
                    &mut conn,
                    "431 Request Header Fields Too Large",
                    "text/plain",
                    b"",
                    false,
                );
            }
        }
        let head = String::from_utf8_lossy(&buf);
        let line = head.lines().next().unwrap_or("");
        let mut parts = line.split_whitespace();
        let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let path = target.split('?').next().unwrap_or("");
        let head_only = method == "HEAD";
        if method != "GET" && !head_only {
            return respond(
                &mut conn,
                "405 Method Not Allowed",
                "text/plain",
                b"GET only\n",
                false,
            );
        }
        match path {
            "/metrics" => {
                let body = self.render();
                respond(
                    &mut conn,
                    "200 OK",
                    "text/plain; version=0.0.4; charset=utf-8",
                    body.as_bytes(),
                    head_only,
                )
            }
            "/" => respond(
                &mut conn,
                "200 OK",
                "text/html; charset=utf-8",
                b"<html><head><title>ebrec agent</title></head><body><h1>ebrec agent</h1>\
                  <p><a href=\"/metrics\">Metrics</a></p></body></html>\n",
                head_only,
            ),
            _ => respond(
                &mut conn,
                "404 Not Found",
                "text/plain",
                b"not found: try /metrics\n",
                head_only,
            ),
        }
    }
}

fn respond(
    conn: &mut TcpStream,
    status: &str,
    ctype: &str,
    body: &[u8],
    head_only: bool,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes())?;
    if !head_only {
        conn.write_all(body)?;
    }
    conn.flush()
}

/// The bucket of `v`: the first bound `>= v` (Prometheus' `le`), else +Inf.
pub fn bucket_of(bounds: &[f64], v: f64) -> usize {
    bounds.partition_point(|&b| b < v)
}

// ---- ebrec's own health: the names the agent loop sets, in one place. ----

/// Sets ebrec's health from the session's cumulative stats (`Session::stats`, the trailer's
/// numbers) and the BPF programs' (`Probes::program_stats`, as `ProgramStats`), and reads
/// ebrec's own CPU time and RSS. Call it every second (cheap: a getrusage and /proc/self/statm):
///
/// - `ebrec_events_total{family}`: events written to the window traces (kept).
/// - `ebrec_probe_hits_total{family}`: probe hits, kept or not.
/// - `ebrec_filtered_events_total{family}`: hits the filters discarded on purpose
///   (threshold, sampling, pid).
/// - `ebrec_bpf_run_seconds_total{program}`, `ebrec_bpf_runs_total{program}`: what the
///   kernel counted per BPF program (run time only with kernel.bpf_stats_enabled, i.e.
///   `--bpf-stats`); `ebrec_bpf_recursion_misses_total{program}`: runs skipped, their
///   events lost.
/// - `ebrec_cpu_seconds_total`: ebrec's user + system CPU time (all its threads).
/// - `ebrec_rss_bytes`: ebrec's resident memory.
///
/// Lost events by reason (`ebrec_lost_events_total{family,reason}`, the kernel's and ebrec's
/// own) come from each window's Lost records ([`super::latency::observe_window`]).
pub fn health(
    m: &Metrics,
    families: &[ebtrace_format::proto::FamilyStats],
    programs: &[ebtrace_format::proto::ProgramStats],
) {
    for f in families {
        let name = ebtrace_format::family::by_number(f.family).map_or("other", |f| f.name);
        let l = [("family", name)];
        m.set_counter(
            "ebrec_events_total",
            "Events written to the window traces, by family.",
            &l,
            f.kept as f64,
        );
        m.set_counter(
            "ebrec_probe_hits_total",
            "Probe hits seen by the BPF programs (kept, filtered or lost), by family.",
            &l,
            f.hits as f64,
        );
        m.set_counter(
            "ebrec_filtered_events_total",
            "Probe hits discarded on purpose by the filters (threshold, sampling, pid), by family.",
            &l,
            f.filtered as f64,
        );
    }
    for p in programs {
        let l = [("program", p.name.as_str())];
        m.set_counter(
            "ebrec_bpf_run_seconds_total",
            "Time the kernel spent running each BPF program (counted with kernel.bpf_stats_enabled=1, ebrec --bpf-stats).",
            &l,
            p.run_time_ns as f64 / 1e9,
        );
        m.set_counter(
            "ebrec_bpf_runs_total",
            "Runs of each BPF program (counted with kernel.bpf_stats_enabled=1).",
            &l,
            p.run_count as f64,
        );
        m.set_counter(
            "ebrec_bpf_recursion_misses_total",
            "Runs of each BPF program the kernel skipped because one was already running on that CPU (their events are lost).",
            &l,
            p.recursion_misses as f64,
        );
    }
    process(m);
}

/// `ebrec_bpf_unseen_seconds_total{kind}`: what the kernel's BPF stats (`--bpf-stats`) do
/// not see around the programs' runs, so that run time + this + `ebrec_cpu_seconds_total`
/// is what ebrec costs: `tracepoint_dispatch`, the runs of tracepoint and perf event
/// programs times their dispatch (timed at start on a system call loop), and `uprobe_traps`,
/// the runs of uprobe programs times one trap (timed on a uprobe of ebrec's own).
pub fn unseen(m: &Metrics, dispatch_s: f64, traps_s: f64) {
    for (kind, v) in [
        ("tracepoint_dispatch", dispatch_s),
        ("uprobe_traps", traps_s),
    ] {
        m.set_counter(
            "ebrec_bpf_unseen_seconds_total",
            "What the BPF run-time stats do not see around the programs' runs (with --bpf-stats): tracepoint dispatch, uprobe traps; each timed on this machine.",
            &[("kind", kind)],
            v,
        );
    }
}

/// `ebrec_cpu_seconds_total` and `ebrec_rss_bytes` of this process.
pub fn process(m: &Metrics) {
    // SAFETY: getrusage writes the struct it is given; zeroed is a valid rusage.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } == 0 {
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        m.set_counter(
            "ebrec_cpu_seconds_total",
            "CPU time used by ebrec itself, user and system, all threads (not the BPF programs': ebrec_bpf_run_seconds_total).",
            &[],
            secs(ru.ru_utime) + secs(ru.ru_stime),
        );
    }
    if let Some(pages) = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
    {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
        m.set_gauge(
            "ebrec_rss_bytes",
            "Resident memory of ebrec itself.",
            &[],
            (pages * page) as f64,
        );
    }
}

/// `ebrec_ringbuf_fill_ratio{ringbuf}`: how full each ring buffer was when last read (its
/// unread bytes over its size, 0..1); near 1, events are about to be lost (ringbuf_full).
pub fn ringbuf_fill(m: &Metrics, ringbuf: &str, ratio: f64) {
    m.set_gauge(
        "ebrec_ringbuf_fill_ratio",
        "Unread bytes over size of each BPF ring buffer when ebrec last drained it (0..1; near 1 events get lost).",
        &[("ringbuf", ringbuf)],
        ratio,
    );
}

/// `ebrec_targets`: the processes recorded now.
pub fn targets(m: &Metrics, n: usize) {
    m.set_gauge("ebrec_targets", "Processes recorded now.", &[], n as f64);
}

/// `ebrec_windows_total` (windows closed: trace files written) and
/// `ebrec_windows_dropped_total{reason}`: `behind`, windows not handed to the worker, which
/// was behind (not in the latency histograms, not pushed); `disk`, windows not written (a
/// full disk, the directory removed or read-only). All absolute cumulative counts.
pub fn windows(m: &Metrics, closed: u64, behind: u64, disk: u64) {
    m.set_counter(
        "ebrec_windows_total",
        "Windows closed (trace files written).",
        &[],
        closed as f64,
    );
    for (reason, n) in [("behind", behind), ("disk", disk)] {
        m.set_counter(
            "ebrec_windows_dropped_total",
            "Windows dropped: not handed to the worker (metrics, pushes) because it was behind, or not written (disk full, directory gone or read-only).",
            &[("reason", reason)],
            n as f64,
        );
    }
}

/// Bounds of `ebrec_push_duration_seconds`: 10 ms to ~80 s, doubling.
pub const PUSH_BOUNDS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];

/// One push of a window's profiles to `backend` ("pyroscope", "parca", "otlp") done:
/// `ebrec_pushes_total{backend,result}` (result "ok" or "error") and its duration in
/// `ebrec_push_duration_seconds{backend}`.
pub fn push_done(m: &Metrics, backend: &str, ok: bool, seconds: f64) {
    let result = if ok { "ok" } else { "error" };
    m.add_counter(
        "ebrec_pushes_total",
        "Pushes of window profiles to a backend, by result (ok, error).",
        &[("backend", backend), ("result", result)],
        1.0,
    );
    m.observe(
        "ebrec_push_duration_seconds",
        "Time one push to a backend took (request and response, retries included).",
        &[("backend", backend)],
        &PUSH_BOUNDS,
        seconds,
    );
}

/// The push queue of `backend`: `ebrec_push_queue_length{backend}` (windows waiting) and
/// `ebrec_push_dropped_total{backend}` (windows dropped unpushed, queue full or too many
/// failures: their absolute cumulative count).
pub fn push_queue(m: &Metrics, backend: &str, queued: usize, dropped_total: u64) {
    let l = [("backend", backend)];
    m.set_gauge(
        "ebrec_push_queue_length",
        "Windows waiting to be pushed to a backend.",
        &l,
        queued as f64,
    );
    m.set_counter(
        "ebrec_push_dropped_total",
        "Windows dropped without being pushed to a backend (queue full, or gave up after failures).",
        &l,
        dropped_total as f64,
    );
}
