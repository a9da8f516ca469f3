//! C++ programs with exactly known behaviour, and the code that builds them,
//! for the tests of the recorder and the symbolizer.
//!
//! The sources live in `testdata/cpp/`; each program documents its call tree
//! and options at the top of its file. Every program prints, as its last line
//! on stdout, `EXPECT ` followed by a JSON object with the exact numbers a
//! test should find (call counts, bytes, leaks, addresses, pids), so tests
//! read the expectations instead of hardcoding them. With `--wait`, a program
//! first prints `READY <pid>` and blocks until it receives SIGUSR1, so a
//! tracer can attach with `-p <pid>` before anything interesting happens.
//!
//! [`build`] compiles a program with g++ on first use into
//! `<target dir>/testdata/<program>-<fp|nofp|…>` and reuses the binary until
//! the source (or a header next to it) changes. It is safe to call from many
//! test threads and processes at once.
//!
//! ```no_run
//! use ebtrace_testdata::{build, Variant};
//! use std::process::Command;
//!
//! let exe = build("alloc_workload", Variant::FramePointer).unwrap();
//! let out = Command::new(&exe).args(["--rounds", "2"]).output().unwrap();
//! let stdout = String::from_utf8(out.stdout).unwrap();
//! let expect = stdout
//!     .lines()
//!     .find_map(|line| line.strip_prefix("EXPECT "))
//!     .expect("every program prints an EXPECT line");
//! assert!(expect.contains(r#""leaked_count":10"#));
//! ```

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

/// How a program is compiled. Every variant uses
/// `-O2 -g -pthread -Wl,--build-id -std=c++17`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    /// `-fno-omit-frame-pointer`: stacks can be walked through `rbp`.
    FramePointer,
    /// `-fomit-frame-pointer`: stacks need DWARF CFI (`.eh_frame`) to walk.
    NoFramePointer,
    /// `-fPIE -pie`, whatever the compiler's default: a position-independent executable.
    Pie,
    /// `-fno-pie -no-pie`: an executable linked at a fixed address (ELF virtual
    /// addresses differ from file offsets by the image base, 0x400000).
    NoPie,
    /// `-fPIC -shared`: the whole program as a shared library, `lib<program>.so`
    /// (`main` is then an ordinary exported function), for symbolizing addresses
    /// inside a `.so`. It is not meant to be run.
    SharedLibrary,
}

impl Variant {
    /// Every variant that builds a runnable executable with the default code model, for
    /// tests that run them all.
    pub const ALL: [Variant; 2] = [Variant::FramePointer, Variant::NoFramePointer];

    /// The position-independent executable, the fixed-address one and the shared
    /// library, for tests of address normalization and symbolization.
    pub const LAYOUTS: [Variant; 3] = [Variant::Pie, Variant::NoPie, Variant::SharedLibrary];

    /// The suffix of the binary's file name: `fp`, `nofp`, `pie`, `nopie` or `so`.
    pub fn suffix(self) -> &'static str {
        match self {
            Variant::FramePointer => "fp",
            Variant::NoFramePointer => "nofp",
            Variant::Pie => "pie",
            Variant::NoPie => "nopie",
            Variant::SharedLibrary => "so",
        }
    }

    /// The file name of `program` built in this variant: `<program>-<suffix>`, or
    /// `lib<program>.so` for [`Variant::SharedLibrary`].
    pub fn file_name(self, program: &str) -> String {
        match self {
            Variant::SharedLibrary => format!("lib{program}.so"),
            _ => format!("{program}-{}", self.suffix()),
        }
    }

    /// The complete g++ flags, before `-o <out> <source>`.
    pub fn flags(self) -> &'static [&'static str] {
        match self {
            Variant::FramePointer => &[
                "-O2",
                "-g",
                "-fno-omit-frame-pointer",
                "-pthread",
                "-Wl,--build-id",
                "-std=c++17",
            ],
            Variant::NoFramePointer => &[
                "-O2",
                "-g",
                "-fomit-frame-pointer",
                "-pthread",
                "-Wl,--build-id",
                "-std=c++17",
            ],
            Variant::Pie => &[
                "-O2",
                "-g",
                "-fPIE",
                "-pie",
                "-pthread",
                "-Wl,--build-id",
                "-std=c++17",
            ],
            Variant::NoPie => &[
                "-O2",
                "-g",
                "-fno-pie",
                "-no-pie",
                "-pthread",
                "-Wl,--build-id",
                "-std=c++17",
            ],
            Variant::SharedLibrary => &[
                "-O2",
                "-g",
                "-fPIC",
                "-shared",
                "-pthread",
                "-Wl,--build-id",
                "-std=c++17",
            ],
        }
    }
}

const PROGRAMS: &[&str] = &[
    "alloc_workload",
    "lock_workload",
    "forker",
    "shop",
    "memgrowth",
    "cpu_split",
    "sleeper",
    "condvar_block",
    "selfstack",
    "dlopener",
    "secret_stack",
    "clock_loop",
    "offcpu_blocks",
    "sampled_heap",
    "heap_known",
    "arena_known",
    "syscalls",
    "runq_pair",
    "tcp_conns",
    "idle_pool",
    "alloc_wrapper",
    "usdt_server",
    "request_server",
    "isra_pool",
];

