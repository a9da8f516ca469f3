//! The report subcommands of ebsym: top, leaks, heap, locks, latency, folded, flamegraph, pprof,
//! diff. A trace that is not symbolized yet is symbolized on the fly, in memory, with the
//! same options as `ebsym TRACE`, and the report reads those bytes (no temporary file):
//! [`symbolized_input`] is the one place that decides what the reports read.
use crate::find_args::FindArgs;
use anyhow::{bail, Context, Result};
use ebtrace_analyze::model::Filter;
use ebtrace_analyze::reports::{self, EventKind, Measure};
use ebtrace_format::TraceReader;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Options every report takes.
#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// The trace (raw or symbolized).
    pub trace: PathBuf,
    /// Only these processes (repeatable).
    #[arg(long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Only these threads (repeatable).
    #[arg(long = "tid", value_name = "TID")]
    pub tids: Vec<u32>,
    /// Only processes with this comm (repeatable).
    #[arg(long = "comm", value_name = "COMM")]
    pub comms: Vec<String>,
    /// Only threads whose name matches PATTERN (repeatable), e.g. `--thread 'worker-*'`.
    ///
    /// A glob (`*` any run, `?` one character; not a regex) matched against the name the
    /// trace gives the thread when the event happened (its comm, as pthread_setname_np or
    /// prctl set it), the process's comm for a thread the trace does not name. The kernel's
    /// histograms and --aggregate's counts belong to no thread and are left out.
    #[arg(long = "thread", value_name = "PATTERN")]
    pub threads: Vec<String>,
    /// Only events at least this many seconds into the trace.
    #[arg(long, value_name = "SECONDS")]
    pub from: Option<f64>,
    /// Only events before this many seconds into the trace.
    #[arg(long, value_name = "SECONDS")]
    pub to: Option<f64>,
    /// Rows to show.
    #[arg(short = 'n', default_value_t = 20)]
    pub n: usize,
    /// JSON for scripts (schema: docs/json.md; its first field, schema_version, changes
    /// when a field is renamed or removed).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub find: FindArgs,
    /// Keep C++ names mangled.
    #[arg(long)]
    pub no_demangle: bool,
    /// Also call idle the waits under a frame whose function matches PATTERN (repeatable).
    ///
    /// PATTERN is a glob (`*` any run, `?` one character; not a regex) matched against each
    /// frame's demangled function name, with and without its parameters, e.g. `--idle
    /// '*Scheduler::wait_next*'`. Off-CPU blocks and lock waits it matches are shown after
    /// the others with the reason "--idle PATTERN" (`top --kind offcpu|lock`, `locks`,
    /// `summary`); the user's patterns are tried before the default rules. A wait for a
    /// mutex another thread holds is never idle.
    #[arg(long = "idle", value_name = "PATTERN")]
    pub idle: Vec<String>,
    /// Turn off the default idle rules: every wait is reported as work, but those --idle
    /// names.
    ///
    /// The default rules (docs/guide.md, "Idle waits and contention"): epoll, poll and
    /// accept waits, a socket read at the top of a connection loop, a thread pool's wait
    /// for a task, a timer thread's sleep.
    #[arg(long)]
    pub no_idle_rules: bool,
    /// Also call an allocator wrapper every frame whose function matches PATTERN
    /// (repeatable): `--by site` rows and the summary's allocation finding name the first frame
    /// past the wrappers, e.g. `--wrapper 'Arena::*'`.
    ///
    /// PATTERN is a glob (`*` any run, `?` one character; not a regex) matched against
    /// each frame's demangled function name, with and without its parameters, as --idle's.
    /// Wrappers by default (docs/guide.md, "Blame the caller"): the C/C++ runtime's frames,
    /// the malloc family, operator new, the std::allocator chains, well-known programs'
    /// allocators (xmalloc, g_malloc, palloc, my_malloc, …), and the program's own
    /// functions that only pass a request on, from one line, for two or more callers.
    #[arg(long = "wrapper", value_name = "PATTERN")]
    pub wrappers: Vec<String>,
    /// Turn off the default wrapper rules (the allocator names and the program's own
    /// wrappers recognised by shape): only the C/C++ runtime's frames and --wrapper's
    /// patterns are folded.
    #[arg(long)]
    pub no_wrapper_rules: bool,
}

