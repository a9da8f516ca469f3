//! Helpers shared by ebrec's integration tests.
#![allow(dead_code)]
use serde_json::Value;
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// ebsym from the same build (`target/<profile>/ebsym`, of the ebtrace-ebsym package).
pub fn ebsym_path() -> PathBuf {
    let dir = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let p = dir.join("ebsym");
    assert!(
        p.exists(),
        "{} is not built: run `cargo build -p ebtrace-ebsym` (scripts/test does)",
        p.display()
    );
    p
}

/// Runs `cmd ARGS`, asserting success.
pub fn run(cmd: &Path, args: &[&str]) -> Output {
    let out = Command::new(cmd).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{} {args:?}: {}",
        cmd.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `ebsym ARGS --json`, parsed.
pub fn ebsym_json(args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.push("--json");
    let out = run(&ebsym_path(), &a);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "ebsym {a:?}: not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Whether the test can run: root is needed for eBPF. Without it the test is skipped
/// loudly, or fails when CI=true.
pub fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        shared();
        return true;
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("this test needs root (eBPF), and CI=true: failing instead of skipping");
    }
    eprintln!("\n*** SKIPPED: needs root for eBPF (run the tests as root) ***\n");
    false
}

/// Every root test runs under a shared hold of this lock, and a test that measures ebrec's
/// own cost (`--max-cpu` budgets) under an exclusive one: in this one test binary, two tests
/// run at once (one per CPU), and a cost measured beside another recording is not its own.
static EXCLUSIVE: RwLock<()> = RwLock::new(());

thread_local! {
    /// This test thread's shared hold (libtest runs each test on its own thread: the hold
    /// ends with the test).
    static SHARED: RefCell<Option<RwLockReadGuard<'static, ()>>> = const { RefCell::new(None) };
}

fn shared() {
    SHARED.with(|s| {
        if s.borrow().is_none() {
            *s.borrow_mut() = Some(EXCLUSIVE.read().unwrap_or_else(|e| e.into_inner()));
        }
    });
}

/// No other root test runs until the guard is dropped.
pub fn exclusive() -> RwLockWriteGuard<'static, ()> {
    SHARED.with(|s| s.borrow_mut().take());
    EXCLUSIVE.write().unwrap_or_else(|e| e.into_inner())
}

/// The npm package `name` (`spec`: what `npm install` gets, e.g. `pprof-format@2`),
/// installed once under the target directory (`node-NAME`); the directory its
/// `node_modules` is in. None (after saying that `what` is skipped, and why) when node or
/// npm are missing or the install fails; a failure instead when CI=true.
pub fn npm_package(name: &str, spec: &str, what: &str) -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("node-{name}"));
    let ready = |d: &Path| {
        d.join("node_modules")
            .join(name)
            .join("package.json")
            .exists()
    };
    let fail = |why: String| -> Option<PathBuf> {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("{why}, and CI=true: failing instead of skipping");
        }
        eprintln!("\n*** SKIPPED {what}: {why} ***\n");
        None
    };
    if Command::new("node").arg("--version").output().is_err() {
        return fail("node is not installed (apt-get install nodejs npm)".into());
    }
    if !ready(&dir) {
        std::fs::create_dir_all(&dir).unwrap();
        let out = Command::new("npm")
            .args([
                "install",
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
                "--prefix",
            ])
            .arg(&dir)
            .arg(spec)
            .output();
        match out {
            Ok(o) if o.status.success() && ready(&dir) => {}
            Ok(o) => {
                return fail(format!(
                    "npm install {spec} failed: {}",
                    String::from_utf8_lossy(&o.stderr)
                ))
            }
            Err(e) => return fail(format!("npm is not installed ({e})")),
        }
    }
    Some(dir)
}

/// playwright-core and a Chromium for it to drive (the system's /usr/bin/chromium, or
/// $CHROMIUM): the modules' directory, or None (said loudly; a failure when CI=true).
#[allow(dead_code)] // not every test binary uses it
pub fn playwright() -> Option<PathBuf> {
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    if !Path::new(&chromium).exists() {
        let why = format!("{chromium} is missing (apt-get install chromium; scripts/setup test)");
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("{why}, and CI=true: failing instead of skipping");
        }
        eprintln!("\n*** SKIPPED the browser checks: {why} ***\n");
        return None;
    }
    npm_package("playwright-core", "playwright-core@1", "the browser checks")
}

