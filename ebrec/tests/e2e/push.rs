//! `ebrec push` end to end, against conformance servers of each backend's published API
//! (ebrec/tests/e2e/conformance/*.py, run with Debian's python3 on 127.0.0.1): a testdata
//! program recorded with `--cpu --offcpu`, pushed to Pyroscope (/ingest, multipart), Parca
//! (WriteRaw over gRPC-Web) and OTLP/HTTP (v1development profiles); the pushed pprof
//! profiles read back with Go's reader (`go tool pprof -raw -symbolize=none`) and the OTLP
//! requests as the server decoded them. Checked: sample types, totals equal to `ebsym
//! top`'s, the mappings' build-ids equal to the binary's (readelf -n), function names only
//! with `--symbolize`, the labels (service, host, kernel, pid, comm), credentials from the
//! auth file; and the failures: 503s, a hang, a reset, garbage, a refusal, a backend that is
//! down. Needs root (skips loudly without it; fails when CI=true).

use crate::common;
use common::{ebsym_path, expect_line, go_pprof_raw, root, run};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const PROGRAM: &str = "offcpu_blocks";

/// The recording all tests push (made once): the trace, the program's pid, the binary.
struct Rec {
    trace: PathBuf,
    pid: u64,
    binary: PathBuf,
}

fn recording() -> &'static Rec {
    static REC: OnceLock<Rec> = OnceLock::new();
    REC.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("push-test");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let trace = dir.join("t.pb.zst");
        let out = common::record_to(&trace, PROGRAM, &["--cpu=999", "--offcpu=5000"], &[]);
        let pid = expect_line(&out, PROGRAM)["pid"].as_u64().unwrap();
        let binary =
            ebtrace_testdata::build(PROGRAM, ebtrace_testdata::Variant::FramePointer).unwrap();
        Rec { trace, pid, binary }
    })
}

/// A conformance server (common::conformance), killed when dropped.
type Server = common::Conformance;

fn python() -> PathBuf {
    let p = PathBuf::from("/usr/bin/python3");
    if p.exists() {
        p
    } else {
        PathBuf::from("python3")
    }
}

fn server(backend: &str, faults: &str, hang_secs: u32) -> Server {
    common::conformance(backend, faults, hang_secs)
}

fn push(args: &[&str]) -> (Output, Duration) {
    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_ebrec"))
        .arg("push")
        .arg(&recording().trace)
        .args(args)
        .output()
        .unwrap();
    (out, t.elapsed())
}

fn push_ok(args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.push("--json");
    let (out, _) = push(&a);
    assert!(
        out.status.success(),
        "ebrec push {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `ebsym top --kind KIND` totals of the recording.
fn top_totals(kind: &str) -> Value {
    let out = run(
        &ebsym_path(),
        &[
            "top",
            recording().trace.to_str().unwrap(),
            "--kind",
            kind,
            "-n",
            "100000",
            "--json",
        ],
    );
    serde_json::from_slice::<Value>(&out.stdout).unwrap()["totals"].clone()
}

fn build_id(binary: &Path) -> String {
    let out = run(Path::new("readelf"), &["-n", binary.to_str().unwrap()]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string))
        .expect("a build-id")
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string()
}

fn kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap()
        .trim()
        .to_string()
}

/// A pushed profile through npm's pprof-format (ebrec/tests/e2e/pprof_decode.js): a second
/// reader, independent of Go's and of ebtrace's.
fn pprof_format_decoded(pb: &Path) -> Option<Value> {
    let modules = common::npm_package("pprof-format", "pprof-format@2", "the pprof decoding")?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/pprof_decode.js");
    let o = Command::new("node")
        .arg(&script)
        .arg(pb)
        .arg(&modules)
        .output()
        .expect("node");
    assert!(
        o.status.success(),
        "pprof-format could not read {}: {}",
        pb.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    Some(serde_json::from_slice(&o.stdout).unwrap())
}

/// The checks of a pushed pprof of `kind` (cpu or offcpu) that every backend shares.
/// How a pushed profile's user frames are named.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Names {
    /// Addresses in mappings with build-ids: the backend symbolizes (Parca, OTLP).
    Addresses,
    /// Function names from the binaries' ELF symbol tables, addresses kept, no file or
    /// line (Pyroscope's default).
    Symtab,
    /// Symbolized on this host with DWARF (--symbolize).
    Dwarf,
}

