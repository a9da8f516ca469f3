//! Golden-file tests of the reports: a synthetic trace, written with `TraceWriter` together
//! with the symbolizer's records (so no binary is needed), rendered by top, leaks, locks,
//! folded and diff in text and JSON (a report's as `ebsym … --json` prints it, with its
//! `schema_version`) and compared with `tests/golden/`. `EBTRACE_BLESS=1` rewrites the files. Also: empty traces and traces with only losses say so; kernel
//! frames named from the trace's `KernelSymbols`; latency percentiles and histograms.
use ebtrace_analyze::model::Filter;
use ebtrace_analyze::reports::{self, DiffOptions, EventKind};
use ebtrace_format::events::{AllocEvent, CpuSample, FreeEvent, FuncEvent, LockEvent};
use ebtrace_format::{TraceWriter, WriterOptions};
use ebtrace_proto::v1::{self as pb, record::Kind, Record};
use std::path::{Path, PathBuf};

const SHOP: u64 = 0x5555_0000_0000;
const LIBC: u64 = 0x7f00_0000_0000;

fn rec(k: Kind) -> Record {
    Record { kind: Some(k) }
}

/// One symbolized address: (function, file, line, inlined), innermost first.
type Sym<'a> = (u64, &'a [(&'a str, &'a str, u32, bool)]);

fn header() -> pb::Header {
    pb::Header {
        recorder_version: "golden".into(),
        hostname: "host".into(),
        arch: "x86_64".into(),
        start_time_ns: 1_000_000_000,
        start_realtime_ns: 1_700_000_000_000_000_000,
        ..Default::default()
    }
}

fn writer() -> TraceWriter<Vec<u8>> {
    let opts = WriterOptions {
        chunk_interval: None,
        ..Default::default()
    };
    TraceWriter::new(Vec::new(), header(), opts).unwrap()
}

/// A process that runs `rounds` rounds: each round allocates 4096 bytes 3 times in
/// `Warehouse::restock` (freed), 100 bytes twice through an inlined helper (one leaked),
/// and waits for a mutex twice.
fn write_shop(path: &Path, rounds: u64) {
    let mut w = writer();
    let comm = w.intern_string(b"shop").unwrap();
    w.write_record(&rec(Kind::Process(pb::Process {
        generation: 1,
        pid: 42,
        comm,
        event: pb::ProcessEvent::Existing as i32,
        time_ns: 1_000_000_000,
        ..Default::default()
    })))
    .unwrap();
    let shop_path = w.intern_string(b"/usr/bin/shop").unwrap();
    let shop_id = w.intern_build_id(&[0xab; 20]).unwrap();
    let libc_path = w.intern_string(b"/lib/libc.so.6").unwrap();
    let libc_id = w.intern_build_id(&[0xcd; 20]).unwrap();
    for (start, path, build_id) in [(SHOP, shop_path, shop_id), (LIBC, libc_path, libc_id)] {
        w.write_record(&rec(Kind::Mapping(pb::Mapping {
            generation: 1,
            start,
            end: start + 0x10000,
            file_offset: 0x1000,
            path,
            build_id,
            perms: 5,
            source: pb::MappingSource::Snapshot as i32,
            ..Default::default()
        })))
        .unwrap();
    }
    let malloc = LIBC + 0x100;
    let lock = LIBC + 0x300;
    let restock = w
        .intern_stack(1, &[malloc, SHOP + 0x1010, SHOP + 0x2020], &[], 0)
        .unwrap();
    // SHOP + 0x1810 has no symbolization record: an unresolved frame.
    let helper = w
        .intern_stack(
            1,
            &[malloc, SHOP + 0x1510, SHOP + 0x1810, SHOP + 0x2020],
            &[],
            0,
        )
        .unwrap();
    let post = w
        .intern_stack(1, &[lock, SHOP + 0x3010, SHOP + 0x2020], &[], 0)
        .unwrap();
    let unlock = w
        .intern_stack(1, &[LIBC + 0x400, SHOP + 0x3110, SHOP + 0x2020], &[], 0)
        .unwrap();
    let mut t = 1_100_000_000;
    let mut addr = 0x6000_0000;
    for _ in 0..rounds {
        let mut blocks = Vec::new();
        for _ in 0..3 {
            t += 1000;
            addr += 0x2000;
            w.alloc(&AllocEvent {
                time_ns: t,
                generation: 1,
                tid: 42,
                stack: restock,
                size: 4096,
                address: addr,
                kind: pb::AllocKind::Malloc,
                sample_period: 0,
                allocator: 0,
            })
            .unwrap();
            blocks.push(addr);
        }
        for (i, size) in [100u64, 100].into_iter().enumerate() {
            t += 1000;
            addr += 0x2000;
            w.alloc(&AllocEvent {
                time_ns: t,
                generation: 1,
                tid: 43,
                stack: helper,
                size,
                address: addr,
                kind: pb::AllocKind::Malloc,
                sample_period: 0,
                allocator: 0,
            })
            .unwrap();
            if i == 0 {
                blocks.push(addr);
            }
        }
        for b in blocks {
            t += 500;
            w.free(&FreeEvent {
                time_ns: t,
                generation: 1,
                tid: 42,
                address: b,
                allocator: 0,
            })
            .unwrap();
        }
        for (wait, hold) in [(2000u64, 5000u64), (6000, 7000)] {
            t += 10_000;
            w.lock(&LockEvent {
                time_ns: t,
                generation: 1,
                tid: 44,
                stack: post,
                mutex: 0x7ffd_0000_1000,
                wait_ns: wait,
                hold_ns: hold,
                waker_tid: 45,
                waker_stack: unlock,
                futex_op: 0,
                source: pb::LockSource::Uprobe,
                result: 0,
            })
            .unwrap();
        }
    }
    w.write_record(&rec(Kind::Process(pb::Process {
        generation: 1,
        pid: 42,
        event: pb::ProcessEvent::Exit as i32,
        time_ns: t + 1000,
        ..Default::default()
    })))
    .unwrap();
    // What ebsym appends: file offsets (leaf: ip, callers: ip - 1, minus start plus the
    // mapping's file offset).
    let off = |base: u64, ip: u64| ip - base + 0x1000;
    w.write_record(&rec(Kind::SymbolizerInfo(pb::SymbolizerInfo {
        symbolizer_version: "golden".into(),
        ..Default::default()
    })))
    .unwrap();
    let syms: &[(u64, Sym<'_>)] = &[
        (
            libc_id,
            (
                off(LIBC, malloc),
                &[("malloc", "malloc/malloc.c", 3281, false)],
            ),
        ),
        (
            libc_id,
            (
                off(LIBC, lock),
                &[("pthread_mutex_lock", "nptl/pthread_mutex_lock.c", 80, false)],
            ),
        ),
        (
            libc_id,
            (
                off(LIBC, LIBC + 0x400),
                &[(
                    "pthread_mutex_unlock",
                    "nptl/pthread_mutex_unlock.c",
                    360,
                    false,
                )],
            ),
        ),
        (
            shop_id,
            (
                off(SHOP, SHOP + 0x1010 - 1),
                &[("Warehouse::restock()", "shop.cpp", 98, false)],
            ),
        ),
        (
            shop_id,
            (
                off(SHOP, SHOP + 0x1510 - 1),
                &[
                    ("make_label(int)", "label.h", 12, true),
                    ("Shelf::fill()", "shop.cpp", 140, false),
                ],
            ),
        ),
        (
            shop_id,
            (
                off(SHOP, SHOP + 0x2020 - 1),
                &[("main", "shop.cpp", 300, false)],
            ),
        ),
        (
            shop_id,
            (
                off(SHOP, SHOP + 0x3010 - 1),
                &[
                    ("std::mutex::lock()", "std_mutex.h", 113, true),
                    ("Ledger::post(long)", "shop.cpp", 210, false),
                ],
            ),
        ),
        (
            shop_id,
            (
                off(SHOP, SHOP + 0x3110 - 1),
                &[("Ledger::post(long)", "shop.cpp", 215, false)],
            ),
        ),
    ];
    for &(build_id, (address, frames)) in syms {
        let mut out = Vec::new();
        for &(function, file, line, inlined) in frames {
            out.push(pb::SymbolFrame {
                function: w.intern_string(function.as_bytes()).unwrap(),
                file: w.intern_string(file.as_bytes()).unwrap(),
                line,
                inlined,
                ..Default::default()
            });
        }
        w.write_record(&rec(Kind::SymbolizedAddress(pb::SymbolizedAddress {
            build_id,
            address,
            frames: out,
            reason: 0,
        })))
        .unwrap();
    }
    let bytes = w
        .finish(Some(pb::Trailer {
            stop_reason: "targets exited".into(),
            ..Default::default()
        }))
        .unwrap();
    std::fs::write(path, bytes).unwrap();
}

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// Compares `got` with `tests/golden/name`, or rewrites it when EBTRACE_BLESS=1.
fn check(name: &str, got: &str) {
    let path = golden_dir().join(name);
    if std::env::var("EBTRACE_BLESS").as_deref() == Ok("1") {
        std::fs::create_dir_all(golden_dir()).unwrap();
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "{} is missing: run with EBTRACE_BLESS=1 to write it",
            path.display()
        )
    });
    if want != got {
        let first = want
            .lines()
            .zip(got.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(want.lines().count().min(got.lines().count()));
        panic!(
            "{} differs from the report (first at line {}); rerun with EBTRACE_BLESS=1 if \
             the change is intended.\n--- got:\n{got}",
            path.display(),
            first + 1
        );
    }
}

fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string_pretty(v).unwrap() + "\n"
}

/// A report's JSON as `ebsym … --json` prints it: its `schema_version` first.
fn cli_json<T: serde::Serialize>(v: &T) -> String {
    json(&ebtrace_analyze::Versioned::new(v))
}

/// A report's rows as their JSON.
fn rows(r: &reports::Report) -> Vec<serde_json::Value> {
    r.rows
        .iter()
        .map(|row| serde_json::to_value(row).unwrap())
        .collect()
}

#[test]
fn reports_match_the_golden_files() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("shop.pb.zst");
    write_shop(&trace, 3);
    let all = Filter::default();

    let top = reports::top(&trace, EventKind::Alloc, "bytes", &all, 20).unwrap();
    check("top_alloc.txt", &top.to_text());
    check("top_alloc.json", &cli_json(&top));

    let leaks = reports::leaks(&trace, &all, 20).unwrap();
    check("leaks.txt", &leaks.to_text());
    check("leaks.json", &cli_json(&leaks));

    let locks = reports::top(&trace, EventKind::Lock, "wait", &all, 20).unwrap();
    check("locks.txt", &locks.to_text());
    check("locks.json", &cli_json(&locks));

    let folded = reports::folded(&trace, EventKind::Alloc, "bytes", &all).unwrap();
    check("folded_alloc.txt", &(folded.lines.join("\n") + "\n"));
    check("folded_alloc.json", &json(&folded.lines));

    let after = dir.path().join("shop5.pb.zst");
    write_shop(&after, 5);
    let diff = reports::diff(
        &trace,
        &after,
        "bytes",
        &DiffOptions {
            kind: EventKind::Alloc,
            filter: &all,
            n: 20,
        },
    )
    .unwrap();
    check("diff_alloc.txt", &diff.to_text());
    check("diff_alloc.json", &cli_json(&diff));
}

#[test]
fn the_numbers_are_what_the_trace_says() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("shop.pb.zst");
    write_shop(&trace, 3);
    let all = Filter::default();
    let top = reports::top(&trace, EventKind::Alloc, "bytes", &all, 20).unwrap();
    assert_eq!(top.totals["count"], 15);
    assert_eq!(top.totals["bytes"], 3 * (3 * 4096 + 200));
    let leaks = reports::leaks(&trace, &all, 20).unwrap();
    assert_eq!(leaks.rows.len(), 1);
    let rows = rows(&leaks);
    assert_eq!(rows[0]["count"], 3);
    assert_eq!(rows[0]["bytes"], 300);
    assert_eq!(rows[0]["alive"], false);
    let locks = reports::top(&trace, EventKind::Lock, "wait", &all, 20).unwrap();
    assert_eq!(locks.totals["wait_ns"], 3 * 8000);
    assert_eq!(locks.totals["hold_ns"], 3 * 12000);
    let after = dir.path().join("shop5.pb.zst");
    write_shop(&after, 5);
    let d = reports::diff(
        &trace,
        &after,
        "bytes",
        &DiffOptions {
            kind: EventKind::Alloc,
            filter: &all,
            n: 20,
        },
    )
    .unwrap();
    assert_eq!(d.rows[0].delta, 2 * 3 * 4096);
    assert_eq!(d.rows[1].delta, 2 * 200);
}

