//! Benchmark of the reports (not a test): a synthetic allocation trace (3000 distinct stacks
//! of 10-40 frames, Zipf-like popularity, most blocks freed soon, a few call sites leaking)
//! with the symbolizer's records for its stacks, then `top`, `leaks` and `flamegraph`
//! through the analyze library, each in a child process so that its peak RSS is its own;
//! and a trace of as many probed-function calls (`--func`) on the same stacks, for
//! `latency` (percentiles per stack). Prints seconds, events/s (the reports run on one
//! core) and peak RSS, at 1 M and at N events, so that one sees memory grow with distinct
//! stacks rather than with events.
//!
//! `cargo run --release -p ebtrace-bench --bin reports -- [EVENTS]` (default 10,000,000);
//! `REPEAT=3` runs each report 3 times and shows the median time (the machine is shared:
//! see bench/scripts/README.md on noise). `… -- --write EVENTS PATH` writes the allocation
//! trace only, `… -- --write-func EVENTS PATH` the function trace, `… -- --measure
//! top|leaks|flamegraph|latency PATH` runs one report on one.
use ebtrace_analyze::model::Filter;
use ebtrace_analyze::reports::{self, EventKind};
use ebtrace_bench::Synth;
use ebtrace_format::events::{AllocEvent, FreeEvent, FuncEvent};
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

/// The build-ids of the two mapped files.
struct Ids {
    shop: u64,
    libc: u64,
}

/// A trace with one process and its two mappings.
fn begin(path: &Path) -> anyhow::Result<(TraceWriter<std::io::BufWriter<std::fs::File>>, Ids)> {
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
    Ok((
        w,
        Ids {
            shop: shop_id,
            libc: libc_id,
        },
    ))
}

/// Writes `n` allocations (and the frees of most of them) with symbolization records.
/// Returns the number of events written (allocations and frees).
fn write_trace(path: &Path, n: usize) -> anyhow::Result<u64> {
    let mut synth = Synth::new(SITES, 42);
    let (mut w, ids) = begin(path)?;
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
            sample_period: 0,
            allocator: 0,
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
                allocator: 0,
            })?;
            events += 1;
            free_list[t].push(old);
        }
    }
    finish(w, &stacks, &ids)?;
    Ok(events)
}

/// Writes `n` calls of four probed functions, from the allocation sites' stacks, with
/// durations spread over four powers of ten (so every stack's histogram spans many
/// buckets). Returns `n`.
fn write_func_trace(path: &Path, n: usize) -> anyhow::Result<u64> {
    let mut synth = Synth::new(SITES, 42);
    let (mut w, ids) = begin(path)?;
    let stacks: Vec<Vec<u64>> = synth.stacks.clone();
    for _ in 0..n {
        let a = synth.next_alloc();
        let stack = w.intern_stack(1, &stacks[a.site], &[], 0)?;
        // 1 µs to ~10 ms, from the generator's pseudo-random time and size.
        let duration_ns = 1000 + (a.time_ns.wrapping_mul(0x9e37_79b9) >> 7) % (a.size * 150);
        w.func(&FuncEvent {
            time_ns: a.time_ns,
            generation: 1,
            tid: a.tid,
            stack,
            function: 1 + (a.site % 4) as u64,
            duration_ns,
            args: Vec::new(),
            ret: 0,
            request: None,
        })?;
    }
    finish(w, &stacks, &ids)?;
    Ok(n as u64)
}

/// Appends the symbolizer's records and the trailer: every distinct (build-id, file
/// offset) looked up, leaf frames at their address, callers at the return address - 1; a
/// quarter of the callers with one inlined frame.
fn finish(
    mut w: TraceWriter<std::io::BufWriter<std::fs::File>>,
    stacks: &[Vec<u64>],
    ids: &Ids,
) -> anyhow::Result<()> {
    let (shop_id, libc_id) = (ids.shop, ids.libc);
    w.write_record(&rec(Kind::SymbolizerInfo(pb::SymbolizerInfo {
        symbolizer_version: "bench".into(),
        ..Default::default()
    })))?;
    let mut wanted: BTreeMap<(u64, u64), ()> = BTreeMap::new();
    for s in stacks {
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
    Ok(())
}

/// Peak RSS (MiB) and CPU time (user + system, seconds) of this process so far.
fn usage() -> (f64, f64) {
    // SAFETY: getrusage writes into the struct we pass; no other precondition.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (
        u.ru_maxrss as f64 / 1024.0,
        secs(u.ru_utime) + secs(u.ru_stime),
    )
}

