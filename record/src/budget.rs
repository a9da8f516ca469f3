//! `--max-cpu PCT`: what ebrec costs the machine, kept within a budget.
//!
//! Each second the cost is the BPF programs' run time (kernel BPF stats), the uprobe traps
//! (runs of uprobe programs, each one trap, times a trap cost calibrated at start on this
//! machine) and ebrec's own CPU time, as a share of one CPU. Above the budget the allocation
//! sampling period goes up a step (`--sample-bytes`, through the BPF side's writable
//! `sample_bytes`: fewer stacks, fewer events); when it is at its top and the cost is still
//! over, the allocator's uprobe session links are detached (the traps go with them) until
//! the cost has been under half the budget for a while; below half the budget the period
//! comes back down a step at a time. Every change is a `ProbeChange` record; reports scale
//! sampled allocations back and the leak report sets aside blocks whose free a pause may
//! have hidden.
use crate::probes::Probes;
use std::time::{Duration, Instant};

/// The sampling periods the budget steps through (bytes per sample; 0: every allocation).
const LADDER: &[u64] = &[
    0,
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
    4 << 20,
    16 << 20,
    64 << 20,
];

/// Seconds under half the budget before a step back (or a resume).
const CALM_S: u32 = 5;

/// What the budget decided in one second, for the trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Rate(u64),
    Paused,
    Resumed,
}

pub struct Budget {
    /// The budget as a share of one CPU (PCT / 100).
    pub limit: f64,
    /// One uprobe trap here, ns (calibrated).
    pub trap_ns: f64,
    last: Instant,
    last_bpf_ns: u64,
    last_traps: u64,
    last_cpu_ns: u64,
    /// Index in `steps` of the period in effect.
    step: usize,
    steps: Vec<u64>,
    pub paused: bool,
    over: u32,
    calm: u32,
    /// Calm seconds needed before the next resume.
    calm_needed: u32,
    pauses: u32,
    /// The cost of each second (share of one CPU), for the summary.
    pub seconds: Vec<f64>,
    /// Seconds spent paused.
    pub paused_s: u32,
}

/// This process's user + system CPU time, ns.
fn own_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// (BPF run time ns, uprobe program runs) of every loaded program.
fn bpf_totals(p: &Probes<'_>) -> (u64, u64) {
    let mut ns = 0;
    let mut traps = 0;
    for (_, run_ns, runs, uprobe) in p.program_stats_typed() {
        ns += run_ns;
        if uprobe {
            traps += runs;
        }
    }
    (ns, traps)
}

impl Budget {
    /// `pct`: percent of one CPU; `period`: the user's --sample-bytes (0: none).
    pub fn new(pct: f64, period: u64, trap_ns: f64, p: &Probes<'_>) -> Budget {
        let mut steps = vec![period];
        // Only the allocation family has a rate to lower so far (without it the budget
        // measures and reports).
        if p.alloc.is_some() {
            steps.extend(LADDER.iter().copied().filter(|&s| s > period));
        }
        let (bpf, traps) = bpf_totals(p);
        Budget {
            limit: pct / 100.0,
            trap_ns,
            last: Instant::now(),
            last_bpf_ns: bpf,
            last_traps: traps,
            last_cpu_ns: own_cpu_ns(),
            step: 0,
            steps,
            paused: false,
            over: 0,
            calm: 0,
            calm_needed: CALM_S,
            pauses: 0,
            seconds: Vec::new(),
            paused_s: 0,
        }
    }

    /// The sampling period in effect.
    pub fn period(&self) -> u64 {
        self.steps[self.step]
    }