/// Whether the running kernel is at least `major.minor`.
pub fn kernel_at_least(major: u32, minor: u32) -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let v: Vec<u32> = release
        .split(|c: char| !c.is_ascii_digit())
        .take(2)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    (v[0], v.get(1).copied().unwrap_or(0)) >= (major, minor)
}

/// The EXPECT line a testdata program printed, for `program`.
pub fn expect_line(out: &Output, program: &str) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("EXPECT "))
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["program"] == program);
    line.unwrap_or_else(|| {
        panic!(
            "no EXPECT line of {program}; stdout: {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// An EXPECT line's address field ("0x…") as a number.
pub fn hex_field(expect: &Value, key: &str) -> u64 {
    let v = expect[key]
        .as_str()
        .unwrap_or_else(|| panic!("EXPECT has no {key}: {expect}"));
    u64::from_str_radix(v.trim_start_matches("0x"), 16)
        .unwrap_or_else(|e| panic!("EXPECT {key} {v:?}: {e}"))
}

/// A finished `ebrec record -q` of a testdata program (frame-pointer build).
pub struct Recording {
    pub trace: std::path::PathBuf,
    pub out: Output,
    _dir: tempfile::TempDir,
}

/// Records `program ARGS` with ebrec `FLAGS` into a fresh temporary directory.
pub fn record(program: &str, flags: &[&str], args: &[&str]) -> Recording {
    record_in_tempdir(program, flags, args, true)
}

/// [`record`] without `-q`: stderr has ebrec's start-up lines (what it attached, and where).
#[allow(dead_code)] // not every test binary uses it
pub fn record_loud(program: &str, flags: &[&str], args: &[&str]) -> Recording {
    record_in_tempdir(program, flags, args, false)
}

/// [`record_loud`] with `env` set for ebrec and so for the program it starts.
#[allow(dead_code)] // not every test binary uses it
pub fn record_loud_env(
    program: &str,
    flags: &[&str],
    args: &[&str],
    env: &[(&str, &str)],
) -> Recording {
    record_in_tempdir_env(program, flags, args, false, env)
}

fn record_in_tempdir(program: &str, flags: &[&str], args: &[&str], quiet: bool) -> Recording {
    record_in_tempdir_env(program, flags, args, quiet, &[])
}

fn record_in_tempdir_env(
    program: &str,
    flags: &[&str],
    args: &[&str],
    quiet: bool,
    env: &[(&str, &str)],
) -> Recording {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.pb.zst");
    let out = run_record_env(
        &trace,
        program,
        ebtrace_testdata::Variant::FramePointer,
        flags,
        args,
        quiet,
        env,
    );
    Recording {
        trace,
        out,
        _dir: dir,
    }
}

/// Records `program ARGS` with ebrec `FLAGS` into `trace`, asserting that ebrec succeeded.
pub fn record_to(trace: &std::path::Path, program: &str, flags: &[&str], args: &[&str]) -> Output {
    record_variant_to(
        trace,
        program,
        ebtrace_testdata::Variant::FramePointer,
        flags,
        args,
    )
}

/// Records `program ARGS` built as `variant` with ebrec `FLAGS` into `dir/name`; the trace's
/// path.
pub fn record_variant_in(
    dir: &std::path::Path,
    name: &str,
    program: &str,
    variant: ebtrace_testdata::Variant,
    flags: &[&str],
    args: &[&str],
) -> String {
    let trace = dir.join(name);
    record_variant_to(&trace, program, variant, flags, args);
    trace.to_str().unwrap().to_string()
}

/// [`record_to`] with the program built as `variant`.
pub fn record_variant_to(
    trace: &std::path::Path,
    program: &str,
    variant: ebtrace_testdata::Variant,
    flags: &[&str],
    args: &[&str],
) -> Output {
    run_record_env(trace, program, variant, flags, args, true, &[])
}

fn run_record_env(
    trace: &std::path::Path,
    program: &str,
    variant: ebtrace_testdata::Variant,
    flags: &[&str],
    args: &[&str],
    quiet: bool,
    env: &[(&str, &str)],
) -> Output {
    let prog = ebtrace_testdata::build(program, variant).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ebrec"))
        .envs(env.iter().copied())
        .arg("record")
        .args(quiet.then_some("-q"))
        .arg("-o")
        .arg(trace)
        .args(flags)
        .arg("--")
        .arg(&prog)
        .args(args)
        .output()
        .expect("run ebrec");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// (count, bytes) per function of `ebsym top --kind alloc` (or `leaks`) rows: the first frame
/// that is one of `functions` ("other" for rows with none, e.g. the C++ runtime's own).
pub fn by_function(
    report: &Value,
    functions: &[&str],
) -> std::collections::BTreeMap<String, (u64, u64)> {
    let mut out: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
    for row in report["rows"].as_array().unwrap() {
        let f = row["frames"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|f| f["function"].as_str())
            .map(|n| n.split('(').next().unwrap())
            .find(|n| functions.contains(n))
            .unwrap_or("other")
            .to_string();
        let e = out.entry(f).or_default();
        e.0 += row["count"].as_u64().unwrap();
        e.1 += row["bytes"].as_u64().unwrap();
    }
    out
}

/// Every event of one batch kind in the trace at `path` (`select` picks the batches), in
/// order; asserts the trace reads without damage.
pub fn events_of<B: ebtrace_format::events::Family>(
    path: &Path,
    select: impl Fn(ebtrace_format::proto::record::Kind) -> Option<B>,
) -> Vec<B::Event> {
    let mut r = ebtrace_format::TraceReader::open(path).unwrap();
    let mut tables = ebtrace_format::Tables::default();
    let mut out = Vec::new();
    for rec in r.by_ref() {
        if tables.observe(&rec) {
            continue;
        }
        if let Some(b) = rec.kind.and_then(&select) {
            out.extend(b.decode().unwrap());
        }
    }
    assert!(r.damage().is_empty(), "{:?}", r.damage());
    out
}

/// A testdata program started with `--wait`, stopped before its work until [`Waiting::go`].
pub struct Waiting {
    pub child: std::process::Child,
    pub stdout: std::io::BufReader<std::process::ChildStdout>,
    pub pid: u32,
}

/// Starts testdata's `program ARGS --wait` (frame-pointer build) and reads its READY line.
pub fn start_waiting(program: &str, args: &[&str]) -> Waiting {
    let exe = ebtrace_testdata::build(program, ebtrace_testdata::Variant::FramePointer).unwrap();
    start_waiting_exe(&exe, args)
}

/// [`start_waiting`] of the program at `exe`.
pub fn start_waiting_exe(exe: &Path, args: &[&str]) -> Waiting {
    use std::io::BufRead;
    let mut child = Command::new(exe)
        .args(args)
        .arg("--wait")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut ready = String::new();
    stdout.read_line(&mut ready).unwrap();
    assert!(ready.starts_with("READY"), "{}: {ready}", exe.display());
    let pid = child.id();
    Waiting { child, stdout, pid }
}

/// A program left waiting (a test that failed before [`Waiting::go`]) is killed, not left
/// blocked for good.
impl Drop for Waiting {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Waiting {
    /// The program's comm (what `--comm` matches).
    pub fn comm(&self) -> String {
        std::fs::read_to_string(format!("/proc/{}/comm", self.pid))
            .unwrap()
            .trim()
            .to_string()
    }

    /// Lets the program run (SIGUSR1) to its end; its stdout after READY.
    pub fn go(mut self) -> String {
        // SAFETY: kill has no memory preconditions.
        unsafe { libc::kill(self.pid as i32, libc::SIGUSR1) };
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut self.stdout, &mut rest).unwrap();
        assert!(self.child.wait().unwrap().success());
        rest
    }

    /// [`Waiting::go`], then the program's EXPECT line.
    pub fn finish(self, program: &str) -> Value {
        let rest = self.go();
        let out = Output {
            status: std::process::ExitStatus::default(),
            stdout: rest.into_bytes(),
            stderr: Vec::new(),
        };
        expect_line(&out, program)
    }
}

/// A conformance server of ebrec/tests/e2e/conformance/ (`name`.py: pyroscope, parca, otlp) on
/// 127.0.0.1, misbehaving as `faults` says for its first requests; killed when dropped.
pub struct Conformance {
    pub child: std::process::Child,
    pub port: u16,
    pub out: tempfile::TempDir,
}

impl Drop for Conformance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn conformance(name: &str, faults: &str, hang_secs: u32) -> Conformance {
    use std::io::BufRead;
    let out = tempfile::tempdir().unwrap();
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/e2e/conformance/{name}.py"));
    let mut child = Command::new("/usr/bin/python3")
        .arg(&script)
        .arg("--out")
        .arg(out.path())
        .args(["--faults", faults, "--hang-secs", &hang_secs.to_string()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .strip_prefix("LISTENING ")
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name}.py did not start: {line:?}"));
    Conformance { child, port, out }
}

impl Conformance {
    /// The URL of `--push` for this server.
    pub fn url(&self, backend: &str) -> String {
        format!("{backend}+http://127.0.0.1:{}", self.port)
    }

    /// The requests it saw (log.jsonl).
    pub fn log(&self) -> Vec<Value> {
        std::fs::read_to_string(self.out.path().join("log.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The accepted payloads: (N.json parsed, N.pb.gz path when there is one).
    pub fn accepted(&self) -> Vec<(Value, Option<PathBuf>)> {
        (1..)
            .map_while(|n| {
                let j = self.out.path().join(format!("{n}.json"));
                let text = std::fs::read_to_string(&j).ok()?;
                let pb = self.out.path().join(format!("{n}.pb.gz"));
                Some((
                    serde_json::from_str(&text).unwrap(),
                    pb.exists().then_some(pb),
                ))
            })
            .collect()
    }
}

/// What a user checks of a pprof with Go's reader, not symbolizing it locally: sample
/// types, per-type totals, the mappings (file, build-id), the names of the locations, the
/// sample labels.
pub struct Raw {
    pub types: Vec<String>,
    pub totals: Vec<i64>,
    pub mappings: Vec<(String, String)>,
    pub names: Vec<String>,
    pub unnamed_user_locations: usize,
    pub labels: Vec<String>,
}

/// `go tool pprof -raw -symbolize=none` of `profile` (Go's own reader, Debian's golang-go).
/// None (after saying so) when go is missing; a failure when CI=true.
pub fn go_pprof_raw(profile: &Path) -> Option<Raw> {
    let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("go-home");
    std::fs::create_dir_all(&home).unwrap();
    let out = match Command::new("go")
        .args(["tool", "pprof", "-raw", "-symbolize=none"])
        .arg(profile)
        .env("HOME", &home)
        .env("GOCACHE", home.join("cache"))
        .env("PPROF_BINARY_PATH", "/nonexistent")
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            let why = format!("go is not installed (apt-get install golang-go): {e}");
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("{why}, and CI=true: failing instead of skipping");
            }
            eprintln!("\n*** SKIPPED go tool pprof: {why} ***\n");
            return None;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "go tool pprof -raw {}: {}{text}",
        profile.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = text.lines();
    lines.by_ref().find(|l| *l == "Samples:").expect("Samples:");
    let types: Vec<String> = lines
        .next()
        .unwrap()
        .split_whitespace()
        .map(|t| t.trim_end_matches("[dflt]").to_string())
        .collect();
    let mut totals = vec![0i64; types.len()];
    let mut labels = Vec::new();
    for l in lines.by_ref() {
        if l == "Locations" {
            break;
        }
        let values = l.split_once(':').and_then(|(v, _)| {
            v.split_whitespace()
                .map(|x| x.parse::<i64>().ok())
                .collect::<Option<Vec<i64>>>()
        });
        match values {
            Some(values) if !values.is_empty() => {
                assert_eq!(values.len(), totals.len(), "{l}");
                for (t, v) in totals.iter_mut().zip(values) {
                    *t += v;
                }
            }
            _ => labels.extend(l.split_whitespace().map(str::to_string)),
        }
    }
    let mut names = Vec::new();
    let mut unnamed_user_locations = 0;
    for l in lines.by_ref() {
        if l == "Mappings" {
            break;
        }
        // `   6: 0x56390e536d0d M=1 name file:line s=0` (several lines per inline chain).
        let rest = l.trim_start();
        let rest = rest.split_once(": ").map_or(rest, |(_, r)| r);
        let mut w = rest.split_whitespace();
        let first = w.next().unwrap_or("");
        let rest: Vec<&str> = if first.starts_with("0x") {
            let m = w.clone().next().unwrap_or("");
            if m.starts_with("M=") {
                w.next();
            }
            w.collect()
        } else {
            std::iter::once(first).chain(w).collect()
        };
        if rest.is_empty() {
            unnamed_user_locations += 1;
        } else if !rest[0].starts_with(':') {
            names.push(rest[0].to_string());
        }
    }
    // `1: 0xSTART/0xLIMIT/0xOFFSET FILE BUILDID [FN]…`
    let mappings = lines
        .filter_map(|l| {
            let mut w = l.split_whitespace().skip(2);
            Some((w.next()?.to_string(), w.next().unwrap_or("").to_string()))
        })
        .collect();
    Some(Raw {
        types,
        totals,
        mappings,
        names,
        unnamed_user_locations,
        labels,
    })
}
