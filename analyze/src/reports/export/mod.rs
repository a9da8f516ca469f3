//! `ebsym export`: a trace as a timeline for other viewers.
//!
//! - [`Format::Perfetto`] (`perfetto.rs`): Chrome's JSON trace-event format (the "JSON
//!   Object Format" that ui.perfetto.dev and chrome://tracing load).
//! - [`Format::Firefox`] (`firefox.rs`): the Firefox Profiler's processed profile, made
//!   with samply's `fxprof-processed-profile` crate.
//!
//! Both read the trace once ([`collect`]): every event that passes the filter is counted,
//! and a bounded number of them is kept (see [`Caps`]); the stacks are named after the
//! whole trace is read (the symbolizer's records come at the end of a symbolized trace).
//! Times are relative to the trace's start (the header's `start_time_ns`, boottime): 0 is
//! the start of the recording; the header's wall-clock start (`start_realtime_ns`) is
//! stated beside (Perfetto: `otherData.start_realtime_ns`; Firefox: `meta.startTime`).
//! Nothing of the target's memory is written: names, files and lines of frames,
//! addresses (mutexes, frames' ips), sizes, durations, thread ids; no stack copy, no
//! `--func` argument or return value.
mod collect;
mod firefox;
mod perfetto;

use crate::model::{Filter, Trace};
use std::io::Write;
use std::path::Path;

pub use collect::{
    Caps, ExportStats, Format, DEFAULT_MAX_INSTANTS, DEFAULT_MAX_SAMPLES, DEFAULT_MAX_SLICES,
};

/// Writes the export of `trace` in `format` to `out`.
pub fn export_from(
    trace: impl Trace,
    format: Format,
    filter: &Filter,
    caps: Caps,
    out: &mut dyn Write,
) -> std::io::Result<ExportStats> {
    let c = collect::collect(trace, format, filter, caps);
    let mut out = Counting { inner: out, n: 0 };
    let mut stats = match format {
        Format::Perfetto => perfetto::write(c, caps, &mut out)?,
        Format::Firefox => firefox::write(c, &mut out)?,
    };
    out.flush()?;
    stats.bytes = out.n;
    Ok(stats)
}

/// [`export_from`] into the file `path`, gzip-compressed when its name ends in `.gz`.
pub fn export_to_path(
    trace: impl Trace,
    format: Format,
    filter: &Filter,
    caps: Caps,
    path: &Path,
) -> std::io::Result<ExportStats> {
    let f = std::fs::File::create(path)?;
    let w = std::io::BufWriter::with_capacity(1 << 20, f);
    if path.extension().is_some_and(|e| e == "gz") {
        let mut gz = flate2::write::GzEncoder::new(w, flate2::Compression::default());
        let stats = export_from(trace, format, filter, caps, &mut gz)?;
        gz.finish()?.flush()?;
        Ok(stats)
    } else {
        let mut w = w;
        let stats = export_from(trace, format, filter, caps, &mut w)?;
        w.flush()?;
        Ok(stats)
    }
}

struct Counting<'a> {
    inner: &'a mut dyn Write,
    n: u64,
}

impl Write for Counting<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.n += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}
