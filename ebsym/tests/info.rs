//! `ebsym info` end to end: a trace written with `TraceWriter`, the binary run on it, and
//! its text and JSON reports checked; then the same trace cut, random bytes and a missing
//! file.
use ebtrace_format::events::{AllocEvent, FreeEvent, LockEvent};
use ebtrace_format::{TraceWriter, WriterOptions};
use ebtrace_proto::v1::{self as pb, record::Kind, Record};
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Output};

const BUILD_ID_SHOP: [u8; 20] = [
    0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
    0xfe, 0xdc, 0xba, 0x98,
];
const BUILD_ID_SHOP_HEX: &str = "123456789abcdef00123456789abcdeffedcba98";
const BUILD_ID_LIBC: [u8; 8] = [0xca, 0xfe, 0xba, 0xbe, 0x00, 0x00, 0x00, 0x01];
const BUILD_ID_LIBC_HEX: &str = "cafebabe00000001";

fn rec(k: Kind) -> Record {
    Record { kind: Some(k) }
}

fn header() -> pb::Header {
    pb::Header {
        recorder_version: "ebrec 0.1.0".into(),
        hostname: "build-7".into(),
        kernel_release: "6.18.0-1-amd64".into(),
        arch: "x86_64".into(),
        page_size: 4096,
        cpu_count: 4,
        boot_id: "0b5e7e1d".into(),
        clock: "boottime".into(),
        options: vec![
            pb::KeyValue {
                key: "alloc".into(),
                value: "4096".into(),
            },
            pb::KeyValue {
                key: "lock".into(),
                value: "100".into(),
            },
        ],
        argv: vec![
            "ebrec".into(),
            "record".into(),
            "--alloc".into(),
            "--lock".into(),
            "--".into(),
            "./shop".into(),
        ],
        start_time_ns: 1_000,
        start_realtime_ns: 1_700_000_000_123_000_000,
        clock_ticks_per_sec: 100,
        format_version: 0,
    }
}

fn alloc(time_ns: u64, generation: u32, stack: u64, size: u64, address: u64) -> AllocEvent {
    AllocEvent {
        time_ns,
        generation,
        tid: 100 + generation,
        stack,
        size,
        address,
        kind: pb::AllocKind::Malloc,
        sample_period: 0,
        allocator: 0,
    }
}

fn free(time_ns: u64, generation: u32, address: u64) -> FreeEvent {
    FreeEvent {
        time_ns,
        generation,
        tid: 100 + generation,
        address,
        allocator: 0,
    }
}

fn lock(time_ns: u64, stack: u64, wait_ns: u64) -> LockEvent {
    LockEvent {
        time_ns,
        generation: 1,
        tid: 101,
        stack,
        mutex: 0x7f00_1000,
        wait_ns,
        hold_ns: 0,
        waker_tid: 102,
        waker_stack: 0,
        futex_op: 9,
        source: pb::LockSource::Futex,
        result: 0,
    }
}

fn lost(time_ns: u64, family: pb::EventFamily, reason: pb::LossReason, count: u64) -> Record {
    rec(Kind::Lost(pb::Lost {
        time_ns,
        family: family as i32,
        reason: reason as i32,
        count,
        cpu: 0,
    }))
}

/// Writes the test trace in two chunks and returns its bytes.
///
/// Chunk 0: definitions, two process generations (1 EXISTING pid 100, 2 FORK pid 101) and
/// their mappings, 3 allocs, 2 frees, 1 lock, and alloc/ringbuf_full losses (3 + 4).
/// Chunk 1: 2 allocs, 1 free, 1 lock, lock/map_full losses (2), the EXIT of generation 1
/// (code 7) and the trailer ("duration").
/// The container id of generation 2 (in a docker scope).
const CONTAINER: &str = "4f3c2b1a00112233445566778899aabbccddeeff00112233445566778899aabb";

