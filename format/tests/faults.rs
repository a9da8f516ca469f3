//! A write error (a full disk) stops the writer at its last whole chunk: the file reads
//! with no damage, and the trailer goes after that chunk.
use ebtrace_format::events::AllocEvent;
use ebtrace_format::proto::{record::Kind, AllocKind, Header, Trailer};
use ebtrace_format::writer::Closed;
use ebtrace_format::{ErrorKind, TraceReader, TraceWriter, WriterOptions};
use std::fs::File;
use std::io::{self, Write};

/// A file that takes `room` bytes, then fails with ENOSPC (a last write takes part).
struct Full {
    f: File,
    room: usize,
}

impl Write for Full {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.room == 0 {
            return Err(io::Error::from_raw_os_error(28));
        }
        let n = buf.len().min(self.room);
        self.room -= n;
        self.f.write(&buf[..n])
    }
    fn flush(&mut self) -> io::Result<()> {
        self.f.flush()
    }
}

fn event(i: u64) -> AllocEvent {
    AllocEvent {
        time_ns: i,
        generation: 1,
        tid: 1,
        stack: 1,
        size: 16 + i % 1000,
        address: 0x10000 + i * 64,
        kind: AllocKind::Malloc,
        sample_period: 0,
        allocator: 0,
    }
}

#[test]
fn a_full_disk_cuts_at_the_last_whole_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.pb.zst");
    let f = File::create(&path).unwrap();
    let opts = WriterOptions {
        chunk_bytes: 4096,
        chunk_interval: None,
        batch_events: 100,
        ..Default::default()
    };
    let out = io::BufWriter::with_capacity(
        1000,
        Full {
            f: f.try_clone().unwrap(),
            room: 20_000,
        },
    );
    let mut w = TraceWriter::new(out, Header::default(), opts).unwrap();
    w.cut_on_error(f);
    let mut n = 0u64;
    while w.fault().is_none() {
        w.alloc(&event(n)).unwrap();
        n += 1;
        assert!(n < 1_000_000, "the writer never failed");
    }
    for i in 0..500 {
        w.alloc(&event(n + i)).unwrap();
    }
    w.flush().unwrap();
    let fault = w.fault().unwrap();
    assert_eq!(fault.error.kind(), ErrorKind::NoSpace);
    let kept = fault.kept;
    assert!(kept.chunks > 1 && kept.bytes <= 20_000, "{kept:?}");
    assert_eq!(kept.events + fault.events_dropped, n + 500);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), kept.bytes);
    let closed = w
        .close(Some(Trailer {
            stop_reason: "disk full".into(),
            ..Default::default()
        }))
        .unwrap();
    assert_eq!(closed, Closed::Cut { trailer: true });
    let mut r = TraceReader::open(&path).unwrap();
    let records: Vec<_> = r.by_ref().collect();
    assert!(r.damage().is_empty(), "{:?}", r.damage());
    assert_eq!(records.len() as u64, kept.records + 1);
    let Some(Kind::Trailer(t)) = &records.last().unwrap().kind else {
        panic!("no trailer last");
    };
    assert_eq!(t.stop_reason, "disk full");
    assert_eq!((t.record_count, t.chunk_count), (kept.records, kept.chunks));
    let events: usize = records
        .iter()
        .map(|r| match &r.kind {
            Some(Kind::Allocs(b)) => b.time_delta.len(),
            _ => 0,
        })
        .sum();
    assert_eq!(events as u64, kept.events);
}

#[test]
fn other_write_errors_are_io() {
    let out = Full {
        f: tempfile::tempfile().unwrap(),
        room: 0,
    };
    // The magic itself cannot be written: creating the writer fails.
    assert!(TraceWriter::new(out, Header::default(), WriterOptions::default()).is_err());
    let e = ebtrace_format::Error::write("x", io::Error::from_raw_os_error(5));
    assert_eq!(e.kind(), ErrorKind::Io);
    let e = ebtrace_format::Error::write("x", io::Error::from_raw_os_error(122));
    assert_eq!(e.kind(), ErrorKind::NoSpace);
}

#[test]
fn with_no_room_for_the_trailer_the_file_ends_at_a_chunk_boundary() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.pb.zst");
    let f = File::create(&path).unwrap();
    let opts = WriterOptions {
        chunk_bytes: 4096,
        chunk_interval: None,
        batch_events: 100,
        ..Default::default()
    };
    let out = io::BufWriter::with_capacity(
        1000,
        Full {
            f: f.try_clone().unwrap(),
            room: 10_000,
        },
    );
    let mut w = TraceWriter::new(out, Header::default(), opts).unwrap();
    w.cut_on_error(f);
    let mut n = 0;
    while w.fault().is_none() {
        w.alloc(&event(n)).unwrap();
        n += 1;
    }
    let kept = w.fault().unwrap().kept;
    // No trailer given (as when none fits): the file ends at the last whole chunk, and the
    // reader finds no damage there, which a recorder killed mid-chunk leaves.
    assert_eq!(w.close(None).unwrap(), Closed::Cut { trailer: false });
    let mut r = TraceReader::open(&path).unwrap();
    assert_eq!(r.by_ref().count() as u64, kept.records);
    assert!(r.damage().is_empty(), "{:?}", r.damage());
    assert_eq!(r.chunks(), kept.chunks);
}
