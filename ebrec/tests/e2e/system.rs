//! The system families end to end (--syscalls, --bio, --runq, --tcp), each beside bpftrace
//! on the same run: a testdata program waits (`--wait`) while ebrec and a bpftrace program
//! attach to it by pid, then runs; ebsym's reports must count what the program says it
//! did and what bpftrace saw. Needs root (skips loudly without it; fails when CI=true).
//!
//! - syscalls: F getppid calls and N nanosleeps of 5 ms (and M fsyncs): exact counts per
//!   syscall in `latency --kind syscall`, the nanosleeps' percentiles in the 5 ms log2
//!   bucket, the slow calls' stacks naming sys::sleeper and its caller; the heat map holds
//!   the same counts.
//! - bio: the fsyncs' writes on the real disk, issued by the program's thread, with the
//!   fsync's kernel path and sys::syncer in the stack; requests and bytes as bpftrace's
//!   block_io_start counts them.
//! - runq: two CPU-bound threads pinned to one CPU: each waits about the time the other
//!   runs, preempted in runq::burner_a/b.
//! - tcp: K connections of known lifetimes and bytes to a listener on 127.0.0.1, and a
//!   connect to a closed port.

use crate::common;
use common::{ebsym_json, expect_line, root};
use ebtrace_format::proto::{record::Kind, EventFamily};
use ebtrace_format::TraceReader;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const MS: u64 = 1_000_000;

/// bpftrace's tracepoints need tracefs, which a fresh machine may not have mounted.
fn tracefs() {
    if Path::new("/sys/kernel/tracing/events").exists() {
        return;
    }
    let _ = Command::new("mount")
        .args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"])
        .status();
    assert!(
        Path::new("/sys/kernel/tracing/events").exists(),
        "tracefs is not mounted at /sys/kernel/tracing and could not be"
    );
}

/// A bpftrace program running with JSON output, attached.
struct Bpftrace {
    child: Child,
}

impl Bpftrace {
    fn start(script: &str) -> Bpftrace {
        tracefs();
        let mut child = Command::new("bpftrace")
            .args(["-f", "json", "-e", script])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("bpftrace (apt-get install bpftrace; scripts/setup test installs it)");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut line = String::new();
        loop {
            line.clear();
            assert!(
                out.read_line(&mut line).unwrap() > 0 && Instant::now() < deadline,
                "bpftrace did not attach: {script}"
            );
            if line.contains("attached_probes") {
                break;
            }
        }
        // The rest of stdout is read at the end.
        child.stdout = Some(out.into_inner());
        Bpftrace { child }
    }

    /// Stops it (SIGINT prints the maps) and returns map name -> key -> value.
    fn finish(mut self) -> std::collections::BTreeMap<String, Value> {
        // SIGINT prints the maps. bpftrace 0.17 now and then misses one (seen here: a test
        // waited 20 minutes on a bpftrace asleep in epoll_wait; a second SIGINT ended it),
        // so it is sent again every 5 s, three times at most, before giving up.
        let mut stdout = self.child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = std::io::Read::read_to_end(&mut stdout, &mut v);
            v
        });
        let mut exited = false;
        for _ in 0..3 {
            // SAFETY: plain kill(2).
            unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if self.child.try_wait().unwrap().is_some() {
                    exited = true;
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            if exited {
                break;
            }
        }
        if !exited {
            let _ = self.child.kill();
            let _ = self.child.wait();
            panic!("bpftrace did not stop on SIGINT three times in 15 s");
        }
        let out = Output {
            status: self.child.wait().unwrap(),
            stdout: reader.join().unwrap(),
            stderr: Vec::new(),
        };
        let mut maps = std::collections::BTreeMap::new();
        for l in String::from_utf8_lossy(&out.stdout).lines() {
            let Ok(v) = serde_json::from_str::<Value>(l) else {
                continue;
            };
            if v["type"] == "map" {
                if let Some(o) = v["data"].as_object() {
                    for (k, val) in o {
                        maps.insert(k.clone(), val.clone());
                    }
                }
            }
        }
        maps
    }
}

/// One run of a testdata program under ebrec (`flags`, by pid) and a bpftrace `script`
/// (`$PID` replaced by the program's pid); ebrec's trace, the program's output and
/// bpftrace's maps.
struct Run {
    trace: std::path::PathBuf,
    out: Output,
    bt: std::collections::BTreeMap<String, Value>,
    _dir: tempfile::TempDir,
}

fn run_beside(program: &str, args: &[&str], flags: &[&str], script: &str) -> Run {
    let prog = ebtrace_testdata::build(program, ebtrace_testdata::Variant::FramePointer).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.pb.zst");
    let mut target = Command::new(&prog)
        .args(args)
        .arg("--wait")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(target.stdout.take().unwrap());
    let mut ready = String::new();
    stdout.read_line(&mut ready).unwrap();
    assert!(ready.starts_with("READY"), "{program}: {ready}");
    let pid = target.id().to_string();
    let bt = Bpftrace::start(&script.replace("$PID", &pid));
    let mut rec = Command::new(env!("CARGO_BIN_EXE_ebrec"))
        .args(["record", "-q", "-o", trace.to_str().unwrap()])
        .args(flags)
        .args(["-p", &pid])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(rec.stderr.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "ebrec ended before recording"
        );
        if line.starts_with("ebrec: recording") {
            break;
        }
    }
    // SAFETY: plain kill(2).
    unsafe { libc::kill(target.id() as i32, libc::SIGUSR1) };
    let mut rest = Vec::new();
    std::io::Read::read_to_end(&mut stdout, &mut rest).unwrap();
    let status = target.wait().unwrap();
    let mut stderr = Vec::new();
    std::io::Read::read_to_end(target.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{program}: {status}");
    // ebrec stops by itself when its target exits.
    let rs = rec.wait().unwrap();
    let mut tail = String::new();
    std::io::Read::read_to_string(&mut err, &mut tail).unwrap();
    assert!(rs.success(), "ebrec: {tail}");
    let bt = bt.finish();
    Run {
        trace,
        out: Output {
            status,
            stdout: [ready.into_bytes(), rest].concat(),
            stderr,
        },
        bt,
        _dir: dir,
    }
}

