//! Round trips, determinism and damage handling of the trace format.
use ebtrace_format::events::*;
use ebtrace_format::{DamageKind, ErrorKind, Tables, TraceReader, TraceWriter, WriterOptions};
use ebtrace_proto::v1::{self as pb, record::Kind, Record};
use rand::{Rng, SeedableRng};

fn opts(chunk_bytes: usize) -> WriterOptions {
    WriterOptions {
        chunk_bytes,
        chunk_interval: None,
        level: 3,
        batch_events: 64,
        ..Default::default()
    }
}

fn header() -> pb::Header {
    pb::Header {
        recorder_version: "test".into(),
        hostname: "host".into(),
        kernel_release: "6.18".into(),
        arch: "x86_64".into(),
        page_size: 4096,
        cpu_count: 2,
        boot_id: "b00t".into(),
        clock: "boottime".into(),
        options: vec![pb::KeyValue {
            key: "alloc".into(),
            value: "4096".into(),
        }],
        argv: vec!["ebrec".into(), "record".into()],
        start_time_ns: 1000,
        start_realtime_ns: 1_700_000_000_000_000_000,
        clock_ticks_per_sec: 100,
        format_version: 0,
    }
}

/// Writes one of every record kind plus `n` events of every family; returns the bytes and
/// what was written.
fn sample_trace(n: usize, chunk_bytes: usize) -> (Vec<u8>, Written) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut w = TraceWriter::new(Vec::new(), header(), opts(chunk_bytes)).unwrap();
    let mut out = Written::default();
    let exe = w.intern_string(b"/usr/bin/shop\xff").unwrap();
    let bid = w.intern_build_id(&[0xab; 20]).unwrap();
    w.write_record(&rec(Kind::Process(pb::Process {
        generation: 1,
        pid: 42,
        start_time_ns: 5,
        ppid: 1,
        comm: exe,
        exe,
        cmdline: vec![exe],
        pid_ns: 4026531836,
        event: pb::ProcessEvent::Existing as i32,
        time_ns: 6,
        parent_generation: 0,
        exit_code: 0,
        ns_pid: 0,
        cgroup: exe,
        container_id: "4f3c2b1a00112233445566778899aabbccddeeff00112233445566778899aabb".into(),
        ns_pids: vec![42, 1],
    })))
    .unwrap();
    w.write_record(&rec(Kind::Mapping(pb::Mapping {
        generation: 1,
        start: 0x400000,
        end: 0x500000,
        file_offset: 0,
        path: exe,
        build_id: bid,
        inode: 99,
        dev: 8 << 20 | 1,
        perms: 5,
        time_ns: 6,
        source: pb::MappingSource::Snapshot as i32,
    })))
    .unwrap();
    let singles = vec![
        Kind::ClockSync(pb::ClockSync {
            boottime_ns: 1,
            monotonic_ns: 2,
            realtime_ns: 3,
        }),
        Kind::Lost(pb::Lost {
            time_ns: 9,
            family: pb::EventFamily::Alloc as i32,
            reason: pb::LossReason::RingbufFull as i32,
            count: 3,
            cpu: 1,
        }),
        Kind::Stats(pb::Stats {
            time_ns: 10,
            families: vec![pb::FamilyStats {
                family: 1,
                kept: 5,
                lost: 3,
                filtered: 2,
                hits: 10,
            }],
            bytes_written: 100,
            programs: vec![pb::ProgramStats {
                name: "malloc".into(),
                run_time_ns: 5,
                run_count: 1,
                recursion_misses: 0,
            }],
            requests_held: 2,
        }),
        Kind::ProbedFunction(pb::ProbedFunction {
            id: 1,
            name: exe,
            symbol: exe,
            path: exe,
            build_id: bid,
            address: 0x401000,
            min_duration_ns: 1000,
        }),
        Kind::KernelSymbols(pb::KernelSymbols {
            address: vec![1, 2],
            name: vec![exe, exe],
            module: vec![0, 0],
        }),
        Kind::UnwindTables(pb::UnwindTables {
            build_id: bid,
            eh_frame: vec![1, 2, 3],
            eh_frame_address: 0x1000,
            eh_frame_hdr: vec![4],
            eh_frame_hdr_address: 0x2000,
            load_segments: vec![0, 0, 0x1000],
        }),
        Kind::SymbolizerInfo(pb::SymbolizerInfo {
            symbolizer_version: "s".into(),
            realtime_ns: 1,
            options: vec![],
        }),
        Kind::SymbolizedAddress(pb::SymbolizedAddress {
            build_id: bid,
            address: 0x401233,
            frames: vec![pb::SymbolFrame {
                function: exe,
                file: exe,
                line: 12,
                column: 3,
                inlined: true,
                offset: 4,
            }],
            reason: 0,
        }),
        Kind::ModuleResolution(pb::ModuleResolution {
            build_id: bid,
            debug_file: exe,
            searched: vec![exe],
            status: 2,
            detail: exe,
        }),
        Kind::UnwoundStack(pb::UnwoundStack {
            stack: 1,
            user_ips: vec![1, 2, 3],
            stop_reason: 0,
            exact_frames: vec![2],
        }),
    ];
    for k in singles {
        let r = rec(k);
        w.write_record(&r).unwrap();
        out.singles.push(r);
    }
    let copy = w
        .write_stack_copy(pb::Stack {
            id: 0,
            generation: 1,
            user_ips: vec![0x401000],
            kernel_ips: vec![],
            flags: pb::StackFlag::CopyTruncated as u32,
            copy: Some(pb::UserStackCopy {
                regs: vec![1, 2],
                reg_mask: 0b11,
                sp: 0x7ff0,
                data: vec![9; 100],
            }),
        })
        .unwrap();
    let stacks: Vec<u64> = (0..50)
        .map(|i| {
            let user: Vec<u64> = (0..(10 + i % 30)).map(|f| 0x401000 + f * 16 + i).collect();
            w.intern_stack(1, &user, &[0xffffffff81000000 + i], 0)
                .unwrap()
        })
        .collect();
    assert_eq!(
        w.intern_stack(
            1,
            &(0..10).map(|f| 0x401000 + f * 16).collect::<Vec<_>>(),
            &[0xffffffff81000000],
            0
        )
        .unwrap(),
        stacks[0]
    );
    let mut t = 1_000_000u64;
    for i in 0..n {
        t += rng.random_range(0..5000);
        let stack = stacks[rng.random_range(0..stacks.len())];
        let a = AllocEvent {
            time_ns: t,
            generation: 1,
            tid: 42 + (i % 3) as u32,
            stack,
            size: rng.random_range(1..100_000),
            address: 0x5555_0000_0000 + rng.random_range(0..1u64 << 30),
            kind: pb::AllocKind::try_from(rng.random_range(1..11)).unwrap(),
            sample_period: if rng.random_bool(0.3) {
                rng.random_range(1..1 << 20)
            } else {
                0
            },
            allocator: if rng.random_bool(0.1) { 1 } else { 0 },
        };
        w.alloc(&a).unwrap();
        out.allocs.push(a);
        let f = FreeEvent {
            time_ns: t + 1,
            generation: 1,
            tid: 43,
            address: a.address,
            allocator: 0,
        };
        w.free(&f).unwrap();
        out.frees.push(f);
        let l = LockEvent {
            time_ns: t,
            generation: 1,
            tid: 44,
            stack,
            mutex: 0x7fff_0000 + (i % 4) as u64 * 64,
            wait_ns: rng.random(),
            hold_ns: rng.random_range(0..1000),
            waker_tid: 45,
            waker_stack: copy,
            futex_op: 9,
            source: pb::LockSource::Futex,
            result: -110,
        };
        w.lock(&l).unwrap();
        out.locks.push(l);
        let fe = FuncEvent {
            time_ns: t,
            generation: 1,
            tid: 46,
            stack,
            function: 1,
            duration_ns: rng.random(),
            args: (0..(i % 7) as u64).collect(),
            ret: u64::MAX,
            request: None,
        };
        w.func(&fe).unwrap();
        out.funcs.push(fe);
        let c = CpuSample {
            time_ns: t,
            generation: 1,
            tid: 47,
            stack,
            cpu: (i % 2) as u32,
        };
        w.cpu_sample(&c).unwrap();
        out.cpu.push(c);
        let o = OffCpuEvent {
            time_ns: t,
            generation: 1,
            tid: 48,
            stack,
            duration_ns: 5,
            waker_tid: 49,
            waker_stack: stack,
            state: 2,
            weight_ns: 0,
            // the optional column, on some events (a block whose wake was seen)
            runnable_ns: if i % 4 == 1 { 3 } else { 0 },
        };
        w.offcpu(&o).unwrap();
        out.offcpu.push(o);
        let m = MemGrowthEvent {
            time_ns: t,
            generation: 1,
            tid: 50,
            stack,
            kind: pb::MemGrowthKind::PageFault,
            size: 4096,
            address: u64::MAX - i as u64,
            // the optional column, on some events (a sampled fault)
            weight: if i % 3 == 0 { 65536 } else { 0 },
        };
        w.mem_growth(&m).unwrap();
        out.mem.push(m);
    }
    let bytes = w
        .finish(Some(pb::Trailer {
            end_time_ns: t,
            stop_reason: "test".into(),
            ..Default::default()
        }))
        .unwrap();
    (bytes, out)
}

