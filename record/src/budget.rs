//! `--max-cpu PCT`: what ebrec costs the machine, kept within a budget.
//!
//! Each second the cost is the BPF programs' run time (kernel BPF stats), the uprobe traps
//! (runs of uprobe programs, each one trap, times a trap cost calibrated at start on this
//! machine) and ebrec's own CPU time, as a share of one CPU. The BPF time and the traps are
//! attributed to families (each program belongs to one: see `Probes::family_costs`); ebrec's
//! own CPU is not attributed. Above the budget the family that cost most in that second and
//! still has a knob to turn is stepped down (several steps when far over):
//!
//! - alloc: the sampling period (`--sample-bytes`, the alloc object's writable
//!   `sample_bytes`) up a step of the ladder below (each step about 4x fewer events);
//! - cpu: the sampling frequency (`--cpu` Hz, set with PERF_EVENT_IOC_PERIOD on every
//!   per-CPU event) halved, down to `CPU_FLOOR_HZ`;
//! - offcpu: the threshold (`--offcpu`, the profile object's writable `offcpu_min_ns`)
//!   times 4, up to `OFFCPU_CEIL_NS`.
//!
//! A uprobe family whose traps alone are over (coarser sampling cannot help: every call
//! traps) is paused: its links are detached until the cost has been under half the budget
//! for a while; so is the costliest pausable family when nothing is left to step down. Below
//! half the budget for `CALM_S` seconds, a paused family resumes, else the last step taken
//! is undone. Every change is a `ProbeChange` record; reports scale sampled allocations
//! back, say when the cpu rate or the off-CPU threshold changed, and say what was paused.
use crate::probes::{ProbeConfig, Probes, FAM_COUNT};
use ebtrace_proto::v1::EventFamily;
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

/// The lowest on-CPU sampling rate the budget goes down to, Hz per CPU (halving from
/// `--cpu`'s).
pub const CPU_FLOOR_HZ: u64 = 1;

/// The highest off-CPU threshold the budget goes up to, ns (x4 from `--offcpu`'s).
pub const OFFCPU_CEIL_NS: u64 = 1_000_000_000;

/// Seconds under half the budget before a step back (or a resume).
const CALM_S: u32 = 5;

/// What the budget decided in one second, for the trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A family's setting (`Knob::setting`) now has this value.
    Rate {
        family: EventFamily,
        setting: &'static str,
        value: u64,
    },
    Paused(EventFamily),
    Resumed(EventFamily),
}

/// A family's sampling setting and the values the budget may give it, gentlest first.
#[derive(Debug, Clone)]
pub struct Knob {
    pub family: EventFamily,
    /// The ProbeChange setting: "sample-bytes", "cpu-hz", "offcpu-min-ns".
    pub setting: &'static str,
    ladder: Vec<u64>,
    step: usize,
    /// About how many times fewer events one step makes (to take several steps at once
    /// when far over).
    factor: f64,
}

impl Knob {
    /// The value in effect.
    pub fn value(&self) -> u64 {
        self.ladder[self.step]
    }

    /// The value in words, for the summary.
    pub fn describe(&self) -> String {
        let v = self.value();
        match self.setting {
            "sample-bytes" if v == 0 => "alloc: every allocation".to_string(),
            "sample-bytes" => format!("alloc: 1 sample per {v} B"),
            "cpu-hz" => format!("cpu: {v} Hz"),
            "offcpu-min-ns" => format!("offcpu: blocks of {} us and more", v / 1000),
            _ => format!("{}: {v}", self.setting),
        }
    }
}

/// The lower-case name of a family, as the trace's readers print it.
pub fn family_name(f: EventFamily) -> &'static str {
    match f {
        EventFamily::Alloc => "alloc",
        EventFamily::Free => "free",
        EventFamily::Lock => "lock",
        EventFamily::Func => "func",
        EventFamily::Cpu => "cpu",
        EventFamily::Offcpu => "offcpu",
        EventFamily::MemGrowth => "memgrowth",
        _ => "other",
    }
}

