//! Limits a user sets so that a recording cannot hurt the server: --max-events-per-sec,
//! --max-size and --rotate. Each check says what was lost and proves it was counted.
//! Needs root (skips loudly without it; fails when CI=true).

use crate::common;
use common::{expect_line, root};
use ebtrace_format::events::Family;
use ebtrace_format::proto::{record::Kind, EventFamily, LossReason, Trailer};
use ebtrace_format::{Tables, TraceReader};
use std::collections::HashSet;
use std::path::Path;

/// What one trace file holds, read on its own.
#[derive(Default, Debug)]
struct File {
    allocs: u64,
    rate_lost: u64,
    trailer: Option<Trailer>,
    /// Events that refer to a generation or a stack the file does not define.
    dangling: u64,
    hits: u64,
    kept: u64,
    lost: u64,
    start_ns: u64,
    end_ns: u64,
}

fn read(path: &Path) -> File {
    let mut r = TraceReader::open(path).unwrap();
    let mut f = File::default();
    let mut tables = Tables::default();
    let mut gens = HashSet::new();
    let mut stacks = HashSet::new();
    for rec in r.by_ref() {
        match &rec.kind {
            Some(Kind::Process(p)) => {
                gens.insert(p.generation);
            }
            Some(Kind::Stack(s)) => {
                stacks.insert(s.id);
            }
            Some(Kind::Lost(l)) if l.reason == LossReason::RateLimit as i32 => {
                f.rate_lost += l.count
            }
            Some(Kind::Stats(s)) => {
                for fam in &s.families {
                    if fam.family == EventFamily::Alloc as i32 {
                        (f.hits, f.kept, f.lost) = (fam.hits, fam.kept, fam.lost);
                    }
                }
            }
            Some(Kind::Trailer(t)) => {
                f.end_ns = t.end_time_ns;
                f.trailer = Some(t.clone());
            }
            Some(Kind::Header(h)) => f.start_ns = h.start_time_ns,
            _ => {}
        }
        if tables.observe(&rec) {
            continue;
        }
        if let Some(Kind::Allocs(b)) = rec.kind {
            for e in b.decode().unwrap() {
                f.allocs += 1;
                if !gens.contains(&e.generation) || (e.stack != 0 && !stacks.contains(&e.stack)) {
                    f.dangling += 1;
                }
            }
        }
    }
    assert!(
        r.damage().is_empty(),
        "{}: {:?}",
        path.display(),
        r.damage()
    );
    f
}

#[test]
fn a_rate_cap_drops_and_counts() {
    if !root() {
        return;
    }
    let rec = common::record(
        "alloc_workload",
        &["--alloc", "--max-events-per-sec", "2000"],
        &["--rounds", "20"],
    );
    let f = read(&rec.trace);
    // Every allocator call is kept or counted as lost to the cap: nothing else.
    assert!(f.rate_lost > 0, "{f:?}");
    assert_eq!(f.kept + f.lost, f.hits, "{f:?}");
    assert_eq!(f.lost, f.rate_lost, "{f:?}");
    assert_eq!(f.allocs, f.kept, "{f:?}");
    // At most the rate over the run plus the bursts (100 ms worth per CPU).
    let secs = (f.end_ns - f.start_ns) as f64 / 1e9;
    let bound = 2000.0 * secs + 200.0;
    assert!(
        (f.kept as f64) <= bound * 1.1,
        "kept {} in {secs:.2} s at 2000/s: {f:?}",
        f.kept
    );
    let expect = expect_line(&rec.out, "alloc_workload");
    assert!(expect["functions"].is_object());
}

#[test]
fn max_size_stops_and_rotate_keeps_files_that_read_alone() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Stop at the size.
    let trace = dir.path().join("t.pb.zst");
    common::record_to(
        &trace,
        "alloc_workload",
        &["--alloc", "--max-size", "64k"],
        // Long enough to outlast the first chunk (cut about once a second) on a fast machine:
        // 400 rounds once ended first there, and the trace stopped with its target.
        &["--rounds", "1500"],
    );
    let f = read(&trace);
    assert_eq!(f.trailer.as_ref().unwrap().stop_reason, "max size");
    // Within a chunk (at most ~1 s of data here) of the cap.
    let size = std::fs::metadata(&trace).unwrap().len();
    assert!((64 << 10..8 << 20).contains(&size), "{size} bytes");

    // Rotate: the newest at the path given, at most 2 older ones, each self-contained.
    let trace = dir.path().join("r.pb.zst");
    common::record_to(
        &trace,
        "alloc_workload",
        &["--alloc", "--max-size", "64k", "--rotate", "2"],
        // Chunks are cut about once a second: enough seconds for three rotations even when
        // tracing is cheap (400 rounds ran in ~2.5 s once free was probed past its first
        // instruction, and then sometimes rotated only once).
        &["--rounds", "1500"],
    );
    let older: Vec<_> = (1..=3)
        .map(|k| dir.path().join(format!("r.{k}.pb.zst")))
        .collect();
    assert!(older[0].exists() && older[1].exists(), "no rotated files");
    assert!(!older[2].exists(), "more files kept than --rotate 2");
    // Traces hold the target's stacks: every file, rotated or not, is the owner's alone.
    for p in older[..2].iter().chain([&trace]) {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}: mode {mode:o}", p.display());
    }
    for p in &older[..2] {
        let f = read(p);
        assert_eq!(
            f.trailer.as_ref().unwrap().stop_reason,
            "rotated",
            "{}",
            p.display()
        );
        assert!(f.allocs > 0, "{}: {f:?}", p.display());
        assert_eq!(f.dangling, 0, "{}: {f:?}", p.display());
    }
    let last = read(&trace);
    assert_eq!(last.dangling, 0, "{last:?}");
    assert_eq!(last.trailer.as_ref().unwrap().stop_reason, "targets exited");
    // The newest file still knows the process: its leaks report works on its own.
    let out = common::run(
        &common::ebsym_path(),
        &["leaks", trace.to_str().unwrap(), "--json"],
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["rows"].is_array(), "{v}");
}

