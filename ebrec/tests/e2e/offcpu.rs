//! Off-CPU time end to end (--offcpu): ebrec records testdata's offcpu_blocks, whose threads
//! block in known functions for known times (a nanosleep in sleeper_a, a pipe read in
//! reader_b ended by writer_c's write) after a ping-pong of short blocks; ebsym reports. The
//! kernel side keeps only a timestamp per block and takes the stacks of the long ones: the
//! kernel stack at the switch-in, the user stack at the syscall exit, the waker's at the
//! wake. Checked in every --stack-mode. Needs root (skips loudly without it; fails when
//! CI=true).

use crate::common;
use common::{ebsym_json, expect_line, root};
use ebtrace_format::events::Family;
use ebtrace_format::proto::{record::Kind, EventFamily};
use ebtrace_format::{Tables, TraceReader};
use serde_json::Value;
use std::path::Path;

/// The threshold the test records with: 5 ms, far under the 20 ms blocks and far over the
/// ping-pong's microseconds.
const MIN_US: u64 = 5000;
const MS: u64 = 1_000_000;

/// (function, is a kernel frame) of a report row's frames (`key`: "frames" or
/// "waker_frames"), leaf first.
fn frames(row: &Value, key: &str) -> Vec<(String, bool)> {
    row[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["function"].as_str().unwrap_or("").to_string(),
                f["module"].as_str() == Some("[kernel]"),
            )
        })
        .collect()
}

fn user(f: &[(String, bool)]) -> Vec<&str> {
    f.iter().filter(|x| !x.1).map(|x| x.0.as_str()).collect()
}

fn kernel(f: &[(String, bool)]) -> Vec<&str> {
    f.iter().filter(|x| x.1).map(|x| x.0.as_str()).collect()
}

/// Whether a demangled name is `want` (with or without its parameters).
fn is_fn(name: &str, want: &str) -> bool {
    name == want || name.strip_prefix(want).is_some_and(|r| r.starts_with('('))
}

/// What a trace says of its off-CPU blocks.
struct OffCpuTrace {
    events: Vec<ebtrace_format::events::OffCpuEvent>,
    /// The family's (hits, kept, filtered).
    stats: (u64, u64, u64),
    /// Blocks the trace counts as lost without a length: the runs of the off-CPU programs
    /// the kernel skipped (a BPF program already running on that CPU; known with
    /// --bpf-stats) and the blocks whose end the kernel reported neither as a switch-in
    /// nor by a return to user space (Lost records, reason unmatched).
    unmatched: u64,
    /// The kept blocks whose switch-in the kernel did not report (ended at the thread's
    /// return to user space, without their kernel stack), by thread.
    unseen_switch_in: std::collections::HashMap<u32, u64>,
}

fn offcpu_events(path: &Path) -> OffCpuTrace {
    use ebtrace_format::proto::{LossReason, StackFlag};
    let mut r = TraceReader::open(path).unwrap();
    let mut tables = Tables::default();
    let mut out = Vec::new();
    let mut stats = (0, 0, 0);
    let mut skipped = 0;
    let mut lost = 0;
    for rec in r.by_ref() {
        if let Some(Kind::Stats(s)) = &rec.kind {
            for f in &s.families {
                if f.family == EventFamily::Offcpu as i32 {
                    stats = (f.hits, f.kept, f.filtered);
                }
            }
            skipped = s
                .programs
                .iter()
                .filter(|p| p.name.starts_with("offcpu_"))
                .map(|p| p.recursion_misses)
                .sum();
        }
        if let Some(Kind::Lost(l)) = &rec.kind {
            if l.family == EventFamily::Offcpu as i32 && l.reason == LossReason::Unmatched as i32 {
                lost += l.count;
            }
        }
        if tables.observe(&rec) {
            continue;
        }
        if let Some(Kind::Offcpu(b)) = rec.kind {
            out.extend(b.decode().unwrap());
        }
    }
    assert!(r.damage().is_empty(), "{:?}", r.damage());
    let mut unseen_switch_in = std::collections::HashMap::new();
    for e in &out {
        let flags = tables.stacks.get(&e.stack).map_or(0, |s| s.flags);
        if flags & StackFlag::KernelSwitchUnseen as u32 != 0 {
            *unseen_switch_in.entry(e.tid).or_default() += 1;
        }
    }
    OffCpuTrace {
        events: out,
        stats,
        unmatched: skipped + lost,
        unseen_switch_in,
    }
}