#[test]
fn pprof_has_inline_chains_as_lines_and_the_totals_of_top() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("shop.pb.zst");
    write_shop(&trace, 3);
    let st = reports::stacks(&trace, EventKind::Lock, &Filter::default()).unwrap();
    let p = ebtrace_analyze::pprof::profile(&st, "wait");
    let s = |i: i64| p.string_table[i as usize].as_str();
    assert_eq!(s(0), "");
    let types: Vec<(&str, &str)> = p
        .sample_type
        .iter()
        .map(|t| (s(t.r#type), s(t.unit)))
        .collect();
    assert_eq!(
        types,
        [
            ("contentions", "count"),
            ("delay", "nanoseconds"),
            ("hold", "nanoseconds")
        ]
    );
    assert_eq!(s(p.default_sample_type), "delay");
    let total = |i: usize| p.sample.iter().map(|x| x.value[i]).sum::<i64>();
    assert_eq!((total(0), total(1), total(2)), (6, 24000, 36000));
    // Ledger::post's location: std::mutex::lock inlined into it, innermost first.
    let f = |id: u64| s(p.function[id as usize - 1].name);
    let post = p
        .location
        .iter()
        .find(|l| l.line.len() == 2)
        .expect("a location with an inline chain");
    assert_eq!(f(post.line[0].function_id), "std::mutex::lock()");
    assert_eq!(f(post.line[1].function_id), "Ledger::post(long)");
    // A caller: its call instruction, the return address 0x3010 - 1 that was looked up.
    assert_eq!(post.address, SHOP + 0x300f);
    let m = &p.mapping[post.mapping_id as usize - 1];
    assert_eq!(s(m.build_id), "ab".repeat(20));
    assert_eq!(s(m.filename), "/usr/bin/shop");
    assert!(m.has_inline_frames);
    // Round trip through gzip and prost.
    let mut gz = Vec::new();
    ebtrace_analyze::pprof::write_gz(&p, &mut gz).unwrap();
    let mut raw = Vec::new();
    use std::io::Read;
    flate2::read::GzDecoder::new(gz.as_slice())
        .read_to_end(&mut raw)
        .unwrap();
    use prost::Message;
    assert_eq!(
        ebtrace_proto::pprof::Profile::decode(raw.as_slice()).unwrap(),
        p
    );
}

/// A trace with a header, `lost` records and a trailer, nothing else.
fn write_bare(path: &Path, lost: &[(pb::EventFamily, u64)]) {
    let mut w = writer();
    for &(family, count) in lost {
        w.write_record(&rec(Kind::Lost(pb::Lost {
            time_ns: 2_000_000_000,
            family: family as i32,
            reason: pb::LossReason::RingbufFull as i32,
            count,
            cpu: 0,
        })))
        .unwrap();
    }
    let bytes = w.finish(Some(pb::Trailer::default())).unwrap();
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn empty_and_loss_only_traces_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.pb.zst");
    write_bare(&empty, &[]);
    let lost = dir.path().join("lost.pb.zst");
    write_bare(
        &lost,
        &[
            (pb::EventFamily::Alloc, 12),
            (pb::EventFamily::Free, 3),
            (pb::EventFamily::Lock, 5),
        ],
    );
    let all = Filter::default();
    let but = " (but 20 events were lost while recording: alloc/ringbuf_full 12, \
               free/ringbuf_full 3, lock/ringbuf_full 5)";
    for (trace, tail) in [(&empty, ""), (&lost, but)] {
        for (kind, by) in [
            (EventKind::Alloc, "bytes"),
            (EventKind::Lock, "wait"),
            (EventKind::Func, "latency"),
            (EventKind::Cpu, "samples"),
            (EventKind::OffCpu, "time"),
        ] {
            let want = format!("no {} events in this trace{tail}", kind.name());
            let r = reports::top(trace, kind, by, &all, 20).unwrap();
            assert!(r.rows.is_empty());
            assert_eq!(r.note.as_deref(), Some(want.as_str()));
            let text = r.to_text();
            assert!(text.contains(&want), "{text}");
            assert!(!text.contains("#1"), "{text}");
            let j = serde_json::to_value(&r).unwrap();
            assert_eq!(j["note"], want.as_str());
            let f = reports::folded(trace, kind, by, &all).unwrap();
            assert!(f.lines.is_empty());
            assert_eq!(f.note.as_deref(), Some(want.as_str()));
            let st = reports::stacks(trace, kind, &all).unwrap();
            assert_eq!(st.note.as_deref(), Some(want.as_str()));
            let p = ebtrace_analyze::pprof::profile(&st, by);
            assert!(p.sample.is_empty() && p.string_table[0].is_empty());
        }
        let want = format!("no alloc events in this trace{tail}");
        let leaks = reports::leaks(trace, &all, 20).unwrap();
        assert_eq!(leaks.note.as_deref(), Some(want.as_str()));
        assert!(leaks.to_text().contains(&want));
        let d = reports::diff(
            trace,
            trace,
            "bytes",
            &DiffOptions {
                kind: EventKind::Alloc,
                filter: &all,
                n: 20,
            },
        )
        .unwrap();
        assert!(d.rows.is_empty());
        assert_eq!(
            d.notes,
            [format!("before: {want}"), format!("after: {want}")]
        );
        let mut svg = Vec::new();
        assert!(reports::diff_flamegraph(&d, EventKind::Alloc, None, false, &mut svg).is_err());
    }
    // Losses are also stated in the report's losses paragraph.
    let r = reports::top(&lost, EventKind::Alloc, "bytes", &all, 20).unwrap();
    assert!(r
        .to_text()
        .contains("losses: events lost while recording: alloc/ringbuf_full 12"));
}

#[test]
fn a_filter_that_keeps_nothing_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("shop.pb.zst");
    write_shop(&trace, 1);
    let f = Filter {
        pids: vec![1],
        ..Default::default()
    };
    let r = reports::top(&trace, EventKind::Alloc, "bytes", &f, 20).unwrap();
    assert_eq!(
        r.note.as_deref(),
        Some("no alloc events in this trace match the filters")
    );
    let leaks = reports::leaks(&trace, &Filter::default(), 20).unwrap();
    assert!(leaks.note.is_none());
    // Every allocation freed: not an empty table either.
    let f = Filter {
        tids: vec![42],
        ..Default::default()
    };
    let leaks = reports::leaks(&trace, &f, 20).unwrap();
    assert_eq!(
        leaks.note.as_deref(),
        Some("no leaks: all 3 traced allocations that match the filters were freed")
    );
}

const K_TEXT: u64 = 0xffff_ffff_8100_0000;
const K_FUTEX: u64 = 0xffff_ffff_8110_0000;
const K_EXT4: u64 = 0xffff_ffff_c010_0000;

/// One-frame `SymbolizedAddress` records in `shop.cpp` for `(address, function, line)`.
fn symbolized(w: &mut TraceWriter<Vec<u8>>, shop_id: u64, addrs: &[(u64, &str, u32)]) {
    for &(address, function, line) in addrs {
        let frames = vec![pb::SymbolFrame {
            function: w.intern_string(function.as_bytes()).unwrap(),
            file: w.intern_string(b"shop.cpp").unwrap(),
            line,
            ..Default::default()
        }];
        w.write_record(&rec(Kind::SymbolizedAddress(pb::SymbolizedAddress {
            build_id: shop_id,
            address,
            frames,
            reason: 0,
        })))
        .unwrap();
    }
}

/// Process 42 (`shop`, generation 1) with `/usr/bin/shop` mapped at SHOP.
fn shop_process(w: &mut TraceWriter<Vec<u8>>) -> u64 {
    let comm = w.intern_string(b"shop").unwrap();
    w.write_record(&rec(Kind::Process(pb::Process {
        generation: 1,
        pid: 42,
        comm,
        event: pb::ProcessEvent::Existing as i32,
        time_ns: 1_000_000_000,
        ..Default::default()
    })))
    .unwrap();
    let shop_path = w.intern_string(b"/usr/bin/shop").unwrap();
    let shop_id = w.intern_build_id(&[0xab; 20]).unwrap();
    w.write_record(&rec(Kind::Mapping(pb::Mapping {
        generation: 1,
        start: SHOP,
        end: SHOP + 0x10000,
        file_offset: 0x1000,
        path: shop_path,
        build_id: shop_id,
        perms: 5,
        source: pb::MappingSource::Snapshot as i32,
        ..Default::default()
    })))
    .unwrap();
    shop_id
}

/// A process sampled on the CPU (`--cpu`): 5 samples in the kernel under a futex system
/// call, 3 in an ext4 module function under a kernel frame no symbol covers, 2 in user
/// space only. The kernel symbols come in three `KernelSymbols` records (as the recorder
/// adds the ones new stacks need), not in address order between records.
fn write_cpu(path: &Path) {
    let mut w = writer();
    let shop_id = shop_process(&mut w);
    let ksyms = |w: &mut TraceWriter<Vec<u8>>, syms: &[(u64, &str, &str)]| {
        let mut k = pb::KernelSymbols::default();
        for &(address, name, module) in syms {
            k.address.push(address);
            k.name.push(w.intern_string(name.as_bytes()).unwrap());
            k.module.push(match module {
                "" => 0,
                m => w.intern_string(m.as_bytes()).unwrap(),
            });
        }
        w.write_record(&rec(Kind::KernelSymbols(k))).unwrap();
    };
    ksyms(
        &mut w,
        &[
            (K_FUTEX, "__x64_sys_futex", ""),
            (K_FUTEX + 0x200, "futex_wait", ""),
            (K_FUTEX + 0x400, "schedule", ""),
        ],
    );
    ksyms(
        &mut w,
        &[
            (K_EXT4, "ext4_file_read_iter", "ext4"),
            (K_EXT4 + 0x800, "ext4_mpage_readpages", "ext4"),
        ],
    );
    ksyms(&mut w, &[(K_TEXT, "entry_SYSCALL_64", "")]);
    // Kernel stacks leaf first; after the leaf, return addresses. K_FUTEX + 0x200 returns
    // to the first byte of futex_wait: the call was the last instruction of
    // __x64_sys_futex, which only looking up address - 1 finds.
    let futex = w
        .intern_stack(
            1,
            &[SHOP + 0x3010, SHOP + 0x2020],
            &[K_FUTEX + 0x410, K_FUTEX + 0x200, K_TEXT + 0x50],
            0,
        )
        .unwrap();
    // 0xffff_ffff_8000_0010 is below every kernel symbol, K_EXT4 + 16 MiB too far past
    // the last one: both unresolved.
    let read = w
        .intern_stack(
            1,
            &[SHOP + 0x1010, SHOP + 0x2020],
            &[
                K_EXT4 + 0x810,
                K_EXT4 + 0x10,
                0xffff_ffff_8000_0010,
                K_EXT4 + 0x100_0000,
            ],
            0,
        )
        .unwrap();
    let user = w
        .intern_stack(1, &[SHOP + 0x1010, SHOP + 0x2020], &[], 0)
        .unwrap();
    let mut t = 1_100_000_000;
    for (stack, n) in [(futex, 5), (read, 3), (user, 2)] {
        for _ in 0..n {
            t += 10_000_000;
            w.cpu_sample(&CpuSample {
                time_ns: t,
                generation: 1,
                tid: 42,
                stack,
                cpu: 1,
            })
            .unwrap();
        }
    }
    let off = |ip: u64| ip - SHOP + 0x1000;
    w.write_record(&rec(Kind::SymbolizerInfo(pb::SymbolizerInfo {
        symbolizer_version: "golden".into(),
        ..Default::default()
    })))
    .unwrap();
    // The first user frame is the leaf (looked up as is), the others return addresses.
    symbolized(
        &mut w,
        shop_id,
        &[
            (off(SHOP + 0x3010), "Ledger::post(long)", 210),
            (off(SHOP + 0x1010), "Warehouse::restock()", 98),
            (off(SHOP + 0x2020 - 1), "main", 300),
        ],
    );
    let bytes = w.finish(Some(pb::Trailer::default())).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// A sample whose leaf is at an address that is also a return address in another stack
/// (the instruction right after a call, sampled once the call came back): two lookups,
/// two lines, and so two pprof Locations, which must not share an address (pprof readers
/// key Locations by mapping and address; CI caught a profile with two).
#[test]
fn a_leaf_at_a_return_address_is_its_own_pprof_location() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("leaf.pb.zst");
    let mut w = writer();
    let shop_id = shop_process(&mut w);
    let caller = w
        .intern_stack(1, &[SHOP + 0x1010, SHOP + 0x2020], &[], 0)
        .unwrap();
    let leaf = w.intern_stack(1, &[SHOP + 0x2020], &[], 0).unwrap();
    for (i, stack) in [caller, leaf].into_iter().enumerate() {
        w.cpu_sample(&CpuSample {
            time_ns: 1_100_000_000 + i as u64,
            generation: 1,
            tid: 42,
            stack,
            cpu: 1,
        })
        .unwrap();
    }
    let off = |ip: u64| ip - SHOP + 0x1000;
    symbolized(
        &mut w,
        shop_id,
        &[
            (off(SHOP + 0x1010), "Warehouse::restock()", 98),
            (off(SHOP + 0x2020 - 1), "main", 300),
            (off(SHOP + 0x2020), "main", 301),
        ],
    );
    let bytes = w.finish(Some(pb::Trailer::default())).unwrap();
    std::fs::write(&trace, bytes).unwrap();
    let st = reports::stacks(&trace, EventKind::Cpu, &Filter::default()).unwrap();
    let p = ebtrace_analyze::pprof::profile(&st, "samples");
    let mut at: Vec<(u64, i64)> = p
        .location
        .iter()
        .filter(|l| l.address & !0xfff == SHOP + 0x2000)
        .map(|l| (l.address - SHOP, l.line[0].line))
        .collect();
    at.sort();
    // main as a caller: its call instruction (0x201f), line 300; as the leaf: 0x2020, 301.
    assert_eq!(at, [(0x201f, 300), (0x2020, 301)]);
}

#[test]
fn kernel_frames_are_named_from_the_traces_kernel_symbols() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("cpu.pb.zst");
    write_cpu(&trace);
    let all = Filter::default();
    let top = reports::top(&trace, EventKind::Cpu, "samples", &all, 20).unwrap();
    check("top_cpu.txt", &top.to_text());
    check("top_cpu.json", &cli_json(&top));

    let rows = rows(&top);
    let frames = |row: usize| -> Vec<(String, String, String)> {
        rows[row]["frames"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                let s = |k: &str| f[k].as_str().unwrap().to_string();
                (s("function"), s("module"), s("address"))
            })
            .collect()
    };
    let hex = |a: u64| format!("{a:#x}");
    // Leaf first: the kernel frames (innermost), then the user frames that entered it.
    assert_eq!(rows[0]["count"], 5);
    assert_eq!(
        frames(0),
        [
            ("schedule", "[kernel]", hex(K_FUTEX + 0x410)),
            // Callers at their call instruction (return address - 1); the user leaf exact.
            ("__x64_sys_futex", "[kernel]", hex(K_FUTEX + 0x1ff)),
            ("entry_SYSCALL_64", "[kernel]", hex(K_TEXT + 0x4f)),
            ("Ledger::post(long)", "/usr/bin/shop", hex(SHOP + 0x3010)),
            ("main", "/usr/bin/shop", hex(SHOP + 0x201f)),
        ]
        .map(|(f, m, a)| (f.to_string(), m.to_string(), a))
    );
    assert_eq!(rows[1]["count"], 3);
    assert_eq!(
        frames(1)[..4],
        [
            ("ext4_mpage_readpages", "[kernel:ext4]", hex(K_EXT4 + 0x810)),
            ("ext4_file_read_iter", "[kernel:ext4]", hex(K_EXT4 + 0xf)),
            (
                "[kernel] 0xffffffff8000000f",
                "[kernel]",
                "0xffffffff8000000f".to_string()
            ),
            (
                "[kernel] 0xffffffffc10fffff",
                "[kernel]",
                hex(K_EXT4 + 0x100_0000 - 1)
            ),
        ]
        .map(|(f, m, a)| (f.to_string(), m.to_string(), a))
    );
    assert_eq!(frames(2)[0].0, "Warehouse::restock()");
    assert_eq!(
        top.losses
            .unresolved_frames
            .get("[kernel]: no kernel symbol"),
        Some(&2)
    );
    let text = top.to_text();
    assert!(
        text.contains("    schedule [kernel]\n    __x64_sys_futex [kernel]\n    entry_SYSCALL_64 [kernel]\n    Ledger::post(long) (shop.cpp:210)\n"),
        "{text}"
    );
    assert!(
        text.contains("    ext4_mpage_readpages [kernel:ext4]\n"),
        "{text}"
    );
    // Flame graphs: the kernel on top of the user frames that called into it.
    let folded = reports::folded(&trace, EventKind::Cpu, "samples", &all).unwrap();
    assert!(folded.lines.contains(
        &"main;Ledger::post(long);entry_SYSCALL_64;__x64_sys_futex;schedule 5".to_string()
    ));
}