impl ReportArgs {
    /// The idle rules the options say: the defaults (unless --no-idle-rules) and each
    /// --idle.
    pub fn idle_rules(&self) -> Result<reports::idle::IdleRules> {
        let mut r = if self.no_idle_rules {
            reports::idle::IdleRules::none()
        } else {
            reports::idle::IdleRules::defaults()
        };
        for p in &self.idle {
            r.add_pattern(p).map_err(anyhow::Error::msg)?;
        }
        Ok(r)
    }

    /// The wrapper rules the options say: the defaults (unless --no-wrapper-rules) and
    /// each --wrapper.
    pub fn wrapper_rules(&self) -> Result<reports::WrapperRules> {
        let mut r = if self.no_wrapper_rules {
            reports::WrapperRules::none()
        } else {
            reports::WrapperRules::defaults()
        };
        for p in &self.wrappers {
            r.add_pattern(p).map_err(anyhow::Error::msg)?;
        }
        Ok(r)
    }

    /// The filter the options say.
    pub fn filter(&self) -> Filter {
        Filter {
            pids: self.pids.clone(),
            tids: self.tids.clone(),
            comms: self.comms.clone(),
            threads: self.threads.clone(),
            from: self.from,
            to: self.to,
        }
    }
}

/// A symbolized trace for the reports to read: the input file itself, or the bytes of a
/// symbolized copy made in memory.
pub enum Input {
    File(PathBuf),
    Memory(Vec<u8>),
}

/// What an [`Input`] is read from.
pub enum Source<'a> {
    File(std::fs::File),
    Memory(&'a [u8]),
}

impl Read for Source<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Source::File(f) => f.read(buf),
            Source::Memory(b) => b.read(buf),
        }
    }
}

impl Input {
    /// The symbolized trace, open for a report.
    pub fn reader(&self) -> Result<TraceReader<Source<'_>>> {
        let source = match self {
            Input::File(p) => Source::File(
                std::fs::File::open(p).with_context(|| format!("cannot open {}", p.display()))?,
            ),
            Input::Memory(b) => Source::Memory(b),
        };
        Ok(TraceReader::new(source)?)
    }
}

fn is_symbolized(path: &Path) -> Result<bool> {
    ebtrace_symbolize::trace::is_symbolized(path)
        .with_context(|| format!("cannot read {}", path.display()))
}

/// `trace` symbolized with the options of `a` (itself if it already is). A raw trace is
/// symbolized into memory: the symbolized copy costs about the raw trace's size in RAM.
pub fn symbolized_input(a: &ReportArgs, trace: &Path) -> Result<Input> {
    if is_symbolized(trace)? {
        return Ok(Input::File(trace.to_path_buf()));
    }
    let options = a.find.options(!a.no_demangle);
    let (report, bytes) = ebtrace_symbolize::trace::symbolize_trace_to_vec(
        trace,
        &options,
        &crate::progress::Resolving::default(),
    )
    .with_context(|| format!("cannot symbolize {}", trace.display()))?;
    // What would name more of its frames: one line per binary.
    for line in ebtrace_symbolize::hint::debug_hints(&report.modules, &options.locator) {
        eprintln!("ebsym: {line}");
    }
    Ok(Input::Memory(bytes))
}

/// `--by` of kind `k`: its default if not given.
fn measure(k: EventKind, by: Option<&str>) -> Result<Measure> {
    match by {
        None => Ok(k.default_measure()),
        Some(by) => match k.parse_measure(by) {
            Some(m) => Ok(m),
            None => bail!(
                "--by {by} does not apply to --kind {} (use one of: {}{})",
                k.name(),
                k.measures().join(", "),
                if k == EventKind::Alloc {
                    "; folded and flamegraph also temporary, peak, leaked"
                } else {
                    ""
                }
            ),
        },
    }
}

