//! Writes the seed corpus of the `reader` fuzz target (`fuzz/corpus/reader/`): a few small
//! valid traces and damaged copies of them. The writer is deterministic (no chunk
//! interval), so the seeds only change when the format does.
//!
//! Regenerate with `cargo test -p ebtrace-format --test fuzz_seeds -- --ignored`.
use ebtrace_format::events::*;
use ebtrace_format::{TraceReader, TraceWriter, WriterOptions};
use ebtrace_proto::v1::{self as pb, record::Kind, Record};
use std::path::PathBuf;

fn opts(chunk_bytes: usize, batch_events: usize) -> WriterOptions {
    WriterOptions {
        chunk_bytes,
        chunk_interval: None,
        level: 3,
        batch_events,
        ..Default::default()
    }
}

fn header() -> pb::Header {
    pb::Header {
        recorder_version: "seed".into(),
        hostname: "h".into(),
        arch: "x86_64".into(),
        page_size: 4096,
        cpu_count: 2,
        clock: "boottime".into(),
        options: vec![pb::KeyValue {
            key: "alloc".into(),
            value: "0".into(),
        }],
        argv: vec!["ebrec".into()],
        start_time_ns: 1000,
        ..Default::default()
    }
}

fn rec(k: Kind) -> Record {
    Record { kind: Some(k) }
}

/// Header and trailer, nothing else.
fn empty() -> Vec<u8> {
    let w = TraceWriter::new(Vec::new(), header(), opts(1 << 20, 64)).unwrap();
    w.finish(Some(pb::Trailer {
        stop_reason: "duration".into(),
        ..Default::default()
    }))
    .unwrap()
}

/// Two generations with mappings (one unmapped), stacks, a stack copy, and `n` events of
/// every family, in chunks of about `chunk_bytes`.
fn events(n: u64, chunk_bytes: usize, trailer: bool) -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), header(), opts(chunk_bytes, 8)).unwrap();
    let exe = w.intern_string(b"/bin/a").unwrap();
    let lib = w.intern_string(b"/lib/libc.so.6").unwrap();
    let bid = w.intern_build_id(&[0xab; 20]).unwrap();
    let bid2 = w.intern_build_id(&[0xcd; 8]).unwrap();
    for (generation, event, parent) in [
        (1, pb::ProcessEvent::Existing, 0),
        (2, pb::ProcessEvent::Fork, 1),
    ] {
        w.write_record(&rec(Kind::Process(pb::Process {
            generation,
            pid: 10 + generation,
            ppid: 1,
            comm: exe,
            exe,
            cmdline: vec![exe],
            event: event as i32,
            time_ns: 5,
            parent_generation: parent,
            ..Default::default()
        })))
        .unwrap();
        for (start, end, path, build_id, time_ns, source) in [
            (0x400000, 0x401000, exe, bid, 5, pb::MappingSource::Snapshot),
            (
                0x7f00_0000,
                0x7f10_0000,
                lib,
                bid2,
                5,
                pb::MappingSource::Snapshot,
            ),
            (0x7f00_0000, 0x7f01_0000, 0, 0, 50, pb::MappingSource::Unmap),
            (
                0x7f00_0000,
                0x7f01_0000,
                lib,
                bid2,
                60,
                pb::MappingSource::Mmap,
            ),
        ] {
            w.write_record(&rec(Kind::Mapping(pb::Mapping {
                generation,
                start,
                end,
                path,
                build_id,
                perms: 5,
                time_ns,
                source: source as i32,
                ..Default::default()
            })))
            .unwrap();
        }
    }
    w.write_record(&rec(Kind::Lost(pb::Lost {
        time_ns: 9,
        family: pb::EventFamily::Alloc as i32,
        reason: pb::LossReason::RingbufFull as i32,
        count: 3,
        cpu: 1,
    })))
    .unwrap();
    let copy = w
        .write_stack_copy(pb::Stack {
            generation: 1,
            user_ips: vec![0x400100],
            copy: Some(pb::UserStackCopy {
                regs: vec![1, 2],
                reg_mask: 0b11,
                sp: 0x7ff0,
                data: vec![9; 16],
            }),
            ..Default::default()
        })
        .unwrap();
    let stacks: Vec<u64> = (0..4)
        .map(|i| {
            w.intern_stack(1 + (i % 2) as u32, &[0x400100 + i, 0x7f00_0010 + i], &[], 0)
                .unwrap()
        })
        .collect();
    for i in 0..n {
        let t = 100 + i * 37;
        let generation = 1 + (i % 2) as u32;
        let tid = 11 + (i % 3) as u32;
        let stack = stacks[(i % 4) as usize];
        let address = 0x5555_0000 + i * 48;
        w.alloc(&AllocEvent {
            time_ns: t,
            generation,
            tid,
            stack,
            size: 48,
            address,
            kind: pb::AllocKind::Malloc,
            sample_period: 0,
            allocator: 0,
        })
        .unwrap();
        w.free(&FreeEvent {
            time_ns: t + 1,
            generation,
            tid,
            address,
            allocator: 0,
        })
        .unwrap();
        w.lock(&LockEvent {
            time_ns: t,
            generation,
            tid,
            stack,
            mutex: 0x7f00_8000,
            wait_ns: 1000,
            hold_ns: 10,
            waker_tid: 12,
            waker_stack: copy,
            futex_op: 9,
            source: pb::LockSource::Futex,
            result: -110,
        })
        .unwrap();
        w.func(&FuncEvent {
            time_ns: t,
            generation,
            tid,
            stack,
            function: 1,
            duration_ns: 5,
            args: (0..i % 4).collect(),
            ret: 0x7f00_0020,
            request: None,
        })
        .unwrap();
        w.cpu_sample(&CpuSample {
            time_ns: t,
            generation,
            tid,
            stack,
            cpu: (i % 2) as u32,
        })
        .unwrap();
        w.offcpu(&OffCpuEvent {
            time_ns: t,
            generation,
            tid,
            stack,
            duration_ns: 7,
            waker_tid: 0,
            waker_stack: 0,
            state: 1,
            weight_ns: 0,
            runnable_ns: 0,
        })
        .unwrap();
        w.mem_growth(&MemGrowthEvent {
            time_ns: t,
            generation,
            tid,
            stack,
            kind: pb::MemGrowthKind::Brk,
            size: 4096,
            address: 0x5555_0000 + i * 4096,
            weight: 0,
        })
        .unwrap();
    }
    w.write_record(&rec(Kind::Process(pb::Process {
        generation: 2,
        pid: 12,
        event: pb::ProcessEvent::Exit as i32,
        time_ns: 100 + n * 37,
        exit_code: 3,
        ..Default::default()
    })))
    .unwrap();
    // Without a trailer the file reads as a cut recording.
    w.finish(trailer.then(|| pb::Trailer {
        stop_reason: "signal".into(),
        ..Default::default()
    }))
    .unwrap()
}

