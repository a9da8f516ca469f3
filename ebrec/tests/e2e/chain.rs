//! The system call chain (bpf/hub.bpf.c): with every family that works at raw sys_enter and
//! sys_exit on, one hub program per tracepoint sees every system call of the machine and
//! runs the families' programs only for the target's: a member that serves every call (the
//! syscall family's) runs exactly once per target call, one that serves a few (futex, brk/mmap/munmap, accept) only
//! for those (the hub's per-number dispatch), and none for another process's calls (a
//! second `syscalls` running beside, untraced, makes far more). Without a family that needs
//! every call, the few-call members run on their own per-syscall tracepoints instead
//! (syscalls:sys_enter_futex, ...), and the hubs are not attached at all.
use crate::common;

use common::*;
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The exit summary's per-program lines (`--bpf-stats`): program -> runs.
fn program_runs(stderr: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in stderr.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.len() == 6 && w[0] == "ebrec:" && w[3] == "runs" && w[5] == "ns/run" {
            if let Ok(n) = w[2].parse() {
                out.insert(w[1].to_string(), n);
            }
        }
    }
    out
}

#[test]
fn one_hub_per_tracepoint_runs_each_family_for_the_targets_calls_only() {
    if !root() {
        return;
    }
    // Its storm of system calls beside would weigh on another test's budget.
    let _alone = common::exclusive();
    // Untraced, beside the recording: getppid loops until the recording is over.
    let stop = Arc::new(AtomicBool::new(false));
    let beside = storm_beside(stop.clone());
    let r = record_loud(
        "syscalls",
        &[
            "--syscalls",
            "--lock",
            "--memgrowth",
            "--offcpu",
            "--runq",
            "--tcp",
            "--bpf-stats",
        ],
        &["--fast", "20000", "--sleeps", "20", "--sleep-ms", "50"],
    );
    stop.store(true, Ordering::SeqCst);
    let beside_calls = beside.join().unwrap();
    let err = String::from_utf8_lossy(&r.out.stderr).to_string();
    let runs = program_runs(&err);
    let get = |name: &str| {
        *runs
            .get(name)
            .unwrap_or_else(|| panic!("no {name} in: {err}"))
    };

    // The target made 20,000 getppid, 20 nanosleeps and libc's own calls.
    let target = get("sys_enter");
    assert!(
        (20_020..25_000).contains(&target),
        "sys_enter ran {target} times: {err}"
    );
    let exits = get("sys_exit");
    assert!(
        exits + 2 >= target && exits <= target,
        "sys_exit {exits}: {err}"
    );

    // The others only for their calls: brk, mmap and munmap (the loader's and libc's, a
    // few dozen; at least one), futex (hardly any in one thread), accept (none). A program
    // that ran 0 times has no line.
    let runs_of = |name: &str| runs.get(name).copied().unwrap_or(0);
    let mem = runs_of("mem_enter");
    assert!((1..=500).contains(&mem), "mem_enter ran {mem} times: {err}");
    assert!(runs_of("mem_exit").abs_diff(mem) <= 1, "{err}");
    assert!(runs_of("futex_enter") <= 50, "{err}");
    assert!(runs_of("futex_exit") <= runs_of("futex_enter"), "{err}");
    assert_eq!(runs_of("tcp_sys_exit"), 0, "{err}");
    // Off-CPU and the run queue take their user stacks where threads return to user space
    // after a switch (rseq_update: at least once for each of the 20 sleeps), not at system
    // calls.
    for (at_exit, at_rseq) in [
        ("offcpu_sys_exit", "offcpu_rseq"),
        ("runq_sys_exit", "runq_rseq"),
    ] {
        assert_eq!(runs_of(at_exit), 0, "{err}");
        assert!(runs_of(at_rseq) >= 20, "{err}");
    }
    // memgrowth still saw the mappings (its events are its calls' exits).
    assert!(
        err.lines().any(|l| l.contains("memgrowth")
            && l.contains("kept")
            && !l.contains("kept         0")),
        "{err}"
    );
    // The hubs saw the other process's calls too, and stopped them.
    assert!(beside_calls >= 200_000, "{beside_calls}");
    let hub = get("hub_sys_enter");
    assert!(
        hub >= target + 100_000,
        "hub_sys_enter ran {hub} times, the target's {target}: {err}"
    );
    assert!(get("hub_sys_exit") >= exits + 100_000, "{err}");
    // And the syscall family still counts the target's calls exactly.
    let expect = expect_line(&r.out, "syscalls");
    assert_eq!(expect["fast"], 20_000);
}

/// `--max-cpu` pausing the only family on the system call chain takes the hubs off the
/// tracepoints: the rest of a storm of 20 million getppid calls runs no program at all
/// (the hubs stayed attached, each call paying the slow path, the dispatch and the target
/// check for no member, and the budget did not see it).
#[test]
fn the_hubs_leave_the_system_calls_when_every_member_is_paused() {
    if !root() {
        return;
    }
    let _alone = common::exclusive();
    let r = record_loud(
        "syscalls",
        &[
            "--syscalls",
            "--syscalls-sample=0",
            "--max-cpu",
            "0.5",
            "--bpf-stats",
        ],
        &["--fast", "20000000", "--sleeps", "1"],
    );
    let err = String::from_utf8_lossy(&r.out.stderr).to_string();
    assert!(err.contains("Paused(Syscall)"), "{err}");
    let runs = program_runs(&err);
    let hub = runs.get("hub_sys_enter").copied().unwrap_or(0);
    assert!(hub > 0, "{err}");
    assert!(
        hub < 5_000_000,
        "hub_sys_enter ran {hub} times of the 20 M calls: {err}"
    );
}