fn check_pprof(pb: &Path, kind: &str, names: Names) {
    let symbolized = names != Names::Addresses;
    let rec = recording();
    let Some(raw) = go_pprof_raw(pb) else { return };
    if let Some(v) = pprof_format_decoded(pb) {
        let t = &v["sample_types"][0];
        let (name, unit) = (t[0].as_str().unwrap(), t[1].as_str().unwrap());
        assert_eq!(
            raw.types,
            vec![format!("{name}/{unit}")],
            "{kind}: pprof-format's types"
        );
        assert_eq!(
            v["totals"][name].as_i64(),
            Some(raw.totals[0]),
            "{kind}: pprof-format's total is Go's"
        );
        let bin = rec.binary.to_str().unwrap();
        let want = build_id(&rec.binary);
        assert!(
            v["mappings"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m["filename"] == bin && m["build_id"] == want.as_str()),
            "{kind}: pprof-format sees no mapping of {bin} with its build-id"
        );
        for l in v["locations"].as_array().unwrap() {
            if l["mapping"]["filename"] != bin {
                continue;
            }
            let lines = l["lines"].as_array().map_or(&[][..], |x| x.as_slice());
            match names {
                // The program's own frames go as addresses: no lines for the backend to
                // trust.
                Names::Addresses => assert_eq!(lines.len(), 0, "{kind}: {l}"),
                // A name from the symbol table, the address kept for a backend that can
                // do better; no line (no DWARF read), and no file but a local symbol's
                // STT_FILE name, as binutils prints it (a sample in crtstuff.c's
                // __do_global_dtors_aux at the exit).
                Names::Symtab => {
                    assert_ne!(l["address"], "0", "{kind}: {l}");
                    assert_eq!(lines.len(), 1, "{kind}: {l}");
                    let file = lines[0]["file"].as_str().unwrap_or("");
                    assert!(
                        file.is_empty() || (!file.contains('/') && file.contains('.')),
                        "{kind}: {l}"
                    );
                    assert_eq!(lines[0]["line"], 0, "{kind}: {l}");
                }
                Names::Dwarf => {}
            }
        }
    }
    let top = top_totals(kind);
    let (ty, total) = match kind {
        "cpu" => ("samples/count", top["count"].as_i64()),
        _ => ("time/nanoseconds", top["total_ns"].as_i64()),
    };
    assert_eq!(raw.types, vec![ty.to_string()], "{kind}");
    assert_eq!(
        Some(raw.totals[0]),
        total,
        "{kind}: the totals are ebsym top's"
    );
    assert!(raw.totals[0] > 0, "{kind}: no samples");
    let bin = rec.binary.to_str().unwrap();
    let want = build_id(&rec.binary);
    assert!(
        raw.mappings.iter().any(|(f, b)| f == bin && *b == want),
        "{kind}: no mapping of {bin} with build-id {want}: {:?}",
        raw.mappings
    );
    for (f, b) in &raw.mappings {
        if f.starts_with('/') && Path::new(f).exists() {
            assert_eq!(*b, build_id(Path::new(f)), "{kind}: {f}'s build-id");
        }
    }
    assert!(
        raw.labels.contains(&format!("pid:[{}]", rec.pid)),
        "{kind}: no pid label: {:?}",
        &raw.labels[..raw.labels.len().min(8)]
    );
    assert!(
        raw.labels.iter().any(|l| l == "comm:[offcpu_blocks-f]"),
        "{kind}: no comm label"
    );
    // Each sample is one thread's, labelled with its name.
    if kind == "offcpu" {
        for t in ["sleeper", "reader", "writer"] {
            let l = format!("thread:[{t}]");
            assert!(raw.labels.contains(&l), "{kind}: no {l}: {:?}", raw.labels);
        }
    }
    let ours = raw
        .names
        .iter()
        .filter(|n| n.starts_with("offcpu::"))
        .count();
    let kernel_names = raw
        .names
        .iter()
        .filter(|n| !n.contains("::") && !n.contains('+'))
        .count();
    assert!(kernel_names > 0, "{kind}: kernel frames keep their names");
    if symbolized {
        if kind == "offcpu" {
            for f in ["offcpu::sleeper_a", "offcpu::reader_b", "offcpu::writer_c"] {
                assert!(
                    raw.names.iter().any(|n| n.starts_with(f)),
                    "{kind}: {f} is not named: {:?}",
                    raw.names
                );
            }
        }
        assert!(ours > 0, "{kind}: no offcpu:: function named");
    } else {
        assert_eq!(
            ours, 0,
            "{kind}: names without --symbolize: {:?}",
            raw.names
        );
        assert!(
            raw.unnamed_user_locations > 0,
            "{kind}: user frames should be addresses in mappings"
        );
    }
}

