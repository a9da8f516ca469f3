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
use std::path::Path;
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
    // Once events reach the file, the disk fills but 64 KiB, which the trace soon needs.
    wait_size(&trace, 4096);
    let filled = fs.fill("filler", 64 << 10);
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
