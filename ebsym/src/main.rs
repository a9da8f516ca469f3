//! `ebsym`: offline symbolization and reports of ebtrace traces. The command line only:
//! the work is done by `ebtrace-symbolize` (finding files, resolving, unwinding, writing
//! the symbolized trace) and `ebtrace-analyze` (the reports).
mod find_args;
mod kind_arg;
mod progress;
mod reports_cli;

use anyhow::Context;
use clap::{Parser, Subcommand};
use ebtrace_analyze::reports::EventKind;
use find_args::FindArgs;
use kind_arg::{Kind, KindParser, TopKind, TopKindParser};
use std::io::Write;
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "ebsym",
    version,
    about = "Symbolize and analyze ebtrace traces (trace.pb.zst) offline",
    after_help = "Examples:\n  ebsym trace.pb.zst --debug-dir ./dbg     # writes trace.sym.pb.zst\n  ebsym trace.pb.zst --debuginfod http://127.0.0.1:8002\n  ebsym addr2line -e ./app -f -i -C 0x401234\n  ebsym info trace.pb.zst\n  ebsym info trace.pb.zst --json | jq .events\n  ebsym strip trace.sym.pb.zst -o shareable.pb.zst   # without the target's stack memory",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    symbolize: SymbolizeArgs,
}