fn print(report: &reports::Report, json: bool, out: &mut dyn Write) -> Result<()> {
    json_or_text(json, report, || report.to_text(), out)
}

/// A report as pretty JSON (`--json`, with its `schema_version` first) or as its text.
fn json_or_text<T: serde::Serialize>(
    json: bool,
    report: &T,
    text: impl FnOnce() -> String,
    out: &mut dyn Write,
) -> Result<()> {
    if json {
        serde_json::to_writer_pretty(&mut *out, &ebtrace_analyze::Versioned::new(report))?;
        writeln!(out)?;
    } else {
        out.write_all(text().as_bytes())?;
    }
    Ok(())
}

/// `top`'s `--by`: a measure of kind `k`, a grouping of the rows (`stack`, `thread`,
/// `site`), or both, comma-separated (`--by site,count`).
fn measure_and_group(k: EventKind, by: Option<&str>) -> Result<(Measure, reports::Group)> {
    let (mut m, mut g) = (None, None);
    for word in by.into_iter().flat_map(|b| b.split(',')).map(str::trim) {
        match reports::Group::parse(word) {
            Some(_) if g.is_some() => bail!("--by {}: one grouping at most", by.unwrap()),
            Some(x) => g = Some(x),
            None if m.is_some() => bail!("--by {}: one measure at most", by.unwrap()),
            None => m = Some(measure(k, Some(word))?),
        }
    }
    let g = g.unwrap_or_default();
    if g == reports::Group::Site && k != EventKind::Alloc {
        bail!(
            "--by site is for --kind alloc (allocation sites; also ebsym leaks --by site), not --kind {}",
            k.name()
        );
    }
    Ok((m.unwrap_or_else(|| k.default_measure()), g))
}

pub fn top(a: &ReportArgs, k: EventKind, by: Option<&str>, out: &mut dyn Write) -> Result<()> {
    let (by, group) = measure_and_group(k, by)?;
    let idle = a.idle_rules()?;
    let wrappers = a.wrapper_rules()?;
    let input = symbolized_input(a, &a.trace)?;
    let opts = reports::TopOptions {
        kind: k,
        by,
        filter: &a.filter(),
        n: a.n,
        idle: &idle,
    };
    let r = reports::top_grouped(input.reader()?, &opts, group, &wrappers);
    print(&r, a.json, out)
}

/// `ebsym top --kind exception`: C++ exceptions by type and stack (symbolized: the types
/// are named by the symbolizer).
pub fn exceptions(a: &ReportArgs, by: Option<&str>, out: &mut dyn Write) -> Result<()> {
    if let Some(by) = by.filter(|b| *b != "count") {
        bail!("--by {by}: --kind exception is counted (--by count)");
    }
    let input = symbolized_input(a, &a.trace)?;
    let rep = reports::exceptions_from(input.reader()?, &a.filter(), a.n);
    json_or_text(a.json, &rep, || rep.to_text(), out)
}

/// `ebsym requests`: two passes over the (symbolized) trace.
pub fn requests(a: &ReportArgs, tail: f64, out: &mut dyn Write) -> Result<()> {
    if !(tail > 0.0 && tail < 100.0) {
        bail!("--tail {tail}: a percentile between 0 and 100 (99: the requests at or above p99)");
    }
    // Said before the symbolizer's notes: a trace without requests is one line.
    let header = ebtrace_format::TraceReader::open(&a.trace)
        .with_context(|| format!("cannot read {}", a.trace.display()))?
        .next()
        .and_then(|r| match r.kind {
            Some(ebtrace_format::proto::record::Kind::Header(h)) => Some(h),
            _ => None,
        });
    if header.is_some_and(|h| !h.options.iter().any(|o| o.key == "request")) {
        bail!("{}", reports::NO_REQUEST);
    }
    let input = symbolized_input(a, &a.trace)?;
    let opts = reports::RequestOptions {
        slowest: a.n,
        tail,
        ..Default::default()
    };
    let rep = reports::requests_from(|| input.reader().ok(), &a.filter(), &opts)
        .map_err(|e| anyhow::anyhow!(e))?;
    json_or_text(a.json, &rep, || rep.to_text(), out)
}

