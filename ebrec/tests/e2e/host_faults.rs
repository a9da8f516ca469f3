//! Faults of the host ebrec runs on (issue 51): a full disk under `ebrec record` and under
//! the agent, the agent's output directory removed or made read-only, SIGHUP. A small tmpfs
//! stands in for the disk; it is unmounted at the end, on failure too. Each test checks that
//! the trace reads with every whole chunk kept, the reason said, what was dropped counted,
//! and the target's work undisturbed. Needs root (skips loudly without it; fails when
//! CI=true).

use crate::common;
use common::{ebsym_json, root};
use ebtrace_format::TraceReader;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A tmpfs of `size` mounted on a fresh directory, unmounted (lazily, should a file still
/// be open) when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(st.success(), "mount -t tmpfs: {st}");
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills what is left of it but `room` bytes with `name`; the bytes written.
    fn fill(&self, name: &str, room: u64) -> u64 {
        let mut f = std::fs::File::create(self.path().join(name)).unwrap();
        let block = vec![0x5au8; 16 << 10];
        let mut n = 0u64;
        loop {
            match f.write(&block) {
                Ok(0) | Err(_) => break,
                Ok(k) => n += k as u64,
            }
        }
        let _ = f.flush();
        let n = n.saturating_sub(room);
        f.set_len(n).unwrap();
        n
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Waits for the line of `child`'s stderr that starts with `prefix`; the lines so far, and
/// the rest of stderr read on a thread.
fn wait_for(
    child: &mut Child,
    prefix: &str,
) -> (Vec<String>, std::thread::JoinHandle<Vec<String>>) {
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    for l in lines.by_ref() {
        let l = l.unwrap();
        let found = l.starts_with(prefix);
        seen.push(l);
        if found {
            break;
        }
    }
    assert!(
        seen.last().is_some_and(|l| l.starts_with(prefix)),
        "no line {prefix:?}: {seen:#?}"
    );
    let rest = std::thread::spawn(move || lines.map_while(Result::ok).collect());
    (seen, rest)
}

/// Waits (at most 10 s) until `file` holds more than `bytes`.
fn wait_size(file: &Path, bytes: u64) {
    let t = Instant::now();
    while std::fs::metadata(file).map_or(0, |m| m.len()) <= bytes {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{} stays small",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The EXPECT line of a program's stdout.
fn expect_of(stdout: &str) -> serde_json::Value {
    let l = stdout
        .lines()
        .find_map(|l| l.strip_prefix("EXPECT "))
        .unwrap_or_else(|| panic!("no EXPECT line: {stdout}"));
    serde_json::from_str(l).unwrap()
}

/// Events of the trace by its reader, its chunks, and that it has no damage.
fn read_whole(trace: &Path) -> (u64, u64) {
    let mut r = TraceReader::open(trace).unwrap();
    let records = r.by_ref().count() as u64;
    assert!(
        r.damage().is_empty(),
        "{}: {:?}",
        trace.display(),
        r.damage()
    );
    (records, r.chunks())
}

#[test]
fn record_on_a_full_disk_stops_at_the_last_whole_chunk() {
    if !root() {
        return;
    }
    let started = Instant::now();
    let prog = ebtrace_testdata::build("shop", ebtrace_testdata::Variant::FramePointer).unwrap();
    let fs = Tmpfs::mount("2m");
    let trace = fs.path().join("t.pb.zst");
    let mut rec = Command::new(env!("CARGO_BIN_EXE_ebrec"))
        .args([
            "record",
            "-o",
            trace.to_str().unwrap(),
            "--alloc=1024",
            "--lock",
            "--",
        ])
        .arg(&prog)
        .args(["--seconds", "4"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (_, rest) = wait_for(&mut rec, "ebrec: recording to");
    // Once events reach the file, the disk fills: its next write fails.
    wait_size(&trace, 4096);
    let filled = fs.fill("filler", 0);
    let at_fill = std::fs::metadata(&trace).map_or(0, |m| m.len());
    let status = rec.wait().unwrap();
    let stopped = started.elapsed();
    let err = rest.join().unwrap();
    // The command goes on, as after Ctrl-C: its output (ebrec's stdout) ends when it does.
    let mut stdout = String::new();
    rec.stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    let expect = expect_of(&stdout);
    assert!(expect["requests"].as_u64().unwrap() > 0, "{expect}");

    assert_eq!(
        status.code(),
        Some(1),
        "filled {filled} bytes when the trace held {at_fill}: {err:#?}"
    );
    let last = err.last().unwrap();
    eprintln!("filled {filled} bytes; stopped after {stopped:?}; {last}");
    assert!(
        last.starts_with("ebrec: disk full (No space left on device (os error 28)) at "),
        "{err:#?}"
    );
    assert!(last.contains("stopped writing;"), "{last}");
    assert!(last.contains(" whole chunks, "), "{last}");
    assert!(last.contains(" events lost"), "{last}");

    let (records, chunks) = read_whole(&trace);
    let chunks_said: u64 = last
        .split(" holds ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    let info = ebsym_json(&["info", trace.to_str().unwrap()]);
    assert!(info["damage"].as_array().unwrap().is_empty(), "{info:#}");
    let alloc = info["events"]["alloc"].as_u64().unwrap();
    assert!(alloc > 0, "{info:#}");
    // Every event the line says the file holds is in it.
    let events_said: u64 = last
        .split(" whole chunks, ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    let events: u64 = ["alloc", "free", "lock"]
        .iter()
        .map(|k| info["events"][k].as_u64().unwrap())
        .sum();
    assert_eq!(events, events_said, "{last}");
    if last.contains(", then its trailer;") {
        assert_eq!(chunks, chunks_said + 1, "{last}");
        assert_eq!(info["ended"], "clean", "{info:#}");
        let reason = info["stop_reason"].as_str().unwrap();
        assert!(
            reason.starts_with("disk full (No space left on device"),
            "{reason}"
        );
        assert!(
            reason.contains("events after them were not written"),
            "{reason}"
        );
        let text = common::run(&common::ebsym_path(), &["info", trace.to_str().unwrap()]);
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(
            text.lines().any(|l| l.starts_with("ended")
                && l.contains("cut at its last whole chunk")
                && l.contains("stopped: disk full")),
            "{text}"
        );
    } else {
        assert!(last.contains("no trailer"), "{last}");
        assert_eq!(chunks, chunks_said);
        assert_eq!(info["ended"], "cut", "{info:#}");
    }
    assert!(records > 0);
}

/// `ebrec agent ARGS` started and recording; its stderr lines go to the channel, the
/// metrics address (with `--metrics 127.0.0.1:0`) is returned.
fn agent(args: &[&str]) -> (Child, std::sync::mpsc::Receiver<String>, Option<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ebrec"))
        .arg("agent")
        .args(args)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let mut metrics = None;
    loop {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(l) if l.contains("recording to") => break,
            Ok(l) => {
                if let Some(a) = l.strip_prefix("ebrec agent: metrics on http://") {
                    metrics = a.strip_suffix("/metrics").map(str::to_string);
                }
            }
            Err(_) => panic!("ebrec agent never started recording"),
        }
    }
    (child, rx, metrics)
}

/// Waits (at most `secs`) for a line of the agent that contains `what`; the lines read.
fn agent_line(rx: &std::sync::mpsc::Receiver<String>, what: &str, secs: u64) -> Vec<String> {
    let t = Instant::now();
    let mut seen = Vec::new();
    while t.elapsed() < Duration::from_secs(secs) {
        if let Ok(l) = rx.recv_timeout(Duration::from_millis(200)) {
            let found = l.contains(what);
            seen.push(l);
            if found {
                return seen;
            }
        }
    }
    panic!("no agent line with {what:?} in {secs} s: {seen:#?}");
}

/// The closed windows of `stem` in `dir`, oldest first.
fn windows(dir: &Path, stem: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    v.retain(|p| {
        let n = p.file_name().unwrap().to_string_lossy().to_string();
        n.starts_with(&format!("{stem}.")) && n.ends_with(".pb.zst") && n.contains('T')
    });
    v.sort();
    v
}

/// A metric's value from the agent's /metrics (`series` as exposed, labels included).
fn metric(addr: &str, series: &str) -> Option<f64> {
    use std::net::TcpStream;
    let mut s = TcpStream::connect(addr).ok()?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// SIGTERM to the agent; its exit status and the lines it wrote before exiting.
fn stop_agent(mut a: Child, rx: &std::sync::mpsc::Receiver<String>) -> (i32, Vec<String>) {
    // SAFETY: plain kill(2).
    unsafe { libc::kill(a.id() as i32, libc::SIGTERM) };
    let st = a.wait().unwrap();
    let rest: Vec<String> =
        std::iter::from_fn(|| rx.recv_timeout(Duration::from_secs(5)).ok()).collect();
    (st.code().unwrap_or(-1), rest)
}

/// A copy of shop under a command name of this test's, started for `secs` seconds.
fn shop(dir: &Path, name: &str, secs: &str) -> Child {
    let prog = ebtrace_testdata::build("shop", ebtrace_testdata::Variant::FramePointer).unwrap();
    let to = dir.join(name);
    std::fs::copy(&prog, &to).unwrap();
    // ETXTBSY: another test thread forked while the copy was open for writing, and its
    // child holds the descriptor until it execs; a moment later it has.
    for _ in 0..50 {
        match Command::new(&to)
            .args(["--seconds", secs])
            .stdout(Stdio::piped())
            .spawn()
        {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                std::thread::sleep(Duration::from_millis(100))
            }
            r => return r.unwrap(),
        }
    }
    panic!("{}: text file busy for 5 s", to.display())
}

/// The target's work, undisturbed: it ends well and prints its EXPECT line.
fn target_done(mut t: Child) -> serde_json::Value {
    let mut out = String::new();
    t.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    assert!(t.wait().unwrap().success());
    let e = expect_of(&out);
    assert!(e["requests"].as_u64().unwrap() > 0, "{e}");
    e
}

#[test]
fn agent_on_a_full_disk_drops_windows_then_resumes() {
    if !root() {
        return;
    }
    let progs = tempfile::tempdir().unwrap();
    let target = shop(progs.path(), "hfshopdisk", "9");
    let fs = Tmpfs::mount("2m");
    let out = fs.path().join("w.pb.zst");
    let (a, rx, addr) = agent(&[
        "--comm",
        "^hfshopdisk$",
        "--window",
        "1",
        "--keep",
        "4",
        "--alloc=1024",
        "--lock",
        "--metrics",
        "127.0.0.1:0",
        "-o",
        out.to_str().unwrap(),
    ]);
    let addr = addr.expect("the metrics line");
    let t = Instant::now();
    while windows(fs.path(), "w").len() < 2 {
        assert!(t.elapsed() < Duration::from_secs(10), "no windows");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Another service takes every byte that frees, until it stops.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let filler = {
        let (stop, dir) = (stop.clone(), fs.path().to_path_buf());
        std::thread::spawn(move || {
            let mut k = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let mut f = std::fs::File::create(dir.join(format!("filler{k}"))).unwrap();
                while f.write(&[0x5a; 4096]).is_ok_and(|n| n > 0) {}
                k += 1;
                std::thread::sleep(Duration::from_millis(30));
            }
        })
    };
    let seen = agent_line(&rx, "ebrec agent: cannot write windows (", 10);
    let full = seen.last().unwrap().clone();
    eprintln!("{full}");
    assert!(full.contains("No space left on device"), "{full}");
    // A few windows go by on the full disk.
    std::thread::sleep(Duration::from_millis(2500));
    let dropped = metric(&addr, "ebrec_windows_dropped_total{reason=\"disk\"}").unwrap();
    assert!(dropped >= 1.0, "{dropped}");
    assert_eq!(
        metric(&addr, "ebrec_windows_dropped_total{reason=\"behind\"}"),
        Some(0.0)
    );
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    filler.join().unwrap();
    for f in std::fs::read_dir(fs.path()).unwrap().flatten() {
        if f.file_name().to_string_lossy().starts_with("filler") {
            std::fs::remove_file(f.path()).unwrap();
        }
    }
    let seen = agent_line(&rx, "ebrec agent: writing windows again (", 10);
    let again = seen.last().unwrap().clone();
    eprintln!("{again}");
    // One line per change of state, not one per window.
    let lines = seen
        .iter()
        .filter(|l| l.contains("cannot write windows"))
        .count();
    assert_eq!(lines, 0, "{seen:#?}");
    let before = windows(fs.path(), "w");
    let t = Instant::now();
    while windows(fs.path(), "w").last() == before.last() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "no window after the disk came back"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (code, rest) = stop_agent(a, &rx);
    assert_eq!(code, 0, "{rest:#?}");
    let last = rest
        .iter()
        .find(|l| l.contains(" not written (disk), "))
        .unwrap_or_else(|| panic!("{rest:#?}"));
    eprintln!("{last}");
    // Every window kept reads whole; the ones the disk cut say so in their trailer.
    let kept = windows(fs.path(), "w");
    assert!(!kept.is_empty());
    for w in &kept {
        read_whole(w);
        let info = ebsym_json(&["info", w.to_str().unwrap()]);
        let reason = info["stop_reason"].as_str().unwrap_or("");
        assert!(
            reason == "window" || reason.starts_with("disk full") || reason.starts_with("signal"),
            "{}: {info:#}",
            w.display()
        );
    }
    target_done(target);
}

#[test]
fn agent_output_directory_removed_then_read_only() {
    if !root() {
        return;
    }
    let progs = tempfile::tempdir().unwrap();
    let target = shop(progs.path(), "hfshopdir", "9");
    let fs = Tmpfs::mount("64m");
    let dir = fs.path().join("out");
    let out = dir.join("w.pb.zst");
    let (a, rx, _) = agent(&[
        "--comm",
        "^hfshopdir$",
        "--window",
        "1",
        "--alloc=1024",
        "--lock",
        "-o",
        out.to_str().unwrap(),
    ]);
    let t = Instant::now();
    while windows(&dir, "w").is_empty() {
        assert!(t.elapsed() < Duration::from_secs(10), "no windows");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::remove_dir_all(&dir).unwrap();
    let seen = agent_line(&rx, "ebrec agent: cannot write windows (", 10);
    let gone = seen.last().unwrap().clone();
    eprintln!("{gone}");
    assert!(gone.contains("No such file or directory"), "{gone}");
    std::fs::create_dir(&dir).unwrap();
    let again = agent_line(&rx, "ebrec agent: writing windows again (", 10);
    eprintln!("{}", again.last().unwrap());
    // Read-only: a read-only bind mount of the directory over it.
    let d = dir.to_str().unwrap();
    assert!(Command::new("mount")
        .args(["--bind", d, d])
        .status()
        .unwrap()
        .success());
    let ro = Command::new("mount")
        .args(["-o", "remount,bind,ro", d])
        .status()
        .unwrap();
    let seen = ro
        .success()
        .then(|| agent_line(&rx, "ebrec agent: cannot write windows (", 10));
    let _ = Command::new("umount").arg(d).status();
    let seen = seen.expect("mount -o remount,bind,ro");
    let rofs = seen.last().unwrap().clone();
    eprintln!("{rofs}");
    assert!(rofs.contains("Read-only file system"), "{rofs}");
    let again = agent_line(&rx, "ebrec agent: writing windows again (", 10);
    eprintln!("{}", again.last().unwrap());
    let (code, rest) = stop_agent(a, &rx);
    assert_eq!(code, 0, "{rest:#?}");
    let last = rest
        .iter()
        .find(|l| l.contains(" not written (disk), "))
        .unwrap_or_else(|| panic!("{rest:#?}"));
    eprintln!("{last}");
    let not_written: u64 = last
        .split(" not handed to the worker (it was behind), ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(not_written >= 2, "{last}");
    for w in windows(&dir, "w") {
        read_whole(&w);
    }
    target_done(target);
}

/// SIGINT and SIGTERM stop `ebrec record` cleanly (the trailer says which, exit 0); SIGHUP
/// is noted and ignored (a closed terminal sends it). The -p target never notices.
#[test]
fn signals_on_record() {
    if !root() {
        return;
    }
    let prog = ebtrace_testdata::build("shop", ebtrace_testdata::Variant::FramePointer).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (sig, name) in [
        (libc::SIGINT, "SIGINT"),
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGHUP, "SIGHUP"),
    ] {
        let trace = dir.path().join(format!("{name}.pb.zst"));
        let mut target = Command::new(&prog)
            .args(["--seconds", "2", "--wait"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(target.stdout.take().unwrap()).lines();
        assert!(lines.next().unwrap().unwrap().starts_with("READY"));
        let mut rec = Command::new(env!("CARGO_BIN_EXE_ebrec"))
            .args([
                "record",
                "-o",
                trace.to_str().unwrap(),
                "--alloc=1024",
                "--lock",
            ])
            .args(["-p", &target.id().to_string()])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (_, rest) = wait_for(&mut rec, "ebrec: recording to");
        // SAFETY: plain kill(2).
        unsafe { libc::kill(target.id() as i32, libc::SIGUSR1) };
        std::thread::sleep(Duration::from_millis(500));
        let sent = Instant::now();
        // SAFETY: plain kill(2).
        unsafe { libc::kill(rec.id() as i32, sig) };
        let status = rec.wait().unwrap();
        let took = sent.elapsed();
        let err = rest.join().unwrap();
        let out: Vec<String> = lines.map_while(Result::ok).collect();
        assert!(target.wait().unwrap().success(), "{name}");
        assert!(
            out.iter().any(|l| l.starts_with("EXPECT ")),
            "{name}: {out:?}"
        );
        assert!(status.success(), "{name}: {status}: {err:#?}");
        let (records, _) = read_whole(&trace);
        assert!(records > 0);
        let info = ebsym_json(&["info", trace.to_str().unwrap()]);
        let reason = info["stop_reason"].as_str().unwrap_or("");
        if sig == libc::SIGHUP {
            assert!(
                err.iter().any(|l| l
                    == "ebrec: SIGHUP ignored: the recording goes on (SIGINT or SIGTERM stops it)"),
                "{err:#?}"
            );
            // It went on until the target's end, 1.5 s later.
            assert_eq!(reason, "targets exited", "{info:#}");
            assert!(took > Duration::from_millis(1000), "{took:?}");
        } else {
            assert_eq!(reason, format!("signal {name}"), "{info:#}");
            assert!(took < Duration::from_millis(1500), "{name}: {took:?}");
        }
        eprintln!("{name}: stopped {took:?} after it; {reason}");
    }
}

/// SIGHUP closes the agent's window now (a new one starts); SIGTERM stops it, the last
/// window kept.
#[test]
fn sighup_closes_the_agents_window() {
    if !root() {
        return;
    }
    let progs = tempfile::tempdir().unwrap();
    let target = shop(progs.path(), "hfshophup", "4");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("w.pb.zst");
    let (a, rx, _) = agent(&[
        "--comm",
        "^hfshophup$",
        "--window",
        "60",
        "--alloc=1024",
        "-o",
        out.to_str().unwrap(),
    ]);
    std::thread::sleep(Duration::from_millis(800));
    assert!(windows(dir.path(), "w").is_empty());
    // SAFETY: plain kill(2).
    unsafe { libc::kill(a.id() as i32, libc::SIGHUP) };
    let seen = agent_line(&rx, "ebrec agent: SIGHUP: the window closes now", 5);
    eprintln!("{}", seen.last().unwrap());
    let t = Instant::now();
    while windows(dir.path(), "w").is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "no window after SIGHUP"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("a window {:?} after SIGHUP", t.elapsed());
    std::thread::sleep(Duration::from_millis(500));
    let (code, rest) = stop_agent(a, &rx);
    assert_eq!(code, 0, "{rest:#?}");
    let w = windows(dir.path(), "w");
    assert_eq!(w.len(), 2, "{w:?}");
    for f in &w {
        read_whole(f);
    }
    let first = ebsym_json(&["info", w[0].to_str().unwrap()]);
    assert_eq!(first["stop_reason"], "window", "{first:#}");
    target_done(target);
}

/// A -p target goes on untouched when the disk fills under `ebrec record`.
#[test]
fn record_on_a_full_disk_leaves_a_p_target_alone() {
    if !root() {
        return;
    }
    let prog = ebtrace_testdata::build("shop", ebtrace_testdata::Variant::FramePointer).unwrap();
    let fs = Tmpfs::mount("2m");
    let trace = fs.path().join("p.pb.zst");
    let mut target = Command::new(&prog)
        .args(["--seconds", "4", "--wait"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(target.stdout.take().unwrap()).lines();
    assert!(lines.next().unwrap().unwrap().starts_with("READY"));
    let mut rec = Command::new(env!("CARGO_BIN_EXE_ebrec"))
        .args([
            "record",
            "-o",
            trace.to_str().unwrap(),
            "--alloc=1024",
            "--lock",
        ])
        .args(["-p", &target.id().to_string()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (_, rest) = wait_for(&mut rec, "ebrec: recording to");
    // SAFETY: plain kill(2).
    unsafe { libc::kill(target.id() as i32, libc::SIGUSR1) };
    wait_size(&trace, 4096);
    fs.fill("filler", 0);
    let status = rec.wait().unwrap();
    let err = rest.join().unwrap();
    let out: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(target.wait().unwrap().success());
    let expect = expect_of(&out.join("\n"));
    assert!(expect["requests"].as_u64().unwrap() > 0, "{expect}");
    assert_eq!(status.code(), Some(1), "{err:#?}");
    let last = err.last().unwrap();
    eprintln!("{last}");
    assert!(last.starts_with("ebrec: disk full ("), "{last}");
    read_whole(&trace);
}

/// A memory cgroup of `limit` bytes below this process's own (v1's memory hierarchy, or v2
/// at the root of the unified one), removed when dropped; None when this machine has
/// neither (said, and a failure when CI=true).
struct MemCgroup {
    dir: PathBuf,
    v1: bool,
}

impl MemCgroup {
    fn new(limit: u64) -> Option<MemCgroup> {
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let name = format!("ebtrace-memtest-{}", std::process::id());
        let v1 = own.lines().find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, c, p) = (f.next()?, f.next()?, f.next()?);
            c.split(',').any(|c| c == "memory").then(|| p.to_string())
        });
        let (dir, file, v1) = match v1 {
            Some(p) => (
                Path::new("/sys/fs/cgroup/memory")
                    .join(p.trim_start_matches('/'))
                    .join(&name),
                "memory.limit_in_bytes",
                true,
            ),
            None => (Path::new("/sys/fs/cgroup").join(&name), "memory.max", false),
        };
        let made = std::fs::create_dir(&dir)
            .and_then(|()| std::fs::write(dir.join(file), limit.to_string()));
        if let Err(e) = made {
            let _ = std::fs::remove_dir(&dir);
            let why = format!("no memory cgroup to make here ({}: {e})", dir.display());
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
            eprintln!("\n*** SKIPPED: {why} ***\n");
            return None;
        }
        Some(MemCgroup { dir, v1 })
    }

    /// The cgroup's peak use and its OOM kills so far.
    fn peak_and_kills(&self) -> (u64, u64) {
        let read = |f: &str| std::fs::read_to_string(self.dir.join(f)).unwrap_or_default();
        let peak = if self.v1 {
            read("memory.max_usage_in_bytes")
        } else {
            read("memory.peak")
        };
        let events = if self.v1 {
            read("memory.oom_control")
        } else {
            read("memory.events")
        };
        let kills = events
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        (peak.trim().parse().unwrap_or(0), kills)
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Under a memory limit far below what the default maps take (about 350 MiB for these
/// families), ebrec sizes its ring buffers, unwind rows and tables to the limit, says so in
/// one line, and records: the allocations of a program whose allocations are known are all
/// there, nothing is OOM-killed, and the cgroup's peak stays under the limit.
#[test]
fn record_under_a_memory_limit_fits_its_maps_to_it() {
    if !root() {
        return;
    }
    const LIMIT: u64 = 160 << 20;
    let Some(cg) = MemCgroup::new(LIMIT) else {
        return;
    };
    let prog =
        ebtrace_testdata::build("heap_known", ebtrace_testdata::Variant::FramePointer).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.pb.zst");
    let procs = cg.dir.join("cgroup.procs");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ebrec"));
    cmd.args([
        "record", "-q", "--cpu", "--offcpu", "--lock", "--alloc", "-o",
    ])
    .arg(&trace)
    .arg("--")
    .arg(&prog);
    // SAFETY: the child only writes its pid to a file before exec.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(move || std::fs::write(&procs, std::process::id().to_string()));
    }
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("ebrec: memory limit 160 MiB on cgroup "))
        .unwrap_or_else(|| panic!("no memory limit line: {err}"));
    assert!(
        line.contains("live blocks instead of 1048576")
            && line.contains("held locks instead of 65536")
            && !line.contains("even so"),
        "{line}"
    );
    let (peak, kills) = cg.peak_and_kills();
    assert_eq!(kills, 0, "OOM kills in the cgroup: {err}");
    assert!(peak > 0 && peak <= LIMIT, "peak {peak} of {LIMIT}");
    let want = expect_of(&String::from_utf8_lossy(&out.stdout));
    let top = ebsym_json(&[
        "top",
        trace.to_str().unwrap(),
        "--kind",
        "alloc",
        "-n",
        "1000",
    ]);
    let got = common::by_function(&top, &["leak_some", "temp_loop", "hold_peak"]);
    for f in ["leak_some", "temp_loop", "hold_peak"] {
        let w = &want["functions"][f];
        assert_eq!(
            got.get(f).copied(),
            Some((w["calls"].as_u64().unwrap(), w["bytes"].as_u64().unwrap())),
            "{f}: {got:?} against {w}"
        );
    }
    let info = ebsym_json(&["info", trace.to_str().unwrap()]);
    let ring: u64 = info["header"]["options"]["ringbuf-size"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(ring < 8 << 20, "ring buffers {ring}");
}

/// An agent killed (SIGKILL: an OOM kill, a crash) while its backend hangs, then started
/// again by its supervisor with a backend that answers: the second run keeps the first's
/// cut window, pushes it and every kept window the first run's pushers were not through
/// with, and its own, each once; every window ends with its `.pushed` mark.
#[test]
fn agent_killed_then_restarted_pushes_each_window_once() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("a.pb.zst");
    let name = format!("shoprs{}", std::process::id() % 10000);
    let target = shop(dir.path(), &name, "30");
    let hangs = vec!["hang"; 40].join(",");
    let stuck = common::conformance("pyroscope", &hangs, 120);
    let args = |url: &str| -> Vec<String> {
        [
            "--cpu",
            "--comm",
            &format!("^{name}$"),
            "--window",
            "2",
            "--keep",
            "20",
            "--service",
            "rs",
            "--push",
            url,
            "-o",
            out.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let a1: Vec<String> = args(&stuck.url("pyroscope"));
    let (mut first, rx1, _) = agent(&a1.iter().map(String::as_str).collect::<Vec<_>>());
    std::thread::sleep(Duration::from_millis(7000));
    first.kill().unwrap();
    first.wait().unwrap();
    drop(rx1);
    let left = windows(dir.path(), "a");
    assert!(left.len() >= 2, "{left:?}");
    assert!(out.exists(), "no cut window left by the killed agent");
    assert!(left
        .iter()
        .all(|w| !Path::new(&format!("{}.pushed", w.display())).exists()));

    let ok = common::conformance("pyroscope", "", 60);
    let mut a2 = args(&ok.url("pyroscope"));
    a2.extend(["--duration".to_string(), "4".to_string()]);
    let (second, rx2, _) = agent(&a2.iter().map(String::as_str).collect::<Vec<_>>());
    let st = second.wait_with_output().unwrap();
    let lines: Vec<String> =
        std::iter::from_fn(|| rx2.recv_timeout(Duration::from_secs(5)).ok()).collect();
    assert!(st.status.success(), "{lines:#?}");
    // The lines before "recording to" went to `agent`'s wait; the resume lines came first.
    let all = windows(dir.path(), "a");
    assert!(all.len() >= left.len() + 2, "{all:?} after {left:?}");
    for w in &all {
        assert!(
            Path::new(&format!("{}.pushed", w.display())).exists(),
            "{} has no .pushed mark: {lines:#?}",
            w.display()
        );
    }
    // Each window's CPU profile arrived once: one push per window with CPU samples (a
    // window cut before its first chunk has none), no two alike.
    let with_cpu = all
        .iter()
        .filter(|w| {
            let info = ebsym_json(&["info", w.to_str().unwrap()]);
            info["events"]["cpu"].as_u64().unwrap_or(0) > 0
        })
        .count();
    let mut froms = Vec::new();
    for (v, _) in ok.accepted() {
        let n = v["query"]["name"].as_str().unwrap_or("").to_string();
        if n.starts_with("rs.cpu") {
            froms.push((v["query"]["from"].as_str().unwrap_or("").to_string(), n));
        }
    }
    let mut uniq = froms.clone();
    uniq.sort();
    uniq.dedup();
    assert_eq!(uniq.len(), froms.len(), "a window pushed twice: {froms:#?}");
    assert_eq!(froms.len(), with_cpu, "{froms:#?} for windows {all:#?}");
    assert!(
        with_cpu >= left.len(),
        "{with_cpu} windows with samples of {all:?}"
    );
    let mut target = target;
    let _ = target.kill();
    let _ = target.wait();
}