/// Calls of one probed function from two call sites, with durations spread over several
/// powers of two: `ebsym latency` shows the percentiles and a log2 histogram per row.
fn write_func(path: &Path) {
    let mut w = writer();
    let comm = w.intern_string(b"shop").unwrap();
    w.write_record(&rec(Kind::Process(pb::Process {
        generation: 1,
        pid: 42,
        comm,
        event: pb::ProcessEvent::Existing as i32,
        time_ns: 1_000_000_000,
        ..Default::default()
    })))
    .unwrap();
    let name = w
        .intern_string(b"shop::Catalog::slow_lookup(unsigned long)")
        .unwrap();
    w.write_record(&rec(Kind::ProbedFunction(pb::ProbedFunction {
        id: 1,
        name,
        address: 0x1000,
        ..Default::default()
    })))
    .unwrap();
    let a = w.intern_stack(1, &[SHOP + 0x1010], &[], 0).unwrap();
    let b = w.intern_stack(1, &[SHOP + 0x3010], &[], 0).unwrap();
    let mut t = 1_100_000_000;
    // Site a: 1000 calls, 1 µs to 1 ms (i² ns); site b: 10 calls of 5 ms.
    for (stack, durations) in [
        (a, (1..=1000u64).map(|i| i * i).collect::<Vec<_>>()),
        (b, vec![5_000_000; 10]),
    ] {
        for d in durations {
            t += 10_000;
            w.func(&FuncEvent {
                time_ns: t,
                generation: 1,
                tid: 42,
                stack,
                function: 1,
                duration_ns: d,
                args: Vec::new(),
                ret: 0,
                request: None,
            })
            .unwrap();
        }
    }
    let bytes = w.finish(Some(pb::Trailer::default())).unwrap();
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn latency_has_percentiles_within_the_bound_and_a_log2_histogram() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("func.pb.zst");
    write_func(&trace);
    let r = reports::top(&trace, EventKind::Func, "latency", &Filter::default(), 20).unwrap();
    check("latency.txt", &r.to_text());
    check("latency.json", &cli_json(&r));
    // Site a: exact nearest-rank percentiles of i² are (500², 900², 990²); the report's
    // are within 1/64 of them, max and total exact.
    let rows = rows(&r);
    let row = rows
        .iter()
        .find(|row| row["count"] == 1000)
        .expect("site a");
    for (key, exact) in [
        ("p50_ns", 500u64 * 500),
        ("p90_ns", 900 * 900),
        ("p99_ns", 990 * 990),
    ] {
        let got = row[key].as_u64().unwrap();
        assert!(
            got.abs_diff(exact) as f64 <= exact as f64 / 64.0,
            "{key}: {got} vs exact {exact}"
        );
    }
    assert_eq!(row["max_ns"], 1_000_000);
    assert_eq!(row["total_ns"], (1..=1000u64).map(|i| i * i).sum::<u64>());
    let b = rows.iter().find(|row| row["count"] == 10).unwrap();
    for key in ["p50_ns", "p90_ns", "p99_ns", "max_ns"] {
        assert_eq!(b[key], 5_000_000, "{key}");
    }
    // The histogram of site a: i² < 1024 for i ≤ 31, so 31 calls under 1K ns; i² in
    // [512K, 1M) for i in 725..=1000.
    let (ia, ib) = if rows[0]["count"] == 1000 {
        (0, 1)
    } else {
        (1, 0)
    };
    let bins = &r.histograms[ia];
    let sum = |f: &dyn Fn(u64, u64) -> bool| -> u64 {
        bins.iter()
            .filter(|x| f(x.low, x.high))
            .map(|x| x.count)
            .sum()
    };
    assert_eq!(sum(&|_, high| high <= 1024), 31);
    assert_eq!(sum(&|low, _| low == 512 << 10), 1000 - 724);
    assert_eq!(sum(&|_, _| true), 1000);
    assert_eq!(r.histograms[ib].len(), 1);
    let text = r.to_text();
    assert!(
        text.contains("[4M, 8M) 10 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|"),
        "{text}"
    );
}