/// In the child: runs one report, prints "SECONDS PEAK_RSS_MIB ROWS CPU_SECONDS" (the CPU
/// time of the report alone: on a busy machine, wall time also counts the waits for a
/// core).
fn measure(report: &str, path: &Path) -> anyhow::Result<()> {
    let all = Filter::default();
    let cpu0 = usage().1;
    let t0 = Instant::now();
    let rows = match report {
        "top" => reports::top(path, EventKind::Alloc, "bytes", &all, 20)?
            .rows
            .len(),
        "leaks" => reports::leaks(path, &all, 20)?.rows.len(),
        "latency" => reports::top(path, EventKind::Func, "latency", &all, 20)?
            .rows
            .len(),
        "flamegraph" => {
            let f = reports::folded(path, EventKind::Alloc, "bytes", &all)?;
            reports::flamegraph(&f.lines, EventKind::Alloc, "bytes", None, std::io::sink())?;
            f.lines.len()
        }
        other => anyhow::bail!("unknown report {other}"),
    };
    let secs = t0.elapsed().as_secs_f64();
    let (peak, cpu) = usage();
    println!("{secs} {peak} {rows} {}", cpu - cpu0);
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 4 && args[1] == "--measure" {
        return measure(&args[2], Path::new(&args[3]));
    }
    // `--write N PATH`: only write the trace (to profile a report on it).
    if args.len() == 4 && (args[1] == "--write" || args[1] == "--write-func") {
        let write = if args[1] == "--write" {
            write_trace
        } else {
            write_func_trace
        };
        let events = write(Path::new(&args[3]), args[2].parse()?)?;
        println!("{events} events");
        return Ok(());
    }
    let repeat: usize = std::env::var("REPEAT")
        .ok()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(1)
        .max(1);
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
    type Writer = fn(&Path, usize) -> anyhow::Result<u64>;
    let traces: [(&str, Writer, &[&str]); 2] = [
        ("alloc", write_trace, &["top", "leaks", "flamegraph"]),
        ("func", write_func_trace, &["latency"]),
    ];
    for &size in &sizes {
        for &(name, write, reports) in &traces {
            let path: PathBuf = dir.join(format!("{name}-{size}.pb.zst"));
            let t0 = Instant::now();
            let events = write(&path, size)?;
            let what = if name == "alloc" {
                format!(
                    "{size} allocations + {} frees = {events} events",
                    events - size as u64
                )
            } else {
                format!("{size} function calls")
            };
            println!(
                "\n{what}: written in {:.2} s, {:.1} MiB",
                t0.elapsed().as_secs_f64(),
                std::fs::metadata(&path)?.len() as f64 / (1 << 20) as f64
            );
            for &report in reports {
                let (secs, cpu, peak, rows) = run(report, &path, repeat)?;
                println!(
                    "  {report:<10} {secs:>7.2} s  {:>6.1} M events/s  (CPU {cpu:.2} s: {:.1} M events/s)  peak RSS {peak:>7.1} MiB  ({rows} rows)   aim >= 5 M events/s",
                    events as f64 / secs / 1e6,
                    events as f64 / cpu / 1e6
                );
                rss.insert((report, size), peak);
            }
            std::fs::remove_file(&path)?;
        }
    }
    if sizes.len() == 2 {
        println!("\npeak RSS at {} vs 1 M events written:", sizes[1]);
        for report in ["top", "leaks", "flamegraph", "latency"] {
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

/// Runs `report` on `path` `repeat` times, each in a child process on one thread: the
/// median seconds, the median CPU seconds, the largest peak RSS (MiB) and the rows.
fn run(report: &str, path: &Path, repeat: usize) -> anyhow::Result<(f64, f64, f64, f64)> {
    let mut secs = Vec::new();
    let mut cpu = Vec::new();
    let (mut peak, mut rows) = (0f64, 0f64);
    for _ in 0..repeat {
        let out = std::process::Command::new(std::env::current_exe()?)
            .args(["--measure", report])
            .arg(path)
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
        secs.push(v[0]);
        cpu.push(v[3]);
        peak = peak.max(v[1]);
        rows = v[2];
    }
    secs.sort_by(f64::total_cmp);
    cpu.sort_by(f64::total_cmp);
    Ok((secs[secs.len() / 2], cpu[cpu.len() / 2], peak, rows))
}