/// The kinds `ebsym latency` reports on.
pub fn latency_kind(k: EventKind) -> bool {
    matches!(
        k,
        EventKind::Func | EventKind::Syscall | EventKind::Bio | EventKind::Runq | EventKind::Usdt
    )
}

/// `ebsym latency`: --kind func from the probed calls' stacks (symbolized); syscall, bio
/// and runq from the kernel's histograms (no stacks: the raw trace is read as it is).
pub fn latency(a: &ReportArgs, k: EventKind, out: &mut dyn Write) -> Result<()> {
    match k {
        EventKind::Func => top(a, k, None, out),
        EventKind::Syscall | EventKind::Bio | EventKind::Runq => {
            let mut r = TraceReader::open(&a.trace)
                .with_context(|| format!("cannot open {}", a.trace.display()))?;
            let rep = reports::system_latency_from(&mut r, k, &a.filter(), a.n);
            json_or_text(a.json, &rep, || rep.to_text(), out)
        }
        EventKind::Usdt => {
            // Times and probe ids only: the raw trace as it is.
            let mut r = TraceReader::open(&a.trace)
                .with_context(|| format!("cannot open {}", a.trace.display()))?;
            let rep = reports::usdt_latency_from(&mut r, &a.filter(), a.n);
            json_or_text(a.json, &rep, || rep.to_text(), out)
        }
        _ => bail!(
            "ebsym latency --kind is {} (not {kind}); the others' stacks are in ebsym top --kind {kind}",
            crate::kind_arg::names(latency_kind),
            kind = k.name()
        ),
    }
}

/// `ebsym tcp`: connections per remote address (no stacks: the raw trace as it is).
pub fn tcp(a: &ReportArgs, out: &mut dyn Write) -> Result<()> {
    let mut r = TraceReader::open(&a.trace)
        .with_context(|| format!("cannot open {}", a.trace.display()))?;
    let rep = reports::tcp_from(&mut r, &a.filter());
    json_or_text(a.json, &rep, || rep.to_text(), out)
}

/// `ebsym threads`: where each thread group's time goes.
pub fn threads(a: &ReportArgs, out: &mut dyn Write) -> Result<()> {
    let input = symbolized_input(a, &a.trace)?;
    let r = input
        .reader()
        .with_context(|| format!("cannot open {}", a.trace.display()))?;
    let rep = reports::threads_from(r, &a.filter());
    json_or_text(a.json, &rep, || rep.to_text(), out)
}

/// `ebsym summary`: the top finding of each family.
pub fn summary(a: &ReportArgs, out: &mut dyn Write) -> Result<()> {
    let idle = a.idle_rules()?;
    let wrappers = a.wrapper_rules()?;
    let input = symbolized_input(a, &a.trace)?;
    let mut s =
        reports::summary::summary_rules(|| input.reader().ok(), &a.filter(), &idle, &wrappers);
    // C++ exceptions (ebrec --exceptions, said in the header): one more pass, for their
    // types.
    let exceptions = TraceReader::open(&a.trace).ok().and_then(|mut r| {
        r.next().and_then(|rec| match rec.kind {
            Some(ebtrace_format::proto::record::Kind::Header(h)) => {
                Some(h.options.iter().any(|o| o.key == "exceptions"))
            }
            _ => None,
        })
    });
    if exceptions == Some(true) {
        let rep = reports::exceptions_from(input.reader()?, &a.filter(), usize::MAX);
        if let Some(finding) = rep.finding() {
            s.findings.push(reports::summary::Finding {
                family: "exception".into(),
                finding,
                subject: rep
                    .rows
                    .iter()
                    .find(|r| r.event == "throw")
                    .map(|r| r.type_name.clone())
                    .unwrap_or_default(),
                value: rep.throws,
                unit: "count",
                share: None,
                total: rep.total,
                idle_share: None,
                idle: Default::default(),
            });
        }
    }
    json_or_text(a.json, &s, || s.to_text(), out)
}