/// `ebsym TRACE …`: symbolize a trace.
#[derive(clap::Args, Debug)]
struct SymbolizeArgs {
    /// The trace to symbolize; writes TRACE with `.pb.zst` replaced by `.sym.pb.zst`.
    ///
    /// Example: `ebsym trace.pb.zst --debug-dir ./dbg -o out.pb.zst`
    trace: Option<PathBuf>,
    /// Output file (default: TRACE with `.pb.zst` replaced by `.sym.pb.zst`).
    #[arg(short, long)]
    output: Option<PathBuf>,
    #[command(flatten)]
    find: FindArgs,
    /// Keep C++ names mangled.
    #[arg(long)]
    no_demangle: bool,
    /// Keep the raw stack copies of `--stack-mode dwarf` (the target's stack memory:
    /// request data, keys, passwords) in the output. By default they are dropped once
    /// unwound: the output keeps the unwound frames, and every report reads the same.
    #[arg(long)]
    keep_stack_copies: bool,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The top stacks of one event kind, by a measure.
    ///
    /// Example: `ebsym top trace.pb.zst --kind alloc --by bytes -n 20`
    Top {
        #[command(flatten)]
        args: reports_cli::ReportArgs,
        /// The event family to report on (or `exception`: C++ exceptions by type and stack).
        #[arg(long, default_value = "alloc", value_parser = TopKindParser(KindParser::with_by()))]
        kind: TopKind,
        /// What to sort by: a measure of the kind (each kind's are listed under --kind, the
        /// first being the default); and what a row is, comma-separated: `stack` (the
        /// default), `thread` (a stack of one thread group, the names' digits folded:
        /// `worker-*`) or, for alloc, `site` (the stacks merged by their allocation site,
        /// the first frame past the allocator wrappers; see --wrapper).
        /// Example: `--by site`, `--by thread,count`
        #[arg(long)]
        by: Option<String>,
    },
    /// Allocations still outstanding at the end of the recording or when their process
    /// exited, by stack, with count, bytes, age and whether the process was still alive.
    ///
    /// Example: `ebsym leaks trace.pb.zst`
    ///
    /// Blocks the C/C++ runtime keeps by design (libstdc++'s emergency exception pool, stdio
    /// buffers, the dynamic loader's TLS and link maps, locale tables) are shown after the
    /// leaks to act on, "held by the runtime", and out of the leak totals, as valgrind's
    /// default suppressions and heaptrack's `__gnu_cxx::__freeres` leave them out.
    Leaks {
        #[command(flatten)]
        args: reports_cli::ReportArgs,
        /// A suppressions file (repeatable): one stack pattern a line, `PATTERN` or
        /// `leak:PATTERN` (LeakSanitizer's form), a glob (`*`, `?`) matched against each
        /// frame's function, source file and module; `#` comments. Matching blocks are
        /// shown apart, held by the pattern's line.
        #[arg(long = "suppress", value_name = "FILE")]
        suppress: Vec<PathBuf>,
        /// What a row is: `stack` (the default), `thread` (a stack of one thread group) or
        /// `site` (the stacks merged by their allocation site, the first frame past the
        /// allocator wrappers; see --wrapper). Example: `--by site`
        #[arg(long, value_parser = ["stack", "thread", "site"])]
        by: Option<String>,
    },
    /// heaptrack's numbers: allocator calls, temporary allocations (freed with no other
    /// allocation or free of the process in between), the peak of live bytes and the stacks
    /// that held it, leaked bytes (as `leaks` splits them), and per stack a lifetime
    /// histogram.
    ///
    /// Example: `ebsym heap trace.pb.zst --by peak`
    ///
    /// Says whether its numbers are exact (every allocator call recorded) or estimates
    /// (sampled by bytes, a size threshold, losses); with --aggregate there are no
    /// temporary allocations, peak or lifetimes to give.
    Heap {
        #[command(flatten)]
        args: reports_cli::ReportArgs,
        /// What to sort the stacks by: allocations (heaptrack_print's first table), bytes,
        /// temporary, peak, leaked.
        #[arg(long, default_value = "allocations", value_parser = ["allocations", "bytes", "temporary", "peak", "leaked"])]
        by: String,
        /// A suppressions file (repeatable), as `ebsym leaks --suppress`: the blocks never
        /// freed that match are held, not leaked.
        #[arg(long = "suppress", value_name = "FILE")]
        suppress: Vec<PathBuf>,
    },
    /// Contended locks: waits (and holds, where recorded) per mutex and stack, with p99,
    /// the kind (mutex, condvar, other) and the stack of the thread that released it.
    /// Contention first: waits for a mutex another thread held (wait_kind mutex,
    /// condvar_mutex), then condvar waits whose mutex reacquire was contended, then the
    /// rest; idle waits (a thread pool waiting for a task, --idle) last.
    ///
    /// Example: `ebsym locks trace.pb.zst --by hold`
    Locks {
        #[command(flatten)]
        args: reports_cli::ReportArgs,
        /// wait, hold, count.
        #[arg(long)]
        by: Option<String>,
    },
    /// Per probed function (--kind func): calls, p50/p90/p99/max latency and a log2
    /// histogram per stack. --kind syscall|bio|runq: per syscall, per device and op, or per
    /// process, every call, request or wait the kernel counted.
    ///
    /// Example: `ebsym latency trace.pb.zst --kind syscall`
    Latency {
        #[command(flatten)]
        args: reports_cli::ReportArgs,
        /// The event family to report on: func (probed calls, with stacks), or one whose
        /// latency the kernel counts.
        #[arg(
            long,
            default_value = "func",
            value_parser = KindParser::showing(reports_cli::latency_kind)
        )]
        kind: Kind,
    },
    /// The targets' TCP connections per remote address: count, failed and open ones,
    /// lifetime percentiles, bytes, retransmits and resets (--tcp).
    ///
    /// Example: `ebsym tcp trace.pb.zst --json`
    Tcp {
        #[command(flatten)]
        args: reports_cli::ReportArgs,
    },
    /// Where each thread group's time goes (threads named by the trace, digits folded:
    /// worker-12 -> worker-*): on CPU (--cpu samples), in the run queue (--runq), and off
    /// the CPU by cause (lock, disk, idle wait, network or pipe, sleep, ...: the blocked
    /// thread's kernel stack, --offcpu), each cause with its top stacks.
    ///
    /// Example: `ebsym threads trace.pb.zst --json`
    Threads {
        #[command(flatten)]
        args: reports_cli::ReportArgs,
    },
    /// Why the slow requests were slow (a trace recorded with `ebrec record --request`):
    /// their exact latency (count, p50/p90/p99/p99.9/max), what the tail (the requests at or
    /// above --tail's percentile) spends more on than the requests around the median, per
    /// cause and stack, and the slowest requests (-n) one by one, each with its time by
    /// cause: on CPU, run queue, off CPU by cause, and the part no event accounts for.
    ///
    /// Example: `ebsym requests trace.pb.zst --tail 99 -n 5`
    Requests {
        #[command(flatten)]
        args: reports_cli::ReportArgs,
        /// The tail's percentile: the requests at or above it are compared with those
        /// around the median (p40 to p60).
        #[arg(long, default_value_t = 99.0)]
        tail: f64,
    },
    /// The top finding of each family, one line each ("most off-CPU time: futex_wait in
    /// Queue::pop, 42% of 12.10 s", "slowest syscall: fsync p99 38.20 ms (120 calls)"), then
    /// where the busiest thread groups' time goes (ebsym threads' split, one line each).
    ///
    /// Example: `ebsym summary trace.pb.zst --json`
    Summary {
        #[command(flatten)]
        args: reports_cli::ReportArgs,
    },
    /// A latency heat map SVG: time on x, log2 latency on y, colour by count (any kind
    /// with a latency: syscall, bio, runq, func, offcpu, lock).
    ///
    /// Example: `ebsym heatmap trace.pb.zst --kind syscall -o heatmap.svg`
    Heatmap {
        #[command(flatten)]
        args: reports_cli::ReportArgs,
        /// The event family to draw: one whose events have a latency.
        #[arg(
            long,
            default_value = "syscall",
            value_parser = KindParser::showing(EventKind::has_latency)
        )]
        kind: Kind,
        /// The SVG to write.
        #[arg(short, long, default_value = "heatmap.svg")]
        output: PathBuf,
        /// Time columns.
        #[arg(long, default_value_t = 100)]
        columns: usize,
        /// Title (default: after the kind).
        #[arg(long)]
        title: Option<String>,
    },
    /// Folded stacks (`root;...;leaf value`) for flamegraph.pl or inferno.
    ///
    /// Example: `ebsym folded trace.pb.zst --kind alloc > alloc.folded`
    Folded {
        #[command(flatten)]
        args: reports_cli::ReportArgs,
        /// The event family to report on.
        #[arg(long, default_value = "alloc", value_parser = KindParser::with_by())]
        kind: Kind,
        /// The value of each stack: a measure of the kind (each kind's are listed under
        /// --kind, the first being the default); with --kind alloc also `ebsym heap`'s
        /// temporary, peak (bytes live at the peak) and leaked (bytes, to act on).
        #[arg(long)]
        by: Option<String>,
    },
    /// A flame graph SVG (inferno), with the palette and unit of the kind.
    ///
    /// Example: `ebsym flamegraph trace.pb.zst --kind alloc --by bytes -o alloc.svg`
    Flamegraph {
        #[command(flatten)]
        args: reports_cli::ReportArgs,
        /// The event family to report on.
        #[arg(long, default_value = "alloc", value_parser = KindParser::with_by())]
        kind: Kind,
        /// The widths: a measure of the kind (each kind's are listed under --kind, the
        /// first being the default); with --kind alloc also `ebsym heap`'s temporary, peak
        /// (bytes live at the peak) and leaked (bytes, to act on).
        #[arg(long)]
        by: Option<String>,
        /// The SVG to write.
        #[arg(short, long, default_value = "flamegraph.svg")]
        output: PathBuf,
        /// Title (default: after the kind).
        #[arg(long)]
        title: Option<String>,
    },
    /// A gzip-compressed pprof profile (profile.proto) of one kind, for `go tool pprof`,
    /// Pyroscope, Parca or Grafana: sample types and units per kind, mappings with
    /// build-ids, functions, inlined frames as several lines of a location.
    ///
    /// Example: `ebsym pprof trace.pb.zst --kind cpu -o cpu.pb.gz`
    Pprof {
        #[command(flatten)]
        args: reports_cli::ReportArgs,
        /// The event family to report on.
        #[arg(long, default_value = "alloc", value_parser = KindParser::with_by())]
        kind: Kind,
        /// The default sample type: a measure of the kind (each kind's are listed under
        /// --kind, the first being the default).
        #[arg(long)]
        by: Option<String>,
        /// The profile to write.
        #[arg(short, long, default_value = "profile.pb.gz")]
        output: PathBuf,
    },
    /// A timeline for other viewers. --format perfetto: Chrome's JSON trace-event format
    /// (ui.perfetto.dev, chrome://tracing): a track per process and thread, slices for
    /// off-CPU blocks, lock waits, --func calls, slow syscalls, block I/O and run-queue
    /// waits (args: the stack as "function (file:line)" lines, the waker), instants for
    /// allocations, CPU samples and memory growth, flows from each waker to the block it
    /// ended. --format firefox: the Firefox Profiler's processed profile
    /// (profiler.firefox.com): CPU samples with their stacks (kernel frames in their own
    /// category), the same intervals as markers with their stacks, allocations as native
    /// allocations. Times are since the trace's start. Caps, per kind: the longest
    /// --max-slices intervals (default 200,000), a uniform sample of --max-instants
    /// instants or allocations (default 200,000), and in Firefox of --max-samples CPU
    /// samples (default 2,000,000); the counts dropped are printed and, in Perfetto,
    /// in otherData. A name ending in .gz is gzip-compressed.
    ///
    /// Example: `ebsym export trace.pb.zst --format perfetto -o trace.json`
    Export {
        #[command(flatten)]
        args: reports_cli::ReportArgs,
        /// perfetto (Chrome JSON trace events) or firefox (Firefox Profiler).
        #[arg(long, value_enum)]
        format: ExportFormat,
        /// The file to write (gzip-compressed if it ends in .gz).
        #[arg(short, long)]
        output: PathBuf,
        /// Instant events (allocations, CPU samples, memory growth) or allocation samples
        /// kept per kind: a uniform sample of this many.
        #[arg(long, value_name = "N", default_value_t = ebtrace_analyze::reports::export::DEFAULT_MAX_INSTANTS)]
        max_instants: usize,
        /// Slices or markers kept per kind (off-CPU, lock, func, syscall, bio, runq): the
        /// longest this many.
        #[arg(long, value_name = "N", default_value_t = ebtrace_analyze::reports::export::DEFAULT_MAX_SLICES)]
        max_slices: usize,
        /// CPU samples kept in a Firefox profile: a uniform sample of this many.
        #[arg(long, value_name = "N", default_value_t = ebtrace_analyze::reports::export::DEFAULT_MAX_SAMPLES)]
        max_samples: usize,
    },
    /// What grew and what shrank between two traces: per stack, the value before and
    /// after and the delta, largest change first; with -o, a differential flame graph
    /// (red grew, blue shrank).
    ///
    /// Example: `ebsym diff before.pb.zst after.pb.zst --kind alloc -o diff.svg`
    Diff {
        /// The before trace, and every option of the reports.
        #[command(flatten)]
        args: reports_cli::ReportArgs,
        /// The after trace.
        after: PathBuf,
        /// The event family to report on.
        #[arg(long, default_value = "alloc", value_parser = KindParser::with_by())]
        kind: Kind,
        /// What to compare: a measure of the kind (each kind's are listed under --kind, the
        /// first being the default).
        #[arg(long)]
        by: Option<String>,
        /// Also write a differential flame graph SVG here.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Title of the flame graph.
        #[arg(long)]
        title: Option<String>,
        /// Draw the before widths instead (what shrank or disappeared stands out).
        #[arg(long)]
        negate: bool,
    },
    /// One self-contained HTML page (opens from disk, asks no host): the summary, a flame
    /// graph per event kind (zoom, search, stacks with file:line), one timeline of all
    /// families per process and thread (wakers' arrows; select a range to filter the flame
    /// graphs and tables), latency heat maps, and sortable tables (latency, locks, leaks,
    /// top stacks); with --base, differential flame graphs. Caps: the timeline draws at
    /// most 50,000 events per kind (the longest; alloc and memgrowth the largest; tcp the
    /// latest; CPU samples as a density), the page says how many more; the flame graphs'
    /// time filter sums per stack and time bucket (250 to 500 buckets, merged past
    /// 300,000 entries per kind); a diff keeps the 20,000 stacks that changed most.
    ///
    /// Example: `ebsym report trace.pb.zst -o report.html --base yesterday.pb.zst`
    Report {
        #[command(flatten)]
        args: reports_cli::ReportArgs,
        /// The HTML file to write.
        #[arg(short, long)]
        output: PathBuf,
        /// A trace to compare against: differential flame graphs (red grew, blue shrank).
        #[arg(long, value_name = "OLD")]
        base: Option<PathBuf>,
    },
    /// What is in a trace: host, time span, processes and binaries, events, losses, whether
    /// it ended cleanly and whether it is symbolized.
    ///
    /// Example: `ebsym info trace.pb.zst --json`
    Info {
        /// The trace file.
        trace: PathBuf,
        /// Print JSON (schema: docs/json.md) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Rewrite a trace (raw or symbolized) without its stack copies: the raw copies of the
    /// target's user stack that `ebrec --stack-mode dwarf` takes (stack memory: request
    /// data, keys, passwords). Every other record is kept, in order, and the stacks keep
    /// their ids, ips and flags; the binaries' unwind tables stay (they are not target
    /// memory). A symbolized trace reports the same after it. A raw trace that is not
    /// symbolized yet can then no longer be unwound offline: its stacks become the
    /// frame-pointer walks ebrec took as a fallback, so symbolize first (`ebsym TRACE`
    /// drops the copies itself) unless the trace only has frame-pointer code.
    ///
    /// Example: `ebsym strip trace.sym.pb.zst -o trace.shareable.pb.zst`
    Strip {
        /// The trace file.
        trace: PathBuf,
        /// The stripped trace to write (not the input).
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Every record of a trace, one per line (Rust debug notation, events decoded), for
    /// debugging the recorder or the format.
    ///
    /// Example: `ebsym dump trace.pb.zst | grep Alloc`
    Dump {
        /// The trace file.
        trace: PathBuf,
    },
    /// Write ebsym's man pages (ebsym.1 and one per command, from these definitions).
    #[command(hide = true)]
    Man {
        /// The directory to write the pages into (created).
        #[arg(short, long, default_value = "docs/man")]
        output: PathBuf,
    },
    /// Write ebsym's shell completions (bash, zsh, fish), from these definitions:
    /// `--shell SHELL` prints one script; `-o DIR` writes all three (ebsym, _ebsym,
    /// ebsym.fish).
    #[command(hide = true, group = clap::ArgGroup::new("where").required(true))]
    Completions {
        /// Print the script of this shell on stdout.
        #[arg(long, value_enum, group = "where")]
        shell: Option<clap_complete::Shell>,
        /// Write bash, zsh and fish scripts into this directory (created).
        #[arg(short, long, group = "where")]
        output: Option<PathBuf>,
    },
    /// A drop-in for binutils `addr2line`, with the same output format: addresses from the
    /// arguments, or one per line on stdin.
    ///
    /// Example: `ebsym addr2line -e ./app -f -i -C 0x1130 0x1200`
    Addr2line(Addr2lineArgs),
}

#[derive(clap::Args, Debug)]
struct Addr2lineArgs {
    /// The binary the addresses are in (its debug file is found as for traces).
    #[arg(
        short = 'e',
        long = "exe",
        value_name = "BINARY",
        default_value = "a.out"
    )]
    exe: PathBuf,
    /// Print the function name before each location.
    #[arg(short = 'f', long = "functions")]
    functions: bool,
    /// Also print the frames the address is inlined into.
    #[arg(short = 'i', long = "inlines")]
    inlines: bool,
    /// Demangle C++ names.
    #[arg(short = 'C', long = "demangle")]
    demangle: bool,
    /// Print the address before its frames.
    #[arg(short = 'a', long = "addresses")]
    addresses: bool,
    #[command(flatten)]
    find: FindArgs,
    /// Hex addresses, with or without 0x; read from stdin when none is given.
    addrs: Vec<String>,
}

