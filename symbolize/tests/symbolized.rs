//! `trace::is_symbolized` from the last chunks gives the answer of a full scan (is there a
//! `SymbolizerInfo`?) on raw and symbolized traces, with the symbolizer records alone in
//! their chunk or followed by chunks of strings and the trailer only, and on cut and
//! damaged files (which it reads whole).
use ebtrace_format::{TraceReader, TraceWriter, WriterOptions};
use ebtrace_proto::v1::{self as pb, record::Kind, Record};
use ebtrace_symbolize::trace::{is_symbolized, symbolize_trace};
use std::path::Path;

fn rec(k: Kind) -> Record {
    Record { kind: Some(k) }
}

fn lost(count: u64) -> Record {
    rec(Kind::Lost(pb::Lost {
        family: pb::EventFamily::Alloc as i32,
        reason: pb::LossReason::RingbufFull as i32,
        count,
        ..Default::default()
    }))
}

/// A trace of `records`; `chunk_bytes` 1 puts every record in a chunk of its own.
fn write(path: &Path, records: &[Record], chunk_bytes: usize) {
    let opts = WriterOptions {
        chunk_bytes,
        chunk_interval: None,
        ..Default::default()
    };
    let mut w = TraceWriter::new(Vec::new(), pb::Header::default(), opts).unwrap();
    for r in records {
        w.write_record(r).unwrap();
    }
    std::fs::write(path, w.finish(Some(pb::Trailer::default())).unwrap()).unwrap();
}

/// The old answer: a `SymbolizerInfo` anywhere in what the reader reads.
fn by_scan(path: &Path) -> bool {
    TraceReader::open(path)
        .unwrap()
        .any(|r| matches!(r.kind, Some(Kind::SymbolizerInfo(_))))
}

fn check(path: &Path, want: bool) {
    assert_eq!(by_scan(path), want, "{}", path.display());
    assert_eq!(is_symbolized(path).unwrap(), want, "{}", path.display());
}

#[test]
fn the_last_chunks_tell_as_a_full_scan_does() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name);
    let events: Vec<Record> = (1..=50).map(lost).collect();

    for chunk_bytes in [1, 64, 4 << 20] {
        let raw = p(&format!("raw-{chunk_bytes}.pb.zst"));
        write(&raw, &events, chunk_bytes);
        check(&raw, false);
        // As ebsym writes it.
        let sym = p(&format!("sym-{chunk_bytes}.pb.zst"));
        symbolize_trace(&raw, &sym, &Default::default()).unwrap();
        check(&sym, true);
    }

    // The symbolizer's records, then chunks of strings and the trailer only.
    let mut records = events.clone();
    records.push(rec(Kind::SymbolizerInfo(pb::SymbolizerInfo::default())));
    for id in 1000..1005 {
        records.push(rec(Kind::String(pb::InternedString {
            id,
            value: b"x".to_vec(),
        })));
    }
    let tail = p("strings-after.pb.zst");
    write(&tail, &records, 1);
    check(&tail, true);

    // Strings at the end of a raw trace say nothing either.
    let mut records = events.clone();
    records.push(rec(Kind::String(pb::InternedString {
        id: 9,
        value: b"y".to_vec(),
    })));
    let raw_strings = p("raw-strings.pb.zst");
    write(&raw_strings, &records, 1);
    check(&raw_strings, false);

    // Cut inside its last chunk, and with garbage inserted: read whole.
    let bytes = std::fs::read(&tail).unwrap();
    let cut = p("cut.pb.zst");
    std::fs::write(&cut, &bytes[..bytes.len() - 3]).unwrap();
    check(&cut, true);
    let raw = std::fs::read(p("raw-1.pb.zst")).unwrap();
    let mut garbage = raw[..200].to_vec();
    garbage.extend_from_slice(b"garbage");
    garbage.extend_from_slice(&raw[200..]);
    let garbled = p("garbled.pb.zst");
    std::fs::write(&garbled, &garbage).unwrap();
    check(&garbled, false);

    // Not a trace: the reader's error.
    let not = p("not.pb.zst");
    std::fs::write(&not, b"hello").unwrap();
    assert!(is_symbolized(&not).is_err());
    assert!(is_symbolized(&p("missing.pb.zst")).is_err());
}
