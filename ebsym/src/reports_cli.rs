//! The report subcommands of ebsym: top, leaks, locks, latency, folded, flamegraph, pprof,
//! diff. A trace that is not symbolized yet is symbolized on the fly (into a temporary
//! file) with the same options as `ebsym TRACE`: [`symbolized_input`] is the one place
//! that decides what the reports read.
use crate::find_args::FindArgs;
use anyhow::{bail, Context, Result};
use ebtrace_analyze::model::Filter;
use ebtrace_analyze::reports::{self, EventKind};
use std::io::Write;
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
    /// Only events at least this many seconds into the trace.
    #[arg(long, value_name = "SECONDS")]
    pub from: Option<f64>,
    /// Only events before this many seconds into the trace.
    #[arg(long, value_name = "SECONDS")]
    pub to: Option<f64>,
    /// Rows to show.
    #[arg(short = 'n', default_value_t = 20)]
    pub n: usize,
    /// JSON for scripts (schema in analyze/src/reports.rs and the README).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub find: FindArgs,
    /// Keep C++ names mangled.
    #[arg(long)]
    pub no_demangle: bool,
}

impl ReportArgs {
    fn filter(&self) -> Filter {
        Filter {
            pids: self.pids.clone(),
            tids: self.tids.clone(),
            comms: self.comms.clone(),
            from: self.from,
            to: self.to,
        }
    }
}

/// A symbolized trace for the reports to read: the input itself, or a temporary
/// symbolized copy (removed when this is dropped).
pub struct Input {
    path: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

impl Input {
    /// Where the symbolized trace is. The reports of `ebtrace-analyze` take a path today;
    /// once they take a reader, this is the one place to give them one instead.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn is_symbolized(path: &Path) -> Result<bool> {
    ebtrace_symbolize::trace::is_symbolized(path)
        .with_context(|| format!("cannot read {}", path.display()))
}

/// `trace` symbolized with the options of `a` (itself if it already is).
pub fn symbolized_input(a: &ReportArgs, trace: &Path) -> Result<Input> {
    if is_symbolized(trace)? {
        return Ok(Input {
            path: trace.to_path_buf(),
            _tmp: None,
        });
    }
    let tmp = tempfile::tempdir()?;
    let out = tmp.path().join("sym.pb.zst");
    ebtrace_symbolize::trace::symbolize_trace_with(
        trace,
        &out,
        &a.find.options(!a.no_demangle),
        &crate::progress::Resolving::default(),
    )
    .with_context(|| format!("cannot symbolize {}", trace.display()))?;
    Ok(Input {
        path: out,
        _tmp: Some(tmp),
    })
}

fn kind_and_by(kind: &str, by: Option<&str>) -> Result<(EventKind, String)> {
    let k = EventKind::parse(kind).with_context(|| {
        format!("unknown --kind {kind} (alloc, lock, func, cpu, offcpu, memgrowth)")
    })?;
    let by = by.unwrap_or(k.measures()[0]);
    if !k.measures().contains(&by) {
        bail!(
            "--by {by} does not apply to --kind {kind} (use one of: {})",
            k.measures().join(", ")
        );
    }
    Ok((k, by.to_string()))
}

fn print(report: &reports::Report, json: bool, out: &mut dyn Write) -> Result<()> {
    if json {
        serde_json::to_writer_pretty(&mut *out, report)?;
        writeln!(out)?;
    } else {
        out.write_all(report.to_text().as_bytes())?;
    }
    Ok(())
}

pub fn top(a: &ReportArgs, kind: &str, by: Option<&str>, out: &mut dyn Write) -> Result<()> {
    let (k, by) = kind_and_by(kind, by)?;
    let input = symbolized_input(a, &a.trace)?;
    let r = reports::top(input.path(), k, &by, &a.filter(), a.n)?;
    print(&r, a.json, out)
}

pub fn leaks(a: &ReportArgs, out: &mut dyn Write) -> Result<()> {
    let input = symbolized_input(a, &a.trace)?;
    let r = reports::leaks(input.path(), &a.filter(), a.n)?;
    print(&r, a.json, out)
}

pub fn folded(a: &ReportArgs, kind: &str, by: Option<&str>, out: &mut dyn Write) -> Result<()> {
    let (k, by) = kind_and_by(kind, by)?;
    let input = symbolized_input(a, &a.trace)?;
    let f = reports::folded(input.path(), k, &by, &a.filter())?;
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
    kind: &str,
    by: Option<&str>,
    title: Option<&str>,
    output: &Path,
) -> Result<()> {
    let (k, by) = kind_and_by(kind, by)?;
    let input = symbolized_input(a, &a.trace)?;
    let folded = reports::folded(input.path(), k, &by, &a.filter())?;
    if let Some(note) = &folded.note {
        bail!("nothing to draw: {note}");
    }
    let f = std::fs::File::create(output)
        .with_context(|| format!("cannot create {}", output.display()))?;
    reports::flamegraph(&folded.lines, k, &by, title, std::io::BufWriter::new(f))?;
    eprint!("{}", reports::losses_text(&folded.losses));
    eprintln!(
        "ebsym: wrote {} ({} stacks)",
        output.display(),
        folded.lines.len()
    );
    Ok(())
}

/// `ebsym pprof`: a gzip-compressed pprof profile of one kind.
pub fn pprof(a: &ReportArgs, kind: &str, by: Option<&str>, output: &Path) -> Result<()> {
    let (k, by) = kind_and_by(kind, by)?;
    let input = symbolized_input(a, &a.trace)?;
    let st = ebtrace_analyze::reports::stacks(input.path(), k, &a.filter())?;
    if let Some(note) = &st.note {
        eprintln!("ebsym: {note} (writing an empty profile)");
    }
    let profile = ebtrace_analyze::pprof::profile(&st, &by);
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

/// `ebsym diff`: what grew and what shrank between two traces, as text, JSON or a
/// differential flame graph.
#[allow(clippy::too_many_arguments)]
pub fn diff(
    a: &ReportArgs,
    after: &Path,
    kind: &str,
    by: Option<&str>,
    output: Option<&Path>,
    title: Option<&str>,
    negate: bool,
    out: &mut dyn Write,
) -> Result<()> {
    let (k, by) = kind_and_by(kind, by)?;
    let before_input = symbolized_input(a, &a.trace)?;
    let after_input = symbolized_input(a, after)?;
    let d = reports::diff(
        before_input.path(),
        after_input.path(),
        k,
        &by,
        &a.filter(),
        a.n,
    )?;
    if let Some(output) = output {
        let f = std::fs::File::create(output)
            .with_context(|| format!("cannot create {}", output.display()))?;
        reports::diff_flamegraph(&d, k, title, negate, std::io::BufWriter::new(f))?;
        eprintln!("ebsym: wrote {}", output.display());
    }
    if a.json {
        serde_json::to_writer_pretty(&mut *out, &d)?;
        writeln!(out)?;
    } else {
        out.write_all(d.to_text().as_bytes())?;
    }
    Ok(())
}