fn rec(k: Kind) -> Record {
    Record { kind: Some(k) }
}

#[derive(Default, Debug, PartialEq)]
struct Written {
    singles: Vec<Record>,
    allocs: Vec<AllocEvent>,
    frees: Vec<FreeEvent>,
    locks: Vec<LockEvent>,
    funcs: Vec<FuncEvent>,
    cpu: Vec<CpuSample>,
    offcpu: Vec<OffCpuEvent>,
    mem: Vec<MemGrowthEvent>,
}

/// Reads everything back into the same shape.
fn read_back(
    bytes: &[u8],
) -> (
    Written,
    Tables,
    Option<pb::Header>,
    Option<pb::Trailer>,
    TraceReader<&[u8]>,
) {
    let mut r = TraceReader::new(bytes).unwrap();
    let mut w = Written::default();
    let mut tables = Tables::default();
    let (mut header, mut trailer) = (None, None);
    for record in r.by_ref() {
        if tables.observe(&record) {
            continue;
        }
        match record.kind.clone() {
            Some(Kind::Header(h)) => header = Some(h),
            Some(Kind::Trailer(t)) => trailer = Some(t),
            Some(Kind::Allocs(b)) => w.allocs.extend(b.decode().unwrap()),
            Some(Kind::Frees(b)) => w.frees.extend(b.decode().unwrap()),
            Some(Kind::Locks(b)) => w.locks.extend(b.decode().unwrap()),
            Some(Kind::Funcs(b)) => w.funcs.extend(b.decode().unwrap()),
            Some(Kind::CpuSamples(b)) => w.cpu.extend(b.decode().unwrap()),
            Some(Kind::Offcpu(b)) => w.offcpu.extend(b.decode().unwrap()),
            Some(Kind::MemGrowth(b)) => w.mem.extend(b.decode().unwrap()),
            _ => w.singles.push(record),
        }
    }
    (w, tables, header, trailer, r)
}

