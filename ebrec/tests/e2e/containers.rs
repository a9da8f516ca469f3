//! Containers end to end: targets in another pid namespace (`unshare -p -f --mount-proc`),
//! launched (children followed across the namespace boundary) and attached by host pid; a
//! target in a docker-style cgroup; a binary that exists only in the target's mount
//! namespace. `ebsym info` must show the host pid, the namespace pid, the cgroup and the
//! container id; `ebsym top` the program's functions. Needs root (skips loudly without it;
//! fails when CI=true).

use crate::common;
use common::{ebsym_json, expect_line, root};
use serde_json::Value;
use std::io::{BufRead, BufReader, Lines};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};

/// The testdata program `name`, frame-pointer build.
fn bin(name: &str) -> PathBuf {
    ebtrace_testdata::build(name, ebtrace_testdata::Variant::FramePointer).unwrap()
}

/// Whether util-linux's unshare is here; loudly not (a failure when CI=true).
fn have_unshare() -> bool {
    let ok = Command::new("unshare")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("unshare (util-linux) is missing, and CI=true: failing instead of skipping");
        }
        eprintln!("\n*** SKIPPED: unshare (util-linux) is missing ***\n");
    }
    ok
}

/// `ebrec record -q -o TRACE FLAGS -- CMD`, asserting success.
fn ebrec_launch(trace: &Path, flags: &[&str], cmd: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_ebrec"))
        .args(["record", "-q", "-o"])
        .arg(trace)
        .args(flags)
        .arg("--")
        .args(cmd)
        .output()
        .expect("run ebrec");
    assert!(
        out.status.success(),
        "ebrec record {flags:?} -- {cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A program started with `--wait` (possibly under unshare/sh): blocked until SIGUSR1;
/// killed at drop if it did not finish.
struct Waiting {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
    /// The program's pid in the root pid namespace.
    host_pid: u32,
    /// The pid it printed (its own getpid(): the innermost namespace's).
    ready_pid: u32,
    done: bool,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if !self.done {
            // SAFETY: plain kill(2) of a process this test started.
            unsafe { libc::kill(self.host_pid as i32, libc::SIGKILL) };
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The descendants of `pid` (children first), from /proc/PID/task/*/children.
fn descendants(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let kids = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            for k in kids.split_whitespace().filter_map(|k| k.parse().ok()) {
                out.push(k);
                todo.push(k);
            }
        }
    }
    out
}

/// Whether process `pid` runs the binary `program` (its file name).
fn runs(pid: u32, program: &str) -> bool {
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .is_ok_and(|e| e.file_name().is_some_and(|n| n == program))
}

/// The file name of the binary `path`.
fn file_name(path: &Path) -> &str {
    path.file_name().unwrap().to_str().unwrap()
}

/// Starts `cmd` (whose last program is `program` (a file name) `... --wait`) and waits
/// for its READY line; the program's host pid is `cmd`'s own or a descendant's.
fn start_waiting(cmd: &[&str], program: &str) -> Waiting {
    let mut child = Command::new(cmd[0])
        .args(&cmd[1..])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let me = child.id();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = lines.next().and_then(|l| l.ok()).unwrap_or_default();
    let host_pid = std::iter::once(me)
        .chain(descendants(me))
        .find(|&p| runs(p, program));
    let ready_pid = ready
        .strip_prefix("READY ")
        .and_then(|p| p.trim().parse().ok());
    let (Some(host_pid), Some(ready_pid)) = (host_pid, ready_pid) else {
        for p in descendants(me) {
            // SAFETY: plain kill(2) of a process this test started.
            unsafe { libc::kill(p as i32, libc::SIGKILL) };
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("{cmd:?}: no READY line ({ready:?}) or no process {program} under {me}");
    };
    Waiting {
        child,
        lines,
        host_pid,
        ready_pid,
        done: false,
    }
}

/// `ebrec record -o TRACE FLAGS -p PID` of a waiting program: once ebrec records, the
/// program is let go; returns the program's stdout lines after READY.
fn ebrec_attach(trace: &Path, flags: &[&str], mut w: Waiting) -> Vec<String> {
    let pid = w.host_pid.to_string();
    let mut rec = Command::new(env!("CARGO_BIN_EXE_ebrec"))
        .args(["record", "-o"])
        .arg(trace)
        .args(flags)
        .args(["-p", &pid])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(rec.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    for l in err.by_ref() {
        let l = l.unwrap();
        let started = l.starts_with("ebrec: recording");
        seen.push(l);
        if started {
            break;
        }
    }
    // SAFETY: plain kill(2).
    unsafe { libc::kill(w.host_pid as i32, libc::SIGUSR1) };
    let rest: Vec<String> = w.lines.by_ref().map(|l| l.unwrap()).collect();
    w.child.wait().unwrap();
    w.done = true;
    let status = rec.wait().unwrap();
    seen.extend(err.map(|l| l.unwrap()));
    assert!(status.success(), "ebrec -p {pid}: {seen:#?}");
    rest
}

/// The EXPECT object among `lines`.
fn expect_of(lines: &[String], program: &str) -> Value {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("EXPECT "))
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["program"] == program)
        .unwrap_or_else(|| panic!("no EXPECT line of {program} in {lines:?}"))
}

/// The processes of `ebsym info --json` that ran the binary `program` (a file name; the
/// comm is its first 15 bytes), not a fork still showing its parent's image.
fn processes<'a>(info: &'a Value, program: &str) -> Vec<&'a Value> {
    let comm: String = program.chars().take(15).collect();
    info["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["comm"] == comm.as_str() && p["event"] != "fork")
        .collect()
}

/// The one process of `info` that ran `program`.
fn process<'a>(info: &'a Value, program: &str) -> &'a Value {
    let ps = processes(info, program);
    assert_eq!(
        ps.len(),
        1,
        "processes of {program}: {:#}",
        info["processes"]
    );
    ps[0]
}

/// Every function name in `ebsym top` rows (parameters cut off).
fn functions(top: &Value) -> std::collections::BTreeSet<String> {
    top["rows"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["frames"].as_array().unwrap())
        .filter_map(|f| f["function"].as_str())
        .map(|n| n.split('(').next().unwrap().to_string())
        .collect()
}

/// This test's cgroup v2 path and the container id in it (none, unless the test itself
/// runs in a container), which the processes it starts inherit.
fn own_cgroup() -> (String, String) {
    let text = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let v2 = text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or("")
        .to_string();
    let id = v2
        .rsplit('/')
        .map(|c| c.trim_end_matches(".scope"))
        .map(|c| c.rsplit('-').next().unwrap())
        .find(|c| c.len() == 64 && c.chars().all(|x| x.is_ascii_hexdigit()))
        .unwrap_or("")
        .to_string();
    (v2, id)
}

/// The inode of the recorder's (this test's) pid namespace.
fn own_pid_ns() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid").unwrap().ino()
}

/// The hex GNU build-id of the ELF file at `path`.
fn build_id_hex(path: &Path) -> String {
    use object::Object;
    let data = std::fs::read(path).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let id = file.build_id().unwrap().expect("a build-id");
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// Asserts what `ebsym info` says of a process in a new pid namespace at pid `ns_pid`.
fn assert_in_new_pid_ns(p: &Value, host_pid: Option<u32>, ns_pid: u64) {
    let pid = p["pid"].as_u64().unwrap();
    if let Some(h) = host_pid {
        assert_eq!(pid, u64::from(h), "{p:#}");
    }
    assert_ne!(pid, ns_pid, "the host pid, not the namespace's: {p:#}");
    assert_eq!(p["ns_pids"], serde_json::json!([pid, ns_pid]), "{p:#}");
    assert_eq!(p["ns_pid"], ns_pid, "{p:#}");
    let ns = p["pid_ns"].as_u64().unwrap();
    assert!(
        ns != 0 && ns != own_pid_ns(),
        "its own pid namespace: {p:#}"
    );
}

#[test]
fn a_pid_namespace_launched_and_attached() {
    if !root() || !have_unshare() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cpu_bin = bin("cpu_split");
    let cpu = cpu_bin.to_str().unwrap();

    // Launched: ebrec starts unshare, follows its fork (pid 1 inside) and that one's exec.
    let trace = dir.path().join("launched.pb.zst");
    let out = ebrec_launch(
        &trace,
        &["--cpu=499"],
        &["unshare", "-p", "-f", "--mount-proc", cpu, "--seconds", "1"],
    );
    let expect = expect_line(&out, "cpu_split");
    assert_eq!(expect["pid"], 1, "the program is pid 1 in its namespace");
    let t = trace.to_str().unwrap();
    let info = ebsym_json(&["info", t]);
    let p = process(&info, file_name(&cpu_bin));
    assert_in_new_pid_ns(p, None, 1);
    assert_eq!(p["event"], "exec", "{p:#}");
    // its parent: unshare, in the recorder's namespace and cgroup
    let unshare = process(&info, "unshare");
    assert_eq!(unshare["ns_pids"], serde_json::json!([unshare["pid"]]));
    assert_eq!(unshare["pid_ns"], own_pid_ns());
    let (cgroup, container) = own_cgroup();
    assert_eq!(unshare["cgroup"], cgroup.as_str(), "{unshare:#}");
    assert_eq!(unshare["container_id"], container.as_str(), "{unshare:#}");
    assert_eq!(p["cgroup"], cgroup.as_str(), "{p:#}");
    assert_eq!(p["ppid"], unshare["pid"], "{:#}", info["processes"]);
    let top = ebsym_json(&["top", t, "--kind", "cpu", "-n", "100"]);
    let f = functions(&top);
    for want in ["split::hot_a", "split::hot_b", "main"] {
        assert!(f.contains(want), "no {want} in {f:?}");
    }

    // Attached by its host pid: the program waits inside the namespace, as pid 1.
    let trace = dir.path().join("attached.pb.zst");
    let alloc = bin("alloc_workload");
    let w = start_waiting(
        &[
            "unshare",
            "-p",
            "-f",
            "--mount-proc",
            alloc.to_str().unwrap(),
            "--rounds",
            "2",
            "--wait",
        ],
        file_name(&alloc),
    );
    assert_eq!(w.ready_pid, 1);
    let host_pid = w.host_pid;
    let rest = ebrec_attach(&trace, &["--alloc"], w);
    let expect = expect_of(&rest, "alloc_workload");
    let t = trace.to_str().unwrap();
    let info = ebsym_json(&["info", t]);
    let p = process(&info, file_name(&alloc));
    assert_eq!(p["event"], "existing");
    assert_in_new_pid_ns(p, Some(host_pid), 1);
    // Events carry the host pid: every allocation of the program is there, by function.
    let top = ebsym_json(&["top", t, "--kind", "alloc", "-n", "1000"]);
    let by = common::by_function(&top, &["Warehouse::restock", "make_table"]);
    let calls = |f: &str, sym: &str| expect["functions"][f][sym]["calls"].as_u64().unwrap();
    assert_eq!(
        by.get("Warehouse::restock").map(|c| c.0),
        Some(calls("Warehouse::restock", "malloc")),
        "{by:?}"
    );
    assert_eq!(
        by.get("make_table").map(|c| c.0),
        Some(calls("make_table", "calloc")),
        "{by:?}"
    );
    let only_pid = ebsym_json(&["top", t, "--kind", "alloc", "--pid", &host_pid.to_string()]);
    assert!(top["totals"]["count"].as_u64().unwrap() > 0);
    assert_eq!(
        only_pid["totals"], top["totals"],
        "every event is the host pid's"
    );
}

/// The cgroup v2 hierarchy's mount point (/sys/fs/cgroup, or /sys/fs/cgroup/unified on a
/// hybrid host), from /proc/self/mountinfo.
fn cgroup2_root() -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        if right.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        Some(PathBuf::from(left.split_whitespace().nth(4)?))
    })
}

/// A transient cgroup `ROOT/ebtrace-test-PID/docker-ID.scope`, killed and removed at drop.
struct Scope {
    top: PathBuf,
    leaf: PathBuf,
}

impl Scope {
    fn new(root: &Path, id: &str) -> Scope {
        let top = root.join(format!("ebtrace-test-{}", std::process::id()));
        let leaf = top.join(format!("docker-{id}.scope"));
        std::fs::create_dir_all(&leaf).unwrap_or_else(|e| panic!("mkdir {}: {e}", leaf.display()));
        Scope { top, leaf }
    }
    fn procs(&self) -> PathBuf {
        self.leaf.join("cgroup.procs")
    }
    /// The path /proc/PID/cgroup shows (below the hierarchy's root).
    fn path(&self, root: &Path) -> String {
        format!("/{}", self.leaf.strip_prefix(root).unwrap().display())
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        let _ = std::fs::write(self.leaf.join("cgroup.kill"), "1");
        for d in [&self.leaf, &self.top] {
            for _ in 0..100 {
                if std::fs::remove_dir(d).is_ok() || !d.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }
}

#[test]
fn a_docker_style_cgroup_names_the_container() {
    if !root() {
        return;
    }
    let Some(cg) = cgroup2_root() else {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("no cgroup2 mount, and CI=true: failing instead of skipping");
        }
        eprintln!("\n*** SKIPPED: no cgroup v2 hierarchy mounted ***\n");
        return;
    };
    // a fake container id, different in each run
    let id: String = format!(
        "{:016x}{:016x}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    )
    .repeat(2);
    assert_eq!(id.len(), 64);
    let scope = Scope::new(&cg, &id);
    let path = scope.path(&cg);
    let dir = tempfile::tempdir().unwrap();
    let alloc = bin("alloc_workload");

    // Attached: moved into the scope while it waits, then recorded by pid, in files
    // rotated at 64 KiB: the one rotated away and the last each describe the process.
    let w = start_waiting(
        &[alloc.to_str().unwrap(), "--rounds", "800", "--wait"],
        file_name(&alloc),
    );
    std::fs::write(scope.procs(), w.host_pid.to_string()).unwrap();
    let host_pid = w.host_pid;
    let trace = dir.path().join("attached.pb.zst");
    let rotated = dir.path().join("attached.1.pb.zst");
    ebrec_attach(
        &trace,
        &["--alloc", "--max-size", "64k", "--rotate", "1"],
        w,
    );
    assert!(rotated.exists(), "no rotation");
    for t in [&rotated, &trace] {
        let info = ebsym_json(&["info", t.to_str().unwrap()]);
        let p = process(&info, file_name(&alloc));
        assert_eq!(p["pid"], host_pid);
        assert_eq!(p["event"], "existing");
        assert_eq!(p["cgroup"], path.as_str(), "{}: {p:#}", t.display());
        assert_eq!(p["container_id"], id.as_str(), "{}: {p:#}", t.display());
        // in the recorder's pid namespace: one pid, the same
        assert_eq!(p["ns_pids"], serde_json::json!([host_pid]), "{p:#}");
        assert_eq!(p["ns_pid"], host_pid);
        assert_eq!(p["pid_ns"], own_pid_ns());
    }

    // Launched: a shell moves itself into the scope and execs the program (the shell is
    // described when ebrec reads its exec: before or after it moved).
    let trace = dir.path().join("launched.pb.zst");
    let script = format!(
        "echo $$ > {} && exec {} --rounds 1",
        scope.procs().display(),
        alloc.display()
    );
    ebrec_launch(&trace, &["--alloc"], &["sh", "-c", &script]);
    let t = trace.to_str().unwrap();
    let info = ebsym_json(&["info", t]);
    let p = process(&info, file_name(&alloc));
    assert_eq!(p["event"], "exec");
    assert_eq!(p["cgroup"], path.as_str(), "{p:#}");
    assert_eq!(p["container_id"], id.as_str(), "{p:#}");
    let sh = process(&info, "sh");
    assert!(
        sh["cgroup"] == path.as_str() || sh["cgroup"] == own_cgroup().0.as_str(),
        "{sh:#}"
    );
    // the text report says it too
    let out = common::run(&common::ebsym_path(), &["info", t]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.trim() == format!("cgroup {path}  container {id}")),
        "{text}"
    );
    let top = ebsym_json(&["top", t, "--kind", "alloc", "-n", "100"]);
    assert!(functions(&top).contains("Warehouse::restock"));
}

#[test]
fn a_binary_only_in_the_targets_mount_namespace_is_symbolized() {
    if !root() || !have_unshare() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Empty here; inside the target's mount namespace a tmpfs over it holds the binary.
    let hidden = dir.path().join("hidden");
    std::fs::create_dir(&hidden).unwrap();
    let cpu = bin("cpu_split");
    let inside = hidden.join(file_name(&cpu));
    let want_id = build_id_hex(&cpu);
    // a mirror of the recorded path, for ebsym --debug-dir
    let dbg = dir.path().join("dbg");
    let mirrored = dbg.join(inside.strip_prefix("/").unwrap());
    std::fs::create_dir_all(mirrored.parent().unwrap()).unwrap();
    std::fs::copy(&cpu, &mirrored).unwrap();
    let dbg = dbg.to_str().unwrap();
    let setup = format!(
        "mount -t tmpfs ebtrace-test {h} && cp {c} {h}/ && exec {i}",
        h = hidden.display(),
        c = cpu.display(),
        i = inside.display()
    );

    let check = |trace: &Path, host_pid: Option<u32>, ns_pid: u64| {
        assert!(!inside.exists(), "{} is visible here", inside.display());
        let t = trace.to_str().unwrap();
        let info = ebsym_json(&["info", t]);
        let p = process(&info, file_name(&cpu));
        assert_in_new_pid_ns(p, host_pid, ns_pid);
        let bins = p["binaries"].as_array().unwrap();
        let b = bins
            .iter()
            .find(|b| b["path"] == inside.to_str().unwrap())
            .unwrap_or_else(|| panic!("no {} in {bins:#?}", inside.display()));
        // ebrec read it through /proc/PID/root (or the kernel's build-id)
        assert_eq!(b["build_id"], want_id.as_str(), "{b:#}");
        // not here: its frames are not named (never a wrong name) ...
        let top = ebsym_json(&["top", t, "--kind", "cpu", "-n", "100", "--no-debuginfod"]);
        let f = functions(&top);
        assert!(!f.contains("split::hot_a"), "{f:?}");
        // ... until ebsym is given the binary
        let top = ebsym_json(&[
            "top",
            t,
            "--kind",
            "cpu",
            "-n",
            "100",
            "--debug-dir",
            dbg,
            "--no-debuginfod",
        ]);
        let f = functions(&top);
        for want in ["split::hot_a", "split::hot_b"] {
            assert!(f.contains(want), "no {want} in {f:?}");
        }
    };

    // Launched: unshare -> (pid 1) sh -> mount, cp -> exec of the hidden copy.
    let trace = dir.path().join("launched.pb.zst");
    let script = format!("{setup} --seconds 1");
    ebrec_launch(
        &trace,
        &["--cpu=499"],
        &[
            "unshare",
            "-m",
            "-p",
            "-f",
            "--mount-proc",
            "sh",
            "-c",
            &script,
        ],
    );
    check(&trace, None, 1);

    // Attached by host pid: ebrec reads its maps' files through /proc/PID/map_files.
    let trace = dir.path().join("attached.pb.zst");
    let script = format!("{setup} --seconds 1 --wait");
    let w = start_waiting(
        &[
            "unshare",
            "-m",
            "-p",
            "-f",
            "--mount-proc",
            "sh",
            "-c",
            &script,
        ],
        file_name(&cpu),
    );
    let host_pid = w.host_pid;
    ebrec_attach(&trace, &["--cpu=499"], w);
    check(&trace, Some(host_pid), 1);
}