pub struct Budget {
    /// The budget as a share of one CPU (PCT / 100).
    pub limit: f64,
    /// One uprobe trap here, ns (calibrated).
    pub trap_ns: f64,
    last: Instant,
    /// Per family: BPF run time ns and traps at the last tick.
    last_fam: [(u64, u64); FAM_COUNT],
    last_cpu_ns: u64,
    pub knobs: Vec<Knob>,
    /// The knobs stepped down, one entry per step, latest last (undone in reverse).
    stepped: Vec<usize>,
    /// The families paused now.
    pub paused: Vec<EventFamily>,
    over: u32,
    calm: u32,
    /// Calm seconds needed before the next resume.
    calm_needed: u32,
    pauses: u32,
    /// The cost of each second (share of one CPU), for the summary.
    pub seconds: Vec<f64>,
    /// Seconds spent with some family paused.
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

/// The knobs of what `cfg` records.
fn knobs(cfg: &ProbeConfig, p: &Probes<'_>) -> Vec<Knob> {
    let mut out = Vec::new();
    // Counted in the kernel (--aggregate), allocations cannot be sampled: the estimate needs
    // each one's size. Only a pause (the traps) is left to the budget there.
    if p.alloc.is_some() && cfg.aggregate_stacks == 0 {
        let period = cfg.sample_bytes;
        let mut ladder = vec![period];
        ladder.extend(LADDER.iter().copied().filter(|&s| s > period));
        out.push(Knob {
            family: EventFamily::Alloc,
            setting: "sample-bytes",
            ladder,
            step: 0,
            factor: 4.0,
        });
    }
    if let (Some(hz), true) = (cfg.cpu_hz, p.profile.is_some()) {
        let mut ladder = vec![hz];
        while *ladder.last().unwrap() / 2 >= CPU_FLOOR_HZ {
            ladder.push(ladder.last().unwrap() / 2);
        }
        out.push(Knob {
            family: EventFamily::Cpu,
            setting: "cpu-hz",
            ladder,
            step: 0,
            factor: 2.0,
        });
    }
    if let (Some(ns), true) = (cfg.offcpu_min_ns, p.profile.is_some()) {
        let mut ladder = vec![ns];
        loop {
            let next = (ladder.last().unwrap() * 4).max(1000);
            if next > OFFCPU_CEIL_NS {
                break;
            }
            ladder.push(next);
        }
        out.push(Knob {
            family: EventFamily::Offcpu,
            setting: "offcpu-min-ns",
            ladder,
            step: 0,
            factor: 4.0,
        });
    }
    out
}

/// The families in `fam` order whose number is a valid EventFamily.
fn family(i: usize) -> EventFamily {
    EventFamily::try_from(i as i32).unwrap_or(EventFamily::Unspecified)
}

impl Budget {
    /// `pct`: percent of one CPU.
    pub fn new(pct: f64, cfg: &ProbeConfig, trap_ns: f64, p: &Probes<'_>) -> Budget {
        Budget {
            limit: pct / 100.0,
            trap_ns,
            last: Instant::now(),
            last_fam: p.family_costs(),
            last_cpu_ns: own_cpu_ns(),
            knobs: knobs(cfg, p),
            stepped: Vec::new(),
            paused: Vec::new(),
            over: 0,
            calm: 0,
            calm_needed: CALM_S,
            pauses: 0,
            seconds: Vec::new(),
            paused_s: 0,
        }
    }

