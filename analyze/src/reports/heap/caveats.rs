//! What the recording's options and the sink's counts say about the heap report's
//! numbers: why they are not exact (`inexact`), and what the report could not do (`notes`).
use super::order::SLACK_NS;
use super::sink::HeapSink;
use crate::model::Loaded;

/// The recording options that bear on the heap report (the header's `ebrec record`
/// options).
struct Recording {
    /// `--no-free`: frees were not tracked.
    no_free: bool,
    /// `--alloc=N`: only allocations of at least N bytes (0: all).
    min_bytes: u64,
    /// `--sample N`: one allocation in N kept.
    sample_one_in: u64,
}

impl Recording {
    fn of(l: &Loaded) -> Recording {
        let opt = |k: &str| {
            l.header
                .options
                .iter()
                .find(|o| o.key == k)
                .map(|o| o.value.clone())
        };
        Recording {
            no_free: opt("no-free").as_deref() == Some("true"),
            min_bytes: opt("alloc")
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0),
            sample_one_in: opt("sample")
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(1),
        }
    }
}

/// What the heap report says about its own numbers.
pub(super) struct Caveats {
    /// Why the numbers are not exact (the report's `inexact`).
    pub(super) inexact: Vec<String>,
    /// What the report could not do (the report's `notes`).
    pub(super) notes: Vec<String>,
    /// Whether every allocation was seen, in order: what temporary needs.
    pub(super) all_seen: bool,
    /// The recording did not track frees (`--no-free`).
    pub(super) no_free: bool,
}

impl HeapSink {
    /// The caveats of the report of this sink, read from the trace `l` was read into.
    pub(super) fn caveats(&self, l: &Loaded) -> Caveats {
        let rec = Recording::of(l);
        let (inexact, mut all_seen) = self.inexact(l, &rec);
        if rec.no_free {
            all_seen = false;
        }
        Caveats {
            inexact,
            notes: self.notes(&rec),
            all_seen,
            no_free: rec.no_free,
        }
    }

    /// Why the numbers are not exact, and whether every allocation was seen all the same
    /// (frees aside).
    fn inexact(&self, l: &Loaded, rec: &Recording) -> (Vec<String>, bool) {
        let mut inexact = Vec::new();
        let mut all_seen = true;
        if self.aggregated > 0 {
            all_seen = false;
            inexact.push(
                "allocations were counted in the kernel (--aggregate): no allocation or free is an event, so there are no temporary allocations, no peak and no lifetimes".to_string(),
            );
        }
        if self.max_period > 1 {
            all_seen = false;
            inexact.push(format!(
                "allocations were sampled by bytes (--sample-bytes, period up to {}): counts, bytes, the peak and leaks are estimates (each sampled block scaled by its inverse probability); temporary allocations cannot be told (the allocations between are not seen)",
                self.max_period
            ));
        } else if self.sampled_small > 0 {
            inexact.push(format!(
                "{} allocations smaller than 14 bytes were recorded at --sample-bytes 1 by an ebrec that kept an allocation of s bytes with probability 1 - e^-s there (today's keeps them all): some tiny allocations may be missing, and those seen are scaled",
                self.sampled_small
            ));
        }
        let sample_one_in = rec.sample_one_in;
        if sample_one_in > 1 {
            all_seen = false;
            inexact.push(format!(
                "one allocation in {sample_one_in} was kept (--sample {sample_one_in}): the numbers are of that sample, not scaled"
            ));
        }
        let min_bytes = rec.min_bytes;
        if min_bytes > 0 {
            all_seen = false;
            inexact.push(format!(
                "only allocations of at least {min_bytes} bytes were traced (--alloc={min_bytes})"
            ));
        }
        if !l.alloc_pauses.is_empty() {
            all_seen = false;
            inexact.push(format!(
                "the allocator probes were paused {} time(s) by --max-cpu",
                l.alloc_pauses.len()
            ));
        }
        let lost: u64 = l
            .losses
            .recorded
            .iter()
            .filter(|(k, _)| k.starts_with("alloc/") || k.starts_with("free/"))
            .map(|(_, v)| *v)
            .sum();
        if lost > 0 {
            inexact.push(format!(
                "{lost} allocation or free events were lost while recording (see losses)"
            ));
        }
        (inexact, all_seen)
    }

    /// What the report could not do: no frees tracked, events taken late, frees of blocks
    /// not seen allocated.
    fn notes(&self, rec: &Recording) -> Vec<String> {
        let mut notes = Vec::new();
        if rec.no_free {
            notes.push(
                "the recording did not track frees (--no-free): no temporary allocations, peak, lifetimes or leaks".into(),
            );
        }
        if self.late > 0 {
            notes.push(format!(
                "{} events came more than {} ms out of time order and were taken late: the temporary count and the peak may be off by them",
                self.late,
                SLACK_NS / 1_000_000
            ));
        }
        if self.unmatched_frees > 0 {
            notes.push(format!(
                "{} frees of blocks not seen allocated (allocated before the recording, or their allocation lost)",
                self.unmatched_frees
            ));
        }
        notes
    }
}