/// Off-CPU blocks (woken by a thread, by an interrupt), memory growth (brk, mmap, page
/// faults, and an munmap that is not growth) and lock waits without holds (futex mode,
/// mutex and condition variable): the kinds and measures the shop trace has not.
fn write_misc(path: &Path) {
    use ebtrace_format::events::{MemGrowthEvent, OffCpuEvent};
    let mut w = writer();
    let shop_id = shop_process(&mut w);
    let s1 = w
        .intern_stack(1, &[SHOP + 0x1010, SHOP + 0x2020], &[], 0)
        .unwrap();
    let s2 = w
        .intern_stack(1, &[SHOP + 0x3010, SHOP + 0x2020], &[], 0)
        .unwrap();
    let s3 = w
        .intern_stack(1, &[SHOP + 0x3110, SHOP + 0x2020], &[], 0)
        .unwrap();
    let mut t = 1_100_000_000;
    for (stack, duration, waker) in [
        (s1, 5_000u64, s3),
        (s1, 7_000, s3),
        (s1, 1_000, s2),
        (s2, 40_000, 0),
        (s2, 2_000, 0),
        (s3, 100, s1),
    ] {
        t += 100_000;
        w.offcpu(&OffCpuEvent {
            time_ns: t,
            generation: 1,
            tid: 42,
            stack,
            duration_ns: duration,
            waker_tid: 43,
            waker_stack: waker,
            state: 1,
            weight_ns: 0,
            runnable_ns: 0,
        })
        .unwrap();
    }
    for (stack, kind, size) in [
        (s1, pb::MemGrowthKind::Brk, 135_168u64),
        (s1, pb::MemGrowthKind::Brk, 4_096),
        (s2, pb::MemGrowthKind::Mmap, 1 << 20),
        (s2, pb::MemGrowthKind::Munmap, 1 << 20),
        (s3, pb::MemGrowthKind::PageFault, 4096),
        (s3, pb::MemGrowthKind::PageFault, 4096),
        (s3, pb::MemGrowthKind::PageFault, 4096),
    ] {
        t += 100_000;
        w.mem_growth(&MemGrowthEvent {
            time_ns: t,
            generation: 1,
            tid: 42,
            stack,
            kind,
            size,
            address: 0x7000_0000 + t,
            weight: 0,
        })
        .unwrap();
    }
    for (stack, mutex, wait, op) in [
        (s1, 0x1000u64, 3_000u64, 0u32),
        (s1, 0x1000, 9_000, 0),
        (s2, 0x2000, 50_000, 9),
        (s3, 0x3000, 10, 1),
    ] {
        t += 100_000;
        w.lock(&LockEvent {
            time_ns: t,
            generation: 1,
            tid: 44,
            stack,
            mutex,
            wait_ns: wait,
            hold_ns: 0,
            waker_tid: 0,
            waker_stack: if stack == s1 { s2 } else { 0 },
            futex_op: op,
            source: pb::LockSource::Futex,
            result: 0,
        })
        .unwrap();
    }
    w.write_record(&rec(Kind::SymbolizerInfo(pb::SymbolizerInfo {
        symbolizer_version: "golden".into(),
        ..Default::default()
    })))
    .unwrap();
    let off = |ip: u64| ip - SHOP + 0x1000;
    symbolized(
        &mut w,
        shop_id,
        &[
            (off(SHOP + 0x1010), "Warehouse::restock()", 98),
            (off(SHOP + 0x3010), "Ledger::post(long)", 210),
            (off(SHOP + 0x2020 - 1), "main", 300),
        ],
    );
    let bytes = w.finish(None).unwrap();
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn offcpu_memgrowth_and_futex_locks_match_the_golden_files() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("misc.pb.zst");
    write_misc(&trace);
    let all = Filter::default();
    for (kind, by, name) in [
        (EventKind::OffCpu, "time", "top_offcpu"),
        (EventKind::MemGrowth, "bytes", "top_memgrowth"),
        (EventKind::Lock, "count", "locks_futex"),
    ] {
        let r = reports::top(&trace, kind, by, &all, 20).unwrap();
        check(&format!("{name}.txt"), &r.to_text());
        check(&format!("{name}.json"), &cli_json(&r));
    }
}