    /// Called about once a second: measures the last interval and decides. Returns the
    /// change (applied by the caller), with the reason in words.
    pub fn tick(&mut self, p: &Probes<'_>) -> Option<(Change, String)> {
        let dt = self.last.elapsed();
        if dt < Duration::from_millis(500) {
            return None;
        }
        let fam = p.family_costs();
        let cpu = own_cpu_ns();
        let wall = dt.as_nanos() as f64;
        // Per family: (BPF share, trap share) of one CPU.
        let mut shares = [(0.0f64, 0.0f64); FAM_COUNT];
        for (i, s) in shares.iter_mut().enumerate() {
            s.0 = fam[i].0.saturating_sub(self.last_fam[i].0) as f64 / wall;
            s.1 = fam[i].1.saturating_sub(self.last_fam[i].1) as f64 * self.trap_ns / wall;
        }
        let bpf_share: f64 = shares.iter().map(|s| s.0).sum();
        let trap_share: f64 = shares.iter().map(|s| s.1).sum();
        let own_share = cpu.saturating_sub(self.last_cpu_ns) as f64 / wall;
        self.last = Instant::now();
        self.last_fam = fam;
        self.last_cpu_ns = cpu;
        let cost = bpf_share + trap_share + own_share;
        self.seconds.push(cost);
        if !self.paused.is_empty() {
            self.paused_s += 1;
        }
        let share = |i: usize| shares[i].0 + shares[i].1;
        let mut by_family: Vec<String> = (0..FAM_COUNT)
            .filter(|&i| share(i) > 0.0)
            .map(|i| format!("{} {:.3}%", family_name(family(i)), share(i) * 100.0))
            .collect();
        if by_family.is_empty() {
            by_family.push("none".into());
        }
        let why = format!(
            "--max-cpu {:.3}%: {:.3}% of a CPU in the last {:.1} s (BPF {:.3}%, traps {:.3}%, ebrec {:.3}%; by family: {})",
            self.limit * 100.0,
            cost * 100.0,
            dt.as_secs_f64(),
            bpf_share * 100.0,
            trap_share * 100.0,
            own_share * 100.0,
            by_family.join(", ")
        );
        if cost > self.limit {
            self.calm = 0;
            self.over += 1;
            // A uprobe family whose traps alone are over: coarser sampling cannot help, only
            // fewer traps.
            let trapping = (0..FAM_COUNT)
                .filter(|&i| shares[i].1 > self.limit * 0.8)
                .map(family)
                .filter(|&f| !self.paused.contains(&f) && p.can_pause(f))
                .max_by(|a, b| shares[*a as usize].1.total_cmp(&shares[*b as usize].1));
            if let Some(f) = trapping {
                return Some((self.pause(f), why));
            }
            // The costliest family that can act: a pause when it has no step left (lock and
            // memgrowth have no rate to lower: their tracepoints pause instead).
            let steppable = |f: EventFamily| {
                self.knobs
                    .iter()
                    .any(|kn| kn.family == f && kn.step + 1 < kn.ladder.len())
            };
            let top = (0..FAM_COUNT)
                .map(family)
                .filter(|&f| {
                    share(f as usize) > 0.0
                        && !self.paused.contains(&f)
                        && (steppable(f) || p.can_pause(f))
                })
                .max_by(|a, b| share(*a as usize).total_cmp(&share(*b as usize)));
            if let Some(f) = top {
                if !steppable(f) {
                    return Some((self.pause(f), why));
                }
            }
            // The costliest family that costs something and can still step down.
            let knob = (0..self.knobs.len())
                .filter(|&k| {
                    let kn = &self.knobs[k];
                    kn.step + 1 < kn.ladder.len()
                        && share(kn.family as usize) > 0.0
                        && !self.paused.contains(&kn.family)
                })
                .max_by(|&a, &b| {
                    share(self.knobs[a].family as usize)
                        .total_cmp(&share(self.knobs[b].family as usize))
                        .then(b.cmp(&a))
                });
            if let Some(k) = knob {
                let kn = &mut self.knobs[k];
                // A step per `factor` over.
                let n = ((cost / self.limit).ln() / kn.factor.ln()).ceil().max(1.0) as usize;
                let n = n.min(kn.ladder.len() - 1 - kn.step);
                kn.step += n;
                self.stepped.extend(std::iter::repeat_n(k, n));
                let c = Change::Rate {
                    family: kn.family,
                    setting: kn.setting,
                    value: kn.value(),
                };
                return Some((c, why));
            }
            if self.over >= 2 {
                let f = (0..FAM_COUNT)
                    .map(family)
                    .filter(|&f| {
                        !self.paused.contains(&f) && p.can_pause(f) && share(f as usize) > 0.0
                    })
                    .max_by(|a, b| share(*a as usize).total_cmp(&share(*b as usize)));
                if let Some(f) = f {
                    return Some((self.pause(f), why));
                }
            }
            return None;
        }
        self.over = 0;
        if cost < self.limit / 2.0 {
            self.calm += 1;
            if !self.paused.is_empty() && self.calm >= self.calm_needed {
                self.calm = 0;
                let f = self.paused.pop().unwrap();
                return Some((Change::Resumed(f), why));
            }
            if self.calm >= CALM_S {
                self.calm = 0;
                if let Some(k) = self.stepped.pop() {
                    let kn = &mut self.knobs[k];
                    kn.step -= 1;
                    let c = Change::Rate {
                        family: kn.family,
                        setting: kn.setting,
                        value: kn.value(),
                    };
                    return Some((c, why));
                }
            }
        } else {
            self.calm = 0;
        }
        None
    }

    /// Pauses `f`; each pause makes the next resume wait twice as long (5 s, 10 s, … 80 s),
    /// so that a workload whose traps alone exceed the budget is sampled in ever shorter
    /// stretches rather than flapping.
    fn pause(&mut self, f: EventFamily) -> Change {
        self.paused.push(f);
        self.calm = 0;
        self.calm_needed = if self.pauses == 0 {
            CALM_S
        } else {
            (self.calm_needed * 2).min(16 * CALM_S)
        };
        self.pauses += 1;
        Change::Paused(f)
    }

    /// The settings in effect, in words ("alloc: 1 sample per 65536 B, cpu: 12 Hz"), and
    /// what is paused.
    pub fn rates(&self) -> String {
        let mut parts: Vec<String> = self.knobs.iter().map(Knob::describe).collect();
        for f in &self.paused {
            parts.push(format!("{} paused", family_name(*f)));
        }
        if parts.is_empty() {
            "nothing to steer".into()
        } else {
            parts.join(", ")
        }
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