/// A bpftrace map value for `key` (0 when absent).
fn bt_u64(maps: &std::collections::BTreeMap<String, Value>, map: &str, key: &str) -> u64 {
    match maps.get(map) {
        Some(Value::Object(o)) => o.get(key).and_then(Value::as_u64).unwrap_or(0),
        Some(v) if key.is_empty() => v.as_u64().unwrap_or(0),
        _ => 0,
    }
}

/// The family's stats (hits, kept, filtered) of the trace's last Stats record.
fn stats(path: &Path, family: EventFamily) -> (u64, u64, u64) {
    let mut out = (0, 0, 0);
    for rec in TraceReader::open(path).unwrap().by_ref() {
        if let Some(Kind::Stats(s)) = &rec.kind {
            for f in &s.families {
                if f.family == family as i32 {
                    out = (f.hits, f.kept, f.filtered);
                }
            }
        }
    }
    out
}

/// The latency report's row named `name`.
fn lat_row<'a>(report: &'a Value, name: &str) -> Option<&'a Value> {
    report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
}

/// The user functions of a row's frames (demangled, without parameters), leaf first.
fn user_functions(row: &Value) -> Vec<String> {
    row["frames"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["module"] != "[kernel]")
        .map(|f| {
            let n = f["function"].as_str().unwrap_or("");
            n.split('(').next().unwrap_or(n).to_string()
        })
        .collect()
}