/// Untraced beside a recording: `syscalls --fast 200000` again and again until `stop`; the
/// getppid calls it made.
fn storm_beside(stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    let prog =
        ebtrace_testdata::build("syscalls", ebtrace_testdata::Variant::FramePointer).unwrap();
    std::thread::spawn(move || {
        let mut calls = 0u64;
        while !stop.load(Ordering::SeqCst) {
            let st = Command::new(&prog)
                .args(["--fast", "200000", "--sleeps", "0"])
                .stdout(Stdio::null())
                .status()
                .unwrap();
            assert!(st.success());
            calls += 200_000;
        }
        calls
    })
}

/// `--lock --memgrowth --tcp` (no family that needs every call): their programs run on the
/// per-syscall tracepoints and the hubs never run, so a storm of another process's getppid
/// calls beside runs no program; memgrowth still records the target's mappings. With
/// `EBTRACE_SYSCALL_HUB_ONLY=1` (the raw tracepoints' chain) the same run's hubs see the
/// storm.
#[test]
fn few_call_families_run_on_their_own_syscall_tracepoints() {
    if !root() {
        return;
    }
    let _alone = common::exclusive();
    for hub_only in ["0", "1"] {
        let stop = Arc::new(AtomicBool::new(false));
        let beside = storm_beside(stop.clone());
        let r = record_loud_env(
            "syscalls",
            &["--lock", "--memgrowth", "--tcp", "--bpf-stats"],
            &["--fast", "20000", "--sleeps", "20", "--sleep-ms", "50"],
            &[("EBTRACE_SYSCALL_HUB_ONLY", hub_only)],
        );
        stop.store(true, Ordering::SeqCst);
        let beside_calls = beside.join().unwrap();
        assert!(beside_calls >= 200_000, "{beside_calls}");
        let err = String::from_utf8_lossy(&r.out.stderr).to_string();
        let runs = program_runs(&err);
        let runs_of = |name: &str| runs.get(name).copied().unwrap_or(0);
        let hubs = runs_of("hub_sys_enter") + runs_of("hub_sys_exit");
        assert!(
            err.lines().any(|l| l.contains("memgrowth")
                && l.contains("kept")
                && !l.contains("kept         0")),
            "{err}"
        );
        if hub_only == "0" {
            assert_eq!(hubs, 0, "the hubs ran: {err}");
            // The target's brk, mmap and munmap (and those of every process of the machine:
            // the programs check the target themselves).
            let mem = runs_of("mem_enter_tp");
            assert!(mem >= 1, "mem_enter_tp ran {mem} times: {err}");
            assert!(runs_of("mem_exit_tp") >= 1, "{err}");
            assert_eq!(runs_of("mem_enter"), 0, "{err}");
        } else {
            assert!(hubs >= 200_000, "the hubs ran {hubs} times: {err}");
            assert_eq!(runs_of("mem_enter_tp"), 0, "{err}");
            assert!(runs_of("mem_enter") >= 1, "{err}");
        }
    }
}

/// `--max-cpu` pausing `--syscalls` (a storm of 20 M getppid) moves memgrowth from the chain
/// to its own tracepoints: the budget pauses the syscall family only (the hubs' cost was
/// its), and memgrowth goes on recording the mapping, the heap growth and the unmapping the
/// program makes after the storm (`memgrowth`'s known sizes), by `mem_enter_tp`.
#[test]
fn pausing_the_syscall_family_moves_memgrowth_to_its_own_tracepoints() {
    if !root() {
        return;
    }
    let _alone = common::exclusive();
    let storm =
        ebtrace_testdata::build("syscalls", ebtrace_testdata::Variant::FramePointer).unwrap();
    let grow =
        ebtrace_testdata::build("memgrowth", ebtrace_testdata::Variant::FramePointer).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.pb.zst");
    let out = Command::new(env!("CARGO_BIN_EXE_ebrec"))
        .args(["record", "-o"])
        .arg(&trace)
        .args([
            "--syscalls",
            "--memgrowth",
            "--max-cpu",
            "5",
            "--bpf-stats",
            "--",
            "sh",
            "-c",
        ])
        .arg(format!(
            "{} --fast 20000000 --sleeps 1 >/dev/null && {}",
            storm.display(),
            grow.display()
        ))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{err}");
    assert!(err.contains("Paused(Syscall)"), "{err}");
    assert!(!err.contains("Paused(MemGrowth)"), "{err}");
    let runs = program_runs(&err);
    assert!(
        runs.get("mem_enter_tp").copied().unwrap_or(0) >= 3,
        "mem_enter_tp did not run: {err}"
    );
    // The 64 MiB mapping and its unmapping, once each, and the heap's growth, as memgrowth
    // says: all made after the storm.
    use ebtrace_format::proto::MemGrowthKind;
    let expect = expect_line(&out, "memgrowth");
    let map_bytes = expect["map_bytes"].as_u64().unwrap();
    let map_addr = common::hex_field(&expect, "map_address");
    let events = crate::profile::mem_events(&trace);
    let at = |kind: MemGrowthKind| {
        events
            .iter()
            .filter(|e| e.kind == kind && e.address == map_addr)
            .map(|e| e.size)
            .collect::<Vec<u64>>()
    };
    assert_eq!(at(MemGrowthKind::Mmap), vec![map_bytes], "{err}");
    assert_eq!(at(MemGrowthKind::Munmap), vec![map_bytes], "{err}");
    let brk: u64 = events
        .iter()
        .filter(|e| e.kind == MemGrowthKind::Brk)
        .map(|e| e.size)
        .sum();
    assert!(brk >= expect["heap_bytes"].as_u64().unwrap(), "brk {brk}");
}