fn default_output(trace: &std::path::Path) -> PathBuf {
    let s = trace.as_os_str().to_string_lossy();
    match s.strip_suffix(".pb.zst") {
        Some(stem) => PathBuf::from(format!("{stem}.sym.pb.zst")),
        None => PathBuf::from(format!("{s}.sym.pb.zst")),
    }
}

fn addr2line(a: Addr2lineArgs, out: &mut impl Write) -> anyhow::Result<()> {
    use ebtrace_symbolize::binutils::{format, parse_address, Flags};
    if !a.exe.exists() {
        anyhow::bail!("'{}': No such file", a.exe.display());
    }
    let mut options = a.find.options(a.demangle);
    options.binutils_files = true;
    let sym = ebtrace_symbolize::Symbolizer::new(options);
    let module = sym.open_binary(&a.exe);
    let flags = Flags {
        functions: a.functions,
        inlines: a.inlines,
        addresses: a.addresses,
    };
    let one = |text: &str, out: &mut dyn Write| -> anyhow::Result<()> {
        let addr = parse_address(text).unwrap_or(0);
        out.write_all(format(addr, &module.resolve(addr), flags).as_bytes())?;
        Ok(())
    };
    if a.addrs.is_empty() {
        // Batches of what is already buffered, resolved over all cores; an interactive
        // pipe still gets each answer at once.
        let mut input = std::io::BufReader::with_capacity(1 << 16, std::io::stdin().lock());
        ebtrace_symbolize::addr2line_stream(&module, flags, &mut input, out)?;
    } else {
        for text in &a.addrs {
            one(text, out)?;
        }
    }
    Ok(())
}