#[test]
fn round_trip_of_every_record_kind() {
    let (bytes, written) = sample_trace(1000, 16 << 10);
    let (read, tables, hdr, trailer, r) = read_back(&bytes);
    assert!(r.damage().is_empty(), "{:?}", r.damage());
    assert!(
        r.chunks() > 3,
        "expected several chunks, got {}",
        r.chunks()
    );
    assert_eq!(read, written);
    let mut h = hdr.expect("header");
    assert_eq!(h.format_version, 1);
    h.format_version = 0;
    assert_eq!(h, header());
    let t = trailer.expect("trailer");
    assert_eq!(t.stop_reason, "test");
    assert_eq!(t.record_count + 1, r.records());
    assert_eq!(tables.string(1), "/usr/bin/shop\u{fffd}");
    assert_eq!(tables.build_id_hex(1), "ab".repeat(20));
    assert_eq!(tables.stacks.len(), 51);
    let s = &tables.stacks[&tables
        .stacks
        .keys()
        .copied()
        .find(|&k| tables.stacks[&k].copy.is_some())
        .unwrap()];
    assert_eq!(s.copy.as_ref().unwrap().data.len(), 100);
    let g = &tables.generations[&1];
    assert_eq!(g.process.pid, 42);
    assert_eq!(tables.mapping_at(1, 0x401000, 100).unwrap().inode, 99);
    assert!(tables.mapping_at(1, 0x600000, 100).is_none());
}

#[test]
fn same_input_gives_same_bytes() {
    let (a, _) = sample_trace(500, 8 << 10);
    let (b, _) = sample_trace(500, 8 << 10);
    assert_eq!(a, b);
}

#[test]
fn zstd_cli_reads_the_file_as_plain_records() {
    // The header frames are skippable: a stock zstd decoder yields the record stream.
    let (bytes, _) = sample_trace(100, 4 << 10);
    let data = zstd::stream::decode_all(&bytes[..]).unwrap();
    let (records, err) = ebtrace_format::reader::decode_records(&data);
    assert!(err.is_none());
    let (_, _, _, _, r) = read_back(&bytes);
    assert_eq!(records.len() as u64, r.records());
}

