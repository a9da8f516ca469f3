//! The per-target latency histograms of `ebrec agent --metrics`, from each closed window
//! trace: read once with the analyze crate when the window closes, added to cumulative
//! Prometheus histograms (so `rate(…_bucket[5m])` and `histogram_quantile` work as usual).
//!
//! Buckets: powers of two nanoseconds, 2^10 ns (1.02 µs) to 2^34 ns (17.2 s), then +Inf.
//! The kernel's buckets (`ebtrace_format::latency`: 16 per power of two, or the log2 ones
//! of an older ebrec's windows) each lie within one power of two, so its histograms go in
//! without splitting a bucket: a kernel bucket `[lo, hi)` lands in the first `le = 2^k ns`
//! at or above its last nanosecond (every value in it is below; within `[2^e, 2^(e+1))`
//! that is `2^(e+1)`), the ones under 1 µs in the first, the open-ended last in +Inf.
//!
//! | metric | labels | from |
//! |---|---|---|
//! | `ebrec_lock_wait_seconds` | pid, comm | every contended lock wait (`--lock`) |
//! | `ebrec_func_latency_seconds` | pid, comm, function | every `--func` call |
//! | `ebrec_offcpu_seconds` | pid, comm | every off-CPU block recorded (`--offcpu`, over its threshold) |
//! | `ebrec_syscall_latency_seconds` | pid, comm, syscall | the kernel's histograms: every call (`--syscalls`) |
//! | `ebrec_bio_latency_seconds` | device, op | the kernel's histograms: every request (`--bio`) |
//! | `ebrec_runq_latency_seconds` | pid, comm | the kernel's histograms: every wait (`--runq`) |
//! | `ebrec_lost_events_total` | family, reason | the window's Lost records (kernel and ebrec's own losses) |
//!
//! The slow syscall, block I/O and run-queue events (those over the --syscalls, --bio,
//! --runq thresholds, with stacks) are not added: the kernel's histograms count every one
//! of them already, and in the window where the kernel's counters were read, which need
//! not be the window of the event (the histograms are read once a second), so no window
//! can tell which of its events its rows hold. Adding both would count them twice.
//! Families counted in the kernel by stack (`--aggregate`) have no per-event durations and
//! are not in these histograms.
#![allow(dead_code)] // the agent loop calls what it needs of it

use super::metrics::{Metrics, Observations};
use ebtrace_analyze::model::{Event, Filter, Loaded, Sink};
use ebtrace_analyze::reports::system::{bio_op_name, device_name, syscall_name};
use ebtrace_format::proto::EventFamily;
use std::collections::BTreeMap;
use std::path::Path;

/// Powers of two ns from 2^FIRST_LOG2 to 2^LAST_LOG2.
const FIRST_LOG2: u32 = 10;
const LAST_LOG2: u32 = 34;
const NB: usize = (LAST_LOG2 - FIRST_LOG2 + 1) as usize;

/// The latency histograms' bounds in seconds: 2^10 ns … 2^34 ns.
pub const LATENCY_BOUNDS: [f64; NB] = {
    let mut b = [0.0; NB];
    let mut i = 0;
    while i < NB {
        b[i] = (1u64 << (FIRST_LOG2 as usize + i)) as f64 / 1e9;
        i += 1;
    }
    b
};

/// Counts by Prometheus bucket (NB bounds + Inf) and the sum in ns.
#[derive(Debug, Clone)]
struct Hist {
    counts: [u64; NB + 1],
    sum_ns: u128,
}

impl Default for Hist {
    fn default() -> Self {
        Hist {
            counts: [0; NB + 1],
            sum_ns: 0,
        }
    }
}

/// The bucket of a duration of `ns`: the first bound 2^k ns with `ns <= 2^k`.
fn bucket_ns(ns: u64) -> usize {
    if ns <= 1 << FIRST_LOG2 {
        return 0;
    }
    // ceil(log2(ns))
    let k = 64 - (ns - 1).leading_zeros();
    ((k - FIRST_LOG2) as usize).min(NB)
}

impl Hist {
    fn add(&mut self, ns: u64) {
        self.counts[bucket_ns(ns)] += 1;
        self.sum_ns += u128::from(ns);
    }

    fn add_n(&mut self, ns: u64, n: u64) {
        self.counts[bucket_ns(ns)] += n;
        self.sum_ns += u128::from(ns) * u128::from(n);
    }