fn kernel_functions(row: &Value) -> Vec<String> {
    row["frames"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["module"] == "[kernel]")
        .map(|f| f["function"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Whether `f` has `callee` and, somewhere after it, `caller`.
fn calls(f: &[String], callee: &str, caller: &str) -> bool {
    f.iter()
        .position(|x| x == callee)
        .is_some_and(|i| f[i + 1..].iter().any(|x| x == caller))
}

/// The events a heat map SVG's cells hold, summed over the cells whose tooltip
/// ("t=1.20-1.30 s, 4-8 ms: 17 events") contains `what` ("" for all cells).
fn tooltip_counts(svg: &str, what: &str) -> u64 {
    svg.split("<title>")
        .skip(1)
        .filter_map(|s| s.split("</title>").next())
        .filter(|s| s.starts_with("t=") && s.contains(what))
        .filter_map(|s| {
            s.rsplit(": ")
                .next()?
                .split(' ')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// A directory on a real block device (the fsyncs must reach a disk, not tmpfs).
fn disk_dir() -> Option<&'static str> {
    ["/var/tmp", "/tmp", "/root"].into_iter().find(|d| {
        let Ok(m) = std::fs::metadata(d) else {
            return false;
        };
        let dev = std::os::unix::fs::MetadataExt::dev(&m);
        let (major, minor) = (libc::major(dev), libc::minor(dev));
        major != 0 && Path::new(&format!("/sys/dev/block/{major}:{minor}")).exists()
    })
}

#[test]
fn syscalls_counted_exactly_with_slow_stacks_and_bpftrace_agrees() {
    if !root() {
        return;
    }
    let (fast, sleeps) = (20000u64, 8u64);
    let run = run_beside(
        "syscalls",
        &["--fast", "20000", "--sleeps", "8", "--sleep-ms", "5"],
        &["--syscalls=1000", "--syscalls-sample=0"],
        "tracepoint:raw_syscalls:sys_enter /pid == $PID/ { @start[tid] = nsecs; } \
         tracepoint:raw_syscalls:sys_exit /pid == $PID && @start[tid]/ { \
           @n[args->id] = count(); \
           if (nsecs - @start[tid] >= 1000000) { @slow[args->id] = count(); } \
           delete(@start[tid]); }",
    );
    let expect = expect_line(&run.out, "syscalls");
    assert_eq!(expect["fast"].as_u64(), Some(fast));
    assert_eq!(expect["sleeps"].as_u64(), Some(sleeps));
    let t = run.trace.to_str().unwrap();

    // Every call, in the kernel's histograms: getppid (110) and nanosleep (35) exactly as
    // many as the program made, and as bpftrace counted.
    let lat = ebsym_json(&["latency", t, "--kind", "syscall", "-n", "1000"]);
    let getppid = lat_row(&lat, "getppid").expect("a getppid row");
    assert_eq!(getppid["count"].as_u64(), Some(fast), "{getppid}");
    assert_eq!(bt_u64(&run.bt, "@n", "110"), fast, "bpftrace: {:?}", run.bt);
    let ns = lat_row(&lat, "nanosleep").expect("a nanosleep row");
    assert_eq!(ns["count"].as_u64(), Some(sleeps), "{ns}");
    assert_eq!(bt_u64(&run.bt, "@n", "35"), sleeps);
    // Each syscall's count equals bpftrace's, for every syscall the program made.
    for r in lat["rows"].as_array().unwrap() {
        let nr = r["key"].as_u64().unwrap().to_string();
        assert_eq!(
            r["count"].as_u64().unwrap(),
            bt_u64(&run.bt, "@n", &nr),
            "{} (nr {nr}): ebrec {} bpftrace {:?}",
            r["name"],
            r["count"],
            run.bt.get("@n")
        );
    }
    // The 5 ms naps: percentiles within the log2 bucket that holds 5 ms, [2^22, 2^23) ns,
    // and no more than the longest nap the program measured around the call.
    let measured: Vec<u64> = expect["sleep_durations_ns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let longest = *measured.iter().max().unwrap();
    for p in ["p50_ns", "p90_ns", "p99_ns", "max_ns"] {
        let v = ns[p].as_u64().unwrap();
        assert!(
            (5 * MS..=longest).contains(&v) || (p != "max_ns" && (1 << 22..1 << 23).contains(&v)),
            "{p} {v} (longest {longest}): {ns}"
        );
    }
    assert!(ns["max_ns"].as_u64().unwrap() >= 5 * MS);
    // The log2 histogram: every nap in it, none faster than the bucket of 5 ms.
    let bins = ns["histogram"].as_array().unwrap();
    assert_eq!(
        bins.iter()
            .map(|b| b["count"].as_u64().unwrap())
            .sum::<u64>(),
        sleeps,
        "{bins:?}"
    );
    assert!(
        bins.iter()
            .filter(|b| b["count"].as_u64() != Some(0))
            .all(|b| b["low"].as_u64().unwrap() >= 1 << 22),
        "{bins:?}"
    );

    // The slow calls (>= 1 ms) are events with the caller's stack: every nap, under
    // sys::sleeper called by sys::sleep_loop; as many slow nanosleeps as bpftrace saw.
    let top = ebsym_json(&["top", t, "--kind", "syscall", "-n", "1000"]);
    let mut naps = 0;
    for r in top["rows"].as_array().unwrap() {
        if r["syscall"] == "nanosleep" {
            let f = user_functions(r);
            assert!(calls(&f, "sys::sleeper", "sys::sleep_loop"), "{f:?}");
            naps += r["count"].as_u64().unwrap();
        }
        assert!(r["p50_ns"].as_u64().unwrap() >= MS, "{r}");
    }
    assert_eq!(naps, sleeps, "{top:#}");
    assert_eq!(bt_u64(&run.bt, "@slow", "35"), sleeps);
    let (hits, kept, filtered) = stats(&run.trace, EventFamily::Syscall);
    assert_eq!(
        hits,
        kept + filtered,
        "hits {hits} kept {kept} filtered {filtered}"
    );
    assert!(kept >= sleeps && hits >= fast + sleeps, "{hits} {kept}");

    // The heat map: the naps' bucket (4-8 ms) holds as many events as the histogram has.
    let svg = run.trace.with_extension("svg");
    common::run(
        &common::ebsym_path(),
        &[
            "heatmap",
            t,
            "--kind",
            "syscall",
            "-o",
            svg.to_str().unwrap(),
        ],
    );
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.starts_with("<?xml") || text.starts_with("<svg"),
        "{text:.200}"
    );
    let in_bucket = tooltip_counts(&text, ", 4-8 ms: ");
    let lat_in_bucket: u64 = lat["rows"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["histogram"].as_array().unwrap().iter())
        .filter(|b| b["low"] == 1u64 << 22)
        .map(|b| b["count"].as_u64().unwrap())
        .sum();
    assert!(lat_in_bucket > 0);
    assert_eq!(in_bucket, lat_in_bucket, "heat map cells of 4-8 ms");
    // And every call is in some cell.
    let cells = tooltip_counts(&text, "");
    let calls_total: u64 = lat["totals"]["count"].as_u64().unwrap();
    assert_eq!(cells, calls_total, "heat map cells, all calls");
}

#[test]
fn bio_attributes_the_fsyncs_writes_to_their_caller_and_bpftrace_agrees() {
    if !root() {
        return;
    }
    let Some(dir) = disk_dir() else {
        panic!("no directory on a block device (/var/tmp, /tmp, /root) to fsync on");
    };
    let fsyncs = 4u64;
    let run = run_beside(
        "syscalls",
        &["--fast", "10", "--sleeps", "0", "--fsyncs", "4", "--dir", dir],
        &["--bio"],
        // Not the discards of the file's removal: the program does not wait for them, so
        // one may complete after the recording ended (ebrec sends a request at its end).
        "tracepoint:block:block_io_start /pid == $PID && args->rwbs != \"DS\" && args->rwbs != \"D\"/ { @n = count(); @bytes = sum(args->bytes); }",
    );
    let expect = expect_line(&run.out, "syscalls");
    assert_eq!(expect["fsyncs"].as_u64(), Some(fsyncs));
    let t = run.trace.to_str().unwrap();
    // The device, named as on this host.
    let dev = expect["dev"].as_str().unwrap().to_string();
    let name = std::fs::read_to_string(format!("/sys/dev/block/{dev}/uevent"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("DEVNAME=").map(str::to_string))
        .unwrap();

    // Every request the program issued, as bpftrace counted them at the same tracepoint.
    let bios: Vec<_> = common::events_of(&run.trace, |k| match k {
        Kind::Bios(b) => Some(b),
        _ => None,
    })
    .into_iter()
    .filter(|b| b.op != 3)
    .collect();
    assert_eq!(bios.len() as u64, bt_u64(&run.bt, "@n", ""), "{:?}", run.bt);
    let bytes: u64 = bios.iter().map(|b| b.bytes).sum();
    assert_eq!(bytes, bt_u64(&run.bt, "@bytes", ""));
    let pid = expect["pid"].as_u64().unwrap() as u32;
    let tid = expect["tid"].as_u64().unwrap() as u32;
    assert!(bios.iter().all(|b| b.tid == tid), "{bios:?}");
    let _ = pid;

    // The fsync's data writes: at least one 4096-byte write per fsync on the file's device,
    // issued from sys::syncer through the kernel's fsync path.
    let top = ebsym_json(&["top", t, "--kind", "bio", "-n", "1000"]);
    let mut data_writes = 0;
    let mut data_bytes = 0;
    for row in top["rows"].as_array().unwrap() {
        let k = kernel_functions(row);
        let u = user_functions(row);
        if row["op"] == "write" && k.iter().any(|f| f.contains("fsync")) {
            assert_eq!(row["device"], name.as_str(), "{row}");
            assert!(calls(&u, "sys::syncer", "sys::sync_loop"), "{u:?}");
            if k.iter().any(|f| f.contains("writepages")) {
                data_writes += row["count"].as_u64().unwrap();
                data_bytes += row["bytes"].as_u64().unwrap();
            }
        }
    }
    assert_eq!(data_writes, fsyncs, "{top:#}");
    assert_eq!(data_bytes, fsyncs * 4096);

    // latency --kind bio: the device's write row counts every write request.
    let lat = ebsym_json(&["latency", t, "--kind", "bio"]);
    let writes = bios.iter().filter(|b| b.op == 1).count() as u64;
    let row = lat_row(&lat, &format!("{name} write")).expect("a write row");
    assert_eq!(row["count"].as_u64(), Some(writes), "{lat:#}");
    let total: u64 = bios
        .iter()
        .filter(|b| b.op == 1)
        .map(|b| b.duration_ns)
        .sum();
    assert_eq!(row["total_ns"].as_u64(), Some(total));
}

#[test]
fn runq_waits_of_two_threads_on_one_cpu_and_bpftrace_agrees() {
    if !root() {
        return;
    }
    let run = run_beside(
        "runq_pair",
        &["--seconds", "1", "--cpu", "0"],
        &["--runq=1000", "--runq-sample=0"],
        // Preemptions of the program's threads (prev is the current task), to their next
        // switch-in: what the two burners wait.
        "tracepoint:sched:sched_switch { \
           if (args->prev_state == 0 && pid == $PID) { @q[args->prev_pid] = nsecs; } \
           if (@q[args->next_pid]) { @sum = sum(nsecs - @q[args->next_pid]); \
             @n = count(); delete(@q[args->next_pid]); } }",
    );
    let expect = expect_line(&run.out, "runq_pair");
    let t = run.trace.to_str().unwrap();
    let wall = expect["wall_ns"].as_u64().unwrap();
    let tids = [
        expect["tids"]["a"].as_u64().unwrap(),
        expect["tids"]["b"].as_u64().unwrap(),
    ];
    let cpu = [
        expect["cpu_ns"]["a"].as_u64().unwrap(),
        expect["cpu_ns"]["b"].as_u64().unwrap(),
    ];
    // Every wait, in the process's histogram: at least what the preemptions bpftrace saw
    // add up to, and about what the two threads were not on the CPU while runnable.
    let lat = ebsym_json(&["latency", t, "--kind", "runq"]);
    let rows = lat["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{lat:#}");
    let total = rows[0]["total_ns"].as_u64().unwrap();
    let bt_total = bt_u64(&run.bt, "@sum", "");
    assert!(
        total as f64 >= bt_total as f64 * 0.97 && total as f64 <= bt_total as f64 * 1.3,
        "ebrec {total} ns, bpftrace {bt_total} ns"
    );
    assert!(rows[0]["count"].as_u64().unwrap() >= bt_u64(&run.bt, "@n", ""));
    let runnable: u64 = cpu.iter().map(|c| wall.saturating_sub(*c)).sum();
    assert!(
        total as f64 >= runnable as f64 * 0.8 && total <= runnable + 50 * MS,
        "waited {total} ns; the threads were off the CPU {runnable} ns of {wall}"
    );

    // The long waits (>= 1 ms) are events with the waiting thread's stack: preempted in
    // its burner, called from runq::thread_main. Each thread's kept waits add up to most
    // of its time off the CPU.
    let events = common::events_of(&run.trace, |k| match k {
        Kind::Runq(b) => Some(b),
        _ => None,
    });
    for (i, tid) in tids.iter().enumerate() {
        let mine: Vec<_> = events.iter().filter(|e| u64::from(e.tid) == *tid).collect();
        let sum: u64 = mine.iter().map(|e| e.duration_ns).sum();
        let off = wall.saturating_sub(cpu[i]);
        assert!(
            sum as f64 >= off as f64 * 0.4 && sum <= off + 20 * MS,
            "thread {tid}: kept waits {sum} ns, off the CPU {off} ns"
        );
        assert!(mine.iter().all(|e| e.duration_ns >= MS && e.stack != 0));
        assert!(
            mine.iter().filter(|e| e.preempted == 1).count() * 10 >= mine.len() * 9,
            "thread {tid}: {mine:?}"
        );
    }
    let top = ebsym_json(&["top", t, "--kind", "runq", "-n", "100"]);
    for burner in ["runq::burner_a", "runq::burner_b"] {
        let n: u64 = top["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| calls(&user_functions(r), burner, "runq::thread_main"))
            .map(|r| r["count"].as_u64().unwrap())
            .sum();
        assert!(n > 10, "{burner}: {n} waits: {top:#}");
    }
}

/// --runq-sample, the time-weighted sample of long waits: two burners on one CPU wait a
/// few ms at every turn, each past --runq's 1 ms. With a 20 ms unit a wait of d ms is kept
/// with p = d/20 and stands for 20 ms (3 s: about 750 waits, 150 kept): far fewer events, whose weights add up to about
/// what the unsampled events of the same threads add up to (the threads' time runnable but
/// not running, less the waits under 1 ms); the histogram still counts every wait.
#[test]
fn runq_sample_keeps_fewer_waits_standing_for_the_same_time() {
    if !root() {
        return;
    }
    let mut got = Vec::new();
    let mut shorts = Vec::new();
    for unit in ["0", "20000"] {
        let rec = common::record(
            "runq_pair",
            &["--runq=1000", &format!("--runq-sample={unit}")],
            &["--seconds", "3", "--cpu", "0"],
        );
        let expect = expect_line(&rec.out, "runq_pair");
        let wall = expect["wall_ns"].as_u64().unwrap();
        let runnable: u64 = ["a", "b"]
            .iter()
            .map(|k| wall.saturating_sub(expect["cpu_ns"][k].as_u64().unwrap()))
            .sum();
        let events = common::events_of(&rec.trace, |k| match k {
            Kind::Runq(b) => Some(b),
            _ => None,
        });
        let lat = ebsym_json(&["latency", rec.trace.to_str().unwrap(), "--kind", "runq"]);
        let counted = lat["rows"][0]["count"].as_u64().unwrap();
        let weighted: u64 = events.iter().map(|e| e.weight()).sum();
        let waits: u64 = events.iter().map(|e| e.waits()).sum();
        if unit != "0" {
            // every kept wait shorter than the unit stands for the unit
            assert!(
                events
                    .iter()
                    .all(|e| (e.duration_ns < 20 * MS && e.weight_ns == 20 * MS)
                        || (e.duration_ns >= 20 * MS && e.weight_ns == 0)),
                "{events:?}"
            );
        } else {
            assert!(events.iter().all(|e| e.weight_ns == 0));
        }
        assert!(events.iter().all(|e| e.duration_ns >= MS && e.stack != 0));
        // Waits shorter than the unit: the ones the sample thins (a loaded machine stretches
        // some past it, and those are always kept, standing for themselves).
        let short: Vec<u64> = events
            .iter()
            .map(|e| e.duration_ns)
            .filter(|&d| d < 20 * MS)
            .collect();
        // What the sample should keep of these: each with p = d / 20 ms.
        let expected: f64 = short.iter().map(|&d| d as f64 / (20 * MS) as f64).sum();
        shorts.push((short.len() as u64, expected));
        got.push((events.len() as u64, weighted, runnable, waits, counted));
        eprintln!("runq-sample {unit}: {} events standing for {waits} waits, {weighted} ns; runnable {runnable} ns; {counted} waits counted", events.len());
    }
    let (_, all_ns, all_runnable, all_waits, _) = got[0];
    let (_, kept_ns, kept_runnable, kept_waits, counted) = got[1];
    // Fewer events: a wait of d ms kept with p = d/20 (a few ms a wait on a quiet machine:
    // about a fifth kept; longer waits on a loaded one, more). The run without the sample
    // says what the sample should keep of the same kind of waits.
    let ((all_short, should_keep), (kept_short, _)) = (shorts[0], shorts[1]);
    assert!(kept_short < all_short, "{shorts:?} short of {got:?}");
    assert!(
        (0.6..1.6).contains(&(kept_short as f64 / should_keep.max(1.0))),
        "kept {kept_short} short waits, about {should_keep:.0} expected: {shorts:?} of {got:?}"
    );
    assert!(kept_short * 3 <= counted * 2, "{shorts:?} short of {got:?}");
    // The same time, as a share of each run's time runnable (the runs differ a little).
    let share = |ns: u64, r: u64| ns as f64 / r.max(1) as f64;
    let (a, b) = (share(all_ns, all_runnable), share(kept_ns, kept_runnable));
    assert!(
        (b / a - 1.0).abs() <= 0.3,
        "sampled {b:.3} of the runnable time, all {a:.3}: {got:?}"
    );
    // And about as many waits.
    assert!(
        (kept_waits as f64 / all_waits as f64 - 1.0).abs() <= 0.4,
        "{got:?}"
    );
}

/// The unwinder's memo (bpf/unwind.bpf.h): a thread's walk from the same registers whose
/// every stack word reads as before reuses its frames; one whose words differ is walked
/// again. sys::sleeper's nanosleep under sys::nap_a and under sys::nap_b (alternately, 30
/// each) has the same pc, stack pointer and frame pointer either way: only the return
/// address into nap_a or nap_b differs, and every slow call must still name its own
/// caller; the 20 naps from sys::sleep_loop before them repeat one stack, which the memo
/// serves (the exit summary counts it).
#[test]
fn unwind_memo_tells_two_callers_apart_by_their_return_address() {
    if !root() {
        return;
    }
    for mode in ["cfi", "auto"] {
        let rec = common::record_loud(
            "syscalls",
            &[
                "--syscalls=1000",
                "--syscalls-sample=0",
                "--stack-mode",
                mode,
            ],
            &[
                "--sleeps",
                "20",
                "--sleep-ms",
                "2",
                "--fast",
                "10",
                "--pairs",
                "30",
            ],
        );
        let err = String::from_utf8_lossy(&rec.out.stderr).to_string();
        let line = err
            .lines()
            .find(|l| l.contains("from their thread's memo"))
            .unwrap_or_else(|| panic!("{mode}: no memo line: {err}"));
        let hits: u64 = line
            .split("; ")
            .last()
            .and_then(|t| t.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{mode}: {line}"));
        assert!(hits >= 10, "{mode}: {line}");
        let top = ebsym_json(&[
            "top",
            rec.trace.to_str().unwrap(),
            "--kind",
            "syscall",
            "-n",
            "100",
        ]);
        let under = |caller: &str| -> u64 {
            top["rows"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| calls(&user_functions(r), "sys::sleeper", caller))
                .map(|r| r["count"].as_u64().unwrap())
                .sum()
        };
        assert_eq!(under("sys::nap_a"), 30, "{mode}: {top:#}");
        assert_eq!(under("sys::nap_b"), 30, "{mode}: {top:#}");
        assert_eq!(under("sys::sleep_loop"), 20, "{mode}: {top:#}");
    }
}

/// A preempted thread's kept wait has its whole stack both ways: with rseq (glibc's
/// default) it is walked where the thread returns to user space after the wait
/// (rseq_update), only for the waits kept; without rseq (glibc's tunable off) at the
/// preemption, its last chance, as before. Two burners on one CPU, 2 s: every kept wait
/// is a preemption inside runq::burner_a/b, called from runq::thread_main.
#[test]
fn runq_preempted_waits_keep_whole_stacks_with_and_without_rseq() {
    if !root() {
        return;
    }
    for env in [&[][..], &[("GLIBC_TUNABLES", "glibc.pthread.rseq=0")][..]] {
        let rec = common::record_loud_env(
            "runq_pair",
            &["--runq=1000", "--runq-sample=0"],
            &["--seconds", "2", "--cpu", "0"],
            env,
        );
        let err = String::from_utf8_lossy(&rec.out.stderr).to_string();
        assert!(err.contains("rseq_update (run queue)"), "{env:?}: {err}");
        let events = common::events_of(&rec.trace, |k| match k {
            Kind::Runq(b) => Some(b),
            _ => None,
        });
        let preempted = events.iter().filter(|e| e.preempted == 1).count() as u64;
        assert!(preempted > 100, "{env:?}: {preempted} preempted waits kept");
        let top = ebsym_json(&[
            "top",
            rec.trace.to_str().unwrap(),
            "--kind",
            "runq",
            "-n",
            "100",
        ]);
        let whole: u64 = top["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| {
                let u = user_functions(r);
                calls(&u, "runq::burner_a", "runq::thread_main")
                    || calls(&u, "runq::burner_b", "runq::thread_main")
            })
            .map(|r| r["count"].as_u64().unwrap())
            .sum();
        assert!(
            whole * 10 >= preempted * 9,
            "{env:?}: {whole} of {preempted} preempted waits with their burner's whole stack: {top:#}"
        );
    }
}

#[test]
fn tcp_connections_lifetimes_bytes_and_a_refused_connect() {
    if !root() {
        return;
    }
    let run = run_beside(
        "tcp_conns",
        &["--conns", "5", "--hold-ms", "20", "--bytes", "10000"],
        &["--tcp"],
        "tracepoint:sock:inet_sock_set_state /pid == $PID && args->protocol == 6 && args->newstate == 2/ { @connects = count(); }",
    );
    let expect = expect_line(&run.out, "tcp_conns");
    let t = run.trace.to_str().unwrap();
    let (k, b) = (5u64, 10000u64);
    let port = expect["port"].as_u64().unwrap();
    let refused = expect["refused_port"].as_u64().unwrap();
    let lifetimes: Vec<u64> = expect["lifetimes_ns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let rep = ebsym_json(&["tcp", t]);
    let rows = rep["rows"].as_array().unwrap();
    let find = |role: &str, remote: &str| {
        rows.iter()
            .find(|r| r["role"] == role && r["remote"] == remote)
            .unwrap_or_else(|| panic!("no {role} row for {remote}: {rep:#}"))
    };
    let out = find("connect", &format!("127.0.0.1:{port}"));
    assert_eq!(out["count"].as_u64(), Some(k));
    assert_eq!(out["failed"].as_u64(), Some(0));
    assert_eq!(out["open"].as_u64(), Some(0));
    assert_eq!(out["bytes_sent"].as_u64(), Some(k * b), "{out}");
    assert_eq!(out["bytes_received"].as_u64(), Some(k * b / 2), "{out}");
    // Lifetimes from SYN_SENT to CLOSE, for the median (the third of 20..100 ms, 20 ms
    // apart) and the longest: at least the time the program held the connection open, and
    // at most its own clock around connect and close, plus the server's FIN coming back.
    let holds: Vec<u64> = expect["hold_ms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() * MS)
        .collect();
    let mut sorted = lifetimes.clone();
    sorted.sort_unstable();
    for (field, hold, clock) in [
        ("lifetime_p50_ns", holds[2], sorted[2]),
        ("lifetime_max_ns", holds[4], sorted[4]),
    ] {
        let got = out[field].as_u64().unwrap();
        assert!(
            got >= hold && got <= clock + 10 * MS,
            "{field} {got}: held {hold}, program's clock {clock}"
        );
    }
    let inbound = find("accept", &format!("127.0.0.1 -> :{port}"));
    assert_eq!(inbound["count"].as_u64(), Some(k));
    assert_eq!(inbound["bytes_sent"].as_u64(), Some(k * b / 2), "{inbound}");
    assert_eq!(inbound["bytes_received"].as_u64(), Some(k * b), "{inbound}");
    let bad = find("connect", &format!("127.0.0.1:{refused}"));
    assert_eq!(bad["count"].as_u64(), Some(1));
    assert_eq!(bad["failed"].as_u64(), Some(1));
    assert_eq!(bad["resets_received"].as_u64(), Some(1), "{bad}");
    // Every connect bpftrace saw (SYN_SENT in the program) is one of ebrec's.
    let connects: u64 = rows
        .iter()
        .filter(|r| r["role"] == "connect")
        .map(|r| r["count"].as_u64().unwrap())
        .sum();
    assert_eq!(connects, bt_u64(&run.bt, "@connects", ""), "{:?}", run.bt);
    // Each connection's states in order.
    let conns = rep["connections"].as_array().unwrap();
    let states = |c: &Value| -> Vec<String> {
        c["states"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s[1].as_str().unwrap().to_string())
            .collect()
    };
    let client = conns
        .iter()
        .find(|c| c["role"] == "connect" && c["remote"] == format!("127.0.0.1:{port}"))
        .unwrap();
    assert_eq!(
        states(client),
        [
            "CLOSE->SYN_SENT",
            "SYN_SENT->ESTABLISHED",
            "ESTABLISHED->FIN_WAIT1",
            "FIN_WAIT1->FIN_WAIT2",
            "FIN_WAIT2->CLOSE"
        ],
        "{client:#}"
    );

    // The stacks of the connects and accepts name the calling functions.
    let top = ebsym_json(&["top", t, "--kind", "tcp", "-n", "100"]);
    let count_of = |kind: &str, callee: &str, caller: &str| -> u64 {
        top["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["kind"] == kind && calls(&user_functions(r), callee, caller))
            .map(|r| r["count"].as_u64().unwrap())
            .sum()
    };
    assert_eq!(
        count_of("connect", "tcpt::connect_one", "tcpt::client_loop"),
        k,
        "{top:#}"
    );
    assert_eq!(
        count_of("accept", "tcpt::accept_one", "tcpt::server_loop"),
        k,
        "{top:#}"
    );
    assert_eq!(
        count_of("connect", "tcpt::connect_refused", "tcpt::client_loop"),
        1
    );
}

#[test]
fn max_cpu_pauses_the_syscall_family_on_a_syscall_storm() {
    if !root() {
        return;
    }
    // It measures or budgets ebrec's own cost: no other recording beside it.
    let _alone = common::exclusive();
    // 20 million getppid calls cost the syscall programs far more than 0.5% of a CPU: the
    // budget pauses the family (a ProbeChange record), and the trace says so.
    let rec = common::record(
        "syscalls",
        &["--syscalls", "--syscalls-sample=0", "--max-cpu", "0.5"],
        &["--fast", "20000000", "--sleeps", "1"],
    );
    let mut paused = 0;
    for r in TraceReader::open(&rec.trace).unwrap().by_ref() {
        if let Some(Kind::ProbeChange(p)) = r.kind {
            if p.family == EventFamily::Syscall as i32
                && p.kind == ebtrace_format::proto::ProbeChangeKind::Paused as i32
            {
                paused += 1;
                assert!(p.reason.contains("syscall"), "{}", p.reason);
            }
        }
    }
    assert!(paused >= 1, "the syscall family was never paused");
    let lat = ebsym_json(&["latency", rec.trace.to_str().unwrap(), "--kind", "syscall"]);
    let getppid = lat_row(&lat, "getppid").expect("a getppid row");
    assert!(getppid["count"].as_u64().unwrap() < 20_000_000, "{getppid}");
}

#[test]
fn diagnose_writes_the_reports_and_a_summary_of_each_family() {
    if !root() {
        return;
    }
    // It measures or budgets ebrec's own cost: no other recording beside it.
    let _alone = common::exclusive();
    let Some(disk) = disk_dir() else {
        panic!("no directory on a block device (/var/tmp, /tmp, /root) to fsync on");
    };
    let prog =
        ebtrace_testdata::build("syscalls", ebtrace_testdata::Variant::FramePointer).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let diag = dir.path().join("diag");
    let ebsym = common::ebsym_path();
    // The program was just built: its pages written back first, and naps long enough in
    // all (480 ms) that a fault waiting on the disk is not the off-CPU finding (once, on a
    // busy machine, a 331 ms folio_wait_bit in ebt::now_ns outweighed 20 naps of 5 ms).
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    let out = Command::new(env!("CARGO_BIN_EXE_ebrec"))
        .arg("diagnose")
        .args(["--duration", "20", "-o", diag.to_str().unwrap()])
        .args(["--ebsym", ebsym.to_str().unwrap()])
        .arg("--")
        .arg(&prog)
        .args(["--fast", "1000", "--sleeps", "60", "--sleep-ms", "8"])
        // Fewer fsyncs than the summary's ten calls for a "slowest" row: a slow disk must
        // not make them the finding.
        .args(["--fsyncs", "6", "--dir", disk])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for f in [
        "trace.pb.zst",
        "trace.sym.pb.zst",
        "summary.txt",
        "summary.json",
        "top-syscall.txt",
        "top-offcpu.txt",
        "flame-offcpu.svg",
        "flame-syscall.svg",
        "latency-syscall.txt",
        "latency-bio.txt",
        "heatmap-syscall.svg",
    ] {
        assert!(
            diag.join(f).is_file(),
            "{f} missing: {:?}",
            std::fs::read_dir(&diag)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect::<Vec<_>>()
        );
    }
    // The summary names the program's own functions and calls: its 60 naps are the slowest
    // syscall with at least ten calls, the time off the CPU is in sys::sleeper, and the
    // fsyncs' writes reach the disk.
    let s: Value =
        serde_json::from_str(&std::fs::read_to_string(diag.join("summary.json")).unwrap()).unwrap();
    let finding = |family: &str| {
        s["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["family"] == family)
            .unwrap_or_else(|| panic!("no {family} finding: {s:#}"))
            .clone()
    };
    let sys = finding("syscall");
    assert_eq!(sys["subject"], "nanosleep", "{sys}");
    assert!(
        (1 << 22..1 << 24).contains(&sys["value"].as_u64().unwrap()),
        "{sys}"
    );
    let off = finding("offcpu");
    assert!(
        off["subject"]
            .as_str()
            .unwrap()
            .ends_with("in sys::sleeper"),
        "{off}"
    );
    let bio = finding("bio");
    assert!(bio["subject"].as_str().unwrap().contains(' '), "{bio}");
    let text = std::fs::read_to_string(diag.join("summary.txt")).unwrap();
    assert!(text.contains("slowest syscall: nanosleep p99"), "{text}");
    // The summary is also what diagnose prints last (after the program's own output).
    assert!(String::from_utf8_lossy(&out.stdout).ends_with(&text));
}

/// The nearest-rank quantile `q` of sorted `v` (as ebsym's).
fn nearest_rank(v: &[u64], q: f64) -> u64 {
    let r = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len());
    v[r - 1]
}

/// Issue 31: p50/p90/p99 from the kernel's log-linear histograms (16 buckets per power of
/// two) within 3% of the true ones. 100 naps of 5 ms under a threshold of 1 s: no nap is an
/// event, only the histogram knows them; the truth is the durations the program measured
/// around each call (the kernel's own are shorter by the call's entry and exit, < 0.1%).
/// Log2 buckets gave p50 6.29 ms for naps of 5.1 ms (+23%).
#[test]
fn syscall_percentiles_from_the_histogram_are_within_3_percent() {
    if !root() {
        return;
    }
    let rec = common::record(
        "syscalls",
        &["--syscalls=1000000"],
        &["--sleeps", "100", "--sleep-ms", "5", "--fast", "1000"],
    );
    let expect = expect_line(&rec.out, "syscalls");
    let mut truth: Vec<u64> = expect["sleep_durations_ns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    truth.sort_unstable();
    assert_eq!(truth.len(), 100);
    let t = rec.trace.to_str().unwrap();
    let lat = ebsym_json(&["latency", t, "--kind", "syscall", "-n", "1000"]);
    assert_eq!(lat["sub_buckets"].as_u64(), Some(16), "{lat:#}");
    let ns = lat_row(&lat, "nanosleep").expect("a nanosleep row");
    assert_eq!(ns["count"].as_u64(), Some(100), "{ns}");
    assert_eq!(ns["exact"], false, "no nap is an event: {ns}");
    for (p, q) in [("p50_ns", 0.5), ("p90_ns", 0.9), ("p99_ns", 0.99)] {
        let (got, want) = (ns[p].as_u64().unwrap(), nearest_rank(&truth, q));
        let err = (got as f64 - want as f64) / want as f64;
        eprintln!(
            "nanosleep {p}: {got} ns, true {want} ns, {:+.2}%",
            err * 100.0
        );
        assert!(
            err.abs() <= 0.03,
            "{p}: {got} vs {want} ({:+.2}%): {ns}",
            err * 100.0
        );
    }
    // The log2 view is what it was: every nap in it, from the bucket of 5 ms, [2^22, 2^23)
    // ns, up (a loaded host may make some longer).
    let bins = ns["histogram"].as_array().unwrap();
    let n: u64 = bins.iter().map(|b| b["count"].as_u64().unwrap()).sum();
    assert_eq!(n, 100, "{bins:?}");
    assert_eq!(bins[0]["low"].as_u64(), Some(1 << 22), "{bins:?}");
    // And the text says how precise it is.
    let out = common::run(&common::ebsym_path(), &["latency", t, "--kind", "syscall"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("percentiles within 3%"), "{text}");
}

/// The kernel's buckets are `ebtrace_format::latency`'s (`Layout::LogLinear`) on real waits:
/// run-queue waits (--runq=0) and block I/O (--bio, every request an event), each also an
/// event with its exact duration. Every event's bucket is counted in the family's
/// histograms, and a row whose every wait is an event has its exact percentiles.
#[test]
fn runq_and_bio_histograms_bucket_waits_as_their_events_say() {
    use ebtrace_format::latency::Layout;
    use std::collections::BTreeMap;
    if !root() {
        return;
    }
    let check = |trace: &Path, family: EventFamily, durations: &[u64]| {
        let mut hist: BTreeMap<u32, u64> = BTreeMap::new();
        for rec in TraceReader::open(trace).unwrap().by_ref() {
            if let Some(Kind::Histogram(h)) = &rec.kind {
                if h.family == family as i32 {
                    assert_eq!(h.sub_buckets, 16);
                    for (b, c) in h.bucket.iter().zip(&h.bucket_count) {
                        *hist.entry(*b).or_default() += c;
                    }
                }
            }
        }
        let mut events: BTreeMap<u32, u64> = BTreeMap::new();
        for &d in durations {
            *events.entry(Layout::LogLinear.bucket_of(d)).or_default() += 1;
        }
        let total: u64 = hist.values().sum();
        assert!(!durations.is_empty() && total >= durations.len() as u64);
        // Every event in its bucket (the kernel may have counted more: an event lost or
        // still pending at the end is in the histogram only).
        for (b, n) in &events {
            assert!(
                hist.get(b).copied().unwrap_or(0) >= *n,
                "{family:?} bucket {b} {:?}: {n} events, histogram {hist:?}",
                Layout::LogLinear.range(*b)
            );
        }
        assert!(
            durations.len() as u64 * 10 >= total * 9,
            "{family:?}: {} events, {total} counted",
            durations.len()
        );
    };

    // Run-queue waits of two threads on one CPU.
    let rec = common::record(
        "runq_pair",
        &["--runq=0", "--runq-sample=0"],
        &["--seconds", "1", "--cpu", "0"],
    );
    let events = common::events_of(&rec.trace, |k| match k {
        Kind::Runq(b) => Some(b),
        _ => None,
    });
    let mut d: Vec<u64> = events.iter().map(|e| e.duration_ns).collect();
    check(&rec.trace, EventFamily::Runq, &d);
    d.sort_unstable();
    let t = rec.trace.to_str().unwrap();
    let lat = ebsym_json(&["latency", t, "--kind", "runq"]);
    let row = &lat["rows"][0];
    if row["exact"] == true {
        for (p, q) in [("p50_ns", 0.5), ("p90_ns", 0.9), ("p99_ns", 0.99)] {
            assert_eq!(row[p].as_u64(), Some(nearest_rank(&d, q)), "{p}: {row}");
        }
    } else {
        eprintln!(
            "runq: not every wait an event ({} of {})",
            d.len(),
            row["count"]
        );
    }

    // Block I/O: the fsyncs' writes on a real disk.
    let Some(dir) = disk_dir() else {
        panic!("no directory on a block device (/var/tmp, /tmp, /root) to fsync on");
    };
    let rec = common::record(
        "syscalls",
        &["--bio"],
        &[
            "--fast", "10", "--sleeps", "0", "--fsyncs", "20", "--dir", dir,
        ],
    );
    let events = common::events_of(&rec.trace, |k| match k {
        Kind::Bios(b) => Some(b),
        _ => None,
    });
    let d: Vec<u64> = events.iter().map(|e| e.duration_ns).collect();
    check(&rec.trace, EventFamily::Bio, &d);
}

/// --syscalls-sample, the time-weighted sample of slow calls: 600 naps of 2 ms, past the
/// 1 ms threshold and under the 10 ms unit, are each kept with their stack with probability
/// 2/10 and stand for 10 ms and 5 naps, so `ebsym top` estimates the naps' count and time
/// (within 30%; ~8% expected), while the latency histogram counts every one exactly.
#[test]
fn slow_syscalls_are_a_time_weighted_sample_and_the_histogram_exact() {
    if !root() {
        return;
    }
    const NAPS: u64 = 600;
    let rec = common::record(
        "syscalls",
        &["--syscalls=1000", "--syscalls-sample=10000"],
        &[
            "--fast",
            "100",
            "--sleeps",
            &NAPS.to_string(),
            "--sleep-ms",
            "2",
        ],
    );
    let expect = expect_line(&rec.out, "syscalls");
    let timed: u64 = expect["sleep_durations_ns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .sum();
    let t = rec.trace.to_str().unwrap();
    let lat = ebsym_json(&["latency", t, "--kind", "syscall", "-n", "1000"]);
    let ns = lat_row(&lat, "nanosleep").expect("a nanosleep row");
    assert_eq!(ns["count"].as_u64(), Some(NAPS), "{ns}");
    let top = ebsym_json(&["top", t, "--kind", "syscall", "-n", "1000"]);
    let (mut count, mut total) = (0, 0);
    for r in top["rows"].as_array().unwrap() {
        if r["syscall"] == "nanosleep" {
            count += r["count"].as_u64().unwrap();
            total += r["total_ns"].as_u64().unwrap();
        }
    }
    let cr = count as f64 / NAPS as f64;
    let tr = total as f64 / timed as f64;
    assert!((0.7..1.3).contains(&cr), "estimated {count} naps of {NAPS}");
    assert!(
        (0.7..1.3).contains(&tr),
        "estimated {total} ns, the program timed {timed} ns"
    );
    // far fewer events than naps: the sample really sampled
    let (mut events, mut weighted) = (0, 0);
    let mut r = ebtrace_format::TraceReader::open(&rec.trace).unwrap();
    for rec in r.by_ref() {
        if let Some(ebtrace_format::proto::record::Kind::Syscalls(b)) = rec.kind {
            use ebtrace_format::events::Family;
            for e in b.decode().unwrap() {
                if e.nr == 35 {
                    events += 1;
                    // a nap shorter than the unit stands for the unit; one that a loaded
                    // machine stretched past it (a 2 ms nap that lasted 12 ms) is always
                    // kept and stands for itself (weight 0), as --syscalls-sample says
                    let stands = if e.weight_ns == 0 {
                        e.duration_ns >= 10_000_000
                    } else {
                        e.weight_ns == 10_000_000
                    };
                    weighted += u64::from(stands);
                }
            }
        }
    }
    assert!(
        (NAPS / 10..=NAPS / 2).contains(&events),
        "{events} naps kept of {NAPS}"
    );
    assert_eq!(
        weighted, events,
        "every kept nap stands for the unit, or for itself past it"
    );
}
