//! Benchmark of the trace format (not a test): write and read N synthetic allocation events
//! and compare the file with the same events as `perf script`-style text compressed by
//! `zstd -3`.
//!
//! `cargo run --release -p ebtrace-bench --bin format -- [EVENTS]` (default 10,000,000).
use ebtrace_bench::Synth;
use ebtrace_format::events::{AllocEvent, Family};
use ebtrace_format::proto::{record::Kind, AllocKind, Header};
use ebtrace_format::{TraceReader, TraceWriter, WriterOptions};
use std::io::Write;
use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let n: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(10_000_000);
    let level: i32 = std::env::args()
        .nth(2)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(3);
    let dir = tempfile_dir()?;
    let path = dir.join("bench.pb.zst");
    println!("format benchmark: {n} allocation events, 3000 distinct stacks of 10-40 frames");

    // Generate first so that the generator's cost is not counted as writing.
    let mut synth = Synth::new(3000, 42);
    let events: Vec<_> = (0..n).map(|_| synth.next_alloc()).collect();

    let t0 = Instant::now();
    let mut w = TraceWriter::create(
        &path,
        Header::default(),
        WriterOptions {
            level,
            ..Default::default()
        },
    )?;
    for e in &events {
        let stack = w.intern_stack(1, &synth.stacks[e.site], &[], 0)?;
        w.alloc(&AllocEvent {
            time_ns: e.time_ns,
            generation: 1,
            tid: e.tid,
            stack,
            size: e.size,
            address: e.address,
            kind: AllocKind::Malloc,
            sample_period: 0,
            allocator: 0,
        })?;
    }
    w.finish(None)?;
    let write_s = t0.elapsed().as_secs_f64();
    let bytes = std::fs::metadata(&path)?.len();

    let t0 = Instant::now();
    let mut read = 0usize;
    let mut checksum = 0u64;
    for r in TraceReader::open(&path)? {
        if let Some(Kind::Allocs(b)) = r.kind {
            for e in b.decode()? {
                read += 1;
                checksum = checksum.wrapping_add(e.size ^ e.stack);
            }
        }
    }
    let read_s = t0.elapsed().as_secs_f64();
    assert_eq!(read, n, "read back {read} of {n} events");

    // The same events as perf-script-style text (one header line + one line per frame),
    // compressed by the zstd CLI at level 3. Text for 10 M events would be ~10 GB, so a
    // sample is measured and scaled.
    let sample = n.min(200_000);
    let text_path = dir.join("bench.txt");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&text_path)?);
        for e in &events[..sample] {
            writeln!(
                f,
                "shop {}/{} [000] {}.{:06}: probe_libc:malloc: (7f1234567890) size={} addr=0x{:x}",
                e.tid / 2,
                e.tid,
                e.time_ns / 1_000_000_000,
                (e.time_ns / 1000) % 1_000_000,
                e.size,
                e.address
            )?;
            for ip in &synth.stacks[e.site] {
                writeln!(f, "\t    {ip:x} [unknown] (/usr/bin/shop)")?;
            }
            writeln!(f)?;
        }
    }
    let text_bytes = std::fs::metadata(&text_path)?.len();
    let st = std::process::Command::new("zstd")
        .args(["-3", "-q", "-f"])
        .arg(&text_path)
        .status()?;
    anyhow::ensure!(st.success(), "zstd -3 failed");
    let zst_bytes = std::fs::metadata(dir.join("bench.txt.zst"))?.len();
    let per_event = bytes as f64 / n as f64;
    let text_per_event = zst_bytes as f64 / sample as f64;

    println!(
        "write: {:>10.0} events/s  ({:.2} s, one core)   aim >= 2,000,000",
        n as f64 / write_s,
        write_s
    );
    println!(
        "read:  {:>10.0} events/s  ({:.2} s)",
        n as f64 / read_s,
        read_s
    );
    println!(
        "size:  {:>10.2} bytes/event ({} bytes)   aim <= 4",
        per_event, bytes
    );
    println!(
        "perf-script text + zstd -3: {:.1} bytes/event ({:.1} uncompressed; measured on {} events)",
        text_per_event,
        text_bytes as f64 / sample as f64,
        sample
    );
    println!(
        "ratio text+zstd / ebtrace: {:.1}x smaller",
        text_per_event / per_event
    );
    std::fs::remove_dir_all(&dir)?;
    let _ = checksum;
    Ok(())
}

fn tempfile_dir() -> std::io::Result<std::path::PathBuf> {
    let d = std::env::temp_dir().join(format!("ebtrace-bench-{}", std::process::id()));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}
