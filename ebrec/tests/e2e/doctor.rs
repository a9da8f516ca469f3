//! `ebrec doctor`: as root every check this machine supports says ok; without privileges the
//! privilege check FAILs with its fix; with `-p`, a testdata program built with and without
//! frame pointers gets the stack mode it needs.

use crate::common;

use ebtrace_testdata::{build, Variant};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

fn doctor(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ebrec"))
        .arg("doctor")
        .args(args)
        .output()
        .expect("run ebrec")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn json(out: &Output) -> Value {
    // The version first, as every --json object of ebtrace has it (docs/json.md).
    assert!(
        stdout(out).starts_with("{\"schema_version\":1,"),
        "{}",
        stdout(out)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            stdout(out),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The check named `name` in `--json` output.
fn check<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == name)
        .unwrap_or_else(|| panic!("no check {name:?} in {v}"))
}

/// Every text line is `ok|warn|FAIL  CHECK: FINDING[ — fix: FIX]`, and FAIL and warn lines
/// carry a fix.
fn assert_lines_well_formed(text: &str) {
    assert!(!text.is_empty());
    for line in text.lines() {
        let (status, rest) = line.split_at(6.min(line.len()));
        let status = status.trim_end();
        assert!(
            matches!(status, "ok" | "warn" | "FAIL"),
            "bad verdict in {line:?}"
        );
        let (check, finding) = rest
            .split_once(": ")
            .unwrap_or_else(|| panic!("no `check: finding` in {line:?}"));
        assert!(!check.is_empty() && !finding.is_empty(), "{line:?}");
        if status != "ok" {
            assert!(
                line.contains(" — fix: "),
                "a {status} without a fix: {line:?}"
            );
        }
    }
}

#[test]
fn as_root_every_supported_check_is_ok() {
    if !common::root() {
        return;
    }
    let out = doctor(&[]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert_lines_well_formed(&text);
    assert!(!text.contains("FAIL"), "{text}");

    let out = doctor(&["--json"]);
    assert_eq!(out.status.code(), Some(0));
    let v = json(&out);
    for c in v["checks"].as_array().unwrap() {
        for key in ["check", "status", "finding", "fix"] {
            assert!(c.get(key).is_some(), "{key} missing in {c}");
        }
    }
    assert_eq!(v["binaries"], Value::Array(vec![]));
    // What this machine has, the doctor must find working.
    let mut supported = vec![
        "kernel",
        "privileges",
        "BPF program",
        "ring buffer",
        "perf events",
    ];
    if Path::new("/sys/kernel/btf/vmlinux").exists() {
        supported.push("BTF");
    }
    if Path::new("/sys/bus/event_source/devices/uprobe/type").exists() {
        supported.push("uprobes");
    }
    if Path::new("/sys/kernel/tracing/uprobe_events").exists() {
        supported.push("tracefs");
    }
    if common::kernel_at_least(6, 13) {
        supported.push("uprobe sessions");
    }
    if Path::new("/sys/kernel/tracing/events/rseq/rseq_update").exists() {
        supported.push("rseq_update");
    }
    for name in supported {
        let c = check(&v, name);
        assert_eq!(c["status"], "ok", "{c}");
        assert_eq!(c["fix"], Value::Null, "{c}");
    }
}

/// A testdata program started with `--wait`: mapped, blocked until SIGUSR1; killed on drop.
struct Waiting(Child);

impl Waiting {
    fn start(exe: &Path) -> Self {
        let mut child = Command::new(exe)
            .arg("--wait")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, format!("READY {}\n", child.id()));
        Waiting(child)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// (stack mode, the executable's entry, the text output) of `doctor -p` on `variant`.
fn doctor_on(variant: Variant) -> (Value, Value, String) {
    let exe = build("cpu_split", variant).unwrap();
    let target = Waiting::start(&exe);
    let pid = target.0.id().to_string();
    let v = json(&doctor(&["-p", &pid, "--json"]));
    let text = stdout(&doctor(&["-p", &pid]));
    drop(target);
    assert_lines_well_formed(&text);
    assert_eq!(check(&v, &format!("process {pid}"))["status"], "ok", "{v}");
    let bins = v["binaries"].as_array().unwrap();
    let exes: Vec<&Value> = bins.iter().filter(|b| b["executable"] == true).collect();
    assert_eq!(exes.len(), 1, "{v}");
    let name = exe.file_name().unwrap().to_str().unwrap();
    assert!(
        exes[0]["path"].as_str().unwrap().ends_with(name),
        "{}",
        exes[0]
    );
    // testdata builds with -g and a build-id.
    assert_eq!(exes[0]["symtab"], true, "{}", exes[0]);
    assert_eq!(exes[0]["debug_info"], true, "{}", exes[0]);
    assert_eq!(exes[0]["eh_frame"], true, "{}", exes[0]);
    assert!(exes[0]["build_id"].is_string(), "{}", exes[0]);
    assert!(
        bins.iter()
            .any(|b| b["path"].as_str().unwrap().contains("libc.so")),
        "libc not among {v}"
    );
    // A library judged without frame pointers is named in the stack-mode advice.
    let advice = check(&v, "stack mode")["finding"]
        .as_str()
        .unwrap()
        .to_string();
    for b in bins {
        if b["executable"] == false && b["frame_pointers"] == false {
            let file = b["path"].as_str().unwrap().rsplit('/').next().unwrap();
            assert!(advice.contains(file), "{file} not in {advice:?}");
            assert!(advice.contains("auto unwinds them"), "{advice:?}");
        }
    }
    (v["stack_mode"].clone(), exes[0].clone(), text)
}

#[test]
fn frame_pointers_decide_the_stack_mode() {
    // The fp build still runs on libc and libstdc++, which keep no frame pointers: auto.
    let (fp_mode, fp_exe, fp_text) = doctor_on(Variant::FramePointer);
    assert_eq!(fp_exe["frame_pointers"], true, "{fp_exe}");
    assert_eq!(fp_mode, "auto");
    assert!(
        fp_text
            .lines()
            .any(|l| l.starts_with("ok    stack mode: --stack-mode auto")
                && l.contains("the executable keeps frame pointers")),
        "{fp_text}"
    );

    let (nofp_mode, nofp_exe, nofp_text) = doctor_on(Variant::NoFramePointer);
    assert_eq!(nofp_exe["frame_pointers"], false, "{nofp_exe}");
    assert_eq!(nofp_mode, "auto");
    let line = nofp_text
        .lines()
        .find(|l| l.starts_with("ok    stack mode: --stack-mode auto"))
        .unwrap_or_else(|| panic!("{nofp_text}"));
    assert!(
        line.contains("no frame pointers; its .eh_frame rows"),
        "{line}"
    );
    assert!(
        nofp_text
            .lines()
            .any(|l| l.starts_with("warn  executable ") && l.contains("no frame pointers")),
        "{nofp_text}"
    );
}

#[test]
fn without_privileges_the_privilege_check_fails_with_a_fix() {
    // Dropping to nobody needs root to begin with.
    if !common::root() {
        return;
    }
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_ebrec"))
        .arg("doctor")
        .output()
        .expect("run setpriv (util-linux)");
    let text = stdout(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{text}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_lines_well_formed(&text);
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("FAIL  privileges: "))
        .collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert!(lines[0].contains("uid 65534"), "{}", lines[0]);
    assert!(
        lines[0].contains(" — fix: run ebrec as root"),
        "{}",
        lines[0]
    );
    // The BPF load is refused too, and says why.
    assert!(
        text.lines()
            .any(|l| l.starts_with("FAIL  BPF program: ") && l.contains("not permitted")),
        "{text}"
    );
}

#[test]
fn a_pid_that_does_not_exist_is_a_one_line_error() {
    // Above any pid_max (at most 2^22).
    let out = doctor(&["-p", "999999999"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "{}", stdout(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err, "ebrec: no process with pid 999999999\n");
}