#[test]
fn pyroscope_takes_each_kind_with_labels_and_sample_type_config() {
    if !root() {
        return;
    }
    let s = server("pyroscope", "", 60);
    let dir = tempfile::tempdir().unwrap();
    let auth = dir.path().join("auth");
    std::fs::write(&auth, "# credentials\nbearer s3cret\ntenant team-a\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&auth, std::fs::Permissions::from_mode(0o600)).unwrap();
    let url = s.url("pyroscope");
    let stats = push_ok(&[
        "--push",
        &url,
        "--service",
        "shop",
        "--label",
        "env=test",
        "--auth-file",
        auth.to_str().unwrap(),
    ]);
    assert_eq!(stats["backends"][0]["pushed"], 2, "{stats}");
    assert_eq!(stats["backends"][0]["failed"], 0, "{stats}");
    let log = s.log();
    assert!(
        log.iter()
            .all(|e| e["authorization"] == "Bearer s3cret" && e["tenant"] == "team-a"),
        "{log:?}"
    );
    let accepted = s.accepted();
    assert_eq!(accepted.len(), 2, "cpu and offcpu");
    for (meta, pb) in &accepted {
        let name = meta["labels"]["__name__"].as_str().unwrap();
        let kind = name.strip_prefix("shop.").unwrap();
        assert_eq!(meta["labels"]["service_name"], "shop");
        assert_eq!(meta["labels"]["host"], hostname().as_str());
        assert_eq!(meta["labels"]["kernel"], kernel().as_str());
        assert_eq!(meta["labels"]["env"], "test");
        assert_eq!(meta["query"]["spyName"], "ebrec");
        assert!(
            meta["query"]["format"].is_null(),
            "multipart: no format=pprof"
        );
        let (from, until): (u64, u64) = (
            meta["query"]["from"].as_str().unwrap().parse().unwrap(),
            meta["query"]["until"].as_str().unwrap().parse().unwrap(),
        );
        assert!(from <= until && until - from < 600, "{from}..{until}");
        match kind {
            "cpu" => {
                assert_eq!(meta["metric_name"], "process_cpu");
                assert_eq!(meta["query"]["sampleRate"], "999");
                assert_eq!(meta["sample_type_config"]["samples"]["units"], "samples");
            }
            "offcpu" => {
                assert_eq!(meta["metric_name"], "block");
                assert_eq!(meta["sample_type_config"]["time"]["units"], "nanoseconds");
                assert_eq!(meta["sample_type_config"]["time"]["aggregation"], "sum");
            }
            k => panic!("unexpected kind {k}"),
        }
        // Pyroscope does not symbolize native frames: they come named from the symbol
        // tables.
        check_pprof(pb.as_ref().unwrap(), kind, Names::Symtab);
    }
    // A group-readable auth file is taken, with a warning; an unknown line is refused.
    std::fs::set_permissions(&auth, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (out, _) = push(&["--push", &url, "--auth-file", auth.to_str().unwrap()]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("readable by others"));
    std::fs::write(&auth, "bearer x\npassword hunter2\n").unwrap();
    let (out, _) = push(&["--push", &url, "--auth-file", auth.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(&format!("{}:2: unknown line", auth.display())),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "secrets are not printed: {err}");
}

#[test]
fn pyroscope_with_symbolize_names_the_functions() {
    if !root() {
        return;
    }
    let s = server("pyroscope", "", 60);
    push_ok(&["--push", &s.url("pyroscope"), "--symbolize"]);
    let accepted = s.accepted();
    assert_eq!(accepted.len(), 2);
    for (meta, pb) in &accepted {
        let kind = meta["labels"]["__name__"]
            .as_str()
            .unwrap()
            .rsplit('.')
            .next()
            .unwrap()
            .to_string();
        // The default service: the busiest process's comm.
        assert_eq!(meta["labels"]["service_name"], "offcpu_blocks-f");
        check_pprof(pb.as_ref().unwrap(), &kind, Names::Dwarf);
    }
}

#[test]
fn parca_takes_a_write_raw_over_grpc_web() {
    if !root() {
        return;
    }
    let s = server("parca", "", 60);
    let stats = push_ok(&["--push", &s.url("parca"), "--service", "shop"]);
    assert_eq!(stats["backends"][0]["pushed"], 1, "one WriteRaw per window");
    let accepted = s.accepted();
    assert_eq!(accepted.len(), 2, "a series per kind");
    for (meta, pb) in &accepted {
        let kind = meta["name"]
            .as_str()
            .unwrap()
            .strip_prefix("ebrec_")
            .unwrap();
        assert_eq!(meta["labels"]["service_name"], "shop");
        assert_eq!(meta["labels"]["host"], hostname().as_str());
        assert_eq!(meta["labels"]["kernel"], kernel().as_str());
        assert_eq!(meta["normalized"], false);
        check_pprof(pb.as_ref().unwrap(), kind, Names::Addresses);
    }
    let s = server("parca", "", 60);
    push_ok(&["--push", &s.url("parca"), "--symbolize"]);
    for (meta, pb) in &s.accepted() {
        let kind = meta["name"]
            .as_str()
            .unwrap()
            .strip_prefix("ebrec_")
            .unwrap();
        check_pprof(pb.as_ref().unwrap(), kind, Names::Dwarf);
    }
}

/// The OTLP request as the server decoded it: per profile its sample type and total,
/// frames and attributes.
fn check_otlp(req: &Value, symbolized: bool) {
    let rec = recording();
    let rp = &req["resource_profiles"][0];
    assert_eq!(rp["resource"]["host.name"], hostname().as_str());
    assert_eq!(rp["resource"]["os.version"], kernel().as_str());
    let profiles = rp["profiles"].as_array().unwrap();
    let mut types: Vec<&str> = profiles
        .iter()
        .map(|p| p["sample_type"].as_str().unwrap())
        .collect();
    types.sort();
    assert_eq!(types, ["samples/count", "time/nanoseconds"]);
    for p in profiles {
        let (kind, total) = match p["sample_type"].as_str().unwrap() {
            "samples/count" => ("cpu", top_totals("cpu")["count"].clone()),
            _ => ("offcpu", top_totals("offcpu")["total_ns"].clone()),
        };
        assert_eq!(p["attributes"]["profile.kind"], kind);
        assert_eq!(p["total"], total, "{kind}: the totals are ebsym top's");
        assert_eq!(p["scope"], "ebrec");
        let samples = p["samples"].as_array().unwrap();
        assert!(samples
            .iter()
            .all(|s| s["attributes"]["process.pid"] == rec.pid
                && s["attributes"]["process.executable.name"] == "offcpu_blocks-f"));
        let frames: Vec<&str> = samples
            .iter()
            .flat_map(|s| s["frames"].as_array().unwrap())
            .map(|f| f.as_str().unwrap())
            .collect();
        let named = frames.iter().filter(|f| f.starts_with("offcpu::")).count();
        let bin = rec.binary.to_str().unwrap();
        let addressed = frames
            .iter()
            .filter(|f| f.contains(&format!(" {bin} {}", build_id(&rec.binary))))
            .count();
        if symbolized {
            assert!(named > 0, "{kind}: no offcpu:: names: {frames:?}");
        } else {
            assert_eq!(named, 0, "{kind}: names without --symbolize");
            assert!(addressed > 0, "{kind}: no address in the program's mapping");
        }
    }
    let bin = rec.binary.to_str().unwrap();
    assert!(req["mappings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["file"] == bin
            && m["attributes"]["process.executable.build_id.gnu"]
                == build_id(&rec.binary).as_str()));
}

#[test]
fn otlp_takes_an_export_profiles_service_request() {
    if !root() {
        return;
    }
    let s = server("otlp", "", 60);
    push_ok(&["--push", &s.url("otlp"), "--service", "shop"]);
    let accepted = s.accepted();
    assert_eq!(accepted.len(), 1);
    assert_eq!(
        accepted[0].0["resource_profiles"][0]["resource"]["service.name"],
        "shop"
    );
    check_otlp(&accepted[0].0, false);
    let s = server("otlp", "", 60);
    push_ok(&["--push", &s.url("otlp"), "--symbolize"]);
    check_otlp(&s.accepted()[0].0, true);
}

/// 503s, a reset and garbage are retried (and counted), a hang times out and is retried;
/// every backend ends with the window taken.
#[test]
fn failures_are_retried_and_counted() {
    if !root() {
        return;
    }
    let cases: [(&str, &str, u64); 5] = [
        ("pyroscope", "503,503", 2),
        ("otlp", "503", 1),
        ("parca", "reset", 1),
        ("parca", "garbage", 1),
        ("pyroscope", "hang", 1),
    ];
    for (backend, faults, failed) in cases {
        let s = server(backend, faults, 30);
        let t = Instant::now();
        let stats = push_ok(&[
            "--push",
            &s.url(backend),
            "--timeout",
            "2",
            "--attempts",
            "4",
        ]);
        let b = &stats["backends"][0];
        assert_eq!(b["failed"], failed, "{backend} {faults}: {stats}");
        assert_eq!(b["dropped"], 0, "{backend} {faults}: {stats}");
        assert!(
            b["pushed"].as_u64().unwrap() >= 1,
            "{backend} {faults}: {stats}"
        );
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{backend} {faults}: {:?}",
            t.elapsed()
        );
        let log = s.log();
        let n_faults = faults.split(',').count();
        assert_eq!(
            log.len(),
            n_faults + b["pushed"].as_u64().unwrap() as usize,
            "{log:?}"
        );
        assert!(
            !s.accepted().is_empty(),
            "{backend} {faults}: nothing stored"
        );
    }
}

/// HTTPS: the server's CA taken from SSL_CERT_FILE (the system's CA store otherwise, which
/// does not know this one: refused with one line).
#[test]
fn https_with_the_system_ca_store() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = |f: &str| dir.path().join(f).to_str().unwrap().to_string();
    let ssl = |args: &[&str]| run(Path::new("openssl"), args);
    ssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=ebrec test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign",
        "-keyout",
        &d("ca.key"),
        "-out",
        &d("ca.pem"),
    ]);
    ssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        &d("srv.key"),
        "-out",
        &d("srv.csr"),
    ]);
    std::fs::write(
        dir.path().join("ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    ssl(&[
        "x509",
        "-req",
        "-in",
        &d("srv.csr"),
        "-CA",
        &d("ca.pem"),
        "-CAkey",
        &d("ca.key"),
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        &d("ext"),
        "-out",
        &d("srv.pem"),
    ]);
    let out = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/conformance/pyroscope.py");
    let mut child = Command::new(python())
        .arg(&script)
        .arg("--out")
        .arg(out.path())
        .args(["--tls-cert", &d("srv.pem"), "--tls-key", &d("srv.key")])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let s = Server {
        port: line
            .trim()
            .strip_prefix("LISTENING ")
            .unwrap()
            .parse()
            .unwrap(),
        child,
        out,
    };
    let url = format!("pyroscope+https://127.0.0.1:{}", s.port);
    let o = Command::new(env!("CARGO_BIN_EXE_ebrec"))
        .args([
            "push",
            recording().trace.to_str().unwrap(),
            "--push",
            &url,
            "--json",
        ])
        .env("SSL_CERT_FILE", d("ca.pem"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(s.accepted().len(), 2);
    let o = Command::new(env!("CARGO_BIN_EXE_ebrec"))
        .args([
            "push",
            recording().trace.to_str().unwrap(),
            "--push",
            &url,
            "--attempts",
            "1",
        ])
        .env_remove("SSL_CERT_FILE")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.lines()
            .last()
            .unwrap()
            .starts_with(&format!("ebrec: push to {url}: ")),
        "{err}"
    );
    assert_eq!(s.accepted().len(), 2, "an unknown CA is not trusted");
}