    /// Called about once a second: measures the last interval and decides. Returns the
    /// change (applied by the caller), with the reason in words.
    pub fn tick(&mut self, p: &Probes<'_>) -> Option<(Change, String)> {
        let dt = self.last.elapsed();
        if dt < Duration::from_millis(500) {
            return None;
        }
        let (bpf, traps) = bpf_totals(p);
        let cpu = own_cpu_ns();
        let wall = dt.as_nanos() as f64;
        let bpf_share = bpf.saturating_sub(self.last_bpf_ns) as f64 / wall;
        let trap_share = traps.saturating_sub(self.last_traps) as f64 * self.trap_ns / wall;
        let own_share = cpu.saturating_sub(self.last_cpu_ns) as f64 / wall;
        self.last = Instant::now();
        self.last_bpf_ns = bpf;
        self.last_traps = traps;
        self.last_cpu_ns = cpu;
        let cost = bpf_share + trap_share + own_share;
        self.seconds.push(cost);
        if self.paused {
            self.paused_s += 1;
        }
        let why = format!(
            "--max-cpu {:.3}%: {:.3}% of a CPU in the last {:.1} s (BPF {:.3}%, traps {:.3}%, ebrec {:.3}%)",
            self.limit * 100.0,
            cost * 100.0,
            dt.as_secs_f64(),
            bpf_share * 100.0,
            trap_share * 100.0,
            own_share * 100.0
        );
        if cost > self.limit {
            self.calm = 0;
            self.over += 1;
            let can_pause = !self.paused && p.alloc_sessions();
            // The traps alone are over: coarser sampling cannot help, only fewer traps.
            if can_pause && trap_share > self.limit * 0.8 {
                return Some((self.pause(), why));
            }
            if self.step + 1 < self.steps.len() {
                // A step per factor of 4 over (each step is 4x fewer samples).
                let factor = (cost / self.limit).log(4.0).ceil().max(1.0) as usize;
                self.step = (self.step + factor).min(self.steps.len() - 1);
                return Some((Change::Rate(self.period()), why));
            }
            if can_pause && self.over >= 2 {
                return Some((self.pause(), why));
            }
            return None;
        }
        self.over = 0;
        if cost < self.limit / 2.0 {
            self.calm += 1;
            if self.paused && self.calm >= self.calm_needed {
                self.calm = 0;
                self.paused = false;
                return Some((Change::Resumed, why));
            }
            if self.calm >= CALM_S {
                self.calm = 0;
                if self.step > 0 {
                    self.step -= 1;
                    return Some((Change::Rate(self.period()), why));
                }
            }
        } else {
            self.calm = 0;
        }
        None
    }

    /// Pauses; each pause makes the next resume wait twice as long (5 s, 10 s, … 80 s), so
    /// that a workload whose traps alone exceed the budget is sampled in ever shorter
    /// stretches rather than flapping.
    fn pause(&mut self) -> Change {
        self.paused = true;
        self.calm = 0;
        self.calm_needed = if self.pauses == 0 {
            CALM_S
        } else {
            (self.calm_needed * 2).min(16 * CALM_S)
        };
        self.pauses += 1;
        Change::Paused
    }

    /// Mean and largest cost per second, as shares of one CPU.
    pub fn summary(&self) -> (f64, f64) {
        if self.seconds.is_empty() {
            return (0.0, 0.0);
        }
        let mean = self.seconds.iter().sum::<f64>() / self.seconds.len() as f64;
        let max = self.seconds.iter().copied().fold(0.0, f64::max);
        (mean, max)
    }
}

// The function the trap calibration probes: in ebrec itself, so that the calibration
// touches no other process. It starts as the allocator functions do (`push rbp`, which the
// kernel emulates, no single-step), so its trap costs what theirs does.
std::arch::global_asm!(
    ".text",
    ".globl ebrec_trap_calibration",
    ".type ebrec_trap_calibration,@function",
    "ebrec_trap_calibration:",
    "push rbp",
    "mov rbp, rsp",
    "lea rax, [rdi + 1]",
    "pop rbp",
    "ret",
    ".size ebrec_trap_calibration, .-ebrec_trap_calibration",
);

extern "C" {
    fn ebrec_trap_calibration(x: u64) -> u64;
}

/// ns of one uprobe trap on this machine: calls to `ebrec_trap_calibration` timed without and
/// with a uprobe on it (a perf event that never samples: the trap and the probe's dispatch),
/// rounds of each interleaved, the least of each kept (the machine may be busy).
pub fn calibrate_trap() -> anyhow::Result<f64> {
    use anyhow::Context;
    let exe = std::fs::read_link("/proc/self/exe").context("reading /proc/self/exe")?;
    let syms = crate::elf::Symbols::read(&exe).map_err(|e| anyhow::anyhow!(e))?;
    let (addr, _) = syms
        .function("ebrec_trap_calibration")
        .context("ebrec_trap_calibration is not in ebrec's symbol table")?;
    let off = syms
        .file_offset(addr)
        .context("ebrec_trap_calibration has no file offset")?;
    const N: u64 = 2_000;
    let time = || {
        let t = Instant::now();
        let mut x = 0;
        for i in 0..N {
            // SAFETY: a leaf function of plain integer arithmetic (above).
            x = unsafe { ebrec_trap_calibration(x ^ i) };
        }
        std::hint::black_box(x);
        t.elapsed().as_nanos() as f64 / N as f64
    };
    let probe = crate::perf::TraceProbe::new(&exe, off, false)
        .context("defining the calibration uprobe")?;
    let (mut bare, mut probed) = (f64::MAX, f64::MAX);
    for _ in 0..5 {
        bare = bare.min(time());
        let fd = probe
            .open_quiet(std::process::id() as i32)
            .context("opening the calibration uprobe")?;
        probed = probed.min(time());
        drop(fd);
    }
    drop(probe);
    Ok((probed - bare).max(50.0))
}