    /// A kernel row: bucket b holds `[lo, hi)` ns of its layout, i.e. values <= hi - 1.
    fn add_row(&mut self, r: &ebtrace_format::events::HistogramRow) {
        for &(b, c) in &r.buckets {
            let (_, hi) = r.layout.range(b);
            // The kernel's last bucket (hi u64::MAX) is open-ended: +Inf.
            let i = if hi == u64::MAX {
                NB
            } else {
                bucket_ns(hi - 1)
            };
            self.counts[i] += c;
        }
        self.sum_ns += u128::from(r.sum_ns);
    }
}

/// What a window holds, by generation (process) until the Process records name them.
#[derive(Default)]
struct Window {
    lock: BTreeMap<u32, Hist>,
    offcpu: BTreeMap<u32, Hist>,
    /// (generation, function id)
    func: BTreeMap<(u32, u64), Hist>,
    /// (generation, nr)
    syscall_rows: BTreeMap<(u32, u64), Hist>,
    /// (dev, op)
    bio_rows: BTreeMap<(u32, u32), Hist>,
    runq_rows: BTreeMap<u32, Hist>,
}

impl Sink for Window {
    fn event(&mut self, ev: &Event<'_>) {
        match ev {
            Event::Lock(e) => self.lock.entry(e.generation).or_default().add(e.wait_ns),
            // a block kept by --offcpu-sample stands for 1/p blocks of its length
            Event::OffCpu(e) => self
                .offcpu
                .entry(e.generation)
                .or_default()
                .add_n(e.duration_ns, e.blocks()),
            Event::Func(e) => self
                .func
                .entry((e.generation, e.function))
                .or_default()
                .add(e.duration_ns),
            Event::Histogram(f, r) => match f {
                EventFamily::Syscall => self
                    .syscall_rows
                    .entry((r.generation, r.key))
                    .or_default()
                    .add_row(r),
                EventFamily::Bio => self
                    .bio_rows
                    .entry(((r.key >> 8) as u32, (r.key & 0xff) as u32))
                    .or_default()
                    .add_row(r),
                EventFamily::Runq => self.runq_rows.entry(r.generation).or_default().add_row(r),
                _ => {}
            },
            _ => {}
        }
    }
}

fn put(m: &Metrics, name: &str, help: &str, labels: &[(&str, &str)], h: &Hist) {
    m.add_histogram(
        name,
        help,
        labels,
        Observations {
            bounds: &LATENCY_BOUNDS,
            counts: &h.counts,
            sum: h.sum_ns as f64 / 1e9,
        },
    );
}

const LOCK_HELP: &str =
    "Contended lock waits of each target process (ebrec --lock), seconds waited.";
const FUNC_HELP: &str = "Calls of each probed function (ebrec --func) in each target process, seconds from entry to return.";
const OFFCPU_HELP: &str = "Blocks off the CPU of each target process (ebrec --offcpu, those over its threshold), seconds off the CPU.";
const SYSCALL_HELP: &str = "Every system call of each target process (ebrec --syscalls, counted in the kernel), seconds from entry to exit.";
const BIO_HELP: &str = "Every block I/O request of the targets (ebrec --bio, counted in the kernel), by device and op, seconds from issue to completion.";
const RUNQ_HELP: &str = "Every run-queue wait of each target process (ebrec --runq, counted in the kernel), seconds from runnable to running.";