fn write_trace() -> Vec<u8> {
    let opts = WriterOptions {
        chunk_bytes: 1 << 20,
        chunk_interval: None,
        level: 3,
        batch_events: 1024,
        ..Default::default()
    };
    let mut w = TraceWriter::new(Vec::new(), header(), opts).unwrap();
    let comm = w.intern_string(b"shop").unwrap();
    let exe = w.intern_string(b"/usr/bin/shop").unwrap();
    let arg = w.intern_string(b"--port=8080").unwrap();
    let cgroup = w
        .intern_string(format!("/system.slice/docker-{CONTAINER}.scope").as_bytes())
        .unwrap();
    let libc = w
        .intern_string(b"/usr/lib/x86_64-linux-gnu/libc.so.6")
        .unwrap();
    let vdso = w.intern_string(b"[vdso]").unwrap();
    let bid_shop = w.intern_build_id(&BUILD_ID_SHOP).unwrap();
    let bid_libc = w.intern_build_id(&BUILD_ID_LIBC).unwrap();
    w.write_record(&rec(Kind::Process(pb::Process {
        generation: 1,
        pid: 100,
        start_time_ns: 500,
        ppid: 1,
        comm,
        exe,
        cmdline: vec![exe, arg],
        pid_ns: 4026531836,
        event: pb::ProcessEvent::Existing as i32,
        time_ns: 1_000,
        ns_pids: vec![100],
        ..Default::default()
    })))
    .unwrap();
    w.write_record(&rec(Kind::Process(pb::Process {
        generation: 2,
        pid: 101,
        start_time_ns: 2_000,
        ppid: 100,
        comm,
        exe,
        cmdline: vec![exe, arg],
        pid_ns: 4026532999,
        event: pb::ProcessEvent::Fork as i32,
        time_ns: 2_000,
        parent_generation: 1,
        // in a container: its own pid namespace and a docker scope
        ns_pid: 1,
        ns_pids: vec![101, 1],
        cgroup,
        container_id: CONTAINER.into(),
        ..Default::default()
    })))
    .unwrap();
    for generation in [1, 2] {
        // (start, end, path, build-id, perms): only executable file mappings are binaries.
        for (start, end, path, build_id, perms) in [
            (0x40_0000u64, 0x40_1000u64, exe, bid_shop, 5u32),
            (0x40_1000, 0x40_2000, exe, bid_shop, 3),
            (0x7f00_0000, 0x7f20_0000, libc, bid_libc, 5),
            (0x7fff_f000, 0x7fff_f000 + 0x2000, vdso, 0, 5),
            (0x5555_0000, 0x5556_0000, 0, 0, 3),
        ] {
            w.write_record(&rec(Kind::Mapping(pb::Mapping {
                generation,
                start,
                end,
                path,
                build_id,
                perms,
                time_ns: 1_000,
                source: pb::MappingSource::Snapshot as i32,
                ..Default::default()
            })))
            .unwrap();
        }
    }
    let s1 = w
        .intern_stack(1, &[0x40_0100, 0x7f00_0200], &[], 0)
        .unwrap();
    let s2 = w.intern_stack(2, &[0x40_0180], &[], 0).unwrap();

    w.alloc(&alloc(10_000, 1, s1, 64, 0x5555_0000)).unwrap();
    w.alloc(&alloc(11_000, 1, s1, 128, 0x5555_0100)).unwrap();
    w.alloc(&alloc(12_000, 2, s2, 32, 0x5555_0200)).unwrap();
    w.free(&free(13_000, 1, 0x5555_0000)).unwrap();
    w.free(&free(14_000, 2, 0x5555_0200)).unwrap();
    w.lock(&lock(15_000, s1, 5_000)).unwrap();
    w.write_record(&lost(
        16_000,
        pb::EventFamily::Alloc,
        pb::LossReason::RingbufFull,
        3,
    ))
    .unwrap();
    w.write_record(&lost(
        17_000,
        pb::EventFamily::Alloc,
        pb::LossReason::RingbufFull,
        4,
    ))
    .unwrap();
    w.flush().unwrap();
    assert_eq!(w.stats().chunks, 1);

    w.alloc(&alloc(20_000, 1, s1, 256, 0x5555_0300)).unwrap();
    w.alloc(&alloc(21_000, 2, s2, 512, 0x5555_0400)).unwrap();
    w.free(&free(22_000, 1, 0x5555_0100)).unwrap();
    w.lock(&lock(23_000, s1, 7_000)).unwrap();
    w.write_record(&lost(
        24_000,
        pb::EventFamily::Lock,
        pb::LossReason::MapFull,
        2,
    ))
    .unwrap();
    w.write_record(&rec(Kind::Process(pb::Process {
        generation: 1,
        pid: 100,
        event: pb::ProcessEvent::Exit as i32,
        time_ns: 25_000,
        exit_code: 7,
        ..Default::default()
    })))
    .unwrap();
    w.finish(Some(pb::Trailer {
        end_time_ns: 26_000,
        end_realtime_ns: 1_700_000_000_123_025_000,
        stop_reason: "duration".into(),
        ..Default::default()
    }))
    .unwrap()
}