/// The names of all programs in `testdata/cpp/`, as accepted by [`build`].
pub fn programs() -> &'static [&'static str] {
    PROGRAMS
}

/// The C++ source of `program`: `testdata/cpp/<program>.cpp`.
pub fn source_path(program: &str) -> PathBuf {
    cpp_dir().join(format!("{program}.cpp"))
}

/// Compiles `testdata/cpp/<program>.cpp` in `variant` unless an up-to-date
/// binary exists, and returns the binary's path,
/// `<target dir>/testdata/<program>-<suffix>` (`lib<program>.so` for a shared
/// library, see [`Variant::file_name`]).
///
/// The target dir is `$CARGO_TARGET_DIR` if set (a relative one is taken
/// from the workspace root), else `<workspace root>/target`. A binary is up
/// to date when it is not older than the program's source and every header
/// in `testdata/cpp/`. The error includes g++'s stderr.
pub fn build(program: &str, variant: Variant) -> Result<PathBuf, String> {
    build_into(&target_dir().join("testdata"), program, variant)
}

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn cpp_dir() -> PathBuf {
    manifest_dir().join("cpp")
}

fn workspace_root() -> &'static Path {
    manifest_dir()
        .parent()
        .expect("the testdata crate lives inside the workspace")
}

fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => workspace_root().join(dir),
        _ => workspace_root().join("target"),
    }
}

fn build_into(out_dir: &Path, program: &str, variant: Variant) -> Result<PathBuf, String> {
    let valid_name = !program.is_empty()
        && program
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !valid_name {
        return Err(format!("invalid test program name {program:?}"));
    }
    let source = source_path(program);
    if !source.is_file() {
        return Err(format!(
            "no test program {program:?}: {} does not exist",
            source.display()
        ));
    }
    let out = out_dir.join(variant.file_name(program));
    compile_if_stale(&source, &out, variant)
}

fn compile_if_stale(source: &Path, out: &Path, variant: Variant) -> Result<PathBuf, String> {
    let out_dir = out.parent().expect("the output has a directory");
    let stem = out
        .file_name()
        .expect("the output has a name")
        .to_string_lossy();

    // Threads of one process wait for each other instead of all compiling the
    // same program; separate processes may compile it concurrently, which is
    // wasteful but safe thanks to the rename below.
    let lock = output_lock(out);
    let _guard = lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());

    let newest_input = newest_input_mtime(source)?;
    if let Ok(meta) = fs::metadata(out) {
        if meta.modified().is_ok_and(|built| built >= newest_input) {
            return Ok(out.to_path_buf());
        }
    }

    fs::create_dir_all(out_dir).map_err(|e| format!("cannot create {}: {e}", out_dir.display()))?;
    // Same directory as `out`, so the rename is atomic: a concurrent reader
    // sees either the old binary or the complete new one, never a partial one.
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let tmp = out_dir.join(format!(
        ".{stem}.tmp.{}.{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let mut output_arg = OsString::from("-o");
    output_arg.push(&tmp);
    let result = Command::new("g++")
        .args(variant.flags())
        .arg(&output_arg)
        .arg(source)
        .current_dir(cpp_dir())
        .output()
        .map_err(|e| format!("cannot run g++ to build {}: {e}", source.display()));
    let output = match result {
        Ok(output) => output,
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
    };
    if !output.status.success() {
        let _ = fs::remove_file(&tmp);
        return Err(format!(
            "g++ {} failed to build {} ({}):\n{}",
            variant.flags().join(" "),
            source.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim_end()
        ));
    }
    fs::rename(&tmp, out).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        format!("cannot move {} to {}: {e}", tmp.display(), out.display())
    })?;
    Ok(out.to_path_buf())
}

/// The per-output-file lock shared by all threads of this process.
fn output_lock(out: &Path) -> Arc<Mutex<()>> {
    static LOCKS: OnceLock<Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>> = OnceLock::new();
    let mut locks = LOCKS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    Arc::clone(locks.entry(out.to_path_buf()).or_default())
}

