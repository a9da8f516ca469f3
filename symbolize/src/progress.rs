//! What the library tells about its long steps while they run, for a front end to show:
//! resolving the addresses of a trace ([`crate::trace::symbolize_trace_with`]) and
//! debuginfod downloads ([`crate::debuginfod::Client::with_progress`]). The library draws
//! nothing itself; ebsym implements [`Progress`] with progress bars on stderr.
//!
//! Reports do not change the work: the answers are the same with any implementation.

/// Receives progress. Every method has a default that ignores it. Called from rayon's
/// threads, hence `Send + Sync`.
pub trait Progress: Send + Sync {
    /// Resolving `total` addresses (of every module of a trace) starts.
    fn resolve_start(&self, total: u64) {
        let _ = total;
    }

    /// `n` more addresses are resolved.
    fn resolved(&self, n: u64) {
        let _ = n;
    }

    /// Resolving is over.
    fn resolve_done(&self) {}

    /// A download from `url` (of `len` bytes, when the server said) has run for more than a
    /// second; the bytes received so far and its end go to what this returns.
    fn download(&self, url: &str, len: Option<u64>) -> Box<dyn Download> {
        let _ = (url, len);
        Box::new(NoProgress)
    }
}

/// One download in progress (see [`Progress::download`]).
pub trait Download: Send {
    /// `bytes` received so far.
    fn position(&self, bytes: u64);
    /// The transfer is over (complete or not).
    fn done(&self);
}

/// Ignores every report: what the library uses when it is given none.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoProgress;

impl Progress for NoProgress {}

impl Download for NoProgress {
    fn position(&self, _bytes: u64) {}
    fn done(&self) {}
}
