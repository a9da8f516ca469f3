//! Inputs that once broke the reader (found by `fuzz/`), one test per bug, named after it.
use ebtrace_format::events::AllocEvent;
use ebtrace_format::frame::ChunkDescriptor;
use ebtrace_format::{DamageKind, TraceReader, TraceWriter, WriterOptions};
use ebtrace_proto::v1::{self as pb, record::Kind};

/// A small valid trace of several chunks; returns the bytes and its record count.
fn small_trace() -> (Vec<u8>, usize) {
    let opts = WriterOptions {
        chunk_bytes: 256,
        chunk_interval: None,
        level: 3,
        batch_events: 4,
        ..Default::default()
    };
    let mut w = TraceWriter::new(Vec::new(), pb::Header::default(), opts).unwrap();
    for i in 0..40 {
        w.alloc(&AllocEvent {
            time_ns: 100 + i,
            generation: 1,
            tid: 7,
            stack: 0,
            size: 16,
            address: 0x1000 + 16 * i,
            kind: pb::AllocKind::Malloc,
            sample_period: 0,
            allocator: 0,
        })
        .unwrap();
    }
    let bytes = w
        .finish(Some(pb::Trailer {
            stop_reason: "test".into(),
            ..Default::default()
        }))
        .unwrap();
    let n = TraceReader::new(&bytes[..]).unwrap().count();
    (bytes, n)
}

/// Bug: after skipping garbage, the reader keeps the bytes it read ahead (up to 64 KiB, or
/// the rest of a small file) and reads the next chunks from them. When the descriptor found
/// there was itself unusable (a length over the limit), the second resync searched only
/// that descriptor and the input behind the read-ahead, silently dropping the read-ahead:
/// every chunk in it was lost and the file was reported as truncated or ended early.
#[test]
fn resync_after_resync_loses_the_read_ahead_bytes() {
    let (trace, records) = small_trace();
    let bad = ChunkDescriptor {
        compressed_len: u64::MAX,
        decompressed_len: 10,
        record_count: 1,
        sequence: 0,
    }
    .encode();
    // More garbage than one descriptor, so that the first resync reads ahead from the input.
    let mut b = trace[..24].to_vec();
    b.extend_from_slice(&[0xee; 40]);
    b.extend_from_slice(&bad);
    b.extend_from_slice(&trace[24..]);

    let mut r = TraceReader::new(&b[..]).unwrap();
    let kinds: Vec<_> = r.by_ref().filter_map(|r| r.kind).collect();
    assert_eq!(kinds.len(), records, "{:?}", r.damage());
    assert!(matches!(kinds.last(), Some(Kind::Trailer(_))));
    let damage: Vec<_> = r
        .damage()
        .iter()
        .map(|d| (d.kind, d.offset, d.bytes))
        .collect();
    assert_eq!(
        damage,
        [
            (DamageKind::Garbage, 24, 40),
            (DamageKind::Garbage, 64, bad.len() as u64)
        ]
    );
    assert_eq!(r.offset(), b.len() as u64);
}

/// The fuzzer's minimized input for the same bug (`tests/data/resync-read-ahead-lost.bin`):
/// a garbage descriptor, then a descriptor with an oversized length whose last byte had
/// been read ahead and was forgotten (the reader ended at byte 81 of 82).
#[test]
fn resync_after_resync_loses_the_read_ahead_bytes_fuzz_input() {
    let b = include_bytes!("data/resync-read-ahead-lost.bin");
    assert_eq!(b.len(), 82);
    let mut r = TraceReader::new(&b[..]).unwrap();
    assert_eq!(r.by_ref().count(), 0);
    let damage: Vec<_> = r
        .damage()
        .iter()
        .map(|d| (d.kind, d.offset, d.bytes))
        .collect();
    assert_eq!(
        damage,
        [(DamageKind::Garbage, 24, 25), (DamageKind::Garbage, 49, 33)]
    );
    assert_eq!(r.offset(), 82);
}
