//! How a write fault of the trace (a full disk, an I/O error) is told: in the exit line of
//! `ebrec record`, in a trailer's stop reason and in the agent's window. A leaf: the exit
//! summary and the rotation both read it.
use ebtrace_format::writer::Fault;
use ebtrace_format::ErrorKind;
use std::path::Path;
use std::time::SystemTime;

/// A wall clock time as `HH:MM:SS UTC`.
pub fn utc(t: SystemTime) -> String {
    let s = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let day = s % 86_400;
    format!(
        "{:02}:{:02}:{:02} UTC",
        day / 3600,
        day % 3600 / 60,
        day % 60
    )
}

/// A write fault's word: "disk full" (ENOSPC, EDQUOT) or "write error" (EIO and the rest).
pub fn fault_word(f: &Fault) -> &'static str {
    match f.error.kind() {
        ErrorKind::NoSpace => "disk full",
        _ => "write error",
    }
}

/// The trailer's stop reason after a write fault: the word, the error, what the file holds.
pub fn fault_reason(f: &Fault) -> String {
    let error = f
        .error
        .io_error()
        .map_or(String::new(), |e| format!(" ({e})"));
    let until = f.kept.until.map_or("its start".to_string(), utc);
    format!(
        "{}{error} at {}: the file holds the events up to {until}; {} events after them were not written",
        fault_word(f),
        utc(f.at),
        f.events_dropped
    )
}

/// The one line `ebrec record` ends with after a write fault (its error: exit status 1).
pub fn fault_line(f: &Fault, output: &Path, trailer: bool) -> String {
    let error = f
        .error
        .io_error()
        .map_or(String::new(), |e| format!(" ({e})"));
    let until = f.kept.until.map_or("its start".to_string(), utc);
    format!(
        "{}{error} at {}: stopped writing; {} holds {} whole chunks, {} events up to {until}{}; {} events lost",
        fault_word(f),
        utc(f.at),
        output.display(),
        f.kept.chunks,
        f.kept.events,
        if trailer {
            ", then its trailer"
        } else {
            ", no trailer (no room left for it)"
        },
        f.events_dropped
    )
}