/// Offsets of the chunk descriptors of a well-formed trace.
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
#[ignore = "writes fuzz/corpus/reader/; run by hand to regenerate the seeds"]
fn write_reader_seed_corpus() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/reader");
    std::fs::create_dir_all(&dir).unwrap();
    let many = events(40, 700, true);
    let starts = chunk_starts(&many);
    assert!(starts.len() >= 4, "{} chunks", starts.len());
    let last = *starts.last().unwrap();
    let mut seeds: Vec<(&str, Vec<u8>)> = vec![
        ("empty", empty()),
        ("magic-only", many[..24].to_vec()),
        ("one-chunk", events(6, 1 << 20, true)),
        ("many-chunks", many.clone()),
        ("no-trailer", events(6, 1 << 20, false)),
        (
            "cut-in-last-chunk",
            many[..last + (many.len() - last) / 2].to_vec(),
        ),
        ("cut-in-descriptor", many[..starts[2] + 20].to_vec()),
    ];
    let mut flipped = many.clone();
    flipped[starts[1] + 32 + 30] ^= 0x10;
    seeds.push(("flipped-byte", flipped));
    let mut garbage = many[..starts[2]].to_vec();
    garbage.extend_from_slice(&[0x51; 100]);
    garbage.extend_from_slice(&many[starts[2]..]);
    seeds.push(("garbage-between-chunks", garbage));

    let mut total = 0;
    for (name, bytes) in &seeds {
        // Every seed must be accepted by the reader (damage and all).
        let mut r = TraceReader::new(&bytes[..]).unwrap();
        let n = r.by_ref().count();
        println!(
            "{name}: {} bytes, {n} records, {:?}",
            bytes.len(),
            r.damage()
        );
        total += bytes.len();
        std::fs::write(dir.join(format!("seed-{name}")), bytes).unwrap();
    }
    assert!(total < 200 << 10, "seed corpus too large: {total} bytes");
}

#[test]
#[ignore = "writes fuzz/corpus/records/; run by hand to regenerate the seeds"]
fn write_records_seed_corpus() {
    use pb::{AllocBatch, FreeBatch};
    use prost::Message;
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/records");
    std::fs::create_dir_all(&dir).unwrap();
    // A chunk's content: an allocation batch and a free batch as the writer packs them (the
    // reader's fast path), each with values of several varint lengths.
    let n = 6usize;
    let records = [
        Record {
            kind: Some(Kind::Allocs(AllocBatch {
                base_time_ns: 1_700_000_000_000_000_000,
                time_delta: vec![0, 5, -3, 1 << 20, 7, 1],
                generation: vec![1; n],
                tid: vec![100, 100, 101, 100, 102, 100],
                stack: vec![1, 2, 300, 2, 1, 70_000],
                size: vec![16, 24, 4096, 1 << 33, 8, 100],
                address_delta: vec![0x5555_0000_1000, 32, -64, 4096, 16, -16],
                kind: vec![0, 1, 2, 0, 3, 0],
                sample_period: vec![],
                allocator: vec![0, 0, 1, 0, 0, 2],
            })),
        },
        Record {
            kind: Some(Kind::Frees(FreeBatch {
                base_time_ns: 1_700_000_000_000_100_000,
                time_delta: vec![0, 9, 9, -1],
                generation: vec![1; 4],
                tid: vec![100, 101, 100, 102],
                address_delta: vec![0x5555_0000_1000, 0x5555_0000_1020, 4096, -32],
                allocator: vec![],
            })),
        },
    ];
    let mut bytes = Vec::new();
    for r in &records {
        r.encode_length_delimited(&mut bytes).unwrap();
    }
    let (read, err) = ebtrace_format::reader::decode_records(&bytes);
    assert!(err.is_none());
    assert_eq!(read, records);
    std::fs::write(dir.join("seed-batches"), &bytes).unwrap();
}