fn symbolize(a: SymbolizeArgs) -> anyhow::Result<()> {
    let trace = a.trace.expect("checked by the caller");
    let output = a.output.unwrap_or_else(|| default_output(&trace));
    let mut options = a.find.options(!a.no_demangle);
    options.keep_stack_copies = a.keep_stack_copies;
    let report = ebtrace_symbolize::trace::symbolize_trace_with(
        &trace,
        &output,
        &options,
        &progress::Resolving::default(),
    )?;
    for d in &report.input_damage {
        eprintln!("ebsym: {}: {d}", trace.display());
    }
    for m in &report.modules {
        eprintln!("ebsym: {}", m.summary_line());
    }
    for line in ebtrace_symbolize::hint::debug_hints(&report.modules, &options.locator) {
        eprintln!("ebsym: {line}");
    }
    for (u, n) in &report.uprobes {
        use ebtrace_format::tables::UprobesFrame;
        let why = match u {
            UprobesFrame::ReturnTrampoline => "a return probe was pending",
            UprobesFrame::SingleStepSlot => "a probed instruction was single-stepped",
        };
        eprintln!(
            "ebsym: {n} frame{} in the kernel's uprobes page, shown as \"{}\" ({why})",
            if *n == 1 { "" } else { "s" },
            u.name()
        );
    }
    if report.no_mapping > 0 {
        eprintln!("ebsym: {} frames outside any mapping", report.no_mapping);
    }
    if report.no_build_id > 0 {
        eprintln!(
            "ebsym: {} frames in mappings without a build-id",
            report.no_build_id
        );
    }
    if report.unwind.stacks > 0 {
        eprintln!("ebsym: {}", report.unwind.summary_line());
    }
    if report.dropped.copies > 0 {
        eprintln!(
            "ebsym: left out {} (the target's stack memory; the unwound frames are kept; \
             --keep-stack-copies keeps them)",
            copies_text(report.dropped)
        );
    } else if a.keep_stack_copies && report.unwind.stacks > 0 {
        eprintln!(
            "ebsym: kept the stack copies: {} holds the target's stack memory \
             (`ebsym strip` removes it)",
            output.display()
        );
    }
    eprintln!("ebsym: wrote {}", output.display());
    // What a user looks at next: the top stacks of each kind the trace holds.
    // The trace read once for all kinds (it was once per kind).
    let mut out = std::io::stdout().lock();
    let trace = ebtrace_format::TraceReader::open(&output)
        .with_context(|| format!("cannot read {}", output.display()))?;
    for (kind, r) in ebtrace_analyze::reports::tops_from(trace, &EventKind::ALL, 5) {
        if !r.rows.is_empty() {
            writeln!(
                out,
                "== top {} stacks (ebsym top {} --kind {} for more)",
                kind.name(),
                output.display(),
                kind.name()
            )?;
            out.write_all(r.to_text().as_bytes())?;
            writeln!(out)?;
        }
    }
    Ok(())
}