/// Offsets of the chunk descriptors (a descriptor is 32 bytes, its compressed length at 8).
fn chunk_starts(bytes: &[u8]) -> Vec<usize> {
    let mut starts = vec![];
    let mut off = 24;
    while off < bytes.len() {
        starts.push(off);
        let len = u64::from_le_bytes(bytes[off + 8..off + 16].try_into().unwrap()) as usize;
        off += 32 + len;
    }
    assert_eq!(off, bytes.len());
    starts
}

fn ebsym(args: &[&str], trace: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ebsym"))
        .args(args)
        .arg(trace)
        .output()
        .expect("run ebsym")
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "ebsym failed ({}): {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

/// `ebsym info --json`, whose first field is the schema's version.
fn info_json(trace: &Path) -> Value {
    let o = ebsym(&["info", "--json"], trace);
    let out = stdout(&o);
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.starts_with(&format!(
            "{{\n  \"schema_version\": {},\n",
            ebtrace_analyze::JSON_SCHEMA_VERSION
        )),
        "{out}"
    );
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// The text report, one entry per line, with runs of spaces collapsed.
fn info_text(trace: &Path) -> Vec<String> {
    let o = ebsym(&["info"], trace);
    let out = stdout(&o);
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

fn has_line(lines: &[String], want: &str) {
    assert!(
        lines.iter().any(|l| l == want),
        "no line {want:?} in:\n{}",
        lines.join("\n")
    );
}

fn expected_processes(exit: bool) -> Value {
    let binaries = json!([
        {"path": "/usr/bin/shop", "build_id": BUILD_ID_SHOP_HEX},
        {"path": "/usr/lib/x86_64-linux-gnu/libc.so.6", "build_id": BUILD_ID_LIBC_HEX},
    ]);
    json!([
        {
            "generation": 1, "pid": 100, "ppid": 1, "comm": "shop", "exe": "/usr/bin/shop",
            "cmdline": ["/usr/bin/shop", "--port=8080"], "event": "existing",
            "start_time_ns": 500,
            "exit_time_ns": if exit { json!(25_000) } else { Value::Null },
            "exit_code": if exit { json!(7) } else { Value::Null },
            "parent_generation": 0, "pid_ns": 4026531836_u64, "ns_pids": [100], "ns_pid": 100,
            "cgroup": "", "container_id": "", "binaries": binaries,
        },
        {
            "generation": 2, "pid": 101, "ppid": 100, "comm": "shop", "exe": "/usr/bin/shop",
            "cmdline": ["/usr/bin/shop", "--port=8080"], "event": "fork",
            "start_time_ns": 2_000, "exit_time_ns": null, "exit_code": null,
            "parent_generation": 1, "pid_ns": 4026532999_u64, "ns_pids": [101, 1], "ns_pid": 1,
            "cgroup": format!("/system.slice/docker-{CONTAINER}.scope"),
            "container_id": CONTAINER, "binaries": binaries,
        },
    ])
}

#[test]
fn info_reports_a_clean_trace_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trace.pb.zst");
    let bytes = write_trace();
    assert_eq!(chunk_starts(&bytes).len(), 2);
    std::fs::write(&path, &bytes).unwrap();

    let j = info_json(&path);
    assert_eq!(
        j["file"],
        json!({
            "path": path.display().to_string(), "bytes": bytes.len(), "format_version": 1,
            "chunks": 2, "records": j["file"]["records"],
        })
    );
    assert_eq!(
        j["header"],
        json!({
            "recorder_version": "ebrec 0.1.0", "hostname": "build-7",
            "kernel_release": "6.18.0-1-amd64", "arch": "x86_64", "cpu_count": 4,
            "page_size": 4096, "boot_id": "0b5e7e1d", "clock": "boottime",
            "options": {"alloc": "4096", "lock": "100"},
            "argv": ["ebrec", "record", "--alloc", "--lock", "--", "./shop"],
            "start_time": "2023-11-14T22:13:20.123Z",
        })
    );
    assert_eq!(
        j["span"],
        json!({"first_event_ns": 10_000, "last_event_ns": 23_000, "duration_ns": 13_000})
    );
    assert_eq!(
        j["events"],
        json!({"alloc": 5, "free": 3, "lock": 2, "func": 0, "cpu": 0, "offcpu": 0, "memgrowth": 0,
            "syscall": 0, "bio": 0, "runq": 0, "tcp": 0, "usdt": 0, "histogram_rows": 0})
    );
    assert_eq!(j["stacks"], 2);
    assert_eq!(j["stack_copies"], 0);
    assert_eq!(j["stack_copy_bytes"], 0);
    assert_eq!(
        j["losses"],
        json!([
            {"family": "alloc", "reason": "ringbuf_full", "count": 7},
            {"family": "lock", "reason": "map_full", "count": 2},
        ])
    );
    assert_eq!(j["lost_total"], 9);
    assert_eq!(j["processes"], expected_processes(true));
    assert_eq!(j["ended"], "clean");
    assert_eq!(j["stop_reason"], "duration");
    assert_eq!(j["damage"], json!([]));
    assert_eq!(j["symbolized"], false);
    assert_eq!(j["symbolized_addresses"], 0);
    assert_eq!(j["uprobes_frames"], 0);
    assert_eq!(j["vdso"], Value::Null);
    assert_eq!(j["probe_changes"], json!([]));
    assert_eq!(j["aggregated"], json!({}));
    // The schema's version (first: info_json checks), every documented field, and nothing
    // else.
    assert_eq!(j["schema_version"], ebtrace_analyze::JSON_SCHEMA_VERSION);
    let mut keys: Vec<&str> = j.as_object().unwrap().keys().map(|k| k.as_str()).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "aggregated",
            "damage",
            "ended",
            "events",
            "file",
            "header",
            "losses",
            "lost_total",
            "probe_changes",
            "processes",
            "schema_version",
            "span",
            "stack_copies",
            "stack_copy_bytes",
            "stacks",
            "stop_reason",
            "symbolized",
            "symbolized_addresses",
            "uprobes_frames",
            "vdso"
        ]
    );

    let t = info_text(&path);
    has_line(
        &t,
        &format!(
            "trace {} ({} bytes, format 1, 2 chunks, {} records)",
            path.display(),
            bytes.len(),
            j["file"]["records"]
        ),
    );
    has_line(&t, "recorder ebrec 0.1.0");
    has_line(
        &t,
        "host build-7 (6.18.0-1-amd64 x86_64, 4 CPUs, page 4096 B, boot 0b5e7e1d)",
    );
    has_line(&t, "command ebrec record --alloc --lock -- ./shop");
    has_line(&t, "options alloc=4096 lock=100");
    has_line(&t, "started 2023-11-14T22:13:20.123Z");
    has_line(&t, "events in 13.0 µs (boottime 10000 .. 23000 ns)");
    has_line(&t, "ended clean (stopped: duration)");
    has_line(&t, "symbolized no");
    has_line(&t, "stack memory none (no stack copies)");
    has_line(&t, "alloc 5");
    has_line(&t, "free 3");
    has_line(&t, "lock 2");
    has_line(&t, "stacks 2");
    for absent in ["func", "cpu", "offcpu", "memgrowth", "DAMAGE"] {
        assert!(
            !t.iter().any(|l| l.split(' ').next() == Some(absent)),
            "unexpected {absent} line in:\n{}",
            t.join("\n")
        );
    }
    has_line(&t, "losses 9 events in all");
    has_line(&t, "alloc ringbuf_full 7");
    has_line(&t, "lock map_full 2");
    has_line(&t, "processes 2");
    has_line(
        &t,
        "pid 100 gen 1 (existing, exited 7) shop [/usr/bin/shop --port=8080]",
    );
    has_line(
        &t,
        "pid 101 (ns pid 1) gen 2 (fork) shop [/usr/bin/shop --port=8080]",
    );
    has_line(
        &t,
        &format!("cgroup /system.slice/docker-{CONTAINER}.scope container {CONTAINER}"),
    );
    has_line(&t, &format!("{BUILD_ID_SHOP_HEX} /usr/bin/shop"));
    has_line(
        &t,
        &format!("{BUILD_ID_LIBC_HEX} /usr/lib/x86_64-linux-gnu/libc.so.6"),
    );
    // [vdso] and the anonymous and non-executable mappings are not binaries.
    assert!(!t.iter().any(|l| l.contains("[vdso]")), "{}", t.join("\n"));
    assert_eq!(
        t.iter().filter(|l| l.ends_with(" /usr/bin/shop")).count(),
        2
    );
}

