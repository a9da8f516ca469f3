//! `--sched`: ebrec's own threads run under the policy asked for (batch by default: no
//! preemption of the traced service at ebrec's wakeups), the command it launches keeps the
//! normal policy, and the trace's header says which policy was asked for.
use crate::common::*;
use std::io::{BufRead, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The scheduling policy (`/proc/PID/task/TID/stat` field 41) of each thread of `pid`.
fn policies(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else {
            continue;
        };
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        // Field 41 is the 39th after the command name's ")" (fields 3.. start here).
        out.push(rest.split(' ').nth(38).unwrap().parse().unwrap());
    }
    out
}

/// Records a shell that waits for a line, with `flags`; once every ebrec thread has
/// `want`, lets the shell print its own policy (chrt) and end. The shell's line, the
/// ebrec threads' policies and the trace's `sched` header option.
fn launched_under(flags: &[&str], want: u32) -> (String, Vec<u32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.pb.zst");
    let mut ebrec = Command::new(env!("CARGO_BIN_EXE_ebrec"))
        .args(["record", "-q", "--cpu", "-o"])
        .arg(&trace)
        .args(flags)
        .args(["--", "sh", "-c", "read x; chrt -p $$"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = policies(ebrec.id());
    while !seen.iter().all(|&p| p == want) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        seen = policies(ebrec.id());
    }
    writeln!(ebrec.stdin.take().unwrap(), "go").unwrap();
    let mut line = String::new();
    std::io::BufReader::new(ebrec.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(ebrec.wait().unwrap().success());
    let info = ebsym_json(&["info", trace.to_str().unwrap()]);
    let sched = info["header"]["options"]["sched"]
        .as_str()
        .unwrap_or("")
        .to_string();
    (line, seen, sched)
}

#[test]
fn ebrec_threads_run_batch_by_default_and_the_command_keeps_its_policy() {
    if !root() {
        return;
    }
    let (line, seen, sched) = launched_under(&[], libc::SCHED_BATCH as u32);
    assert!(
        seen.iter().all(|&p| p == libc::SCHED_BATCH as u32),
        "ebrec's threads' policies {seen:?}, want all SCHED_BATCH (3)"
    );
    assert!(line.contains("SCHED_OTHER"), "the launched shell: {line}");
    assert_eq!(sched, "batch");

    let (line, seen, sched) = launched_under(&["--sched", "idle"], libc::SCHED_IDLE as u32);
    assert!(
        seen.iter().all(|&p| p == libc::SCHED_IDLE as u32),
        "ebrec's threads' policies {seen:?}, want all SCHED_IDLE (5)"
    );
    assert!(line.contains("SCHED_OTHER"), "the launched shell: {line}");
    assert_eq!(sched, "idle");
}
