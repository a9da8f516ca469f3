//! `--request-slow`: which requests are slow, so that the kernel keeps their blocks whole.
//!
//! With `--request` and `--offcpu` the kernel splits every request's time exactly, and a
//! time-weighted sample of the blocks names that time (1 ms by default). A slow request made
//! of many short waits (a hundred 200 us reads) then has its causes named only by the blocks
//! the sample drew. Tail-based detail: once a request has run for the slow threshold, every
//! block of it that ends from then on is kept whole, with its stacks and waker, whatever its
//! length (`req_slow_ns` in bpf/profile.bpf.c). Only the tail's requests pay for it, and only
//! past the threshold: a request cannot be known slow before it has been.
//!
//! The threshold is a fixed duration (`--request-slow 5ms`) or adaptive, a quantile of the
//! requests done so far (`auto`: p99; `p95`, `p99.9`): once a second the recorder takes the
//! quantile of the last [`WINDOW`] requests' durations (from the done events the kernel
//! splits) and writes it when it moved by more than a tenth. The first is set as soon as ten
//! requests lie past the quantile's rank (1,000 done for p99; [`needed`]); nothing is kept
//! whole before. Each new threshold is a `ProbeChange` record (setting
//! `request-slow-ns`), so `ebsym` knows which blocks were kept by it.
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How many of the latest requests the adaptive threshold is taken from.
pub const WINDOW: usize = 4096;
/// Requests done before an adaptive threshold is set: at least this many, and enough for ten
/// of them to lie past the quantile (1,000 for p99): a quantile of the first few requests
/// done is biased to the fast ones (the slow ones have not ended yet).
pub const MIN_REQUESTS: usize = 100;

/// The requests an adaptive threshold at quantile `q` (percent) waits for.
fn needed(q: f64) -> usize {
    ((10.0 / (1.0 - q / 100.0)).round() as usize).clamp(MIN_REQUESTS, WINDOW)
}

/// `--request-slow`'s value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RequestSlow {
    /// No block kept for its request's length.
    Off,
    /// A fixed threshold, ns.
    Fixed(u64),
    /// The quantile (percent, 50 to 99.99) of the requests done so far.
    Tail(f64),
}

impl std::fmt::Display for RequestSlow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestSlow::Off => write!(f, "off"),
            RequestSlow::Fixed(ns) => write!(f, "{}us", ns / 1000),
            RequestSlow::Tail(q) => write!(f, "p{q}"),
        }
    }
}

impl std::str::FromStr for RequestSlow {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "--request-slow {s:?}: expected auto, off, a quantile (p95, p99.9) or a duration (500us, 5ms, 1s)"
            )
        };
        match s {
            "off" | "0" => return Ok(RequestSlow::Off),
            "auto" => return Ok(RequestSlow::Tail(99.0)),
            _ => {}
        }
        if let Some(q) = s.strip_prefix('p') {
            let q: f64 = q.parse().map_err(|_| bad())?;
            if !(50.0..=99.99).contains(&q) {
                return Err(format!(
                    "--request-slow {s}: the quantile must be p50 to p99.99"
                ));
            }
            return Ok(RequestSlow::Tail(q));
        }
        let (num, unit) = s
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .map_or((s, ""), |i| s.split_at(i));
        let mult = match unit {
            "ns" => 1.0,
            "us" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            _ => return Err(bad()),
        };
        let v: f64 = num.parse().map_err(|_| bad())?;
        let ns = v * mult;
        if !(1e3..=3600e9).contains(&ns) {
            return Err(format!("--request-slow {s}: between 1us and 1h"));
        }
        Ok(RequestSlow::Fixed(ns as u64))
    }
}

/// The adaptive threshold: the latest requests' durations, and the threshold in force.
#[derive(Debug)]
pub struct SlowTail {
    quantile: f64,
    recent: VecDeque<u64>,
    done: u64,
    since: Instant,
    /// The threshold in force, ns (0: none yet).
    pub threshold_ns: u64,
    /// Changes made.
    pub changes: u32,
}

impl SlowTail {
    pub fn new(quantile: f64) -> SlowTail {
        SlowTail {
            quantile,
            recent: VecDeque::with_capacity(WINDOW),
            done: 0,
            since: Instant::now(),
            threshold_ns: 0,
            changes: 0,
        }
    }

    /// A request done, `ns` long.
    pub fn done(&mut self, ns: u64) {
        if self.recent.len() == WINDOW {
            self.recent.pop_front();
        }
        self.recent.push_back(ns);
        self.done += 1;
    }