/// Chunk boundaries (offsets where each chunk descriptor starts).
fn chunk_starts(bytes: &[u8]) -> Vec<usize> {
    let mut starts = vec![];
    let mut off = 24;
    while off + 32 <= bytes.len() {
        starts.push(off);
        let len = u64::from_le_bytes(bytes[off + 8..off + 16].try_into().unwrap()) as usize;
        off += 32 + len;
    }
    assert_eq!(off, bytes.len());
    starts
}

#[test]
fn cut_at_every_byte_of_the_last_two_chunks() {
    let (bytes, _) = sample_trace(300, 4 << 10);
    let starts = chunk_starts(&bytes);
    assert!(starts.len() >= 4);
    let full = read_back(&bytes).4.records();
    // Records in complete chunks before each boundary.
    let records_before = |cut: usize| -> u64 {
        let mut n = 0;
        for (i, &s) in starts.iter().enumerate() {
            let end = starts.get(i + 1).copied().unwrap_or(bytes.len());
            if end <= cut {
                n += u64::from(u32::from_le_bytes(
                    bytes[s + 24..s + 28].try_into().unwrap(),
                ));
            }
            let _ = s;
        }
        n
    };
    let from = starts[starts.len() - 2];
    for cut in from..=bytes.len() {
        let mut r = TraceReader::new(&bytes[..cut]).unwrap();
        let n = r.by_ref().count() as u64;
        assert_eq!(n, records_before(cut), "cut at {cut}");
        let at_boundary = starts.contains(&cut) || cut == bytes.len();
        if at_boundary {
            assert!(
                r.damage().is_empty(),
                "cut at boundary {cut}: {:?}",
                r.damage()
            );
        } else {
            assert_eq!(r.damage().len(), 1, "cut at {cut}");
            assert_eq!(r.damage()[0].kind, DamageKind::Truncated);
        }
    }
    assert_eq!(records_before(bytes.len()), full);
}

#[test]
fn a_corrupt_middle_chunk_is_skipped_and_reported() {
    let (mut bytes, _) = sample_trace(300, 4 << 10);
    let starts = chunk_starts(&bytes);
    let victim = starts[2];
    let n_victim = u64::from(u32::from_le_bytes(
        bytes[victim + 24..victim + 28].try_into().unwrap(),
    ));
    bytes[victim + 32 + 40] ^= 0x55;
    let full = read_back(&sample_trace(300, 4 << 10).0).4.records();
    let mut r = TraceReader::new(&bytes[..]).unwrap();
    let n = r.by_ref().count() as u64;
    assert_eq!(r.damage().len(), 1, "{:?}", r.damage());
    assert_eq!(r.damage()[0].kind, DamageKind::CorruptChunk);
    assert_eq!(r.damage()[0].chunk, Some(2));
    assert_eq!(n + n_victim, full);
}

#[test]
fn garbage_between_chunks_is_skipped() {
    let (bytes, _) = sample_trace(300, 4 << 10);
    let starts = chunk_starts(&bytes);
    let mut damaged = bytes[..starts[3]].to_vec();
    damaged.extend_from_slice(&[0x51; 1000]);
    damaged.extend_from_slice(&bytes[starts[3]..]);
    let full = read_back(&bytes).4.records();
    let mut r = TraceReader::new(&damaged[..]).unwrap();
    let n = r.by_ref().count() as u64;
    assert_eq!(n, full);
    assert_eq!(r.damage().len(), 1);
    assert_eq!(r.damage()[0].kind, DamageKind::Garbage);
    assert_eq!(r.damage()[0].bytes, 1000);
    assert_eq!(r.damage()[0].offset, starts[3] as u64);
}

#[test]
fn random_flips_never_panic() {
    let (bytes, _) = sample_trace(200, 4 << 10);
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    for _ in 0..2000 {
        let mut b = bytes.clone();
        for _ in 0..rng.random_range(1..8) {
            let i = rng.random_range(0..b.len());
            b[i] ^= 1 << rng.random_range(0..8);
        }
        if let Ok(r) = TraceReader::new(&b[..]) {
            let mut tables = Tables::default();
            for rec in r {
                tables.observe(&rec);
                // Decoding a batch with mismatched columns must be an error, not a panic.
                match rec.kind {
                    Some(Kind::Allocs(b)) => drop(b.decode()),
                    Some(Kind::Funcs(b)) => drop(b.decode()),
                    Some(Kind::Locks(b)) => drop(b.decode()),
                    _ => {}
                }
            }
        }
    }
}