/// `ebsym heatmap`: time x latency, as an SVG.
pub fn heatmap(
    a: &ReportArgs,
    k: EventKind,
    output: &Path,
    columns: usize,
    title: Option<&str>,
) -> Result<()> {
    use reports::heatmap::{build, render_svg, HeatmapOptions};
    if !k.has_latency() {
        bail!(
            "--kind {} has no latency to draw ({})",
            k.name(),
            crate::kind_arg::names(EventKind::has_latency)
        );
    }
    if !(1..=10_000).contains(&columns) {
        bail!("--columns must be between 1 and 10000");
    }
    let mut r = TraceReader::open(&a.trace)
        .with_context(|| format!("cannot open {}", a.trace.display()))?;
    let (l, points) = reports::system::heat_points(&mut r, k, &a.filter());
    let opts = HeatmapOptions {
        title: title.map_or_else(|| format!("{} latency", k.name()), str::to_string),
        columns,
        start_ns: l.header.start_time_ns,
        end_ns: l.last_event_ns.unwrap_or(0).max(l.header.start_time_ns),
        unit_label: "events".into(),
    };
    let h = build(&points, &opts);
    std::fs::write(output, render_svg(&h, &opts))
        .with_context(|| format!("cannot write {}", output.display()))?;
    eprint!("{}", reports::losses_text(&l.losses));
    eprintln!(
        "ebsym: wrote {} ({} events in {} columns x {} rows)",
        output.display(),
        h.total,
        h.columns,
        h.rows.len()
    );
    Ok(())
}

pub fn leaks(
    a: &ReportArgs,
    suppress: &[PathBuf],
    by: Option<&str>,
    out: &mut dyn Write,
) -> Result<()> {
    let group = match by {
        None => reports::Group::Stack,
        Some(w) => reports::Group::parse(w)
            .with_context(|| format!("--by {w}: one of stack, thread, site"))?,
    };
    let mut rules = reports::suppress::Suppressions::runtime();
    for f in suppress {
        rules.add_file(f).map_err(anyhow::Error::msg)?;
    }
    let wrappers = a.wrapper_rules()?;
    let input = symbolized_input(a, &a.trace)?;
    let opts = reports::LeakOptions {
        filter: &a.filter(),
        n: a.n,
        rules: &rules,
        group,
        wrappers: &wrappers,
    };
    let r = reports::leaks_grouped(input.reader()?, &opts);
    print(&r, a.json, out)
}

/// `ebsym heap`: heaptrack's numbers, per stack sorted `by` a measure's name.
pub fn heap(a: &ReportArgs, by: &str, suppress: &[PathBuf], out: &mut dyn Write) -> Result<()> {
    let Some(by) = reports::HeapMeasure::parse(by) else {
        bail!("--by {by}: one of allocations, bytes, temporary, peak, leaked");
    };
    let mut rules = reports::suppress::Suppressions::runtime();
    for f in suppress {
        rules.add_file(f).map_err(anyhow::Error::msg)?;
    }
    let input = symbolized_input(a, &a.trace)?;
    let r = reports::heap_with(input.reader()?, &a.filter(), by, a.n, &rules);
    json_or_text(a.json, &r, || r.to_text(), out)
}

