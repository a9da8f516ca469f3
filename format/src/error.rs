//! The format crate's error type: a small kind plus a one-line message with context.
use std::fmt;

/// What went wrong, for callers that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Reading or writing the underlying file failed.
    Io,
    /// Writing failed for want of space: the disk or the user's quota is full (ENOSPC,
    /// EDQUOT). A recorder stops, or drops windows until space returns; the file it wrote
    /// is cut back to its last whole chunk.
    NoSpace,
    /// The input does not start with the ebtrace file magic.
    NotATrace,
    /// The file was written by a newer (or unknown) format version.
    UnsupportedVersion,
    /// The data is damaged in a way that prevents reading on.
    Corrupt,
}

/// An error with a one-line, user-facing message.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    source: Option<std::io::Error>,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            source: None,
        }
    }

    pub(crate) fn io(context: impl Into<String>, err: std::io::Error) -> Self {
        Error {
            kind: ErrorKind::Io,
            message: context.into(),
            source: Some(err),
        }
    }

    /// A write error, its kind from the OS's error number: [`ErrorKind::NoSpace`] for
    /// ENOSPC and EDQUOT, [`ErrorKind::Io`] for the others (EIO, EROFS, ...).
    pub fn write(context: impl Into<String>, err: std::io::Error) -> Self {
        let kind = match err.kind() {
            std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => {
                ErrorKind::NoSpace
            }
            _ => ErrorKind::Io,
        };
        Error {
            kind,
            message: context.into(),
            source: Some(err),
        }
    }

    /// The OS error under it, if any.
    pub fn io_error(&self) -> Option<&std::io::Error> {
        self.source.as_ref()
    }

    /// The kind of the error.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            Some(e) => write!(f, "{}: {}", self.message, e),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_ref().map(|e| e as _)
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::io("I/O error", e)
    }
}