#[test]
fn random_data_is_refused_clearly() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(2);
    for len in [0usize, 1, 7, 24, 100, 10_000] {
        let b: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        let e = TraceReader::new(&b[..]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotATrace, "{e}");
        assert!(e.to_string().starts_with("not an ebtrace trace"), "{e}");
    }
    // A valid magic followed by random data: no error, no records, damage reported.
    let mut b = ebtrace_format::frame::file_header(1).to_vec();
    b.extend((0..100_000).map(|_| rng.random::<u8>()));
    let mut r = TraceReader::new(&b[..]).unwrap();
    assert_eq!(r.by_ref().count(), 0);
    assert!(!r.damage().is_empty());
    // A newer version is refused with the versions named.
    let b = ebtrace_format::frame::file_header(9).to_vec();
    let e = TraceReader::new(&b[..]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnsupportedVersion);
    assert!(e.to_string().contains("version 9"));
}

#[test]
fn a_huge_declared_length_does_not_allocate_it() {
    // Descriptor claiming 64 MiB compressed, then EOF: a truncation, not an allocation.
    let mut b = ebtrace_format::frame::file_header(1).to_vec();
    b.extend_from_slice(
        &ebtrace_format::frame::ChunkDescriptor {
            compressed_len: 60 << 20,
            decompressed_len: 60 << 20,
            record_count: 1,
            sequence: 0,
        }
        .encode(),
    );
    b.extend_from_slice(&[0; 100]);
    let mut r = TraceReader::new(&b[..]).unwrap();
    assert_eq!(r.by_ref().count(), 0);
    assert_eq!(r.damage()[0].kind, DamageKind::Truncated);
}

#[test]
fn files_are_created_0600_and_dropped_writers_keep_their_data() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.pb.zst");
    std::fs::write(&path, b"old").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    {
        let mut w = TraceWriter::create(&path, header(), WriterOptions::default()).unwrap();
        w.alloc(&AllocEvent {
            time_ns: 1,
            generation: 1,
            tid: 1,
            stack: 0,
            size: 8,
            address: 16,
            kind: pb::AllocKind::Malloc,
            sample_period: 0,
            allocator: 0,
        })
        .unwrap();
        // dropped without finish: no trailer, but the event is on disk
    }
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let r = TraceReader::open(&path).unwrap();
    let kinds: Vec<_> = r.filter_map(|r| r.kind).collect();
    assert!(matches!(kinds[0], Kind::Header(_)));
    assert!(kinds
        .iter()
        .any(|k| matches!(k, Kind::Allocs(b) if b.size == vec![8])));
    assert!(!kinds.iter().any(|k| matches!(k, Kind::Trailer(_))));
}

#[test]
fn a_full_stack_table_is_emptied_and_stacks_are_defined_again() {
    let o = WriterOptions {
        max_stack_words: 100,
        ..opts(1 << 20)
    };
    let mut w = TraceWriter::new(Vec::new(), header(), o).unwrap();
    // 30 distinct stacks of 8 frames (10 words each with the key's prefix), twice over.
    let mut ids = Vec::new();
    for round in 0..2 {
        for s in 0..30u64 {
            let frames: Vec<u64> = (0..8).map(|f| 0x1000 * (s + 1) + f).collect();
            let id = w.intern_stack(1, &frames, &[], 0).unwrap();
            ids.push((round, s, id, frames));
        }
    }
    let evictions = w.stats().stack_evictions;
    assert!(evictions >= 5, "{evictions} evictions");
    let bytes = w.finish(None).unwrap();
    // Ids are never reused, and every id a caller got is defined in the file with the
    // frames it was given.
    let mut seen = std::collections::HashSet::new();
    let mut defined = std::collections::HashMap::new();
    for r in TraceReader::new(&bytes[..]).unwrap() {
        if let Some(Kind::Stack(s)) = r.kind {
            assert!(seen.insert(s.id), "stack id {} defined twice", s.id);
            defined.insert(s.id, s.user_ips);
        }
    }
    for (round, s, id, frames) in ids {
        assert_eq!(
            defined.get(&id),
            Some(&frames),
            "round {round} stack {s} id {id}"
        );
    }
}