/// `--kind alloc --by temporary|peak|leaked`: a measure of `ebsym heap` rather than of the
/// events, and the flame graph measure (unit) and title to draw it with.
fn heap_measure(
    k: EventKind,
    by: Option<&str>,
) -> Option<(reports::HeapMeasure, Measure, &'static str)> {
    use reports::HeapMeasure as H;
    match (k, by?) {
        (EventKind::Alloc, "temporary") => {
            Some((H::Temporary, Measure::Count, "Temporary allocations"))
        }
        (EventKind::Alloc, "peak") => {
            Some((H::Peak, Measure::Bytes, "Bytes live at the heap's peak"))
        }
        (EventKind::Alloc, "leaked") => {
            Some((H::Leaked, Measure::Bytes, "Leaked bytes (to act on)"))
        }
        _ => None,
    }
}

/// The folded stacks of a heap measure (every stack of `ebsym heap`), its notes on
/// stderr.
fn heap_folded(a: &ReportArgs, by: reports::HeapMeasure) -> Result<Vec<String>> {
    let input = symbolized_input(a, &a.trace)?;
    let rules = reports::suppress::Suppressions::runtime();
    let r = reports::heap_with(input.reader()?, &a.filter(), by, usize::MAX, &rules);
    for why in r.inexact.iter().chain(&r.notes) {
        eprintln!("ebsym: {why}");
    }
    eprint!("{}", reports::losses_text(&r.losses));
    Ok(r.folded_lines(by))
}

pub fn folded(a: &ReportArgs, k: EventKind, by: Option<&str>, out: &mut dyn Write) -> Result<()> {
    if let Some((hm, _, _)) = heap_measure(k, by) {
        for l in heap_folded(a, hm)? {
            writeln!(out, "{l}")?;
        }
        return Ok(());
    }
    let by = measure(k, by)?;
    let input = symbolized_input(a, &a.trace)?;
    let f = reports::folded_from(input.reader()?, k, by, &a.filter());
    for l in &f.lines {
        writeln!(out, "{l}")?;
    }
    if let Some(note) = &f.note {
        eprintln!("ebsym: {note}");
    }
    eprint!("{}", reports::losses_text(&f.losses));
    Ok(())
}

pub fn flamegraph(
    a: &ReportArgs,
    k: EventKind,
    by: Option<&str>,
    title: Option<&str>,
    output: &Path,
) -> Result<()> {
    if let Some((hm, m, name)) = heap_measure(k, by) {
        let lines = heap_folded(a, hm)?;
        if lines.is_empty() {
            bail!(
                "nothing to draw: no stack has {} bytes or allocations",
                hm.name()
            );
        }
        let f = std::fs::File::create(output)
            .with_context(|| format!("cannot create {}", output.display()))?;
        reports::flamegraph_by(
            &lines,
            k,
            m,
            Some(title.unwrap_or(name)),
            std::io::BufWriter::new(f),
        )?;
        eprintln!("ebsym: wrote {} ({} stacks)", output.display(), lines.len());
        return Ok(());
    }
    let by = measure(k, by)?;
    let input = symbolized_input(a, &a.trace)?;
    let folded = reports::folded_from(input.reader()?, k, by, &a.filter());
    if let Some(note) = &folded.note {
        bail!("nothing to draw: {note}");
    }
    let f = std::fs::File::create(output)
        .with_context(|| format!("cannot create {}", output.display()))?;
    folded.flamegraph(title, std::io::BufWriter::new(f))?;
    eprint!("{}", reports::losses_text(&folded.losses));
    eprintln!(
        "ebsym: wrote {} ({} stacks)",
        output.display(),
        folded.lines.len()
    );
    Ok(())
}