/// "1,234 stack copies (5.6 MiB of target stack)".
fn copies_text(s: ebtrace_symbolize::trace::Stripped) -> String {
    use ebtrace_analyze::info::{size_text, thousands};
    format!(
        "{} stack cop{} ({} of target stack)",
        thousands(s.copies),
        if s.copies == 1 { "y" } else { "ies" },
        size_text(s.bytes)
    )
}

/// `ebsym export --format`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum ExportFormat {
    /// Chrome's JSON trace-event format, for ui.perfetto.dev and chrome://tracing.
    Perfetto,
    /// The Firefox Profiler's processed profile, for profiler.firefox.com.
    Firefox,
}

/// `ebsym export`: the trace as a Perfetto (Chrome JSON) trace or a Firefox profile.
fn export(
    a: &reports_cli::ReportArgs,
    format: ExportFormat,
    output: &std::path::Path,
    caps: ebtrace_analyze::reports::export::Caps,
) -> anyhow::Result<()> {
    use ebtrace_analyze::reports::export::{export_to_path, Format};
    let filter = a.filter();
    let format = match format {
        ExportFormat::Perfetto => Format::Perfetto,
        ExportFormat::Firefox => Format::Firefox,
    };
    let input = reports_cli::symbolized_input(a, &a.trace)?;
    let stats = export_to_path(input.reader()?, format, &filter, caps, output)
        .with_context(|| format!("cannot write {}", output.display()))?;
    eprint!("{}", ebtrace_analyze::reports::losses_text(&stats.losses));
    let capped = stats.capped();
    let kinds: Vec<String> = stats
        .kinds
        .iter()
        .map(|(k, (kept, _))| format!("{k} {kept}"))
        .collect();
    eprintln!(
        "ebsym: wrote {} ({}; {} processes, {} threads; {}{}{})",
        output.display(),
        ebtrace_analyze::info::size_text(stats.bytes),
        stats.processes,
        stats.threads,
        if kinds.is_empty() {
            "no events".to_string()
        } else {
            kinds.join(", ")
        },
        if stats.flows > 0 {
            format!("; {} wake-up flows", stats.flows)
        } else {
            String::new()
        },
        if capped.is_empty() {
            String::new()
        } else {
            format!("; capped: {}", capped.join(", "))
        },
    );
    Ok(())
}

