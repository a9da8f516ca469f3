//! Benchmark of the reports (not a test): a synthetic allocation trace (3000 distinct stacks
//! of 10-40 frames, Zipf-like popularity, most blocks freed soon, a few call sites leaking)
//! with the symbolizer's records for its stacks, then `top`, `leaks` and `flamegraph`
//! through the analyze library, each in a child process so that its peak RSS is its own.
//! Prints seconds, events/s (the reports run on one core) and peak RSS, at 1 M and at N
//! events, so that one sees memory grow with distinct stacks rather than with events.
//!
//! `cargo run --release -p ebtrace-bench --bin reports -- [EVENTS]` (default 10,000,000);
//! `… -- --write EVENTS PATH` writes the trace only, `… -- --measure top|leaks|flamegraph
//! PATH` runs one report on it.
use ebtrace_analyze::model::Filter;
use ebtrace_analyze::reports::{self, EventKind};
use ebtrace_bench::Synth;
use ebtrace_format::events::{AllocEvent, FreeEvent};
use ebtrace_format::proto::{self as pb, record::Kind, AllocKind, Header, Record};
use ebtrace_format::{TraceWriter, WriterOptions};
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::time::Instant;

const SITES: usize = 3000;
const SHOP: u64 = 0x5555_5555_0000;
const LIBC: u64 = 0x7f12_3400_0000;
const SPAN: u64 = 0x100_0000;

fn rec(k: Kind) -> Record {
    Record { kind: Some(k) }
}

/// Writes `n` allocations (and the frees of most of them) with symbolization records.
/// Returns the number of events written (allocations and frees).
fn write_trace(path: &Path, n: usize) -> anyhow::Result<u64> {
    let mut synth = Synth::new(SITES, 42);
    let mut w = TraceWriter::create(path, Header::default(), WriterOptions::default())?;
    let comm = w.intern_string(b"shop")?;
    w.write_record(&rec(Kind::Process(pb::Process {
        generation: 1,
        pid: 4242,
        comm,
        event: pb::ProcessEvent::Existing as i32,
        ..Default::default()
    })))?;
    let shop_path = w.intern_string(b"/usr/bin/shop")?;
    let shop_id = w.intern_build_id(&[0x5a; 20])?;
    let libc_path = w.intern_string(b"/usr/lib/x86_64-linux-gnu/libc.so.6")?;
    let libc_id = w.intern_build_id(&[0x1c; 20])?;
    for (start, path, build_id) in [(SHOP, shop_path, shop_id), (LIBC, libc_path, libc_id)] {
        w.write_record(&rec(Kind::Mapping(pb::Mapping {
            generation: 1,
            start,
            end: start + SPAN,
            path,
            build_id,
            perms: 5,
            source: pb::MappingSource::Snapshot as i32,
            ..Default::default()
        })))?;
    }
    let stacks: Vec<Vec<u64>> = synth.stacks.clone();
    // Blocks live per thread: the oldest is freed once 1000 are live, except at the sites
    // that leak (every 100th call site, rarely called: a few blocks per million events).
    let mut live: Vec<VecDeque<u64>> = vec![VecDeque::new(); 8];
    let mut free_list: Vec<Vec<u64>> = vec![Vec::new(); 8];
    let mut bump: Vec<u64> = (0..8).map(|t| 0x6000_0000_0000 + (t << 36)).collect();
    let mut events = 0u64;
    for _ in 0..n {
        let a = synth.next_alloc();
        let t = (a.tid - 1000) as usize;
        let stack = w.intern_stack(1, &stacks[a.site], &[], 0)?;
        let address = free_list[t].pop().unwrap_or_else(|| {
            bump[t] += 0x10000;
            bump[t]
        });
        w.alloc(&AllocEvent {
            time_ns: a.time_ns,
            generation: 1,
            tid: a.tid,
            stack,
            size: a.size,
            address,
            kind: AllocKind::Malloc,
        })?;
        events += 1;
        if a.site % 100 != 99 {
            live[t].push_back(address);
        }
        if live[t].len() > 1000 {
            let old = live[t].pop_front().unwrap();
            w.free(&FreeEvent {
                time_ns: a.time_ns + 1,
                generation: 1,
                tid: a.tid,
                address: old,
            })?;
            events += 1;
            free_list[t].push(old);
        }
    }
    // The symbolizer's records: every distinct (build-id, file offset) looked up, leaf
    // frames at their address, callers at the return address - 1; a quarter of the
    // callers with one inlined frame.
    w.write_record(&rec(Kind::SymbolizerInfo(pb::SymbolizerInfo {
        symbolizer_version: "bench".into(),
        ..Default::default()
    })))?;
    let mut wanted: BTreeMap<(u64, u64), ()> = BTreeMap::new();
    for s in &stacks {
        for (i, &ip) in s.iter().enumerate() {
            let (base, id) = if ip >= LIBC {
                (LIBC, libc_id)
            } else {
                (SHOP, shop_id)
            };
            let look = if i == 0 { ip } else { ip - 1 };
            wanted.insert((id, look - base), ());
        }
    }
    for &(build_id, offset) in wanted.keys() {
        let mut frames = Vec::new();
        let module = if build_id == libc_id { "libc" } else { "shop" };
        if build_id == shop_id && offset % 4 == 0 {
            frames.push(pb::SymbolFrame {
                function: w.intern_string(format!("inline_helper_{:x}", offset / 64).as_bytes())?,
                file: w.intern_string(b"src/helpers.h")?,
                line: (offset % 500) as u32 + 1,
                inlined: true,
                ..Default::default()
            });
        }
        frames.push(pb::SymbolFrame {
            function: w.intern_string(format!("{module}_fn_{:x}", offset / 64).as_bytes())?,
            file: w.intern_string(format!("src/{module}/f{}.cc", offset / 4096).as_bytes())?,
            line: (offset % 1000) as u32 + 1,
            ..Default::default()
        });
        w.write_record(&rec(Kind::SymbolizedAddress(pb::SymbolizedAddress {
            build_id,
            address: offset,
            frames,
            reason: 0,
        })))?;
    }
    w.finish(Some(pb::Trailer {
        stop_reason: "bench".into(),
        ..Default::default()
    }))?;
    Ok(events)
}