    /// Called often; once a second at most, the new threshold when it moved by more than a
    /// tenth, and why.
    /// The first threshold is set as soon as enough requests are done ([`needed`]).
    pub fn tick(&mut self) -> Option<(u64, String)> {
        let first = self.threshold_ns == 0 && self.recent.len() >= needed(self.quantile);
        if !first && self.since.elapsed() < Duration::from_secs(1) {
            return None;
        }
        self.since = Instant::now();
        self.decide()
    }

    fn decide(&mut self) -> Option<(u64, String)> {
        let n = self.recent.len();
        if n < needed(self.quantile) {
            return None;
        }
        let mut v: Vec<u64> = self.recent.iter().copied().collect();
        // the nearest rank: the smallest duration with at least q% of the requests at or
        // under it
        let rank = ((self.quantile / 100.0 * n as f64).ceil() as usize).clamp(1, n) - 1;
        let (_, q, _) = v.select_nth_unstable(rank);
        let q = (*q).max(1);
        let old = self.threshold_ns;
        if old != 0 && q.abs_diff(old) * 10 <= old {
            return None;
        }
        self.threshold_ns = q;
        self.changes += 1;
        Some((
            q,
            format!(
                "--request-slow p{}: {}% of the last {n} requests ({} done) took {} us or less; blocks of a request past it are kept whole",
                self.quantile,
                self.quantile,
                self.done,
                q / 1000
            ),
        ))
    }

    /// For the exit summary.
    pub fn summary(&self) -> String {
        if self.threshold_ns == 0 {
            format!(
                "--request-slow p{}: no threshold set while recording ({} requests done; it is set once {} are): no block kept for its request's length",
                self.quantile, self.done, needed(self.quantile)
            )
        } else {
            format!(
                "--request-slow p{}: blocks of requests past {} us kept whole ({} requests done, {} change(s); ebsym info lists them)",
                self.quantile,
                self.threshold_ns / 1000,
                self.done,
                self.changes
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form_and_refuses_the_rest() {
        assert_eq!("auto".parse::<RequestSlow>(), Ok(RequestSlow::Tail(99.0)));
        assert_eq!("p99.9".parse::<RequestSlow>(), Ok(RequestSlow::Tail(99.9)));
        assert_eq!("off".parse::<RequestSlow>(), Ok(RequestSlow::Off));
        assert_eq!(
            "5ms".parse::<RequestSlow>(),
            Ok(RequestSlow::Fixed(5_000_000))
        );
        assert_eq!(
            "250us".parse::<RequestSlow>(),
            Ok(RequestSlow::Fixed(250_000))
        );
        assert_eq!(
            "1.5s".parse::<RequestSlow>(),
            Ok(RequestSlow::Fixed(1_500_000_000))
        );
        for bad in [
            "p10", "p100", "5", "5 ms", "ms", "-1ms", "500ns", "2h", "fast",
        ] {
            let e = bad.parse::<RequestSlow>().unwrap_err();
            assert!(e.starts_with("--request-slow"), "{bad}: {e}");
        }
        assert_eq!(RequestSlow::Fixed(5_000_000).to_string(), "5000us");
        assert_eq!(RequestSlow::Tail(99.0).to_string(), "p99");
    }

    #[test]
    fn the_threshold_is_the_quantile_of_the_latest_and_moves_by_a_tenth() {
        let mut t = SlowTail::new(99.0);
        for _ in 0..50 {
            t.done(20_000);
        }
        assert_eq!(t.decide(), None, "under the 1,000 needed");
        assert_eq!(
            (needed(99.0), needed(95.0), needed(50.0), needed(99.99)),
            (1000, 200, 100, WINDOW)
        );
        // 990 fast (20 us), 10 slow (10 ms): p99 is the last fast one
        for _ in 0..940 {
            t.done(20_000);
        }
        for _ in 0..10 {
            t.done(10_000_000);
        }
        assert_eq!(t.decide().unwrap().0, 20_000);
        // two more slow: 12 of 1,002 now, the nearest rank falls on a slow one
        t.done(10_000_000);
        t.done(10_000_000);
        let (q, why) = t.decide().unwrap();
        assert_eq!(q, 10_000_000);
        assert!(why.contains("10000 us or less"), "{why}");
        // within a tenth: no change
        for _ in 0..5 {
            t.done(10_500_000);
        }
        assert_eq!(t.decide(), None);
        assert_eq!(t.changes, 2);
        // the window forgets: WINDOW fast requests later the slow ones are gone
        for _ in 0..WINDOW {
            t.done(30_000);
        }
        assert_eq!(t.decide().unwrap().0, 30_000);
        assert!(t.summary().contains("past 30 us"), "{}", t.summary());
    }
}