/// `ebsym strip`: one line on stderr saying what was removed.
fn strip(trace: &std::path::Path, output: &std::path::Path) -> anyhow::Result<()> {
    let r = ebtrace_symbolize::strip::strip_stack_copies(trace, output)?;
    for d in &r.input_damage {
        eprintln!("ebsym: {}: {d}", trace.display());
    }
    let lost = if r.not_unwound > 0 {
        format!(
            "; {} of them never unwound (not symbolized): those stacks are now \
             frame-pointer walks only (`ebsym {}` first keeps them whole)",
            ebtrace_analyze::info::thousands(r.not_unwound),
            trace.display()
        )
    } else {
        String::new()
    };
    let strings = if r.removed.strings > 0 {
        format!(
            " and {} USDT string argument{} ({})",
            ebtrace_analyze::info::thousands(r.removed.strings),
            if r.removed.strings == 1 { "" } else { "s" },
            ebtrace_analyze::info::size_text(r.removed.string_bytes)
        )
    } else {
        String::new()
    };
    eprintln!(
        "ebsym: wrote {}: removed {}{strings}{lost}",
        output.display(),
        copies_text(r.removed)
    );
    Ok(())
}

/// `ebsym report`: the HTML page of a trace (and of its diff against `base`).
fn html_report(
    a: &reports_cli::ReportArgs,
    output: &std::path::Path,
    base: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let filter = a.filter();
    let started = std::time::Instant::now();
    let input = reports_cli::symbolized_input(a, &a.trace)?;
    let base_input = base
        .map(|b| reports_cli::symbolized_input(a, b))
        .transpose()?;
    let mut open = || input.reader().ok();
    let mut open_base = || base_input.as_ref().and_then(|b| b.reader().ok());
    let name = a.trace.display().to_string();
    let base_name = base.map(|b| b.display().to_string());
    let rules = ebtrace_analyze::reports::html::PageRules {
        idle: a.idle_rules()?,
        wrappers: a.wrapper_rules()?,
    };
    let opts = ebtrace_analyze::reports::html::PageOptions {
        filter: &filter,
        name: &name,
        base_name: base_name.as_deref(),
        n: a.n.max(100),
        rules: &rules,
    };
    let (html, stats) = ebtrace_analyze::reports::html::report(
        &mut open,
        base.is_some()
            .then_some(&mut open_base as &mut dyn FnMut() -> Option<_>),
        &opts,
    );
    std::fs::write(output, &html).with_context(|| format!("cannot write {}", output.display()))?;
    let capped: Vec<String> = stats
        .timeline
        .iter()
        .filter(|(_, (kept, all))| (*kept as u64) < *all)
        .map(|(k, (kept, all))| format!("{k} {kept} of {all}"))
        .collect();
    eprintln!(
        "ebsym: wrote {} ({}; {} kinds: {}; {} stacks, {} frames{}) in {:.1} s",
        output.display(),
        ebtrace_analyze::info::size_text(stats.bytes as u64),
        stats.kinds.len(),
        stats.kinds.join(", "),
        stats.stacks,
        stats.frames,
        if capped.is_empty() {
            String::new()
        } else {
            format!("; timeline capped: {}", capped.join(", "))
        },
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    let command = match cli.command {
        Some(c) => c,
        None if cli.symbolize.trace.is_some() => return symbolize(cli.symbolize),
        None => {
            use clap::CommandFactory;
            Cli::command().print_help()?;
            std::process::exit(2);
        }
    };
    match command {
        Command::Addr2line(a) => addr2line(a, &mut out)?,
        Command::Top {
            args,
            kind: TopKind::Exception,
            by,
        } => reports_cli::exceptions(&args, by.as_deref(), &mut out)?,
        Command::Top {
            args,
            kind: TopKind::Event(kind),
            by,
        } => reports_cli::top(&args, kind.0, by.as_deref(), &mut out)?,
        Command::Leaks { args, suppress, by } => {
            reports_cli::leaks(&args, &suppress, by.as_deref(), &mut out)?
        }
        Command::Heap { args, by, suppress } => reports_cli::heap(&args, &by, &suppress, &mut out)?,
        Command::Locks { args, by } => {
            reports_cli::top(&args, EventKind::Lock, by.as_deref(), &mut out)?
        }
        Command::Latency { args, kind } => reports_cli::latency(&args, kind.0, &mut out)?,
        Command::Tcp { args } => reports_cli::tcp(&args, &mut out)?,
        Command::Summary { args } => reports_cli::summary(&args, &mut out)?,
        Command::Threads { args } => reports_cli::threads(&args, &mut out)?,
        Command::Requests { args, tail } => reports_cli::requests(&args, tail, &mut out)?,
        Command::Heatmap {
            args,
            kind,
            output,
            columns,
            title,
        } => reports_cli::heatmap(&args, kind.0, &output, columns, title.as_deref())?,
        Command::Folded { args, kind, by } => {
            reports_cli::folded(&args, kind.0, by.as_deref(), &mut out)?
        }
        Command::Flamegraph {
            args,
            kind,
            by,
            output,
            title,
        } => reports_cli::flamegraph(&args, kind.0, by.as_deref(), title.as_deref(), &output)?,
        Command::Pprof {
            args,
            kind,
            by,
            output,
        } => reports_cli::pprof(&args, kind.0, by.as_deref(), &output)?,
        Command::Export {
            args,
            format,
            output,
            max_instants,
            max_slices,
            max_samples,
        } => export(
            &args,
            format,
            &output,
            ebtrace_analyze::reports::export::Caps {
                instants: max_instants,
                slices: max_slices,
                samples: max_samples,
            },
        )?,
        Command::Diff {
            args,
            after,
            kind,
            by,
            output,
            title,
            negate,
        } => reports_cli::diff(
            &args,
            reports_cli::DiffRequest {
                after: &after,
                kind: kind.0,
                by: by.as_deref(),
                output: output.as_deref(),
                title: title.as_deref(),
                negate,
            },
            &mut out,
        )?,
        Command::Report { args, output, base } => html_report(&args, &output, base.as_deref())?,
        Command::Info { trace, json } => {
            let info = ebtrace_analyze::info::summarize(&trace)
                .with_context(|| format!("cannot read {}", trace.display()))?;
            if json {
                serde_json::to_writer_pretty(&mut out, &ebtrace_analyze::Versioned::new(&info))?;
                writeln!(out)?;
            } else {
                out.write_all(info.to_text().as_bytes())?;
            }
        }
        Command::Strip { trace, output } => strip(&trace, &output)?,
        Command::Man { output } => {
            use clap::CommandFactory;
            ebtrace_manpages::write_all(&Cli::command(), &output, &["ebrec"])
                .with_context(|| format!("writing the man pages into {}", output.display()))?;
        }
        Command::Completions { shell, output } => {
            use clap::CommandFactory;
            let cmd = Cli::command();
            if let Some(dir) = output {
                ebtrace_manpages::write_completions(&cmd, &dir)
                    .with_context(|| format!("writing the completions into {}", dir.display()))?;
            } else if let Some(shell) = shell {
                ebtrace_manpages::print_completions(&cmd, shell, &mut out);
            }
        }
        Command::Dump { trace } => {
            use ebtrace_format::events::Family;
            use ebtrace_format::proto::record::Kind;
            let mut r = ebtrace_format::TraceReader::open(&trace)
                .with_context(|| format!("cannot read {}", trace.display()))?;
            fn events<B: Family>(b: &B, out: &mut impl Write) -> anyhow::Result<()>
            where
                B::Event: std::fmt::Debug,
            {
                for e in b.decode()? {
                    writeln!(out, "{e:?}")?;
                }
                Ok(())
            }
            for rec in r.by_ref() {
                match rec.kind {
                    Some(Kind::Allocs(b)) => events(&b, &mut out)?,
                    Some(Kind::Frees(b)) => events(&b, &mut out)?,
                    Some(Kind::Locks(b)) => events(&b, &mut out)?,
                    Some(Kind::Funcs(b)) => events(&b, &mut out)?,
                    Some(Kind::CpuSamples(b)) => events(&b, &mut out)?,
                    Some(Kind::Offcpu(b)) => events(&b, &mut out)?,
                    Some(Kind::MemGrowth(b)) => events(&b, &mut out)?,
                    Some(Kind::Syscalls(b)) => events(&b, &mut out)?,
                    Some(Kind::Bios(b)) => events(&b, &mut out)?,
                    Some(Kind::Runq(b)) => events(&b, &mut out)?,
                    Some(Kind::Tcp(b)) => events(&b, &mut out)?,
                    Some(Kind::Usdts(b)) => events(&b, &mut out)?,
                    Some(k) => writeln!(out, "{k:?}")?,
                    None => writeln!(out, "(unknown record kind)")?,
                }
            }
            for d in r.damage() {
                writeln!(out, "DAMAGE {d}")?;
            }
        }
    }
    out.flush()?;
    Ok(())
}

/// jemalloc (tikv-jemallocator, rustc's allocator): with two threads, glibc's malloc lost
/// a third of the speed of a large lookup to its arena locks (protoc, 100k addresses, median
/// of 5: glibc 1.45 s, jemalloc 1.11 s, mimalloc 1.3 s; peak RSS 161 / 172 / 180 MiB).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        // A closed pipe (ebsym … | head) is not an error.
        if e.chain().any(|c| {
            c.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
        }) {
            std::process::exit(0);
        }
        let chain: Vec<String> = e.chain().map(|c| c.to_string()).collect();
        eprintln!("ebsym: {}", chain.join(": "));
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// The subcommands that take `--kind`, with their default.
    const WITH_KIND: [(&str, EventKind); 7] = [
        ("top", EventKind::Alloc),
        ("latency", EventKind::Func),
        ("heatmap", EventKind::Syscall),
        ("folded", EventKind::Alloc),
        ("flamegraph", EventKind::Alloc),
        ("pprof", EventKind::Alloc),
        ("diff", EventKind::Alloc),
    ];

    fn parse(cmd: &str, kind: Option<&str>) -> Result<EventKind, clap::Error> {
        let mut args = vec!["ebsym", cmd, "t.pb.zst"];
        if cmd == "diff" {
            args.push("after.pb.zst");
        }
        if let Some(k) = kind {
            args.extend(["--kind", k]);
        }
        let kind = match Cli::try_parse_from(args)?.command {
            Some(Command::Top { kind, .. }) => return Ok(kind.event_kind()),
            Some(
                Command::Latency { kind, .. }
                | Command::Heatmap { kind, .. }
                | Command::Folded { kind, .. }
                | Command::Flamegraph { kind, .. }
                | Command::Pprof { kind, .. }
                | Command::Diff { kind, .. },
            ) => kind,
            c => panic!("{cmd}: {c:?}"),
        };
        Ok(kind.0)
    }

    #[test]
    fn every_kind_subcommand_accepts_every_name_and_alias_and_keeps_its_default() {
        let kinds = Cli::command()
            .get_subcommands()
            .filter(|c| c.get_arguments().any(|a| a.get_id() == "kind"))
            .count();
        assert_eq!(kinds, WITH_KIND.len(), "a --kind missing from WITH_KIND");
        for (cmd, default) in WITH_KIND {
            assert_eq!(parse(cmd, None).unwrap(), default, "{cmd}");
            for f in ebtrace_format::family::FAMILIES.iter().filter(|f| f.report) {
                for word in std::iter::once(&f.name).chain(f.aliases) {
                    let k = parse(cmd, Some(word)).unwrap_or_else(|e| panic!("{cmd} {word}: {e}"));
                    assert_eq!(k.family(), f.id, "{cmd} --kind {word}");
                }
            }
        }
    }

    #[test]
    fn an_unknown_kind_is_a_one_line_error_naming_the_kinds() {
        for (cmd, _) in WITH_KIND {
            for word in ["nonsense", "free", "Alloc"] {
                let e = parse(cmd, Some(word)).unwrap_err();
                assert_eq!(e.kind(), clap::error::ErrorKind::InvalidValue, "{cmd}");
                let text = e.to_string();
                assert_eq!(text.lines().count(), 1, "{cmd} {word}: {text}");
                assert!(
                    text.starts_with(&format!("error: unknown --kind {word} (")),
                    "{cmd}: {text}"
                );
                assert!(text.contains("func"), "{cmd}: {text}");
            }
        }
    }

    #[test]
    fn help_lists_the_kinds() {
        let mut cli = Cli::command();
        for (cmd, _) in WITH_KIND {
            let sub = cli.find_subcommand_mut(cmd).unwrap();
            let short = sub.render_help().to_string();
            let long = sub.render_long_help().to_string();
            for k in EventKind::ALL {
                let shown = match cmd {
                    "latency" => reports_cli::latency_kind(k),
                    "heatmap" => k.has_latency(),
                    _ => true,
                };
                let about = ebtrace_format::family::family(k.family()).about;
                assert_eq!(long.contains(about), shown, "{cmd} --help, {k:?}:\n{long}");
                // -h lists the values on a line that clap wraps: look for "name," or "name]".
                let words: Vec<&str> = short
                    .split(|c: char| c.is_whitespace() || c == ',' || c == ']' || c == '[')
                    .collect();
                assert_eq!(
                    words.contains(&k.name()),
                    shown,
                    "{cmd} -h, {k:?}:\n{short}"
                );
            }
            let by = ["top", "folded", "flamegraph", "pprof", "diff"].contains(&cmd);
            assert_eq!(long.contains("; --by bytes, count"), by, "{cmd}:\n{long}");
            assert!(
                long.contains("(also: mem, mem_growth)") || cmd == "latency" || cmd == "heatmap"
            );
        }
    }
}