fn peak_rss_mib() -> f64 {
    // SAFETY: getrusage writes into the struct we pass; no other precondition.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    u.ru_maxrss as f64 / 1024.0
}

/// In the child: runs one report, prints "SECONDS PEAK_RSS_MIB ROWS".
fn measure(report: &str, path: &Path) -> anyhow::Result<()> {
    let all = Filter::default();
    let t0 = Instant::now();
    let rows = match report {
        "top" => reports::top(path, EventKind::Alloc, "bytes", &all, 20)?
            .rows
            .len(),
        "leaks" => reports::leaks(path, &all, 20)?.rows.len(),
        "flamegraph" => {
            let f = reports::folded(path, EventKind::Alloc, "bytes", &all)?;
            reports::flamegraph(&f.lines, EventKind::Alloc, "bytes", None, std::io::sink())?;
            f.lines.len()
        }
        other => anyhow::bail!("unknown report {other}"),
    };
    println!("{} {} {rows}", t0.elapsed().as_secs_f64(), peak_rss_mib());
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 4 && args[1] == "--measure" {
        return measure(&args[2], Path::new(&args[3]));
    }
    // `--write N PATH`: only write the trace (to profile a report on it).
    if args.len() == 4 && args[1] == "--write" {
        let events = write_trace(Path::new(&args[3]), args[2].parse()?)?;
        println!("{events} events");
        return Ok(());
    }
    let n: usize = args
        .get(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(10_000_000);
    let dir = std::env::temp_dir().join(format!("ebtrace-bench-reports-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    println!(
        "reports benchmark: synthetic allocation traces, {SITES} distinct stacks of 10-40 \
         frames, symbolized; each report in its own process, on one core"
    );
    let sizes: Vec<usize> = if n > 1_000_000 {
        vec![1_000_000, n]
    } else {
        vec![n]
    };
    let mut rss: BTreeMap<(&str, usize), f64> = BTreeMap::new();
    for &size in &sizes {
        let path: PathBuf = dir.join(format!("alloc-{size}.pb.zst"));
        let t0 = Instant::now();
        let events = write_trace(&path, size)?;
        println!(
            "\n{size} allocations + {} frees = {events} events: written in {:.2} s, {:.1} MiB",
            events - size as u64,
            t0.elapsed().as_secs_f64(),
            std::fs::metadata(&path)?.len() as f64 / (1 << 20) as f64
        );
        for report in ["top", "leaks", "flamegraph"] {
            let out = std::process::Command::new(std::env::current_exe()?)
                .args(["--measure", report])
                .arg(&path)
                .env("RAYON_NUM_THREADS", "1")
                .output()?;
            anyhow::ensure!(
                out.status.success(),
                "{report}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let line = String::from_utf8(out.stdout)?;
            let v: Vec<f64> = line
                .split_whitespace()
                .map(|x| x.parse())
                .collect::<Result<_, _>>()?;
            let (secs, peak, rows) = (v[0], v[1], v[2]);
            println!(
                "  {report:<10} {secs:>7.2} s  {:>6.1} M events/s  peak RSS {peak:>7.1} MiB  ({rows} rows)   aim >= 5 M events/s",
                events as f64 / secs / 1e6
            );
            rss.insert((report, size), peak);
        }
        std::fs::remove_file(&path)?;
    }
    if sizes.len() == 2 {
        println!("\npeak RSS at {} vs 1 M allocations:", sizes[1]);
        for report in ["top", "leaks", "flamegraph"] {
            println!(
                "  {report:<10} {:.1} MiB -> {:.1} MiB (x{:.2} for x{} events)",
                rss[&(report, sizes[0])],
                rss[&(report, sizes[1])],
                rss[&(report, sizes[1])] / rss[&(report, sizes[0])],
                sizes[1] / sizes[0]
            );
        }
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
