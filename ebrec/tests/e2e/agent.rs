//! `ebrec agent` end to end: targets found by command name or cgroup while it runs (a
//! process started after the agent is followed), one self-contained trace file per window
//! with every event in exactly one of them, the newest --keep kept, and one-line refusals.
//! Needs root (skips loudly without it; fails when CI=true).

use crate::common;
use common::{ebsym_json, root};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The testdata program `program` copied under `name` (a command name no other process has).
fn renamed(program: &str, name: &str, dir: &Path) -> PathBuf {
    let prog = ebtrace_testdata::build(program, ebtrace_testdata::Variant::FramePointer).unwrap();
    let to = dir.join(name);
    std::fs::copy(&prog, &to).unwrap();
    to
}

/// Starts `ebrec agent ARGS` and waits until it records; its stderr lines go to the channel.
fn agent(args: &[&str]) -> (Child, mpsc::Receiver<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ebrec"))
        .arg("agent")
        .args(args)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(l) if l.contains("recording to") => break,
            Ok(l) => seen.push(l),
            Err(_) => panic!("ebrec agent never started recording: {seen:?}"),
        }
    }
    (child, rx)
}

/// The window files of OUTPUT (`STEM.<UTC stamp>.pb.zst`), oldest first.
fn windows(dir: &Path, stem: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy().to_string();
            n.starts_with(&format!("{stem}.")) && n.ends_with(".pb.zst") && n.contains('T')
        })
        .collect();
    v.sort();
    v
}

/// Off-CPU blocks of `pid` over 90 ms whose stack has `func`, in one window's trace.
fn long_blocks(trace: &Path, pid: u32, func: &str) -> u64 {
    let top = ebsym_json(&[
        "top",
        trace.to_str().unwrap(),
        "--kind",
        "offcpu",
        "--pid",
        &pid.to_string(),
        "-n",
        "1000",
    ]);
    top["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            r["frames"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["function"].as_str().unwrap_or("").contains(func))
        })
        .map(|r| r["count"].as_u64().unwrap())
        .sum()
}

/// The v2 hierarchy: /sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid host.
fn cgroup2_root() -> PathBuf {
    let mi = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    mi.lines()
        .find_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            (post.starts_with("cgroup2 "))
                .then(|| pre.split(' ').nth(4).map(PathBuf::from))
                .flatten()
        })
        .expect("no cgroup2 hierarchy mounted")
}

/// Waits for the agent's "following pid PID" line; how long it took.
fn followed_within(rx: &mpsc::Receiver<String>, pid: u32, limit: Duration) -> Duration {
    let t = std::time::Instant::now();
    let mut early = Vec::new();
    loop {
        match rx.recv_timeout(limit.saturating_sub(t.elapsed())) {
            Ok(l) if l.contains(&format!("following pid {pid} ")) => return t.elapsed(),
            Ok(l) => early.push(l),
            Err(_) => panic!("the agent did not follow pid {pid} within {limit:?}: {early:?}"),
        }
    }
}

fn finish(child: Child, rx: mpsc::Receiver<String>) -> Vec<String> {
    let out = child.wait_with_output().unwrap();
    let lines: Vec<String> = rx.try_iter().collect();
    assert!(out.status.success(), "ebrec agent failed: {lines:#?}");
    lines
}