/// Every report of every kind by every measure, in text and JSON, with the folded stacks,
/// flame graphs, pprof profiles and diffs, written to the directory `EBTRACE_DUMP` names
/// (skipped without it): run before and after a change to the reports and compare the
/// two directories.
#[test]
fn dump_every_report() {
    let Some(out) = std::env::var_os("EBTRACE_DUMP") else {
        return;
    };
    let out = PathBuf::from(out);
    std::fs::create_dir_all(&out).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let traces: Vec<(&str, PathBuf)> = ["shop", "shop5", "cpu", "func", "misc"]
        .iter()
        .map(|n| (*n, dir.path().join(format!("{n}.pb.zst"))))
        .collect();
    write_shop(&traces[0].1, 3);
    write_shop(&traces[1].1, 5);
    write_cpu(&traces[2].1);
    write_func(&traces[3].1);
    write_misc(&traces[4].1);
    let filters = [
        ("all", Filter::default()),
        (
            "tid42",
            Filter {
                tids: vec![42],
                ..Default::default()
            },
        ),
    ];
    let put = |name: String, bytes: &[u8]| std::fs::write(out.join(name), bytes).unwrap();
    for (t, path) in &traces {
        for (f, filter) in &filters {
            let leaks = reports::leaks(path, filter, 20).unwrap();
            put(format!("{t}.{f}.leaks.txt"), leaks.to_text().as_bytes());
            put(format!("{t}.{f}.leaks.json"), json(&leaks).as_bytes());
            // The page, alone and against the shop trace (its diffs).
            let bytes = std::fs::read(path).unwrap();
            let shop = std::fs::read(&traces[0].1).unwrap();
            for base in [false, true] {
                let mut open = || ebtrace_format::TraceReader::new(bytes.as_slice()).ok();
                let mut open_base = || ebtrace_format::TraceReader::new(shop.as_slice()).ok();
                let (html, _) = reports::html::report(
                    &mut open,
                    base.then_some(&mut open_base as &mut dyn FnMut() -> _),
                    &reports::html::PageOptions {
                        filter,
                        name: t,
                        base_name: base.then_some("shop"),
                        n: 20,
                        rules: &reports::html::PageRules::default(),
                    },
                );
                put(format!("{t}.{f}.page.{base}.html"), html.as_bytes());
            }
            for kind in [
                EventKind::Alloc,
                EventKind::Lock,
                EventKind::Func,
                EventKind::Cpu,
                EventKind::OffCpu,
                EventKind::MemGrowth,
            ] {
                let st = reports::stacks(path, kind, filter).unwrap();
                for by in kind.measures() {
                    let k = kind.name();
                    let r = reports::top(path, kind, by, filter, 2).unwrap();
                    put(format!("{t}.{f}.{k}.{by}.top2.txt"), r.to_text().as_bytes());
                    let r = reports::top(path, kind, by, filter, 20).unwrap();
                    put(format!("{t}.{f}.{k}.{by}.top.txt"), r.to_text().as_bytes());
                    put(format!("{t}.{f}.{k}.{by}.top.json"), json(&r).as_bytes());
                    let fo = reports::folded(path, kind, by, filter).unwrap();
                    let text = format!(
                        "{}\n{:?}\n{}",
                        fo.lines.join("\n"),
                        fo.note,
                        reports::losses_text(&fo.losses)
                    );
                    put(format!("{t}.{f}.{k}.{by}.folded"), text.as_bytes());
                    let mut svg = Vec::new();
                    let r = reports::flamegraph(&fo.lines, kind, by, None, &mut svg);
                    put(format!("{t}.{f}.{k}.{by}.svg"), &svg);
                    put(
                        format!("{t}.{f}.{k}.{by}.svg.err"),
                        format!("{r:?}").as_bytes(),
                    );
                    let p = ebtrace_analyze::pprof::profile(&st, by);
                    let mut gz = Vec::new();
                    ebtrace_analyze::pprof::write_gz(&p, &mut gz).unwrap();
                    put(
                        format!("{t}.{f}.{k}.{by}.pprof"),
                        format!("{p:?}").as_bytes(),
                    );
                    for (u, other) in &traces {
                        let d = reports::diff(
                            path,
                            other,
                            by,
                            &DiffOptions {
                                kind,
                                filter,
                                n: 20,
                            },
                        )
                        .unwrap();
                        put(
                            format!("{t}.{f}.{k}.{by}.diff.{u}.txt"),
                            d.to_text().as_bytes(),
                        );
                        put(
                            format!("{t}.{f}.{k}.{by}.diff.{u}.json"),
                            json(&d).as_bytes(),
                        );
                        for negate in [false, true] {
                            let mut svg = Vec::new();
                            let r = reports::diff_flamegraph(&d, kind, None, negate, &mut svg);
                            svg.extend(format!("{r:?}").bytes());
                            put(format!("{t}.{f}.{k}.{by}.diff.{u}.{negate}.svg"), &svg);
                        }
                    }
                }
            }
        }
    }
}

/// The reports of an open trace (a reader over bytes in memory, or records already
/// decoded, as ebsym has after symbolizing a raw trace into memory) are the reports of
/// the file.
#[test]
fn reports_of_an_open_trace_are_the_reports_of_its_file() {
    use ebtrace_analyze::reports::{Measure, Records};
    use ebtrace_format::TraceReader;
    let dir = tempfile::tempdir().unwrap();
    let (trace, after) = (dir.path().join("shop.pb.zst"), dir.path().join("b.pb.zst"));
    write_shop(&trace, 3);
    write_shop(&after, 5);
    let (bytes, after_bytes) = (
        std::fs::read(&trace).unwrap(),
        std::fs::read(&after).unwrap(),
    );
    let reader = || TraceReader::new(bytes.as_slice()).unwrap();
    let records = || Records(reader().collect::<Vec<_>>());
    let all = Filter::default();
    for kind in EventKind::ALL {
        for &by in kind.valid_measures() {
            let want = reports::top(&trace, kind, by.name(), &all, 20).unwrap();
            // A borrowed reader stays the caller's, read to its end.
            let mut borrowed = reader();
            let of_borrowed = reports::top_from(&mut borrowed, kind, by, &all, 20);
            assert_eq!(borrowed.offset(), bytes.len() as u64);
            for got in [
                reports::top_from(reader(), kind, by, &all, 20),
                of_borrowed,
                reports::top_from(records(), kind, by, &all, 20),
            ] {
                assert_eq!(json(&got), json(&want));
                assert_eq!(got.to_text(), want.to_text());
            }
            let want = reports::folded(&trace, kind, by.name(), &all).unwrap();
            let got = reports::folded_from(records(), kind, by, &all);
            assert_eq!((&got.lines, &got.note), (&want.lines, &want.note));
            let st = reports::stacks_from(reader(), kind, &all);
            assert_eq!(st.folded(by).lines, want.lines);
            let want = reports::diff(
                &trace,
                &after,
                by.name(),
                &DiffOptions {
                    kind,
                    filter: &all,
                    n: 20,
                },
            )
            .unwrap();
            let after_reader = TraceReader::new(after_bytes.as_slice()).unwrap();
            let got = reports::diff_from(
                reader(),
                after_reader,
                by,
                &DiffOptions {
                    kind,
                    filter: &all,
                    n: 20,
                },
            );
            assert_eq!(json(&got), json(&want));
            assert_eq!(got.to_text(), want.to_text());
        }
    }
    let want = reports::leaks(&trace, &all, 20).unwrap();
    let got = reports::leaks_from(records(), &all, 20);
    assert_eq!(json(&got), json(&want));
    assert_eq!(got.by, Measure::Bytes);
    // The file's name and size are the caller's to give; the rest is the file's.
    let want = ebtrace_analyze::info::summarize(&trace).unwrap();
    let got = ebtrace_analyze::info::summarize_from(reader(), &trace.display().to_string());
    assert_eq!(got.file.bytes, bytes.len() as u64);
    assert_eq!(json(&got), json(&want));
}