/// Adds what the closed window trace at `trace` holds to the histograms (see the module
/// table) and its losses to `ebrec_lost_events_total{family,reason}`. (The windows
/// themselves are counted by the agent loop: [`super::metrics::windows`].)
pub fn observe_window(m: &Metrics, trace: &Path) -> anyhow::Result<()> {
    let mut w = Window::default();
    let l = Loaded::read(trace, &Filter::default(), &mut w)
        .map_err(|e| anyhow::anyhow!("{}: {e}", trace.display()))?;
    // (pid, comm) of a generation.
    let who = |g: u32| -> (String, String) {
        match l.tables.generations.get(&g) {
            Some(info) => (
                info.process.pid.to_string(),
                l.tables.string(info.process.comm).into_owned(),
            ),
            None => ("0".to_string(), format!("generation_{g}")),
        }
    };
    for (&g, h) in &w.lock {
        let (pid, comm) = who(g);
        put(
            m,
            "ebrec_lock_wait_seconds",
            LOCK_HELP,
            &[("pid", &pid), ("comm", &comm)],
            h,
        );
    }
    for (&g, h) in &w.offcpu {
        let (pid, comm) = who(g);
        put(
            m,
            "ebrec_offcpu_seconds",
            OFFCPU_HELP,
            &[("pid", &pid), ("comm", &comm)],
            h,
        );
    }
    for (&(g, f), h) in &w.func {
        let (pid, comm) = who(g);
        let function = match l.probed.get(&f) {
            Some(&s) => l.tables.string(s).into_owned(),
            None => format!("function_{f}"),
        };
        put(
            m,
            "ebrec_func_latency_seconds",
            FUNC_HELP,
            &[("pid", &pid), ("comm", &comm), ("function", &function)],
            h,
        );
    }
    let arch = l.header.arch.clone();
    for (&(g, nr), h) in &w.syscall_rows {
        let (pid, comm) = who(g);
        let name = syscall_name(&arch, nr);
        put(
            m,
            "ebrec_syscall_latency_seconds",
            SYSCALL_HELP,
            &[("pid", &pid), ("comm", &comm), ("syscall", &name)],
            h,
        );
    }
    for (&(dev, op), h) in &w.bio_rows {
        let device = device_name(&l, dev);
        put(
            m,
            "ebrec_bio_latency_seconds",
            BIO_HELP,
            &[("device", &device), ("op", bio_op_name(op))],
            h,
        );
    }
    for (&g, h) in &w.runq_rows {
        let (pid, comm) = who(g);
        put(
            m,
            "ebrec_runq_latency_seconds",
            RUNQ_HELP,
            &[("pid", &pid), ("comm", &comm)],
            h,
        );
    }
    for (key, &n) in &l.losses.recorded {
        let (fam, reason) = key.split_once('/').unwrap_or((key.as_str(), ""));
        let family = ebtrace_format::family::FAMILIES
            .iter()
            .find(|f| f.wire_name() == fam)
            .map_or(fam, |f| f.name);
        m.add_counter(
            "ebrec_lost_events_total",
            "Events lost, by family and reason (ringbuf_full, map_full, rate_limit: in the kernel; malformed, unmatched, user_limit: in ebrec), added once per window.",
            &[("family", family), ("reason", if reason.is_empty() { "unspecified" } else { reason })],
            n as f64,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ebtrace_format::events::HistogramRow;
    use ebtrace_format::latency::Layout;

    /// The Prometheus bucket of each of `values`, through a kernel row of `layout`.
    fn le_of(layout: Layout, values: &[u64]) -> Vec<usize> {
        values
            .iter()
            .map(|&v| {
                let mut h = Hist::default();
                h.add_row(&HistogramRow {
                    count: 1,
                    sum_ns: v,
                    buckets: vec![(layout.bucket_of(v), 1)],
                    layout,
                    ..Default::default()
                });
                h.counts.iter().position(|&c| c == 1).unwrap()
            })
            .collect()
    }

    #[test]
    fn kernel_buckets_land_in_the_power_of_two_above() {
        // Both layouts put a value in the bucket `le = 2^k` of its power of two's top
        // (the log2 layout's answers, unchanged): 5.06 ms and 6 ms under 2^23 ns.
        let v = [
            0,
            5,
            15,
            800,
            1024,
            1025,
            2047,
            5_060_000,
            6_000_000,
            1 << 33,
        ];
        let want = [0, 0, 0, 0, 1, 1, 1, 13, 13, 24];
        assert_eq!(le_of(Layout::Log2, &v), want);
        assert_eq!(le_of(Layout::LogLinear, &v), want);
        assert_eq!(LATENCY_BOUNDS[13], (1u64 << 23) as f64 / 1e9);
        // Past 2^34 ns, and each layout's open-ended last bucket: +Inf.
        for layout in [Layout::Log2, Layout::LogLinear] {
            assert_eq!(le_of(layout, &[1 << 35, 1 << 40, u64::MAX]), vec![NB; 3]);
        }
        // A log-linear bucket's lowest and highest values go to one `le`: its last
        // nanosecond's.
        let l = Layout::LogLinear;
        for b in 0..l.buckets() - 1 {
            let (lo, hi) = l.range(b);
            let direct = bucket_ns(hi - 1);
            assert_eq!(le_of(l, &[lo, hi - 1]), vec![direct, direct], "bucket {b}");
        }
    }
}