#[test]
fn everything_at_once_with_the_smallest_ring_buffer_loses_only_what_it_counts() {
    if !root() {
        return;
    }
    let started = std::time::Instant::now();
    let rec = common::record(
        "shop",
        &[
            "--alloc",
            "--lock",
            "--cpu=999",
            "--offcpu=0",
            "--memgrowth",
            "--func",
            "shop::Catalog::lookup",
            "--syscalls=0",
            "--syscalls-sample=0",
            "--bio",
            "--runq=0",
            "--runq-sample=0",
            "--tcp",
            "--ringbuf-size",
            "4096",
        ],
        &["--seconds", "2", "--threads", "2"],
    );
    // The service ran to its end and the recorder stopped with it.
    let _ = expect_line(&rec.out, "shop");
    assert!(started.elapsed().as_secs() < 30, "{:?}", started.elapsed());
    let mut r = TraceReader::open(&rec.trace).unwrap();
    let mut lost_records = std::collections::HashMap::<i32, u64>::new();
    let mut trailer = None;
    for rec in r.by_ref() {
        match rec.kind {
            Some(Kind::Lost(l)) => *lost_records.entry(l.family).or_default() += l.count,
            Some(Kind::Trailer(t)) => trailer = Some(t),
            _ => {}
        }
    }
    assert!(r.damage().is_empty(), "{:?}", r.damage());
    let t = trailer.expect("a trailer");
    let mut lost_any = 0;
    for f in &t.families {
        // Every probe hit of every family is kept, lost or filtered, and each loss is in
        // the file as a Lost record.
        assert_eq!(f.kept + f.lost + f.filtered, f.hits, "{f:?}");
        assert_eq!(
            lost_records.get(&f.family).copied().unwrap_or(0),
            f.lost,
            "{f:?}"
        );
        lost_any += f.lost;
    }
    assert!(
        lost_any > 0,
        "a one-page ring buffer lost nothing: {:?}",
        t.families
    );
    assert!(t.families.len() >= 6, "{:?}", t.families);
    // The system families too: every syscall and run-queue wait an event (thresholds 0).
    for fam in [EventFamily::Syscall, EventFamily::Runq] {
        let f = t.families.iter().find(|f| f.family == fam as i32);
        assert!(f.is_some_and(|f| f.hits > 0), "{fam:?}: {:?}", t.families);
    }
}

/// USDT hits with stacks through a one-page ring buffer: every hit the program made is kept
/// or lost, and each loss is in the file as a Lost record.
#[test]
fn usdt_with_the_smallest_ring_buffer_counts_its_losses() {
    if !root() {
        return;
    }
    let requests = 20_000u64;
    let rec = common::record(
        "usdt_server",
        &[
            "--usdt",
            "usdt_server-fp:shop:*",
            "--usdt-stack",
            "--ringbuf-size",
            "4096",
        ],
        &["--requests", &requests.to_string(), "--throw-every", "0"],
    );
    let e = expect_line(&rec.out, "usdt_server");
    let made = 2 * requests + 1 + e["slow_enabled"].as_u64().unwrap();
    let mut r = TraceReader::open(&rec.trace).unwrap();
    let mut lost_records = 0;
    let mut trailer = None;
    for rec in r.by_ref() {
        match rec.kind {
            Some(Kind::Lost(l)) if l.family == EventFamily::Usdt as i32 => lost_records += l.count,
            Some(Kind::Trailer(t)) => trailer = Some(t),
            _ => {}
        }
    }
    assert!(r.damage().is_empty(), "{:?}", r.damage());
    let t = trailer.expect("a trailer");
    let f = t
        .families
        .iter()
        .find(|f| f.family == EventFamily::Usdt as i32)
        .expect("usdt stats");
    eprintln!("usdt through one page: {f:?}");
    assert_eq!(f.hits, made, "{f:?}");
    assert_eq!(f.kept + f.lost + f.filtered, f.hits, "{f:?}");
    assert_eq!(lost_records, f.lost, "{f:?}");
}