#[test]
fn comm_follows_a_later_process_and_every_block_is_in_one_window() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let prog = renamed("offcpu_blocks", "ebt_agent_ob", dir.path());
    let out = dir.path().join("a.pb.zst");
    let (child, rx) = agent(&[
        "--offcpu=5000",
        "--comm",
        "^ebt_agent_ob$",
        "--window",
        "1",
        "--keep",
        "100",
        "--duration",
        "7",
        "-o",
        out.to_str().unwrap(),
    ]);
    // Started after the agent: found by its name (within the agent's 100 ms scan), then
    // let go. 10 naps of 150 ms span several windows.
    std::thread::sleep(Duration::from_millis(1500));
    let run =
        common::start_waiting_exe(&prog, &["--naps", "10", "--ms", "150", "--pingpong", "100"]);
    let pid = run.pid;
    let mut early = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(l) if l.contains(&format!("following pid {pid} ")) => break,
            Ok(l) => early.push(l),
            Err(_) => panic!("the agent did not follow pid {pid}: {early:?}"),
        }
    }
    let rest = run.go();
    assert!(rest.contains("EXPECT"), "{rest}");
    let lines = finish(child, rx);
    let files = windows(dir.path(), "a");
    assert!(!out.exists(), "the last window was not closed");
    assert!(
        (6..=9).contains(&files.len()),
        "7 s in 1 s windows: {files:?}"
    );
    // Each window reads on its own, and the program is described in those it ran in.
    let mut naps = 0;
    let mut with_program = 0;
    for f in &files {
        let info = ebsym_json(&["info", f.to_str().unwrap()]);
        assert_eq!(
            info["damage"].as_array().map_or(0, |d| d.len()),
            0,
            "{f:?}: {info}"
        );
        // Always on: no wake hook by default (one program fewer at every wakeup).
        let text = String::from_utf8_lossy(
            &common::run(&common::ebsym_path(), &["info", f.to_str().unwrap()]).stdout,
        )
        .into_owned();
        assert!(text.contains("offcpu-wakers=off"), "{text}");
        let procs = info["processes"].as_array().unwrap();
        if let Some(p) = procs
            .iter()
            .find(|p| p["comm"].as_str() == Some("ebt_agent_ob"))
        {
            with_program += 1;
            assert_eq!(p["pid"].as_u64(), Some(pid as u64));
            naps += long_blocks(f, pid, "sleeper_a");
        }
    }
    assert!(
        lines
            .iter()
            .any(|l| l.contains("processes followed after the start")),
        "{lines:#?}"
    );
    assert!(
        with_program >= 2,
        "the program's 1.5 s span one window only?"
    );
    assert_eq!(naps, 10, "every nap in exactly one window");
}

/// A process older than the agent's 2 s of close looks that execs into the name, and one
/// moved into the cgroup, are followed at the next once-a-second check (within 4 s here, on a
/// loaded machine; the every-10-s look would come at 10 s), and their naps after that are all
/// recorded.
#[test]
fn a_process_that_execs_or_moves_in_later_is_followed_within_a_second() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let naps = |f: &Path, pid: u32| -> u64 {
        windows(
            dir.path(),
            f.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .split('.')
                .next()
                .unwrap(),
        )
        .iter()
        .map(|w| long_blocks(w, pid, "sleeper_a"))
        .sum()
    };
    let args = ["--naps", "5", "--ms", "150", "--pingpong", "10"];

    // --comm: sh waits 3 s, then execs into the program (same pid, a new comm).
    let prog = renamed("offcpu_blocks", "ebt_agent_late", dir.path());
    let out = dir.path().join("e.pb.zst");
    let (child, rx) = agent(&[
        "--offcpu=5000",
        "--comm",
        "^ebt_agent_late$",
        "--window",
        "2",
        "--keep",
        "100",
        "--duration",
        "12",
        "-o",
        out.to_str().unwrap(),
    ]);
    let mut sh = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "sleep 3; exec {} {} --wait",
            prog.display(),
            args.join(" ")
        ))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = sh.id();
    let mut stdout = BufReader::new(sh.stdout.take().unwrap());
    let mut ready = String::new();
    stdout.read_line(&mut ready).unwrap();
    assert!(ready.starts_with("READY"), "{ready}");
    // (killed when dropped: a failure leaves no program waiting)
    let run = common::Waiting {
        child: sh,
        stdout,
        pid,
    };
    let took = followed_within(&rx, pid, Duration::from_secs(4));
    let rest = run.go();
    assert!(rest.contains("EXPECT"), "{rest}");
    finish(child, rx);
    assert_eq!(
        naps(&out, pid),
        5,
        "exec'd after 3 s, followed after {took:?}"
    );

    // --cgroup: the program runs outside for 3 s, then is moved in.
    let prog = renamed("offcpu_blocks", "ebt_agent_mv", dir.path());
    let cg = format!("ebtrace-agent-move-{}", std::process::id());
    let cg_dir = cgroup2_root().join(&cg);
    std::fs::create_dir(&cg_dir).unwrap();
    let out = dir.path().join("m.pb.zst");
    let (child, rx) = agent(&[
        "--offcpu=5000",
        "--cgroup",
        &cg,
        "--window",
        "2",
        "--keep",
        "100",
        "--duration",
        "12",
        "-o",
        out.to_str().unwrap(),
    ]);
    let run = common::start_waiting_exe(&prog, &args);
    std::thread::sleep(Duration::from_secs(3));
    std::fs::write(cg_dir.join("cgroup.procs"), run.pid.to_string()).unwrap();
    let pid = run.pid;
    let took = followed_within(&rx, pid, Duration::from_secs(4));
    let rest = run.go();
    assert!(rest.contains("EXPECT"), "{rest}");
    finish(child, rx);
    let _ = std::fs::remove_dir(&cg_dir);
    assert_eq!(
        naps(&out, pid),
        5,
        "moved in after 3 s, followed after {took:?}"
    );
}

