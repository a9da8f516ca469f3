//! What a search for the files of a build-id tried: each candidate (a path, or a
//! debuginfod URL) and what happened to it. Shared by [`crate::find`], which tries the
//! local places, and [`crate::debuginfod`], which asks the servers.
use std::fmt;
use std::path::PathBuf;

/// What happened to one candidate path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// No such file.
    Missing,
    /// Not readable or not an ELF file.
    Unreadable(String),
    /// Its build-id differs (the hex of the one it has, or "none").
    BuildIdMismatch(String),
    /// Its CRC32 differs from the `.gnu_debuglink` one.
    CrcMismatch,
    /// The right file, without DWARF.
    NoDebugInfo,
    /// Taken.
    Used,
    /// A server that did not answer with the file (not a 404): why.
    Unavailable(String),
}

/// One candidate and what happened to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Searched {
    pub path: PathBuf,
    pub outcome: Outcome,
}

impl fmt::Display for Searched {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.path.display())?;
        match &self.outcome {
            Outcome::Missing => write!(f, "not found"),
            Outcome::Unreadable(e) => write!(f, "unreadable ({e})"),
            Outcome::BuildIdMismatch(has) => write!(f, "build-id mismatch (has {has})"),
            Outcome::CrcMismatch => write!(f, "debuglink CRC mismatch"),
            Outcome::NoDebugInfo => write!(f, "no debug info"),
            Outcome::Used => write!(f, "used"),
            Outcome::Unavailable(why) => write!(f, "{why}"),
        }
    }
}
