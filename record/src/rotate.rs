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

/// `ebrec agent`'s window: the current file (OUTPUT) ends with its trailer and becomes
/// `closed`; recording goes on in a new OUTPUT.
pub fn rotate_to(s: &mut Session<'_>, header: Header, output: &Path, closed: &Path) -> Result<()> {
    end_and_restart(s, header, output, "window", |output| {
        std::fs::rename(output, closed)
            .with_context(|| format!("cannot rename {} to {}", output.display(), closed.display()))
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