/// `ebsym pprof`: a gzip-compressed pprof profile of one kind.
pub fn pprof(a: &ReportArgs, k: EventKind, by: Option<&str>, output: &Path) -> Result<()> {
    if let Some((hm, _, _)) = heap_measure(k, by) {
        return heap_pprof(a, hm, output);
    }
    let by = measure(k, by)?;
    let input = symbolized_input(a, &a.trace)?;
    let st = reports::stacks_by_thread_from(input.reader()?, k, &a.filter());
    if let Some(note) = &st.note {
        eprintln!("ebsym: {note} (writing an empty profile)");
    }
    let profile = ebtrace_analyze::pprof::profile_by(&st, by);
    let f = std::fs::File::create(output)
        .with_context(|| format!("cannot create {}", output.display()))?;
    let mut w = std::io::BufWriter::new(f);
    ebtrace_analyze::pprof::write_gz(&profile, &mut w)?;
    w.flush()?;
    eprint!("{}", reports::losses_text(&st.losses));
    eprintln!(
        "ebsym: wrote {} ({} samples, {} locations, {} functions, {} mappings)",
        output.display(),
        profile.sample.len(),
        profile.location.len(),
        profile.function.len(),
        profile.mapping.len()
    );
    Ok(())
}

/// `ebsym pprof --kind alloc --by temporary|peak|leaked`: the profile of `ebsym heap`'s
/// measures per stack (allocations, bytes, temporary, peak, leaked), `by`'s the default.
fn heap_pprof(a: &ReportArgs, by: reports::HeapMeasure, output: &Path) -> Result<()> {
    let input = symbolized_input(a, &a.trace)?;
    let rules = reports::suppress::Suppressions::runtime();
    let r = reports::heap_with(input.reader()?, &a.filter(), by, usize::MAX, &rules);
    for why in r.inexact.iter().chain(&r.notes) {
        eprintln!("ebsym: {why}");
    }
    let profile = ebtrace_analyze::pprof::heap_profile(&r, by);
    let f = std::fs::File::create(output)
        .with_context(|| format!("cannot create {}", output.display()))?;
    let mut w = std::io::BufWriter::new(f);
    ebtrace_analyze::pprof::write_gz(&profile, &mut w)?;
    w.flush()?;
    eprint!("{}", reports::losses_text(&r.losses));
    eprintln!(
        "ebsym: wrote {} ({} samples, {} locations, {} functions; default sample type {})",
        output.display(),
        profile.sample.len(),
        profile.location.len(),
        profile.function.len(),
        profile
            .string_table
            .get(profile.default_sample_type as usize)
            .map_or("", String::as_str)
    );
    Ok(())
}

/// What `ebsym diff` compares and how it shows it (beside the report's common arguments).
#[derive(Debug, Clone, Copy)]
pub struct DiffRequest<'a> {
    /// The second trace (the first is the report's TRACE).
    pub after: &'a Path,
    pub kind: EventKind,
    /// `--by`: the measure (the kind's default when None).
    pub by: Option<&'a str>,
    /// `-o`: a differential flame graph here.
    pub output: Option<&'a Path>,
    pub title: Option<&'a str>,
    /// `--negate`: the flame graph drawn from the second trace's view.
    pub negate: bool,
}

/// `ebsym diff`: what grew and what shrank between two traces, as text, JSON or a
/// differential flame graph.
pub fn diff(a: &ReportArgs, req: DiffRequest<'_>, out: &mut dyn Write) -> Result<()> {
    let DiffRequest {
        after,
        kind: k,
        by,
        output,
        title,
        negate,
    } = req;
    let by = measure(k, by)?;
    let before_input = symbolized_input(a, &a.trace)?;
    let after_input = symbolized_input(a, after)?;
    let opts = reports::DiffOptions {
        kind: k,
        filter: &a.filter(),
        n: a.n,
    };
    let d = reports::diff_from(before_input.reader()?, after_input.reader()?, by, &opts);
    if let Some(output) = output {
        let f = std::fs::File::create(output)
            .with_context(|| format!("cannot create {}", output.display()))?;
        reports::diff_flamegraph(&d, k, title, negate, std::io::BufWriter::new(f))?;
        eprintln!("ebsym: wrote {}", output.display());
    }
    json_or_text(a.json, &d, || d.to_text(), out)
}