/// Records without a trailer are a cut recording, as a file without one is.
#[test]
fn records_without_a_trailer_are_cut() {
    use ebtrace_analyze::reports::{Measure, Records};
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("shop.pb.zst");
    write_shop(&trace, 1);
    let records: Vec<Record> = ebtrace_format::TraceReader::open(&trace)
        .unwrap()
        .filter(|r| !matches!(r.kind, Some(Kind::Trailer(_))))
        .collect();
    let r = reports::top_from(
        Records(records),
        EventKind::Alloc,
        Measure::Bytes,
        &Filter::default(),
        20,
    );
    assert!(r.losses.cut);
    assert_eq!(r.totals["count"], 5);
}

/// `ebsym report` reads the trace twice (its info and every report at once, side by side)
/// and opens it once more for its header alone; a base trace twice (its info, then the
/// stacks of every kind); `ebsym summary` reads it once.
#[test]
fn the_page_and_the_summary_read_the_trace_once_for_their_reports() {
    use ebtrace_format::TraceReader;
    let dir = tempfile::tempdir().unwrap();
    let (trace, base) = (dir.path().join("shop.pb.zst"), dir.path().join("b.pb.zst"));
    write_shop(&trace, 3);
    write_misc(&base);
    let (bytes, base_bytes) = (
        std::fs::read(&trace).unwrap(),
        std::fs::read(&base).unwrap(),
    );
    let (mut opened, mut base_opened) = (0, 0);
    let mut open = || {
        opened += 1;
        TraceReader::new(bytes.as_slice()).ok()
    };
    let mut open_base = || {
        base_opened += 1;
        TraceReader::new(base_bytes.as_slice()).ok()
    };
    let all = Filter::default();
    let (html, stats) = reports::html::report(
        &mut open,
        Some(&mut open_base),
        &reports::html::PageOptions {
            filter: &all,
            name: "shop",
            base_name: Some("misc"),
            n: 20,
            rules: &reports::html::PageRules::default(),
        },
    );
    assert!(html.contains("ebtrace report: shop"));
    assert_eq!(stats.kinds, ["alloc", "lock"]);
    assert_eq!((opened, base_opened), (3, 2));
    let mut opened = 0;
    let summary = reports::summary::summary_from(
        || {
            opened += 1;
            TraceReader::new(bytes.as_slice()).ok()
        },
        &all,
    );
    assert_eq!(opened, 1);
    assert_eq!(summary.findings.len(), 2, "{summary:?}");
}