#[test]
fn info_reports_a_cut_trace_with_the_complete_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.pb.zst");
    let bytes = write_trace();
    let starts = chunk_starts(&bytes);
    let last = starts[1];
    // Halfway into the last chunk's zstd frame.
    let cut = last + 32 + (bytes.len() - last - 32) / 2;
    std::fs::write(&path, &bytes[..cut]).unwrap();

    let j = info_json(&path);
    assert_eq!(j["file"]["bytes"], cut);
    assert_eq!(j["file"]["chunks"], 1);
    assert_eq!(
        j["events"],
        json!({"alloc": 3, "free": 2, "lock": 1, "func": 0, "cpu": 0, "offcpu": 0, "memgrowth": 0,
            "syscall": 0, "bio": 0, "runq": 0, "tcp": 0, "usdt": 0, "histogram_rows": 0})
    );
    assert_eq!(
        j["span"],
        json!({"first_event_ns": 10_000, "last_event_ns": 15_000, "duration_ns": 5_000})
    );
    assert_eq!(
        j["losses"],
        json!([{"family": "alloc", "reason": "ringbuf_full", "count": 7}])
    );
    assert_eq!(j["lost_total"], 7);
    // The EXIT record was in the lost chunk.
    assert_eq!(j["processes"], expected_processes(false));
    assert_eq!(j["ended"], "cut");
    assert_eq!(j["stop_reason"], Value::Null);
    let damage = j["damage"].as_array().unwrap();
    assert_eq!(damage.len(), 1, "{damage:?}");
    let d = damage[0].as_str().unwrap();
    assert!(d.contains("truncated"), "{d}");
    assert!(d.contains(&format!("at byte {last}")), "{d}");
    assert_eq!(j["symbolized"], false);

    let t = info_text(&path);
    has_line(
        &t,
        "ended CUT: no trailer, the recorder did not finish (killed, crashed or still running)",
    );
    let damage_lines: Vec<_> = t.iter().filter(|l| l.starts_with("DAMAGE ")).collect();
    assert_eq!(damage_lines.len(), 1, "{}", t.join("\n"));
    assert!(damage_lines[0].contains("truncated"), "{}", damage_lines[0]);
    has_line(&t, "alloc 3");
    has_line(&t, "free 2");
    has_line(&t, "lock 1");
    has_line(&t, "losses 7 events in all");
    has_line(
        &t,
        "pid 100 gen 1 (existing) shop [/usr/bin/shop --port=8080]",
    );
}

/// Runs `ebsym info` (text and JSON) expecting failure; returns the single stderr line.
fn failure_line(path: &Path) -> String {
    let mut lines = vec![];
    for args in [&["info"][..], &["info", "--json"][..]] {
        let o = ebsym(args, path);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {o:?}");
        assert!(o.stdout.is_empty(), "{args:?}: {o:?}");
        let err = String::from_utf8(o.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{args:?}: {err:?}");
        assert!(err.ends_with('\n'), "{err:?}");
        lines.push(err.trim_end().to_string());
    }
    assert_eq!(lines[0], lines[1]);
    lines.remove(0)
}

#[test]
fn random_bytes_are_not_a_trace() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("random.bin");
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let bytes: Vec<u8> = (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(&path, bytes).unwrap();
    let line = failure_line(&path);
    assert!(line.starts_with("ebsym: "), "{line}");
    assert!(line.contains("not an ebtrace trace"), "{line}");
}

#[test]
fn a_missing_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-such-trace.pb.zst");
    let line = failure_line(&path);
    assert!(line.starts_with("ebsym: "), "{line}");
    assert!(line.contains(&path.display().to_string()), "{line}");
}