/// The latest modification time of the source and of the headers it may
/// include (every `.h` in `testdata/cpp/`).
fn newest_input_mtime(source: &Path) -> Result<SystemTime, String> {
    let mtime = |path: &Path| {
        fs::metadata(path)
            .and_then(|m| m.modified())
            .map_err(|e| format!("cannot stat {}: {e}", path.display()))
    };
    let mut newest = mtime(source)?;
    let dir = cpp_dir();
    let entries = fs::read_dir(&dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry
            .map_err(|e| format!("cannot list {}: {e}", dir.display()))?
            .path();
        if path.extension().is_some_and(|ext| ext == "h") {
            newest = newest.max(mtime(&path)?);
        }
    }
    Ok(newest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use std::thread;

    /// Runs `exe args`, checks it succeeds, and returns every EXPECT object
    /// it printed (forker --exec prints two), in order.
    fn run(exe: &Path, args: &[&str]) -> Vec<Value> {
        let out = Command::new(exe)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()));
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert!(
            out.status.success(),
            "{} {args:?} failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
            exe.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let expects: Vec<Value> = stdout
            .lines()
            .filter_map(|line| line.strip_prefix("EXPECT "))
            .map(|json| serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}")))
            .collect();
        assert!(!expects.is_empty(), "no EXPECT line in:\n{stdout}");
        expects
    }

    fn run_one(exe: &Path, args: &[&str]) -> Value {
        let mut expects = run(exe, args);
        assert_eq!(expects.len(), 1, "{expects:?}");
        expects.pop().unwrap()
    }

    fn u(v: &Value) -> u64 {
        v.as_u64()
            .unwrap_or_else(|| panic!("not an unsigned number: {v}"))
    }

    fn each_variant(program: &str, mut check: impl FnMut(Variant, &Path)) {
        for variant in Variant::ALL {
            let exe = build(program, variant).unwrap();
            check(variant, &exe);
        }
    }

    #[test]
    fn programs_have_sources() {
        for program in programs() {
            assert!(source_path(program).is_file(), "{program}");
        }
    }

    #[test]
    fn alloc_workload_reports_exact_counts() {
        each_variant("alloc_workload", |_, exe| {
            let e = run_one(exe, &["--rounds", "2"]);
            assert_eq!(e["program"], "alloc_workload");
            assert_eq!(u(&e["rounds"]), 2);
            assert_eq!(u(&e["leaked_count"]), 10);
            assert_eq!(u(&e["leaked_bytes"]), 7 * 5000 + 3 * 12000);
            let f = &e["functions"];
            let restock = &f["Warehouse::restock"]["malloc"];
            assert_eq!((u(&restock["calls"]), u(&restock["size"])), (200, 4096));
            assert_eq!(u(&restock["bytes"]), 200 * 4096);
            assert_eq!(u(&f["reserve_block"]["operator new[]"]["calls"]), 100);
            assert_eq!(u(&f["make_table"]["calloc"]["bytes"]), 40 * 16 * 1024);
            assert_eq!(u(&f["grow_buffer"]["malloc"]["calls"]), 2);
            assert_eq!(u(&f["grow_buffer"]["realloc"]["calls"]), 20);
            assert!(f["grow_buffer"]["realloc"].get("size").is_none());
            assert_eq!(u(&f["small_allocs"]["malloc"]["calls"]), 2000);
            assert_eq!(u(&f["aligned_allocs"]["aligned_alloc"]["align"]), 4096);
            assert_eq!(u(&f["leak_some"]["malloc"]["leaked"]), 7);
            assert_eq!(u(&f["leak_more"]["operator new[]"]["leaked"]), 3);

            // Everything allocated outside the leak functions is freed again.
            let mut allocated = 0;
            let mut freed = 0;
            for (function, symbols) in f.as_object().unwrap() {
                for (symbol, site) in symbols.as_object().unwrap() {
                    let bytes = u(&site["bytes"]);
                    match symbol.as_str() {
                        "free" | "operator delete[]" => freed += bytes,
                        // A realloc frees the old block; count only the growth.
                        "realloc" => {}
                        _ if function.starts_with("leak_") => {}
                        _ => allocated += bytes,
                    }
                }
            }
            let realloc_growth = 2 * (20000 - 1000);
            assert_eq!(allocated + realloc_growth, freed);
        });
    }

    #[test]
    fn lock_workload_mutex_mode() {
        each_variant("lock_workload", |_, exe| {
            let args = ["--threads", "3", "--iters", "4", "--hold-us", "200"];
            let e = run_one(exe, &args);
            assert_eq!(e["mode"], "mutex");
            assert_eq!(
                (u(&e["threads"]), u(&e["iters"]), u(&e["hold_us"])),
                (3, 4, 200)
            );
            assert_eq!(u(&e["acquisitions"]), 12);
            assert!(u(&e["total_hold_us"]) >= 12 * 200, "{e}");
            assert!(e["mutex"].as_str().unwrap().starts_with("0x"), "{e}");
        });
    }

    #[test]
    fn lock_workload_condvar_mode() {
        each_variant("lock_workload", |_, exe| {
            let e = run_one(exe, &["--condvar", "--iters", "5"]);
            assert_eq!(e["mode"], "condvar");
            for key in ["pushes", "pops", "notifies"] {
                assert_eq!(u(&e[key]), 5, "{key}");
            }
            assert!(u(&e["waits"]) <= 5);
            assert!(e["condvar"].as_str().unwrap().starts_with("0x"), "{e}");
        });
    }

    #[test]
    fn forker_reports_children_and_threads() {
        each_variant("forker", |_, exe| {
            let e = run_one(exe, &["--children", "3"]);
            assert_eq!(e["program"], "forker");
            let children = e["child_pids"].as_array().unwrap();
            assert_eq!(children.len(), 3);
            assert!(children.iter().all(|pid| u(pid) != u(&e["pid"])));
            assert_eq!(e["thread_tids"].as_array().unwrap().len(), 3);
            assert_eq!(u(&e["functions"]["child_work"]["malloc"]["calls"]), 75);
            assert_eq!(u(&e["functions"]["thread_work"]["malloc"]["calls"]), 30);
            assert!(e["exec"].is_null());
        });
    }

    #[test]
    fn forker_execs_into_alloc_workload() {
        let alloc = build("alloc_workload", Variant::FramePointer).unwrap();
        let alloc = alloc.to_str().unwrap();
        each_variant("forker", |_, exe| {
            let args = ["--children", "1", "--exec", alloc, "--rounds", "1"];
            let expects = run(exe, &args);
            assert_eq!(expects.len(), 2, "{expects:?}");
            let (forker, workload) = (&expects[0], &expects[1]);
            assert_eq!(forker["program"], "forker");
            assert_eq!(forker["exec"]["path"], alloc);
            assert_eq!(forker["exec"]["argv"].as_array().unwrap().len(), 3);
            assert_eq!(workload["program"], "alloc_workload");
            assert_eq!(forker["pid"], workload["pid"], "exec keeps the pid");
        });
    }

    #[test]
    fn alloc_wrapper_reports_its_sites() {
        let exe = build("alloc_wrapper", Variant::FramePointer).unwrap();
        let e = run_one(&exe, &[]);
        assert_eq!(e["program"], "alloc_wrapper");
        let s = &e["sites"];
        assert_eq!(u(&s["parse_headers"]["calls"]), 300);
        assert_eq!(u(&s["parse_headers"]["bytes"]), 300 * 48);
        assert_eq!(u(&s["read_body"]["bytes"]), 120 * 2000);
        assert_eq!(u(&s["read_body"]["leaked_bytes"]), 5 * 2000);
        assert_eq!(u(&s["new_records"]["bytes"]), 40 * 96);
        assert_eq!(s["read_body"]["thread"], "body-1");
    }

    #[test]
    fn shop_runs_briefly() {
        each_variant("shop", |_, exe| {
            let e = run_one(exe, &["--seconds", "0.2", "--threads", "2"]);
            assert_eq!(e["program"], "shop");
            let requests = u(&e["requests"]);
            assert!(requests > 0, "{e}");
            assert_eq!(u(&e["pricing_calls"]), requests);
            assert_eq!(u(&e["sessions_opened"]), requests);
            assert_eq!(u(&e["lookups"]), u(&e["items_added"]));
            assert_eq!(u(&e["slow_lookups"]), u(&e["lookups"]) / 50);
            // Requests are numbered 0..requests; r % 100 == 99 leaks.
            assert_eq!(u(&e["leaked_sessions"]), requests / 100);
            assert_eq!(u(&e["leaked_bytes"]), u(&e["leaked_sessions"]) * 2048);
        });
    }

    #[test]
    fn clock_loop_counts_its_reads() {
        each_variant("clock_loop", |_, exe| {
            let e = run_one(exe, &["--seconds", "0.1"]);
            assert_eq!(e["program"], "clock_loop");
            let rounds = u(&e["rounds"]);
            assert!(rounds > 0, "{e}");
            assert_eq!(u(&e["clock_reads"]), rounds * 40000);
            assert_eq!(u(&e["hashes"]), rounds * 4000);
            assert_eq!(u(&e["ticks"]), rounds * 100);
            let e = run_one(exe, &["--seconds", "10", "--rounds", "3"]);
            assert_eq!(u(&e["rounds"]), 3);
            assert_eq!(u(&e["clock_reads"]), 3 * 40000);
        });
    }

    #[test]
    fn syscalls_reports_its_calls() {
        let dir = target_dir().join(format!("testdata-syscalls-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        each_variant("syscalls", |_, exe| {
            let e = run_one(exe, &["--fast", "1000", "--sleeps", "3", "--sleep-ms", "2"]);
            assert_eq!(e["program"], "syscalls");
            assert_eq!(e["tid"], e["pid"], "one thread makes the calls");
            assert_eq!(
                (u(&e["fast"]), u(&e["sleeps"]), u(&e["sleep_ms"])),
                (1000, 3, 2)
            );
            let sleeps = e["sleep_durations_ns"].as_array().unwrap();
            assert_eq!(sleeps.len(), 3);
            assert!(sleeps.iter().all(|d| u(d) >= 2_000_000), "{e}");
            assert_eq!(u(&e["fsyncs"]), 0);
            assert!(e["fsync_durations_ns"].as_array().unwrap().is_empty());
            assert!(e["file"].is_null() && e["dev"].is_null(), "{e}");

            let d = dir.to_str().unwrap();
            let e = run_one(
                exe,
                &["--fast", "0", "--sleeps", "0", "--fsyncs", "2", "--dir", d],
            );
            assert_eq!(u(&e["fsyncs"]), 2);
            assert_eq!(e["fsync_durations_ns"].as_array().unwrap().len(), 2);
            assert_eq!(u(&e["bytes_per_fsync"]), 4096);
            let file = e["file"].as_str().unwrap();
            assert_eq!(file, format!("{d}/syscalls.{}.tmp", e["pid"]));
            assert!(!Path::new(file).exists(), "{file} is removed");
            let dev = e["dev"].as_str().unwrap();
            let (major, minor) = dev.split_once(':').unwrap();
            assert!(
                major.parse::<u32>().is_ok() && minor.parse::<u32>().is_ok(),
                "{dev}"
            );
        });
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn runq_pair_shares_one_cpu() {
        each_variant("runq_pair", |_, exe| {
            let e = run_one(exe, &["--seconds", "0.3", "--cpu", "0"]);
            assert_eq!(e["program"], "runq_pair");
            assert_eq!(u(&e["cpu"]), 0);
            assert_eq!(e["seconds"].as_f64(), Some(0.3));
            let (a, b) = (u(&e["tids"]["a"]), u(&e["tids"]["b"]));
            assert!(a != b && a != u(&e["pid"]) && b != u(&e["pid"]), "{e}");
            let wall = u(&e["wall_ns"]);
            assert!(wall >= 300_000_000, "{e}");
            let (ca, cb) = (u(&e["cpu_ns"]["a"]), u(&e["cpu_ns"]["b"]));
            // One CPU for both: together at most the wall time (plus clock
            // granularity), and each got a fair part of it.
            assert!(ca + cb <= wall + 10_000_000, "{e}");
            assert!(ca > wall / 5 && cb > wall / 5, "{e}");
        });
    }

    #[test]
    fn tcp_conns_reports_connections() {
        each_variant("tcp_conns", |_, exe| {
            let e = run_one(exe, &["--conns", "3", "--hold-ms", "10", "--bytes", "3000"]);
            assert_eq!(e["program"], "tcp_conns");
            assert_eq!(u(&e["conns"]), 3);
            assert_eq!((u(&e["bytes_sent"]), u(&e["bytes_received"])), (3000, 1500));
            let port = u(&e["port"]);
            assert!(port > 0 && port < 65536, "{e}");
            let holds: Vec<u64> = e["hold_ms"].as_array().unwrap().iter().map(u).collect();
            assert_eq!(holds, [10, 20, 30]);
            let lifetimes = e["lifetimes_ns"].as_array().unwrap();
            assert_eq!(lifetimes.len(), 3);
            for (life, hold) in lifetimes.iter().zip(&holds) {
                assert!(u(life) >= hold * 1_000_000, "{e}");
            }
            let ports = e["client_ports"].as_array().unwrap();
            assert_eq!(ports.len(), 3);
            assert!(ports.iter().all(|p| u(p) != port && u(p) > 0), "{e}");
            assert_ne!(e["client_tid"], e["server_tid"]);
            assert!(u(&e["refused_port"]) > 0);
            assert_eq!(u(&e["refused_errno"]), 111);
        });
    }

    #[test]
    fn request_server_plants_its_slow_requests() {
        each_variant("request_server", |_, exe| {
            let dir = std::env::temp_dir();
            let e = run_one(
                exe,
                &[
                    "--requests",
                    "250",
                    "--workers",
                    "3",
                    "--dir",
                    dir.to_str().unwrap(),
                ],
            );
            assert_eq!(e["program"], "request_server");
            assert_eq!(u(&e["requests"]), 250);
            // ids 10, 110, 210 wait for the ledger; 20, 120, 220 fsync; ...
            for k in ["lock", "fsync", "cpu", "condvar"] {
                assert_eq!(u(&e["slow"][k]), 3, "{k}: {e}");
            }
        });
    }

    #[test]
    fn usdt_server_reports_its_requests_and_probes() {
        each_variant("usdt_server", |_, exe| {
            let e = run_one(exe, &["--requests", "25", "--throw-every", "10"]);
            assert_eq!(e["program"], "usdt_server");
            assert_eq!(u(&e["requests"]), 25);
            // Ids 0, 10 and 20 throw; each is caught twice (once rethrown).
            assert_eq!((u(&e["throws"]), u(&e["rethrows"])), (3, 3));
            assert_eq!(u(&e["catches"]), 6);
            // No tracer: the guarded probe's semaphore stays 0.
            assert_eq!(u(&e["slow_enabled"]), 0);
            let probes = e["probes"].as_array().unwrap();
            assert_eq!(probes.len(), 4);
            let out = Command::new("readelf").arg("-n").arg(exe).output().unwrap();
            let notes = String::from_utf8(out.stdout).unwrap();
            for p in probes {
                let name = p["name"].as_str().unwrap();
                assert!(
                    notes.contains(&format!("Name: {name}\n")),
                    "{name}: {notes}"
                );
            }
            let e = run_one(exe, &["--requests", "5", "--throw-every", "0"]);
            assert_eq!((u(&e["throws"]), u(&e["catches"])), (0, 0));
        });
    }

    /// The token is 64 bytes, made from the seed at run time: the same for a seed,
    /// another for another, and in no byte of the binary.
    #[test]
    fn secret_stack_makes_its_token_at_run_time() {
        each_variant("secret_stack", |_, exe| {
            let token = |seed: &str| {
                let e = run_one(exe, &["--seed", seed, "--allocs", "3"]);
                assert_eq!(e["program"], "secret_stack");
                assert_eq!(e["seed"], seed);
                assert_eq!(u(&e["allocs"]), 3);
                assert_eq!(u(&e["token_bytes"]), 64);
                e["token"].as_str().unwrap().to_string()
            };
            let (a, b) = (token("12345"), token("12346"));
            assert_eq!(a, token("12345"));
            assert_ne!(a, b);
            for t in [&a, &b] {
                assert_eq!(t.len(), 64, "{t}");
                let hex = t.strip_prefix("EBTRACE-SECRET-TOKEN-").unwrap();
                assert!(hex.bytes().all(|c| c.is_ascii_hexdigit()), "{t}");
            }
            let binary = fs::read(exe).unwrap();
            assert!(!binary.windows(64).any(|w| w == a.as_bytes()));
        });
    }

    /// `--wait`: READY comes first, nothing runs until SIGUSR1.
    #[test]
    fn wait_blocks_until_sigusr1() {
        for program in programs() {
            let exe = build(program, Variant::FramePointer).unwrap();
            let extra: &[&str] = match *program {
                "alloc_workload" => &["--rounds", "1"],
                "lock_workload" => &["--iters", "1", "--hold-us", "10"],
                "shop" => &["--seconds", "0.05"],
                "memgrowth" => &["--map-mib", "1", "--touch-pages", "1", "--heap-blocks", "1"],
                "cpu_split" => &["--seconds", "0.1"],
                "sleeper" => &["--calls", "1", "--ms", "1", "--depth", "1"],
                "condvar_block" => &["--ms", "10"],
                "dlopener" => &["--times", "0", "/nonexistent.so"],
                "clock_loop" => &["--seconds", "0.05"],
                "sampled_heap" => &["--churn", "1"],
                "syscalls" => &["--fast", "10", "--sleeps", "1", "--sleep-ms", "1"],
                "runq_pair" => &["--seconds", "0.05"],
                "tcp_conns" => &["--conns", "1", "--hold-ms", "1", "--bytes", "100"],
                "idle_pool" => &["--seconds", "0.05"],
                "usdt_server" => &["--requests", "3"],
                "request_server" => &["--requests", "3", "--workers", "1"],
                _ => &[],
            };
            let mut child = Command::new(&exe)
                .arg("--wait")
                .args(extra)
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let mut stdout = BufReader::new(child.stdout.take().unwrap());
            let mut line = String::new();
            stdout.read_line(&mut line).unwrap();
            assert_eq!(line, format!("READY {}\n", child.id()), "{program}");
            // Still blocked: nothing more has been printed and it is running.
            thread::sleep(std::time::Duration::from_millis(50));
            assert!(
                child.try_wait().unwrap().is_none(),
                "{program} did not wait"
            );
            let kill = Command::new("kill")
                .args(["-USR1", &child.id().to_string()])
                .status()
                .unwrap();
            assert!(kill.success());
            line.clear();
            stdout.read_line(&mut line).unwrap();
            assert!(line.starts_with("EXPECT {"), "{program}: {line}");
            let v: Value = serde_json::from_str(line["EXPECT ".len()..].trim_end()).unwrap();
            assert_eq!(u(&v["pid"]), u64::from(child.id()), "{program}");
            assert!(child.wait().unwrap().success(), "{program}");
        }
    }

    /// Every noinline function a test may look for is a symbol of its own,
    /// not inlined, cloned or folded.
    #[test]
    fn named_functions_are_symbols() {
        let expected: &[(&str, &[&str])] = &[
            (
                "alloc_workload",
                &[
                    "run_alloc(long)",
                    "Warehouse::restock()",
                    "reserve_block(Round&)",
                    "make_table(Round&)",
                    "grow_buffer(Round&)",
                    "small_allocs()",
                    "aligned_allocs(Round&)",
                    "leak_some()",
                    "leak_more()",
                    "release_round(Round&)",
                ],
            ),
            (
                "lock_workload",
                &[
                    "run_ledger(long, long, long)",
                    "ledger_worker(long, long, WorkerStats*)",
                    "Ledger::post(long, WorkerStats&)",
                    "Ledger::audit()",
                    "run_condvar(long)",
                    "producer_loop(Queue*, long)",
                    "consumer_loop(Queue*, long)",
                    "Queue::push(long)",
                    "Queue::pop()",
                ],
            ),
            (
                "forker",
                &[
                    "spawn_children(long)",
                    "child_work()",
                    "run_threads()",
                    "thread_work(int)",
                ],
            ),
            (
                "shop",
                &[
                    "run_shop(double, long)",
                    "shop::Server::worker_loop(long, shop::WorkerStats*)",
                    "shop::Server::handle_request(unsigned long, shop::WorkerStats&)",
                    "shop::Catalog::lookup(unsigned long)",
                    "shop::Catalog::slow_lookup(unsigned long)",
                    "shop::Cart::add_item(unsigned long, unsigned long, unsigned long)",
                    "shop::Session::open(unsigned long)",
                    "shop::Session::close(shop::Session*)",
                    "shop::Pricing::compute(shop::Cart const&)",
                ],
            ),
            (
                "memgrowth",
                &[
                    "grow::map_region(unsigned long)",
                    "grow::touch_pages(char*, long, long)",
                    "grow::heap_grow(long, std::vector<void*, std::allocator<void*> >*)",
                    "grow::unmap_region(char*, unsigned long)",
                ],
            ),
            (
                "cpu_split",
                &[
                    "split::hot_a(unsigned long, long)",
                    "split::hot_b(unsigned long, long)",
                ],
            ),
            (
                "sleeper",
                &[
                    "sleeper::nap(int)",
                    "sleeper::recurse(int, int, long*)",
                    "sleeper::fail(int)",
                    "sleeper::route(long)",
                ],
            ),
            (
                "condvar_block",
                &[
                    "cv::wait_for_signal(cv::Channel*, long)",
                    "cv::signal_after(cv::Channel*, int)",
                ],
            ),
            (
                "dlopener",
                &["dl::cycle(char const*, std::vector<char*, std::allocator<char*> >*)"],
            ),
            (
                "secret_stack",
                &[
                    "secret::make_token(unsigned long, char*)",
                    "secret::allocate_with_token(char const*, long, long)",
                    "secret::hold_token(unsigned long, long, long)",
                ],
            ),
            (
                "clock_loop",
                &[
                    "clockloop::read_clock(long)",
                    "clockloop::tick(unsigned long)",
                    "clockloop::hash_text(long, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const&)",
                    "clockloop::timed_round(clockloop::Counts*, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const&)",
                    "run_clock(double, long, clockloop::Counts*)",
                ],
            ),
            (
                "selfstack",
                &[
                    "selfstack::capture(char const*)",
                    "selfstack::compare(void const*, void const*)",
                    "selfstack::via_qsort(int)",
                    "selfstack::level_lambda(int)",
                    "selfstack::via_function(int)",
                    "selfstack::once_body()",
                    "selfstack::via_call_once()",
                    "selfstack::via_signal()",
                    "selfstack::deep(int)",
                    "selfstack::thread_main()",
                    "selfstack::run_scenarios()",
                ],
            ),
            (
                "offcpu_blocks",
                &[
                    "offcpu::sleeper_a(int)",
                    "offcpu::reader_b(int)",
                    "offcpu::writer_c(int, int)",
                    "offcpu::pingpong_d(int, int, long)",
                    "offcpu::pingpong_e(int, int, long)",
                ],
            ),
            (
                "sampled_heap",
                &[
                    "big_blocks()",
                    "small_churn(long)",
                    "medium()",
                    "kinds()",
                    "thread_churn()",
                    "child_blocks()",
                ],
            ),
            (
                "heap_known",
                &[
                    "run()",
                    "leak_some()",
                    "temp_loop()",
                    "pairs()",
                    "grow()",
                    "hold_peak()",
                    "hold_other()",
                    "release_peak()",
                ],
            ),
            (
                "arena_known",
                &[
                    "pool::Arena::grow()",
                    "pool::Arena::Allocate(unsigned long)",
                    "pool::Arena::Free(void*)",
                    "pool::Arena::release_chunks()",
                    "arena_leak()",
                    "arena_temp()",
                    "arena_keep()",
                    "arena_release()",
                    "run()",
                ],
            ),
            (
                "syscalls",
                &[
                    "run_syscalls(long, int, long, long, char const*)",
                    "sys::fast_calls(long)",
                    "sys::sleeper(int)",
                    "sys::sleep_loop(long, int, std::vector<long, std::allocator<long> >*)",
                    "sys::syncer(int)",
                    "sys::sync_loop(int, long, std::vector<long, std::allocator<long> >*)",
                    "sys::nap_a(int)",
                    "sys::nap_b(int)",
                    "sys::pair_loop(long, int)",
                ],
            ),
            (
                "runq_pair",
                &[
                    "run_pair(double, int)",
                    "runq::burner_a(long)",
                    "runq::burner_b(long)",
                    "runq::thread_main(int, bool, runq::Burn*)",
                ],
            ),
            (
                "tcp_conns",
                &[
                    "run_tcp(long, long, long)",
                    "tcpt::server_loop(int, long, long, long*)",
                    "tcpt::accept_one(int)",
                    "tcpt::client_loop(unsigned short, long, long, long, tcpt::ClientResult*)",
                    "tcpt::connect_one(unsigned short, long, long, std::vector<char, std::allocator<char> >*, long*)",
                    "tcpt::connect_refused(long*)",
                ],
            ),
            (
                "idle_pool",
                &[
                    "run_idle_pool(double)",
                    "net::accept_loop(int, std::atomic<long>*)",
                    "net::event_loop(int, int, std::atomic<long>*)",
                    "driver::submit_rounds(pool::ThreadPool*, contend::Ledger*, double)",
                ],
            ),
            (
                "alloc_wrapper",
                &[
                    "my_alloc(unsigned long)",
                    "pool_take(unsigned long)",
                    "parse_headers()",
                    "read_body()",
                    "build_index()",
                    "new_records()",
                ],
            ),
            (
                "usdt_server",
                &[
                    "shop::slow_request(long, int)",
                    "shop::handle(long, int, long)",
                    "shop::serve(long, int, long, shop::Bounds)",
                    "shop::serve_one(long, long)",
                    "shop::serve_all(long, long)",
                ],
            ),
            (
                "request_server",
                &[
                    "rsrv::wait_for_ledger()",
                    "rsrv::persist_order(long)",
                    "rsrv::compute_discount()",
                    "rsrv::await_timer()",
                    "rsrv::quick_lookup()",
                    "rsrv::handle_request(long)",
                    "rsrv::worker_loop(int, long)",
                    "rsrv::holder_loop()",
                ],
            ),
            (
                // drop's only copy is GCC's clone (its `this` dropped): what the
                // --alloc-fn clone test is about
                "isra_pool",
                &[
                    "store::(anonymous namespace)::Pool::grab(unsigned long)",
                    "store::(anonymous namespace)::Pool::drop(void*) [clone .constprop.0]",
                ],
            ),
        ];
        assert_eq!(expected.len(), programs().len());
        for (program, functions) in expected {
            each_variant(program, |variant, exe| {
                let out = Command::new("nm").arg("-C").arg(exe).output().unwrap();
                assert!(out.status.success());
                let nm = String::from_utf8(out.stdout).unwrap();
                let text_symbols: Vec<&str> = nm
                    .lines()
                    .filter_map(|line| {
                        let mut parts = line.splitn(3, ' ');
                        let (_addr, kind, name) = (parts.next()?, parts.next()?, parts.next()?);
                        matches!(kind, "t" | "T").then_some(name)
                    })
                    .collect();
                for function in *functions {
                    let n = text_symbols.iter().filter(|s| *s == function).count();
                    assert_eq!(n, 1, "{program} {variant:?}: {function} appears {n} times");
                }
            });
        }
    }

    /// No warnings with -Wall -Wextra, checked without generating code.
    #[test]
    fn sources_compile_without_warnings() {
        for program in programs() {
            let out = Command::new("g++")
                .args(["-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror"])
                .arg(source_path(program))
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{program}:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    /// Many threads asking for the same fresh binary all get a complete one.
    #[test]
    fn concurrent_builds_agree() {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = target_dir().join(format!(
            "testdata-concurrency-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let paths: Vec<PathBuf> = thread::scope(|s| {
            let handles: Vec<_> = (0..6)
                .map(|_| s.spawn(|| build_into(&dir, "forker", Variant::NoFramePointer)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap().unwrap())
                .collect()
        });
        assert!(paths.windows(2).all(|w| w[0] == w[1]));
        run_one(&paths[0], &["--children", "1"]);
        let leftovers: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers.len(), 1, "temporary files left: {leftovers:?}");
        fs::remove_dir_all(&dir).unwrap();
    }

    /// The layout variants are what they say (the ELF type from `readelf -h`), and
    /// the two executables run.
    #[test]
    fn layout_variants() {
        let elf_type = |path: &Path| {
            let out = Command::new("readelf")
                .arg("-h")
                .arg(path)
                .output()
                .unwrap();
            assert!(out.status.success());
            let text = String::from_utf8(out.stdout).unwrap();
            let line = text.lines().find(|l| l.trim_start().starts_with("Type:"));
            line.unwrap().split_whitespace().nth(1).unwrap().to_string()
        };
        for variant in Variant::LAYOUTS {
            let bin = build("forker", variant).unwrap();
            let name = bin.file_name().unwrap().to_str().unwrap().to_string();
            assert_eq!(name, variant.file_name("forker"));
            match variant {
                Variant::SharedLibrary => {
                    assert_eq!(name, "libforker.so");
                    assert_eq!(elf_type(&bin), "DYN");
                }
                Variant::Pie => {
                    assert_eq!(elf_type(&bin), "DYN");
                    run_one(&bin, &["--children", "1"]);
                }
                Variant::NoPie => {
                    assert_eq!(elf_type(&bin), "EXEC");
                    run_one(&bin, &["--children", "1"]);
                }
                _ => unreachable!(),
            }
        }
    }

    #[test]
    fn unknown_programs_are_errors() {
        let err = build("no_such_program", Variant::FramePointer).unwrap_err();
        assert!(err.contains("no_such_program"), "{err}");
        assert!(build("../cpp/forker", Variant::FramePointer).is_err());
    }

    #[test]
    fn compile_errors_include_gxx_stderr() {
        let dir = target_dir().join(format!("testdata-broken-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let source = dir.join("broken.cpp");
        fs::write(&source, "int main() { return undeclared_identifier; }\n").unwrap();
        let result = compile_if_stale(&source, &dir.join("broken-fp"), Variant::FramePointer);
        let leftovers = fs::read_dir(&dir).unwrap().count();
        fs::remove_dir_all(&dir).unwrap();
        let err = result.unwrap_err();
        assert!(err.contains("undeclared_identifier"), "{err}");
        assert_eq!(leftovers, 1, "only the source should remain");
    }
}