#[test]
fn cgroup_selects_its_processes_only_and_keep_bounds_the_files() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let prog = renamed("offcpu_blocks", "ebt_agent_cg", dir.path());
    let cg = format!("ebtrace-agent-test-{}", std::process::id());
    let cg_dir = cgroup2_root().join(&cg);
    std::fs::create_dir(&cg_dir).unwrap();
    let out = dir.path().join("c.pb.zst");
    let (child, rx) = agent(&[
        "--offcpu=5000",
        "--cgroup",
        &cg,
        "--window",
        "1",
        "--keep",
        "3",
        "--duration",
        "6",
        "-o",
        out.to_str().unwrap(),
    ]);
    // Both run 5 s, into the last three windows of the agent's 6 s.
    let args = "--naps 50 --ms 100 --pingpong 100";
    // One copy inside the cgroup (it moves itself in before exec), one outside.
    let inside = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "echo $$ > {}/cgroup.procs && exec {} {args}",
            cg_dir.display(),
            prog.display()
        ))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let outside = Command::new(&prog)
        .args(args.split(' '))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (inside, outside) = (
        inside.wait_with_output().unwrap(),
        outside.wait_with_output().unwrap(),
    );
    let in_pid = common::expect_line(&inside, "offcpu_blocks")["pid"].as_u64();
    let out_pid = common::expect_line(&outside, "offcpu_blocks")["pid"].as_u64();
    finish(child, rx);
    let _ = std::fs::remove_dir(&cg_dir);
    let files = windows(dir.path(), "c");
    assert_eq!(files.len(), 3, "--keep 3: {files:?}");
    let mut pids = std::collections::BTreeSet::new();
    for f in &files {
        let info = ebsym_json(&["info", f.to_str().unwrap()]);
        for p in info["processes"].as_array().unwrap() {
            pids.insert(p["pid"].as_u64().unwrap());
        }
    }
    if let Some(p) = out_pid {
        assert!(
            !pids.contains(&p),
            "the copy outside the cgroup was recorded: {pids:?}"
        );
    }
    let in_pid = in_pid.expect("the copy in the cgroup printed no pid");
    assert!(
        pids.contains(&in_pid),
        "the copy in the cgroup is in no window: {pids:?}"
    );
}

