//! `--max-size SIZE --rotate N`: the full file ends with its trailer and is renamed
//! `OUTPUT.1` (older ones shift, at most N kept); recording goes on in a new OUTPUT.
use crate::config::RecordConfig;
use crate::procfs;
use crate::session::Session;
use anyhow::{Context, Result};
use ebtrace_format::proto::{Header, Trailer};
use ebtrace_format::{TraceWriter, WriterOptions};
use std::path::{Path, PathBuf};

/// OUTPUT with `.k` before its `.pb.zst` (or at the end): the k-th older file of a rotation.
pub fn rotated_name(output: &Path, k: u32) -> PathBuf {
    let s = output.to_string_lossy();
    match s.strip_suffix(".pb.zst") {
        Some(stem) => PathBuf::from(format!("{stem}.{k}.pb.zst")),
        None => PathBuf::from(format!("{s}.{k}")),
    }
}

/// Shifts OUTPUT.1 … OUTPUT.(keep-1) up by one (dropping OUTPUT.keep) and moves OUTPUT to
/// OUTPUT.1.
fn shift_rotated(output: &Path, keep: u32) -> Result<()> {
    if keep == 0 {
        std::fs::remove_file(output)?;
        return Ok(());
    }
    let _ = std::fs::remove_file(rotated_name(output, keep));
    for k in (1..keep).rev() {
        let from = rotated_name(output, k);
        if from.exists() {
            std::fs::rename(&from, rotated_name(output, k + 1))?;
        }
    }
    std::fs::rename(output, rotated_name(output, 1))?;
    Ok(())
}

/// Ends the current file and goes on in a new OUTPUT, keeping `keep` older files.
pub fn rotate(s: &mut Session<'_>, a: &RecordConfig, keep: u32) -> Result<()> {
    let header = crate::header::header(a);
    end_and_restart(s, header, &a.output, "rotated", |output| {
        shift_rotated(output, keep)
    })
}

/// What became of an agent's window at its close ([`crate::Recording::close_window`]).
#[derive(Debug, Default)]
pub struct WindowClosed {
    /// Its file is at the closed path (whole, or cut at its last whole chunk by a write
    /// fault, which its trailer says); else it was not written, and why.
    pub not_written: Option<String>,
    /// A write fault cut it.
    pub cut: bool,
    /// The next window's file could not be created (why): nothing is written until a
    /// later window's can.
    pub next: Option<String>,
}

impl WindowClosed {
    /// Whether the window's file is at the closed path.
    pub fn kept(&self) -> bool {
        self.not_written.is_none()
    }
}

/// `ebrec agent`'s window: the current file (OUTPUT) ends with its trailer and becomes
/// `closed`; recording goes on in a new OUTPUT. A file that cannot be created or moved
/// (a full disk, the directory removed or read-only) does not stop the recording: the
/// window is not written, and the next one tries again.
pub fn rotate_to(
    s: &mut Session<'_>,
    header: Header,
    output: &Path,
    closed: &Path,
) -> Result<WindowClosed> {
    let now = procfs::clock_ns(libc::CLOCK_BOOTTIME);
    let cut = s.w.fault().is_some();
    // A window cut before its first chunk (its header) has nothing to read.
    let empty = s.w.fault().is_some_and(|f| f.kept.chunks == 0);
    let had_file = !s.w.is_detached();
    let mut trailer = window_trailer(s, now)?;
    if let Some(f) = s.w.fault() {
        trailer.stop_reason = crate::faults::fault_reason(f);
    }
    let tmp = output.with_extension("next");
    let mut done = WindowClosed {
        cut,
        ..Default::default()
    };
    match TraceWriter::create(&tmp, header, WriterOptions::default()) {
        Ok(next) => {
            s.rotate(next, trailer, now)?;
            s.w.flush()?;
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            s.w.detach(Some(trailer))?;
            done.next = Some(format!("cannot create {}: {e}", tmp.display()));
        }
    }
    done.not_written = if !had_file {
        Some("its file could not be created".into())
    } else if empty {
        let _ = std::fs::remove_file(output);
        Some("nothing of it reached the disk".into())
    } else {
        std::fs::rename(output, closed).err().map(|e| {
            let _ = std::fs::remove_file(output);
            format!(
                "cannot rename {} to {}: {e}",
                output.display(),
                closed.display()
            )
        })
    };
    if done.next.is_none() {
        if let Err(e) = std::fs::rename(&tmp, output) {
            // The directory went between the calls: the new file went with it.
            s.w.detach(None)?;
            done.next = Some(format!("cannot rename {}: {e}", tmp.display()));
        }
    }
    Ok(done)
}

/// The trailer of a file that ends now.
fn window_trailer(s: &mut Session<'_>, now: u64) -> Result<Trailer> {
    Ok(Trailer {
        end_time_ns: now,
        end_realtime_ns: procfs::clock_ns(libc::CLOCK_REALTIME),
        stop_reason: "window".into(),
        families: s.stats(now)?,
        ..Default::default()
    })
}

fn end_and_restart(
    s: &mut Session<'_>,
    header: Header,
    output: &Path,
    reason: &str,
    move_old: impl FnOnce(&Path) -> Result<()>,
) -> Result<()> {
    // A new file: the old one ends with its trailer and is moved away.
    let now = procfs::clock_ns(libc::CLOCK_BOOTTIME);
    let families = s.stats(now)?;
    let trailer = Trailer {
        end_time_ns: now,
        end_realtime_ns: procfs::clock_ns(libc::CLOCK_REALTIME),
        stop_reason: reason.into(),
        families,
        ..Default::default()
    };
    let tmp = output.with_extension("next");
    let next = TraceWriter::create(&tmp, header, WriterOptions::default())
        .with_context(|| format!("cannot create {}", tmp.display()))?;
    s.rotate(next, trailer, now)?;
    s.w.flush()?;
    move_old(output)?;
    std::fs::rename(&tmp, output)?;
    Ok(())
}
