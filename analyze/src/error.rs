//! The analyze crate's error type, where a caller may decide on the kind (the user's rules:
//! `--idle` and `--wrapper` patterns, suppressions files): a small kind plus a one-line
//! message with its context, the words the CLI prints.
use std::fmt;

/// What went wrong, for callers that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Reading a file the user named failed (a suppressions file).
    Io,
    /// A pattern is empty (`--idle`, `--wrapper`, a suppressions file's line).
    EmptyPattern,
    /// A suppressions file's line is of another tool's kind (`race:PATTERN`), not a leak
    /// suppression.
    NotALeakRule,
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

    /// An [`ErrorKind::Io`] error: `context` says what was being read, `err` why it failed
    /// (shown after it: "context: err").
    pub(crate) fn io(context: impl Into<String>, err: std::io::Error) -> Self {
        Error {
            kind: ErrorKind::Io,
            message: context.into(),
            source: Some(err),
        }
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