#[test]
fn refusals_are_one_line() {
    let ebrec = env!("CARGO_BIN_EXE_ebrec");
    for (args, want) in [
        (vec!["agent", "--cpu"], "say what to trace"),
        (
            vec!["agent", "--cpu", "--all", "--comm", "x"],
            "--all traces every process",
        ),
        (
            vec!["agent", "--cpu", "--cgroup", "no/such/cgroup.scope"],
            "no such cgroup",
        ),
        (vec!["agent", "--cpu", "--comm", "("], "--comm ("),
        (
            vec!["agent", "--cpu", "--all", "--window", "0"],
            "--window SECS",
        ),
        (
            vec!["agent", "--cpu", "--all", "--", "true"],
            "does not start a command",
        ),
    ] {
        let out = Command::new(ebrec).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    }
    // a label Prometheus and the backends would refuse is refused here (clap's usage error)
    let out = Command::new(ebrec)
        .args(["agent", "--cpu", "--all", "--label", "1x=y"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("label name \"1x\" is not"), "{err}");
}

/// A port nothing listens on.
fn dead_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[test]
fn pushes_every_window_past_503s_and_a_dead_backend_never_holds_it() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let target = common::start_waiting(
        "offcpu_blocks",
        &["--naps", "10", "--ms", "150", "--pingpong", "100"],
    );
    let pid = target.pid;
    let pyro = common::conformance("pyroscope", "503,503,reset", 60);
    let dead = dead_port();
    let out = dir.path().join("p.pb.zst");
    let (child, rx) = agent(&[
        "--offcpu=5000",
        "-p",
        &pid.to_string(),
        "--window",
        "1",
        "--duration",
        "6",
        "--keep",
        "0",
        "--service",
        "ob",
        "--label",
        "env=ci",
        "--push",
        &format!("pyroscope+http://127.0.0.1:{}", pyro.port),
        "--push",
        &format!("parca+http://127.0.0.1:{dead}"),
        "-o",
        out.to_str().unwrap(),
    ]);
    // From the first window on (the agent's start, its BPF programs loaded, is no part of
    // the claim: a loaded CI host once took most of the bound there).
    let started = std::time::Instant::now();
    target.go();
    let lines = finish(child, rx);
    // 6 s of recording, then at most the pusher's 10 s to flush: the dead backend costs no
    // more.
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    // --keep 0: every window deleted once the pushers were through with it.
    assert!(
        windows(dir.path(), "p").is_empty(),
        "{:?}",
        windows(dir.path(), "p")
    );
    let line = |what: &str| {
        lines
            .iter()
            .find(|l| l.contains(what) && l.contains("pushed"))
            .unwrap_or_else(|| panic!("no push summary for {what}: {lines:#?}"))
            .clone()
    };
    let (py, pa) = (line("pyroscope+http"), line("parca+http"));
    assert!(
        py.contains("3 failed attempts") && py.contains(" 0 dropped"),
        "{lines:#?}"
    );
    assert!(pa.contains("0 pushed"), "{pa}");
    // Every window's off-CPU profile arrived once: the program's naps are all there.
    let mut nap_ns = 0u64;
    let mut offcpu_pushes = 0;
    for e in std::fs::read_dir(pyro.out.path()).unwrap().flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "json") {
            let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
            let name = v["query"]["name"].as_str().unwrap_or("");
            assert!(name.starts_with("ob."), "{name}");
            // --label: on every series, beside the service, host and kernel
            assert!(
                name.contains("env=ci") && name.contains("service_name=ob"),
                "{name}"
            );
            if name.starts_with("ob.offcpu") {
                offcpu_pushes += 1;
                nap_ns += v["summary"]["totals"][0].as_u64().unwrap_or(0);
            }
        }
    }
    assert!(offcpu_pushes >= 2, "{offcpu_pushes} off-CPU pushes");
    assert!(
        nap_ns >= 10 * 150_000_000 * 9 / 10,
        "pushed off-CPU time {nap_ns} ns < the program's 10 naps of 150 ms"
    );
}