/// A refusal (4xx; gRPC InvalidArgument) is not retried; a backend that is down fails
/// within the attempts: `ebrec push` exits 1 with one line saying what.
#[test]
fn refusals_and_dead_backends_fail_with_one_line() {
    if !root() {
        return;
    }
    for (backend, faults, want) in [
        (
            "pyroscope",
            "400,400",
            "HTTP 400: invalid request (fault): bad profile",
        ),
        (
            "parca",
            "400",
            "grpc-status 3: invalid request (fault): bad profile",
        ),
        (
            "otlp",
            "400",
            "HTTP 400: invalid request (fault): bad profile",
        ),
    ] {
        let s = server(backend, faults, 30);
        let (out, took) = push(&["--push", &s.url(backend), "--timeout", "2"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{backend}: {err}");
        let last = err.lines().last().unwrap_or("");
        assert!(
            last.starts_with(&format!("ebrec: push to {}: ", s.url(backend)))
                && last.contains(want),
            "{backend}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
        assert_eq!(
            s.log().len(),
            faults.split(',').count(),
            "{backend}: refused, not retried"
        );
        assert!(took < Duration::from_secs(10), "{took:?}");
    }
    // Down: a port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    for backend in ["pyroscope", "parca", "otlp"] {
        let url = format!("{backend}+http://127.0.0.1:{port}");
        let (out, took) = push(&["--push", &url, "--timeout", "2", "--attempts", "2"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{backend}: {err}");
        let last = err.lines().last().unwrap_or("");
        assert!(
            last.starts_with(&format!("ebrec: push to {url}: "))
                && last.contains("connection refused"),
            "{backend}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
        assert!(took < Duration::from_secs(15), "{backend}: {took:?}");
    }
    // A bad URL: at once, one line.
    let (out, _) = push(&["--push", "zipkin+http://127.0.0.1:1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("unknown backend"), "{err}");
}
