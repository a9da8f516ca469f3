//! `--offcpu-rate`, `--syscalls-rate`, `--runq-rate`: the time-weighted samples bounded in
//! events a second.
//!
//! A time-weighted sample (`--offcpu-sample` and its kin) keeps a block, call or wait of
//! length d shorter than its unit with probability d/unit, and the event stands for `unit`
//! of time: its cost is the stacks of the events kept, and their number is about the time
//! spent in short blocks a second over the unit. That time grows with the threads: 16
//! backends of a database waiting for their clients' next queries are 16 s of blocks a
//! second, 1,600 kept blocks a second at 10 ms, three stack walks each (a fifth to a half of
//! what `--offcpu` costs such a server). Once a second the pacer compares the events the
//! family wrote with its rate: more than 1.5 times the rate multiplies the unit by the
//! power of two that brings them back under it (up to 1 s, the most the programs take),
//! fewer than a quarter halves it (not below the user's unit). Each event carries the unit
//! it was decided with (`weight_ns`), so totals stay unbiased across the changes; a block,
//! call or wait at least as long as the unit in force is still always kept. Every change is
//! a `ProbeChange` record (setting `offcpu-sample-ns`, `syscalls-sample-ns` or
//! `runq-sample-ns`). A unit of 0 (every event, exact) is the user's choice and stays.
use ebtrace_proto::v1::EventFamily;
use std::time::{Duration, Instant};

/// The largest unit, ns (the programs' products stay under 2^64 up to 1 s).
pub const UNIT_CEIL_NS: u64 = 1_000_000_000;

/// One family's unit, paced.
#[derive(Debug, Clone)]
pub struct Pacer {
    pub family: EventFamily,
    /// The ProbeChange setting: "offcpu-sample-ns", "syscalls-sample-ns", "runq-sample-ns".
    pub setting: &'static str,
    /// The flag, for the reasons and the summary: "--offcpu-rate".
    pub flag: &'static str,
    /// Events a second aimed at.
    pub rate: u64,
    /// The user's unit (the least), ns.
    pub floor_ns: u64,
    /// The unit in force, ns.
    pub unit_ns: u64,
    /// The highest unit it reached, and when first (seconds into the recording).
    pub highest_ns: u64,
    pub highest_at: f64,
    /// Changes made.
    pub changes: u32,
    kept: u64,
    since: Instant,
}

impl Pacer {
    /// A pacer for a family whose sample has `unit_ns` (None when it is not paced: no
    /// sample, a rate of 0, or a family without a time-weighted sample).
    pub fn new(family: EventFamily, rate: u64, unit_ns: u64) -> Option<Pacer> {
        let (setting, flag) = match family {
            EventFamily::Offcpu => ("offcpu-sample-ns", "--offcpu-rate"),
            EventFamily::Syscall => ("syscalls-sample-ns", "--syscalls-rate"),
            EventFamily::Runq => ("runq-sample-ns", "--runq-rate"),
            _ => return None,
        };
        if rate == 0 || unit_ns == 0 {
            return None;
        }
        Some(Pacer {
            family,
            setting,
            flag,
            rate,
            floor_ns: unit_ns,
            unit_ns,
            highest_ns: unit_ns,
            highest_at: 0.0,
            changes: 0,
            kept: 0,
            since: Instant::now(),
        })
    }

    /// Called often with the family's events written so far and the seconds since the
    /// recording started; once a second at most, the new unit when it changes and why.
    pub fn tick(&mut self, kept: u64, at_s: f64) -> Option<(u64, String)> {
        let dt = self.since.elapsed();
        if dt < Duration::from_secs(1) {
            return None;
        }
        let n = kept.saturating_sub(self.kept);
        self.kept = kept;
        self.since = Instant::now();
        let per_s = n as f64 / dt.as_secs_f64();
        let rate = self.rate as f64;
        let unit = if per_s > 1.5 * rate && self.unit_ns < UNIT_CEIL_NS {
            let factor = ((per_s / rate).ceil() as u64).next_power_of_two().max(2);
            self.unit_ns.saturating_mul(factor).min(UNIT_CEIL_NS)
        } else if per_s < rate / 4.0 && self.unit_ns > self.floor_ns {
            (self.unit_ns / 2).max(self.floor_ns)
        } else {
            return None;
        };
        let why = format!(
            "{} {}: {n} events in the last {:.1} s, the time-weighted sample's unit {} us -> {} us",
            self.flag,
            self.rate,
            dt.as_secs_f64(),
            self.unit_ns / 1000,
            unit / 1000
        );
        self.unit_ns = unit;
        self.changes += 1;
        if unit > self.highest_ns {
            self.highest_ns = unit;
            self.highest_at = at_s;
        }
        Some((unit, why))
    }

    /// For the exit summary: what the pacer did, or None when it changed nothing.
    pub fn summary(&self) -> Option<String> {
        (self.changes > 0).then(|| {
            format!(
                "{} {}: the unit raised up to {} us (from {:.1} s into the recording; {} change(s), now {} us; ebsym info lists them)",
                self.flag,
                self.rate,
                self.highest_ns / 1000,
                self.highest_at,
                self.changes,
                self.unit_ns / 1000
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn aged(p: &mut Pacer) {
        p.since = Instant::now() - Duration::from_millis(1000);
    }

    #[test]
    fn raises_by_the_power_of_two_that_fits_then_comes_back() {
        let mut p = Pacer::new(EventFamily::Offcpu, 200, 10_000_000).unwrap();
        assert_eq!(p.tick(5000, 0.5), None, "not a second yet");
        aged(&mut p);
        // 1,500 a second against 200: x8 (7.5 rounded up to a power of two)
        let (u, why) = p.tick(1500, 1.0).unwrap();
        assert_eq!(u, 80_000_000);
        assert!(why.contains("10000 us -> 80000 us"), "{why}");
        aged(&mut p);
        assert_eq!(p.tick(1500 + 250, 2.0), None, "within 1.5x");
        aged(&mut p);
        let (u, _) = p.tick(1750 + 40, 3.0).unwrap();
        assert_eq!(u, 40_000_000, "under a quarter: halved");
        for i in 0..5 {
            aged(&mut p);
            p.tick(1790, 4.0 + i as f64);
        }
        assert_eq!(p.unit_ns, 10_000_000, "never under the user's unit");
        assert_eq!(p.highest_ns, 80_000_000);
        assert!(p.summary().unwrap().contains("up to 80000 us"));
    }

    #[test]
    fn stops_at_one_second_and_leaves_zero_alone() {
        let mut p = Pacer::new(EventFamily::Syscall, 10, 500_000_000).unwrap();
        aged(&mut p);
        assert_eq!(p.tick(100_000, 1.0).unwrap().0, UNIT_CEIL_NS);
        aged(&mut p);
        assert_eq!(p.tick(200_000, 2.0), None, "at the ceiling");
        assert!(Pacer::new(EventFamily::Offcpu, 200, 0).is_none());
        assert!(Pacer::new(EventFamily::Offcpu, 0, 10).is_none());
        assert!(Pacer::new(EventFamily::Cpu, 200, 10).is_none());
    }
}