/// The summary's thread groups and the page's Threads section are `ebsym threads`' rows,
/// made from the one pass each already reads the trace with.
#[test]
fn the_summary_and_the_page_show_where_each_thread_groups_time_goes() {
    use ebtrace_format::TraceReader;
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("misc.pb.zst");
    write_misc(&trace);
    let bytes = std::fs::read(&trace).unwrap();
    let all = Filter::default();
    let threads = reports::threads_from(TraceReader::new(bytes.as_slice()).unwrap(), &all);
    let mut opened = 0;
    let summary = reports::summary::summary_from(
        || {
            opened += 1;
            TraceReader::new(bytes.as_slice()).ok()
        },
        &all,
    );
    assert_eq!(opened, 1);
    // tid 42's off-CPU blocks: 5 + 7 + 1 + 40 + 2 + 0.1 µs, none of them a known cause
    // (no kernel stacks)
    let g = &threads.groups[0];
    assert_eq!(g.offcpu_ns, 55_100, "{g:?}");
    assert_eq!(g.offcpu[0].cause, "unknown (no kernel stack)");
    assert_eq!(g.offcpu[0].blocks, 6);
    let n = threads
        .groups
        .len()
        .min(reports::summary::SUMMARY_THREAD_GROUPS);
    assert_eq!(json(&summary.threads), json(&threads.groups[..n].to_vec()));
    let text = summary.to_text();
    let line = format!("threads    {}: {}", g.title(), g.split_text());
    assert!(text.contains(&line), "no `{line}` in:\n{text}");
    assert!(
        line.contains("unknown (no kernel stack) "),
        "the split names the cause: {line}"
    );

    let mut open = || TraceReader::new(bytes.as_slice()).ok();
    let (html, _) = reports::html::report::<&[u8], &[u8]>(
        &mut open,
        None,
        &reports::html::PageOptions {
            filter: &all,
            name: "misc",
            base_name: None,
            n: 20,
            rules: &reports::html::PageRules::default(),
        },
    );
    let start = html.find(r#"id="ebtrace-data">"#).unwrap() + r#"id="ebtrace-data">"#.len();
    let end = start + html[start..].find("</script>").unwrap();
    let data: serde_json::Value = serde_json::from_str(&html[start..end]).unwrap();
    let page = &data["thread_groups"];
    assert_eq!(
        page["groups"],
        serde_json::to_value(&threads.groups).unwrap()
    );
    assert_eq!(page["total"], threads.groups.len());
}

/// The page's heap chart draws the stacks that held the peak even when they held it only
/// between two buckets' ends: a block of 8 MiB allocated and freed within one bucket, in
/// the middle of a second's small allocations, is the first series (heap_known's hold_peak
/// was missing from the legend when its 8 MiB lived for less than a bucket).
#[test]
fn the_heap_chart_draws_a_peak_held_within_one_bucket() {
    use ebtrace_format::TraceReader;
    let mut w = writer();
    shop_process(&mut w);
    let small = w.intern_stack(1, &[SHOP + 0x1010], &[], 0).unwrap();
    let big = w.intern_stack(1, &[SHOP + 0x2020], &[], 0).unwrap();
    let alloc = |w: &mut TraceWriter<Vec<u8>>, t: u64, stack: u64, size: u64, address: u64| {
        w.alloc(&AllocEvent {
            time_ns: t,
            generation: 1,
            tid: 42,
            stack,
            size,
            address,
            kind: pb::AllocKind::Malloc,
            sample_period: 0,
            allocator: 0,
        })
        .unwrap()
    };
    let start = 1_000_000_000u64;
    for i in 0..1000u64 {
        let t = start + i * 1_000_000;
        alloc(&mut w, t, small, 64, 0x6000_0000 + i * 0x100);
        if i == 500 {
            alloc(&mut w, t + 10, big, 8 << 20, 0x7000_0000);
            w.free(&FreeEvent {
                time_ns: t + 20,
                generation: 1,
                tid: 42,
                address: 0x7000_0000,
                allocator: 0,
            })
            .unwrap();
        }
    }
    let bytes = w.finish(None).unwrap();
    let mut open = || TraceReader::new(bytes.as_slice()).ok();
    let (html, _) = reports::html::report::<&[u8], &[u8]>(
        &mut open,
        None,
        &reports::html::PageOptions {
            filter: &Filter::default(),
            name: "shop",
            base_name: None,
            n: 20,
            rules: &reports::html::PageRules::default(),
        },
    );
    let start = html.find(r#"id="ebtrace-data">"#).unwrap() + r#"id="ebtrace-data">"#.len();
    let end = start + html[start..].find("</script>").unwrap();
    let data: serde_json::Value = serde_json::from_str(&html[start..end]).unwrap();
    let heap = &data["heap"];
    let top = &heap["peak_holders"][0];
    assert_eq!(top[1], 8u64 << 20, "{heap}");
    let series = heap["series"].as_array().unwrap();
    assert_eq!(series[0]["stack"], top[0], "{heap}");
    assert_eq!(series.len(), 2, "{heap}");
}

/// USDT hits of a start/done pair and a lone probe on two threads: a nest and a done
/// without a start left unpaired, one start open at the end.
fn write_usdt(path: &Path) {
    use ebtrace_format::events::UsdtEvent;
    let mut w = writer();
    let comm = w.intern_string(b"shop").unwrap();
    w.write_record(&rec(Kind::Process(pb::Process {
        generation: 1,
        pid: 42,
        comm,
        event: pb::ProcessEvent::Existing as i32,
        time_ns: 1_000_000_000,
        ..Default::default()
    })))
    .unwrap();
    let provider = w.intern_string(b"shop").unwrap();
    for (id, name, done) in [
        (1, &b"request__start"[..], 2),
        (2, b"request__done", 0),
        (3, b"idle", 0),
    ] {
        let name = w.intern_string(name).unwrap();
        w.write_record(&rec(Kind::ProbedUsdt(pb::ProbedUsdt {
            id,
            provider,
            name,
            done,
            ..Default::default()
        })))
        .unwrap();
    }
    let stack = w.intern_stack(1, &[SHOP + 0x1010], &[], 0).unwrap();
    let mut t = 1_100_000_000u64;
    let mut hit = |w: &mut TraceWriter<Vec<u8>>, probe, tid, dt: u64| {
        t += dt;
        w.usdt(&UsdtEvent {
            time_ns: t,
            generation: 1,
            tid,
            stack,
            probe,
            args: vec![7],
            request: None,
            text: Vec::new(),
        })
        .unwrap();
    };
    hit(&mut w, 3, 42, 0);
    // 100 requests of (i + 3) µs on thread 42, each interleaved with thread 43's.
    for i in 0..100u64 {
        hit(&mut w, 1, 42, 1_000);
        hit(&mut w, 1, 43, 10);
        hit(&mut w, 2, 43, 2_000);
        hit(&mut w, 2, 42, (i + 3) * 1_000 - 2_010);
    }
    hit(&mut w, 2, 42, 1_000); // no start
    hit(&mut w, 1, 42, 1_000); // a nest of four
    hit(&mut w, 1, 42, 1_000);
    hit(&mut w, 2, 42, 1_000);
    hit(&mut w, 2, 42, 1_000);
    hit(&mut w, 1, 43, 1_000); // open at the end
    let bytes = w.finish(Some(pb::Trailer::default())).unwrap();
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn usdt_pairs_and_hits_match_the_golden_files() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("usdt.pb.zst");
    write_usdt(&trace);
    let mut r = ebtrace_format::TraceReader::open(&trace).unwrap();
    let lat = reports::usdt_latency_from(&mut r, &Filter::default(), 20);
    check("latency_usdt.txt", &lat.to_text());
    check("latency_usdt.json", &cli_json(&lat));
    let row = &lat.rows[0];
    assert_eq!(row.name, "shop:request__start -> request__done");
    assert_eq!(row.count, 200, "thread 42's 100 and thread 43's 100");
    assert_eq!((row.nested, row.unmatched_done, row.open_at_end), (4, 1, 1));
    assert_eq!(row.max_ns, 102_000);
    let top = reports::top(&trace, EventKind::Usdt, "count", &Filter::default(), 20).unwrap();
    check("top_usdt.txt", &top.to_text());
    let counts: Vec<u64> = top.rows.iter().map(|r| r.count()).collect();
    assert_eq!(counts, [203, 203, 1]);
}

/// An off-CPU block runs from its switch-out to its switch-in, so it holds the run-queue
/// wait after its wake; when that wait passed --runq's threshold the runq family has it too
/// (a runq event inside the block). `ebsym threads` counts it once, as run queue: a thread
/// blocked 10 ms (3 ms of it runnable, also a runq event) and 5 ms (0.4 ms runnable, under
/// the 1 ms threshold: no runq event, left in off CPU) is 12 ms off CPU and 3 ms in the run
/// queue, 15 ms of a 15 ms span, nothing counted twice.
#[test]
fn threads_count_a_blocks_run_queue_wait_once() {
    use ebtrace_format::events::{OffCpuEvent, RunqEvent};
    use ebtrace_format::TraceReader;
    let mut h = header();
    for (k, v) in [("offcpu", "1000"), ("runq", "1000")] {
        h.options.push(pb::KeyValue {
            key: k.into(),
            value: v.into(),
        });
    }
    let mut w = TraceWriter::new(
        Vec::new(),
        h,
        WriterOptions {
            chunk_interval: None,
            ..Default::default()
        },
    )
    .unwrap();
    shop_process(&mut w);
    let s = w.intern_stack(1, &[SHOP + 0x1010], &[], 0).unwrap();
    let t0 = 1_100_000_000;
    for (start, duration, runnable) in [
        (t0, 10_000_000u64, 3_000_000u64),
        (t0 + 10_000_000, 5_000_000, 400_000),
    ] {
        w.offcpu(&OffCpuEvent {
            time_ns: start,
            generation: 1,
            tid: 42,
            stack: s,
            duration_ns: duration,
            waker_tid: 43,
            waker_stack: 0,
            state: 1,
            weight_ns: 0,
            runnable_ns: runnable,
        })
        .unwrap();
    }
    w.runq(&RunqEvent {
        time_ns: t0 + 7_000_000,
        generation: 1,
        tid: 42,
        stack: s,
        duration_ns: 3_000_000,
        preempted: 0,
        cpu: 0,
        weight_ns: 0,
    })
    .unwrap();
    let bytes = w.finish(None).unwrap();
    let threads = reports::threads_from(
        TraceReader::new(bytes.as_slice()).unwrap(),
        &Filter::default(),
    );
    let g = &threads.groups[0];
    assert_eq!((g.offcpu_ns, g.runq_ns), (12_000_000, 3_000_000), "{g:?}");
    assert_eq!((g.wall_ns, g.not_seen_ns), (15_000_000, 0), "{g:?}");
}

/// `tops_from` (what `ebsym` prints after symbolizing) reads the trace once for every
/// kind: each kind's report is the one `top_from` of that kind alone gives.
#[test]
fn tops_of_one_read_are_each_kinds_top() {
    use ebtrace_format::TraceReader;
    let dir = tempfile::tempdir().unwrap();
    let (shop, cpu, misc) = (
        dir.path().join("shop.pb.zst"),
        dir.path().join("cpu.pb.zst"),
        dir.path().join("misc.pb.zst"),
    );
    write_shop(&shop, 3);
    write_cpu(&cpu);
    write_misc(&misc);
    let mut with_rows = Vec::new();
    for t in [&shop, &cpu, &misc] {
        let tops = reports::tops_from(TraceReader::open(t).unwrap(), &EventKind::ALL, 5);
        assert_eq!(tops.len(), EventKind::ALL.len());
        for (kind, got) in tops {
            let want = reports::top_from(
                TraceReader::open(t).unwrap(),
                kind,
                kind.default_measure(),
                &Filter::default(),
                5,
            );
            assert_eq!(
                cli_json(&got),
                cli_json(&want),
                "{kind:?} of {}",
                t.display()
            );
            if !got.rows.is_empty() {
                with_rows.push(kind);
            }
        }
    }
    for k in [
        EventKind::Alloc,
        EventKind::Lock,
        EventKind::Cpu,
        EventKind::OffCpu,
    ] {
        assert!(with_rows.contains(&k), "no {k:?} rows in {with_rows:?}");
    }
}