/// The report rows of thread `tid` whose user stack has `func`.
fn rows_with(t: &str, tid: u64, func: &str) -> Vec<Value> {
    let top = ebsym_json(&[
        "top",
        t,
        "--kind",
        "offcpu",
        "--tid",
        &tid.to_string(),
        "-n",
        "1000",
    ]);
    top["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| user(&frames(r, "frames")).iter().any(|f| is_fn(f, func)))
        .cloned()
        .collect()
}

fn check(mode: &str) {
    check_env(mode, &[], 0, &[]);
}

/// [`check`] with `env` set for ebrec and the program and `more` arguments for it, allowing
/// `unsent` blocks of the sleeper and of the reader without their user stack; ebrec's stderr
/// (not quiet).
fn check_env(mode: &str, env: &[(&str, &str)], unsent: u64, more: &[&str]) -> String {
    let flags = ["--offcpu=5000", "--stack-mode", mode];
    assert_eq!(flags[0], format!("--offcpu={MIN_US}"));
    let mut args = vec!["--ms", "21", "--writer-ms", "25"];
    args.extend_from_slice(more);
    let rec = common::record_loud_env("offcpu_blocks", &flags, &args, env);
    let expect = expect_line(&rec.out, "offcpu_blocks");
    let t = rec.trace.to_str().unwrap();
    let sleeper = expect["sleeper"]["tid"].as_u64().unwrap();
    let reader = expect["reader"]["tid"].as_u64().unwrap();
    let writer = expect["writer"]["tid"].as_u64().unwrap();
    let naps = expect["sleeper"]["naps"].as_u64().unwrap();
    let rounds = expect["reader"]["rounds"].as_u64().unwrap();
    let measured = |k: &str| -> u64 {
        expect[k]["durations_ns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .sum()
    };
    let oc = offcpu_events(&rec.trace);
    let (events, (hits, kept, filtered), skipped) = (&oc.events, oc.stats, oc.unmatched);
    if skipped > 0 {
        eprintln!("offcpu {mode}: {skipped} blocks lost without a length (counted)");
    }

    // The raw events: every sleeper_a nap and every reader_b read is one block of at least
    // 20 ms (21 ms naps; the writer waits 25 ms once the reader is about to read), no longer
    // than the program's own clock around the call says.
    let mut seen_of = std::collections::HashMap::new();
    for (tid, n, name) in [(sleeper, naps, "sleeper"), (reader, rounds, "reader")] {
        let long: Vec<_> = events
            .iter()
            .filter(|e| u64::from(e.tid) == tid && e.duration_ns >= MIN_US * 1000)
            .collect();
        // Every block is there, but for those lost without a length (the trace counts
        // them: a skipped program run, a switch-in the kernel did not report and no return
        // to user space ended; rare).
        let seen = long.len() as u64;
        assert!(
            seen <= n && n - seen <= skipped,
            "{mode} {name}: {seen} of {n} blocks (hits {hits}, kept {kept}, filtered {filtered}, {skipped} lost without a length): {long:?}"
        );
        assert!(
            long.iter()
                .all(|e| e.duration_ns >= 20 * MS && e.stack != 0),
            "{mode} {name}: {long:?}"
        );
        seen_of.insert(name, seen);
        let total: u64 = long.iter().map(|e| e.duration_ns).sum();
        let prog = measured(name);
        assert!(
            total <= prog && total as f64 >= prog as f64 * 0.95 * seen as f64 / n as f64,
            "{mode} {name}: off-CPU {total} ns, the program measured {prog} ns"
        );
    }
    // reader_b's blocks were ended by writer_c's thread, with a stack.
    assert!(
        events
            .iter()
            .filter(|e| u64::from(e.tid) == reader && e.duration_ns >= 20 * MS)
            .all(|e| u64::from(e.waker_tid) == writer && e.waker_stack != 0),
        "{mode}: {events:?}"
    );

    // The short blocks of the ping-pong are counted and dropped in the kernel: none kept
    // but the rare one that a busy machine stretched past the threshold. (A round trip
    // blocks each side at most once; less when the byte is there before the read.)
    let pp: Vec<u64> = expect["pingpong"]["tids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let trips = expect["pingpong"]["round_trips"].as_u64().unwrap();
    let pp_kept: Vec<_> = events
        .iter()
        .filter(|e| pp.contains(&u64::from(e.tid)))
        .collect();
    assert!(
        filtered >= trips / 2 && filtered <= hits,
        "{mode}: filtered {filtered} of {hits} hits, {trips} ping-pong round trips"
    );
    assert!(
        (pp_kept.len() as u64) * 100 <= filtered * 2,
        "{mode}: {} ping-pong blocks kept, {filtered} dropped",
        pp_kept.len(),
    );
    assert!(
        pp_kept.iter().all(|e| e.duration_ns >= MIN_US * 1000),
        "{mode}: {pp_kept:?}"
    );
    assert_eq!(kept, events.len() as u64, "{mode}");
    assert!(
        hits >= kept + filtered,
        "{mode}: hits {hits} kept {kept} filtered {filtered}"
    );

    // The stacks, symbolized: user frames name the function that blocked and its caller, the
    // kernel frames the syscall's path.
    let naps_rows = rows_with(t, sleeper, "offcpu::sleeper_a");
    let count: u64 = naps_rows.iter().map(|r| r["count"].as_u64().unwrap()).sum();
    assert!(
        count <= seen_of["sleeper"] && count + unsent >= seen_of["sleeper"],
        "{mode}: {count} of {} naps with their stack: {naps_rows:#?}",
        seen_of["sleeper"]
    );
    // Blocks whose switch-in the kernel did not report have no kernel stack: as many rows
    // without kernel frames as the trace flags, and no more.
    let unseen = |tid: u64| oc.unseen_switch_in.get(&(tid as u32)).copied().unwrap_or(0);
    let no_kernel = |rows: &[Value]| -> u64 {
        rows.iter()
            .filter(|r| kernel(&frames(r, "frames")).is_empty())
            .map(|r| r["count"].as_u64().unwrap())
            .sum()
    };
    assert!(
        no_kernel(&naps_rows) <= unseen(sleeper),
        "{mode}: {naps_rows:#?}"
    );
    for r in &naps_rows {
        let f = frames(r, "frames");
        let u = user(&f);
        let k = kernel(&f);
        if k.is_empty() {
            continue;
        }
        let at = u
            .iter()
            .position(|x| is_fn(x, "offcpu::sleeper_a"))
            .unwrap();
        assert!(
            u[at + 1..].iter().any(|x| is_fn(x, "offcpu::sleeper_loop")),
            "{mode}: {u:?}"
        );
        assert!(
            k.contains(&"entry_SYSCALL_64_after_hwframe"),
            "{mode}: {k:?}"
        );
        assert!(k.iter().any(|x| x.contains("nanosleep")), "{mode}: {k:?}");
        // kernel frames first (leaf first), then user frames
        assert!(f[0].1 && !f[f.len() - 1].1, "{mode}: {f:?}");
    }
    let read_rows = rows_with(t, reader, "offcpu::reader_b");
    let count: u64 = read_rows.iter().map(|r| r["count"].as_u64().unwrap()).sum();
    assert!(
        count <= seen_of["reader"] && count + unsent >= seen_of["reader"],
        "{mode}: {count} of {} reads with their stack: {read_rows:#?}",
        seen_of["reader"]
    );
    assert!(
        no_kernel(&read_rows) <= unseen(reader),
        "{mode}: {read_rows:#?}"
    );
    for r in &read_rows {
        let f = frames(r, "frames");
        let u = user(&f);
        let k = kernel(&f);
        assert!(
            u.iter().any(|x| is_fn(x, "offcpu::reader_loop")),
            "{mode}: {u:?}"
        );
        if k.is_empty() {
            continue;
        }
        assert!(k.iter().any(|x| x.contains("pipe_read")), "{mode}: {k:?}");
        assert!(k.contains(&"ksys_read"), "{mode}: {k:?}");
        assert!(
            k.contains(&"entry_SYSCALL_64_after_hwframe"),
            "{mode}: {k:?}"
        );
        // the waker: writer_c writing to the pipe
        let w = frames(r, "waker_frames");
        assert!(
            user(&w).iter().any(|x| is_fn(x, "offcpu::writer_c")),
            "{mode}: {w:?}"
        );
        assert!(
            kernel(&w).iter().any(|x| x.contains("pipe_write")),
            "{mode}: {w:?}"
        );
    }
    String::from_utf8_lossy(&rec.out.stderr).into_owned()
}

/// The user stacks of kept blocks are taken where the thread returns to user space, on the
/// rseq_update tracepoint, which fires there for threads with restartable sequences (glibc
/// registers every thread). The same blocks with the same stacks for a program whose threads
/// have none (glibc's tunable turns rseq off): ebrec sees the first such block, says so in
/// one line and takes their stacks at syscall exits from then on (the few blocks kept before
/// it read the count go with their kernel stacks only, counted in the exit summary: the
/// check finds every block, and allows 15 of the sleeper's 40 and of the reader's 20
/// without their user stack); and with the syscall exits from the start
/// (EBTRACE_OFFCPU_SYS_EXIT=1, the older way, and kernels without rseq_update).
#[test]
fn offcpu_blocks_with_and_without_rseq() {
    if !root() {
        return;
    }
    let err = check_env("cfi", &[], 0, &[]);
    assert!(err.contains("rseq_update (off-CPU)"), "{err}");
    assert!(!err.contains("without rseq"), "{err}");
    assert!(!err.contains("kernel stack only"), "{err}");
    let err = check_env("cfi", &[("EBTRACE_OFFCPU_SYS_EXIT", "1")], 0, &[]);
    assert!(err.contains("sys_exit (off-CPU)"), "{err}");
    // 40 naps and 20 reads of 21-25 ms: ebrec reads the count within its loop's 100 ms
    // pace, so most have their stacks (15 of each may not: a loaded machine).
    let err = check_env(
        "cfi",
        &[("GLIBC_TUNABLES", "glibc.pthread.rseq=0")],
        15,
        &["--naps", "40", "--rounds", "20"],
    );
    assert!(err.contains("rseq_update (off-CPU)"), "{err}");
    assert!(
        err.lines().any(|l| l.contains("off-CPU: ")
            && l.contains("kept events of threads without rseq")
            && l.contains("syscall exits")),
        "{err}"
    );
}

/// An fsync blocks several times in one system call (the writeback waits, the journal):
/// every block kept, the earlier ones of the call are sent when the next is kept, before the
/// thread is back in user space, and that is no sign that rseq_update failed. Such blocks
/// once counted as rseq misses, and past 16 ebrec put every system call of the machine on
/// the syscall-exit tracepoint (a third of --offcpu's BPF time on PostgreSQL's tpcb mix);
/// and they had no user stack. Now the recorder gives them the call's user stack, taken at
/// its last block's return (the same user registers: the same call). request_server's fsync
/// requests (30 of 3,000), every block kept: no fallback, and the fsync's blocks all in
/// rsrv::persist_order.
#[test]
fn blocks_in_one_system_call_are_no_rseq_miss() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rec = crate::common::record_loud(
        "request_server",
        &["--offcpu=1", "--offcpu-sample=0"],
        &["--requests", "3000", "--dir", dir.path().to_str().unwrap()],
    );
    let err = String::from_utf8_lossy(&rec.out.stderr);
    let filled: u64 = err
        .lines()
        .find(|l| l.contains("off-CPU blocks followed by another in the same system call"))
        .and_then(|l| l.split_whitespace().find_map(|w| w.parse().ok()))
        .unwrap_or(0);
    assert!(
        filled >= 16,
        "the premise: blocks followed by another in the same call ({filled}): {err}"
    );
    assert!(!err.contains("rseq_update did not come"), "{err}");
    assert!(!err.contains("without rseq"), "{err}");
    // The fsync's blocks (the kernel's writeback and journal waits, under fsync) have their
    // user stack: in rsrv::persist_order.
    let t = rec.trace.to_str().unwrap();
    let j = crate::common::ebsym_json(&["top", "--kind", "offcpu", t, "-n", "200"]);
    let (mut with, mut without) = (0u64, 0u64);
    for r in j["rows"].as_array().unwrap() {
        let f = frames(r, "frames");
        if !kernel(&f).iter().any(|k| k.contains("fsync")) {
            continue;
        }
        let n = r["count"].as_u64().unwrap_or(0);
        if user(&f).iter().any(|u| is_fn(u, "rsrv::persist_order")) {
            with += n;
        } else {
            without += n;
        }
    }
    assert!(
        with >= 30 && without * 20 <= with,
        "fsync blocks in persist_order: {with}, without its frame: {without}: {j:#}"
    );
}

/// --offcpu-wakers off: no wake hook (its attach line says so), no waker in any block, the
/// header says so; the blocks themselves all there. The default has the writer as the
/// reader's waker.
#[test]
fn offcpu_wakers_off_leaves_out_the_wake_hook() {
    if !root() {
        return;
    }
    let args = [
        "--ms",
        "21",
        "--writer-ms",
        "25",
        "--naps",
        "10",
        "--rounds",
        "10",
    ];
    for wakers in ["on", "off"] {
        let rec = common::record_loud(
            "offcpu_blocks",
            &["--offcpu=5000", "--offcpu-wakers", wakers],
            &args,
        );
        let err = String::from_utf8_lossy(&rec.out.stderr);
        let expect = expect_line(&rec.out, "offcpu_blocks");
        let writer = expect["writer"]["tid"].as_u64().unwrap() as u32;
        let reader = expect["reader"]["tid"].as_u64().unwrap() as u32;
        let oc = offcpu_events(&rec.trace);
        let reads = oc.events.iter().filter(|e| e.tid == reader).count();
        assert!(reads >= 10, "{wakers}: {reads} reader blocks");
        let by_writer = oc
            .events
            .iter()
            .filter(|e| e.tid == reader && e.waker_tid == writer)
            .count();
        let any_waker = oc.events.iter().filter(|e| e.waker_tid != 0).count();
        let info = String::from_utf8_lossy(
            &common::run(
                &common::ebsym_path(),
                &["info", rec.trace.to_str().unwrap()],
            )
            .stdout,
        )
        .into_owned();
        if wakers == "on" {
            assert!(err.contains("sched_switch, sched_waking, "), "{err}");
            assert!(
                by_writer >= 9,
                "{by_writer} of {reads} reads woken by the writer"
            );
            assert!(!info.contains("offcpu-wakers=off"), "{info}");
        } else {
            assert!(
                err.contains("attached tp_btf/sched_switch, rseq_update (off-CPU)"),
                "{err}"
            );
            assert_eq!(any_waker, 0, "wakers without the wake hook");
            assert!(info.contains("offcpu-wakers=off"), "{info}");
        }
    }
}

#[test]
fn offcpu_blocks_fp() {
    if !root() {
        return;
    }
    check("fp");
}

#[test]
fn offcpu_blocks_cfi() {
    if !root() {
        return;
    }
    check("cfi");
}

#[test]
fn offcpu_blocks_auto() {
    if !root() {
        return;
    }
    check("auto");
}

#[test]
fn offcpu_blocks_dwarf() {
    if !root() {
        return;
    }
    check("dwarf");
}

/// offcpu_blocks's sleeper thread and the time its naps took by its own clock, ns.
fn sleeper_timing(out: &std::process::Output) -> (u64, u64) {
    let expect = expect_line(out, "offcpu_blocks");
    let timed = expect["sleeper"]["durations_ns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .sum();
    (expect["sleeper"]["tid"].as_u64().unwrap(), timed)
}

/// `ebsym top`'s naps of thread `sleeper` in sleeper_a: (count, ns off the CPU).
fn sleeper_totals(t: &str, sleeper: u64) -> (u64, u64) {
    let rows = rows_with(t, sleeper, "offcpu::sleeper_a");
    let count = rows.iter().map(|r| r["count"].as_u64().unwrap()).sum();
    let ns = rows.iter().map(|r| r["total_ns"].as_u64().unwrap()).sum();
    (count, ns)
}

/// A sample's estimates of `naps` naps that took `timed` ns, from `k` kept: within 30%.
fn assert_estimates(count: u64, ns: u64, naps: u64, timed: u64, k: u64) {
    let ratio = ns as f64 / timed as f64;
    assert!(
        (0.7..1.3).contains(&ratio),
        "estimated {ns} ns off the CPU, the program timed {timed} ns ({k} kept)"
    );
    let cr = count as f64 / naps as f64;
    assert!(
        (0.7..1.3).contains(&cr),
        "estimated {count} naps of {naps} ({k} kept)"
    );
}

/// --offcpu-sample, the time-weighted sample: 800 naps of 2 ms, under the 10 ms unit, are
/// each kept (with their stacks) with probability 2/10 and stand for 1/p naps, so sleeper_a's
/// off-CPU time and count in `ebsym top` are the program's own timing within the sample's
/// error (about 8% for ~160 kept naps; the bounds are 30%), while far fewer events are
/// written; with --offcpu-sample=0 every nap is there, as it is.
#[test]
fn offcpu_time_weighted_sample_estimates_the_total() {
    if !root() {
        return;
    }
    const NAPS: u64 = 800;
    for unit in [10_000u64, 0] {
        let flag = format!("--offcpu-sample={unit}");
        let rec = common::record(
            "offcpu_blocks",
            &["--offcpu=1000", &flag],
            &[
                "--naps",
                &NAPS.to_string(),
                "--ms",
                "2",
                "--rounds",
                "1",
                "--pingpong",
                "0",
            ],
        );
        let (sleeper, timed) = sleeper_timing(&rec.out);
        let oc = offcpu_events(&rec.trace);
        let (events, (hits, kept, filtered)) = (&oc.events, oc.stats);
        assert!(hits >= kept + filtered, "{unit}: {hits} {kept} {filtered}");
        let naps: Vec<_> = events
            .iter()
            .filter(|e| u64::from(e.tid) == sleeper)
            .collect();
        let t = rec.trace.to_str().unwrap();
        let (count, ns) = sleeper_totals(t, sleeper);
        if unit == 0 {
            // Every nap kept, but for those the trace counts as lost without a length (a
            // switch-in the kernel did not report that no return to user space ended:
            // docs/kernels.md).
            let missing = NAPS - (naps.len() as u64).min(NAPS);
            assert!(
                missing <= oc.unmatched,
                "{} of {NAPS} naps kept, {filtered} blocks filtered, {} lost without a length",
                naps.len(),
                oc.unmatched
            );
            assert!(naps.iter().all(|e| e.weight_ns == 0), "{naps:?}");
            assert_eq!(count, naps.len() as u64);
            assert!(
                ns <= timed && ns as f64 >= 0.9 * timed as f64,
                "{ns} ns off the CPU, the program timed {timed}"
            );
        } else {
            let k = naps.len() as u64;
            assert!(
                (NAPS / 10..=NAPS / 2).contains(&k),
                "{k} of {NAPS} naps kept, about a fifth expected"
            );
            // each kept nap stands for unit/(its length at the wake) naps: more than itself;
            // one at least as long as the unit (a 2 ms nap that a loaded machine made last
            // 100 ms) is always kept and stands for itself (weight 0)
            let unit_ns = unit * 1000;
            assert!(
                naps.iter().all(|e| if e.weight_ns == 0 {
                    e.duration_ns >= unit_ns
                } else {
                    e.weight_ns > e.duration_ns
                }),
                "{naps:?}"
            );
            assert_estimates(count, ns, NAPS, timed, k);
            // the report says its numbers are estimates
            let top = ebsym_json(&["top", t, "--kind", "offcpu"]);
            assert!(
                top["losses"]["offcpu_sampled"].as_u64() >= Some(k),
                "{}",
                top["losses"]
            );
        }
    }
}

/// --offcpu-rate, the sample bounded in events a second: 1,500 naps of 2 ms under the 10 ms
/// unit are ~100 kept blocks a second, five times --offcpu-rate=20. After its first second
/// ebrec multiplies the unit by 8 (the power of two that brings them under 20), writes the
/// change in the trace and says so at exit and in the report; the naps kept after it stand
/// for 80 ms each, so the estimated off-CPU time and count are still the program's own
/// timing (within the sample's error: ~120 kept naps, about 9%; the bounds are 30%), from
/// a third of the events the fixed unit writes.
#[test]
fn offcpu_rate_raises_the_unit_and_keeps_the_total() {
    if !root() {
        return;
    }
    const NAPS: u64 = 1500;
    let rec = common::record_loud(
        "offcpu_blocks",
        &["--offcpu=1000", "--offcpu-sample=10000", "--offcpu-rate=20"],
        &[
            "--naps",
            &NAPS.to_string(),
            "--ms",
            "2",
            "--rounds",
            "1",
            "--pingpong",
            "0",
        ],
    );
    let stderr = String::from_utf8_lossy(&rec.out.stderr);
    let (sleeper, timed) = sleeper_timing(&rec.out);
    let t = rec.trace.to_str().unwrap();
    // the change, in the trace: 10 ms -> 80 ms (maybe back down at the end, when the naps
    // stop and nothing is kept)
    let info = ebsym_json(&["info", t]);
    let units: Vec<u64> = info["probe_changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| {
            c["family"] == "offcpu" && c["kind"] == "rate" && c["setting"] == "offcpu-sample-ns"
        })
        .map(|c| c["value"].as_u64().unwrap())
        .collect();
    assert_eq!(
        units.first(),
        Some(&80_000_000),
        "{}",
        info["probe_changes"]
    );
    assert!(
        stderr.contains("--offcpu-rate 20: the unit raised up to 80000 us"),
        "{stderr}"
    );
    let events = offcpu_events(&rec.trace).events;
    let naps: Vec<_> = events
        .iter()
        .filter(|e| u64::from(e.tid) == sleeper)
        .collect();
    let k = naps.len() as u64;
    // ~100 in the first second, ~12 a second after: far under the ~300 of the fixed unit
    assert!(
        (30..=NAPS / 8).contains(&k),
        "{k} of {NAPS} naps kept: the unit was not raised"
    );
    // the weights: 10 ms before the change, 80 ms after (a block decided at its wake
    // stands for unit * length / (its length at the wake): a little more than the unit)
    let weights: Vec<u64> = naps.iter().map(|e| e.weight_ns).collect();
    assert!(
        weights.iter().any(|&w| w >= 80_000_000) && weights.iter().any(|&w| w < 20_000_000),
        "{weights:?}"
    );
    let (count, ns) = sleeper_totals(t, sleeper);
    assert_estimates(count, ns, NAPS, timed, k);
    // the report says what the unit became
    let top = common::run(&common::ebsym_path(), &["top", t, "--kind", "offcpu"]);
    let text = String::from_utf8_lossy(&top.stdout);
    assert!(
        text.contains("unit went from 10000 us up to 80000 us by --offcpu-rate"),
        "{text}"
    );
}

/// Thread names and `ebsym threads`: offcpu_blocks's threads name themselves as they start
/// (sleeper, reader, writer, pingpong-1, pingpong-2); the report groups them by name with
/// the digits folded and splits each group's time by cause from the blocked thread's
/// kernel stack: the sleeper's naps are sleep, the reader's pipe reads "network or pipe",
/// each as long as the program timed them.
#[test]
fn threads_report_names_the_threads_and_where_their_time_goes() {
    if !root() {
        return;
    }
    let rec = common::record(
        "offcpu_blocks",
        &[
            "--offcpu=5000",
            "--offcpu-sample=0",
            "--cpu",
            "--runq=1000",
            "--runq-sample=0",
        ],
        &["--ms", "21", "--writer-ms", "25", "--pingpong", "20000"],
    );
    let expect = expect_line(&rec.out, "offcpu_blocks");
    let timed = |k: &str| -> u64 {
        expect[k]["durations_ns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .sum()
    };
    let t = rec.trace.to_str().unwrap();
    let rep = ebsym_json(&["threads", t]);
    let groups = rep["groups"].as_array().unwrap();
    let group = |name: &str| -> &Value {
        groups
            .iter()
            .find(|g| g["thread"] == name)
            .unwrap_or_else(|| panic!("no thread group {name}: {rep:#}"))
    };
    for (name, cause, func, k) in [
        ("sleeper", "sleep", "offcpu::sleeper_a", "sleeper"),
        ("reader", "network or pipe", "offcpu::reader_b", "reader"),
    ] {
        let g = group(name);
        assert_eq!(g["threads"], 1, "{g:#}");
        let top = &g["offcpu"][0];
        assert_eq!(top["cause"], cause, "{g:#}");
        let ns = top["ns"].as_u64().unwrap();
        let want = timed(k);
        assert!(
            ns <= want && ns as f64 >= 0.9 * want as f64,
            "{name}: {ns} ns of {cause}, the program timed {want} ns: {g:#}"
        );
        let frames: Vec<&str> = top["top_stacks"][0]["frames"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        assert!(frames.iter().any(|f| is_fn(f, func)), "{name}: {frames:?}");
    }
    assert_eq!(group("writer")["offcpu"][0]["cause"], "sleep");
    let pp = group("pingpong-*");
    assert_eq!(pp["threads"], 2, "{pp:#}");
    let mut names: Vec<&str> = pp["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["pingpong-1", "pingpong-2"]);
    // the ping-pong runs on the CPU and waits in the run queue: both are seen
    assert!(pp["on_cpu_ns"].as_u64().unwrap() > 0, "{pp:#}");

    // The summary shows the same groups, the same split (one pass over the trace, the
    // threads report's sink among the summary's), its findings unchanged beside them.
    let summary = ebsym_json(&["summary", t]);
    assert!(
        summary["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["family"] == "offcpu"),
        "{summary:#}"
    );
    let in_summary = summary["threads"].as_array().unwrap();
    assert!(!in_summary.is_empty(), "{summary:#}");
    assert_eq!(
        in_summary.as_slice(),
        &groups[..in_summary.len()],
        "the summary's thread groups are the threads report's first rows"
    );
    for name in ["sleeper", "reader", "writer", "pingpong-*"] {
        assert!(
            in_summary.iter().any(|g| g["thread"] == name),
            "no {name} in the summary: {summary:#}"
        );
    }
    let out = common::run(&common::ebsym_path(), &["summary", t]);
    let text = String::from_utf8_lossy(&out.stdout);
    let sleeper = text
        .lines()
        .find(|l| l.starts_with("threads ") && l.contains("] sleeper (1 thread)"))
        .unwrap_or_else(|| panic!("no sleeper line in the summary:\n{text}"));
    let parts = |line: &str| -> Vec<String> {
        let split = line.rsplit_once(": ").unwrap().1;
        split.split(", ").map(String::from).collect()
    };
    assert!(
        parts(sleeper).iter().any(|p| p.starts_with("sleep ")),
        "{sleeper}"
    );
    let pingpong = text
        .lines()
        .find(|l| l.starts_with("threads ") && l.contains("] pingpong-* (2 threads)"))
        .unwrap_or_else(|| panic!("no pingpong-* line in the summary:\n{text}"));
    assert!(
        parts(pingpong).iter().any(|p| p.starts_with("on CPU ")),
        "{pingpong}"
    );

    // The report rows carry the thread: each block's row its thread's name.
    let top = ebsym_json(&["top", t, "--kind", "offcpu", "-n", "100"]);
    let rows = top["rows"].as_array().unwrap();
    for (func, name) in [
        ("offcpu::sleeper_a", "sleeper"),
        ("offcpu::reader_b", "reader"),
        ("offcpu::writer_c", "writer"),
    ] {
        let row = rows
            .iter()
            .find(|r| user(&frames(r, "frames")).iter().any(|f| is_fn(f, func)))
            .unwrap_or_else(|| panic!("no row in {func}: {top:#}"));
        assert_eq!(row["thread"], name, "{row:#}");
    }
    // --thread: the ping-pong group's samples only, each row one of its threads.
    let cpu = ebsym_json(&["top", t, "--kind", "cpu", "-n", "1000"]);
    let pp_cpu = ebsym_json(&[
        "top",
        t,
        "--kind",
        "cpu",
        "--thread",
        "pingpong-*",
        "-n",
        "1000",
    ]);
    let n = |r: &Value| r["totals"]["count"].as_u64().unwrap();
    assert!(n(&pp_cpu) > 0 && n(&pp_cpu) <= n(&cpu), "{pp_cpu:#}");
    for r in pp_cpu["rows"].as_array().unwrap() {
        let th = r["thread"].as_str().unwrap();
        assert!(
            ["pingpong-1", "pingpong-2", "pingpong-*"].contains(&th),
            "{r:#}"
        );
    }
    // --by thread: a stack of one group a row; the sums are the whole.
    let by = ebsym_json(&["top", t, "--kind", "cpu", "--by", "thread", "-n", "100000"]);
    assert_eq!(by["group"], "thread");
    assert_eq!(n(&by), n(&cpu));
    for r in by["rows"].as_array().unwrap() {
        let th = r["thread"].as_str().unwrap();
        assert!(!th.contains(", "), "one group a row: {r:#}");
    }
    // pprof: every sample labelled with its thread (go tool pprof's own reader).
    let out = rec.trace.with_extension("offcpu.pb.gz");
    common::run(
        &common::ebsym_path(),
        &["pprof", t, "--kind", "offcpu", "-o", out.to_str().unwrap()],
    );
    if let Some(raw) = common::go_pprof_raw(&out) {
        for name in ["sleeper", "reader", "writer"] {
            let l = format!("thread:[{name}]");
            assert!(raw.labels.contains(&l), "{l} not in {:?}", raw.labels);
        }
    }
}

/// A kept block or run-queue wait waits in its thread's storage for the thread's return to
/// user space (its user stack is taken there). A `-p` recording may end while a thread is
/// still in the kernel after one: util-linux's `flock` waits in wait4 for its child, is
/// woken when the child stops (SIGSTOP) and, nothing to report, sleeps again in the same
/// call. The end of the recording sends what the threads hold (a task iterator): flock's
/// 1 s block and its run-queue wait after the wake are in the trace with their kernel
/// stacks (do_wait), and each family's kept, lost and filtered add up to its hits. The
/// block's waker is the child, named in its own image (it exec'd sleep after the block began).
#[test]
fn blocks_and_waits_still_in_the_kernel_at_the_end_are_sent() {
    if !root() {
        return;
    }
    let _alone = common::exclusive();
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let lock = dir.path().join("lock");
    let trace = dir.path().join("t.pb.zst");
    // The shell polls for `go`, then becomes flock, whose child sleeps.
    let mut target = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "while [ ! -e {} ]; do sleep 0.05; done; exec flock {} sleep 60",
            go.display(),
            lock.display()
        ))
        .spawn()
        .unwrap();
    let pid = target.id();
    let mut rec = Command::new(env!("CARGO_BIN_EXE_ebrec"))
        .args(["record", "-o"])
        .arg(&trace)
        .args(["--offcpu", "--runq=0", "--runq-sample", "0", "-p"])
        .arg(pid.to_string())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(rec.stderr.take().unwrap());
    let mut log = String::new();
    loop {
        let mut l = String::new();
        assert!(err.read_line(&mut l).unwrap() > 0, "ebrec stopped: {log}");
        log += &l;
        if l.contains("recording to") {
            break;
        }
    }
    std::fs::write(&go, b"").unwrap();
    // flock's child, then a second in wait4.
    let child = (0..200)
        .find_map(|_| {
            std::thread::sleep(std::time::Duration::from_millis(25));
            let out = Command::new("pgrep")
                // flock's child, not a `sleep 0.05` of the shell's poll before its exec.
                .args(["-P", &pid.to_string(), "-f", "^sleep 60$"])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse::<i32>()
                .ok()
        })
        .expect("flock's child");
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let boot = || {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid timespec out-pointer.
        unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    };
    let stopped_at = boot();
    // SAFETY: signals to processes this test started.
    unsafe { libc::kill(child, libc::SIGSTOP) };
    std::thread::sleep(std::time::Duration::from_millis(500));
    let state = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    let status = rec.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    log += &rest;
    unsafe {
        libc::kill(child, libc::SIGKILL);
        libc::kill(pid as i32, libc::SIGKILL);
    }
    let _ = target.wait();
    assert!(status.success(), "{log}");
    assert_eq!(state, "do_wait", "flock is not back in wait4: {log}");

    let events = offcpu_events(&trace).events;
    let after: Vec<_> = events
        .iter()
        .filter(|e| e.tid == pid && e.time_ns < stopped_at && e.duration_ns >= 900 * MS)
        .collect();
    assert_eq!(after.len(), 1, "flock's block in wait4: {events:?}\n{log}");
    let t = trace.to_str().unwrap();
    let tid = pid.to_string();
    let top = ebsym_json(&["top", t, "--kind", "offcpu", "--tid", &tid, "-n", "100"]);
    let rows = top["rows"].as_array().unwrap();
    let row = rows
        .iter()
        .find(|r| {
            r["total_ns"].as_u64().unwrap_or(0) >= 900 * MS
                && kernel(&frames(r, "frames")).contains(&"do_wait")
        })
        .unwrap_or_else(|| panic!("{top:#}"));
    // Its waker is the child, stopping, in its own image: it had exec'd sleep since the
    // block began (its frames resolve in /usr/bin/sleep, not in flock's copy it forked).
    assert!(
        row["waker_frames"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["module"].as_str().is_some_and(|m| m.ends_with("/sleep"))),
        "{row:#}"
    );

    let runq = common::events_of(&trace, |k| match k {
        Kind::Runq(b) => Some(b),
        _ => None,
    });
    let woken: Vec<_> = runq
        .iter()
        .filter(|e| e.tid == pid && e.time_ns >= stopped_at)
        .collect();
    assert_eq!(
        woken.len(),
        1,
        "flock's wait after its wake: {runq:?}\n{log}"
    );
    // The run-queue family's counts add up: nothing left in a thread's storage.
    let mut r = TraceReader::open(&trace).unwrap();
    let mut fams = None;
    for rec in r.by_ref() {
        if let Some(Kind::Stats(s)) = rec.kind {
            fams = s
                .families
                .into_iter()
                .find(|f| f.family == EventFamily::Runq as i32);
        }
    }
    let f = fams.expect("runq's stats");
    assert_eq!(f.kept + f.lost + f.filtered, f.hits, "{f:?}\n{log}");
}
