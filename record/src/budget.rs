//! `--max-cpu PCT`: what ebrec costs the machine, kept within a budget.
//!
//! Every quarter second (`TICK`) the cost is the BPF programs' run time (kernel BPF stats),
//! the uprobe traps (runs of uprobe programs, each one trap, times a trap cost calibrated at
//! start on this machine) and ebrec's own CPU time, as a share of one CPU. The BPF time and
//! the traps are attributed to families (each program belongs to one: see
//! `Probes::family_costs`); ebrec's own CPU is not attributed. Above the budget, families are
//! cut, costliest first, until the predicted cost is under 90% of it, all in the same
//! quarter second:
//!
//! - alloc: the sampling period (`--sample-bytes`, the alloc object's writable
//!   `sample_bytes`) up the ladder below (each step about 4x fewer events);
//! - cpu: the sampling frequency (`--cpu` Hz, set with PERF_EVENT_IOC_PERIOD on every
//!   per-CPU event) halved, down to `CPU_FLOOR_HZ`;
//! - offcpu: the threshold (`--offcpu`, the profile object's writable `offcpu_min_ns`)
//!   times 4, up to `OFFCPU_CEIL_NS`.
//!
//! A step lowers a family's BPF time (and the events ebrec reads: each family is lent a
//! part of ebrec's own CPU in proportion to its BPF time), not its traps (every probed call
//! traps). A family with no step left, or whose traps alone are over the budget, is paused:
//! its links are detached. A paused family comes back when what it cost when it ran fits in the room
//! under 80% of the budget; otherwise it is tried again for a quarter second at intervals
//! so spaced that the tries of all paused families together cost a tenth of the budget (a
//! family that cost a whole CPU under `--max-cpu 1`, alone: every 250 s). Below half the budget for `CALM_S` seconds
//! the last step taken is undone when its predicted cost fits. Every change is a
//! `ProbeChange` record; reports scale sampled allocations back, say when the cpu rate or the
//! off-CPU threshold changed, and say what was paused.
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
        EventFamily::Unspecified => "other",
        f => ebtrace_format::family::family(f).name,
    }
}

/// How often the budget measures and decides. A quarter second: a family that costs a
/// whole CPU when it starts (the allocator's traps on a busy service) is paused within it.
const TICK: Duration = Duration::from_millis(250);

/// Sampled measuring (`--max-cpu` without `--bpf-stats`): while within the budget, the
/// kernel's BPF stats are off this long after each measure, so that they are on a quarter
/// of the time. They cost every BPF program run on the machine two clock reads (on a KVM
/// guest, whose sched_clock is kvm-clock: ~+250 ns a traced system call under the diagnose set, +120 ns
/// an untraced one), more than some families cost themselves. Over the budget, after a
/// change and while a paused family is on trial, they stay on: every quarter second is
/// measured. A family that starts costing a whole CPU is paused within a second.
const REST: Duration = Duration::from_millis(750);

/// A paused family, what it cost when it ran, and when it may be tried again.
#[derive(Debug, Clone)]
struct Paused {
    family: EventFamily,
    /// Its share of a CPU in the last measure before the pause.
    est: f64,
    next_try: Instant,
    /// When it was paused.
    since: Instant,
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
    /// The families paused now, latest last.
    paused: Vec<Paused>,
    /// Since when the cost has been under half the budget.
    calm_since: Option<Instant>,
    /// The family resumed on trial (its cost unknown until the next measure).
    trial: Option<EventFamily>,
    /// Each measure: its length and its cost (share of one CPU), for the summary.
    measures: Vec<(f64, f64)>,
    /// Seconds spent with some family paused (wall time; the pauses ended), and since when
    /// one is paused now.
    paused_time: f64,
    any_paused_since: Option<Instant>,
    /// Seconds each family spent paused (its pauses ended).
    paused_by: Vec<(EventFamily, f64)>,
    /// The families whose probes can be detached and attached again.
    can_pause: Vec<EventFamily>,
    /// Measure a part of the time ([`REST`]) while within the budget.
    sampled: bool,
}

impl std::fmt::Debug for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Budget").finish_non_exhaustive()
    }
}

/// This process's user + system CPU time (every thread), ns.
pub(crate) fn own_cpu_ns() -> u64 {
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
        out.push(cpu_knob(hz));
    }
    if let (Some(ns), true) = (cfg.offcpu_min_ns, p.profile.is_some()) {
        out.push(offcpu_knob(ns));
    }
    out
}

/// cpu sampling from `hz`, halved down to `CPU_FLOOR_HZ`.
fn cpu_knob(hz: u64) -> Knob {
    let mut ladder = vec![hz];
    while *ladder.last().unwrap() / 2 >= CPU_FLOOR_HZ {
        ladder.push(ladder.last().unwrap() / 2);
    }
    Knob {
        family: EventFamily::Cpu,
        setting: "cpu-hz",
        ladder,
        step: 0,
        factor: 2.0,
    }
}

/// The off-CPU threshold from `ns`, x4 up to `OFFCPU_CEIL_NS`.
fn offcpu_knob(ns: u64) -> Knob {
    let mut ladder = vec![ns];
    loop {
        let next = (ladder.last().unwrap() * 4).max(1000);
        if next > OFFCPU_CEIL_NS {
            break;
        }
        ladder.push(next);
    }
    Knob {
        family: EventFamily::Offcpu,
        setting: "offcpu-min-ns",
        ladder,
        step: 0,
        factor: 4.0,
    }
}

/// The families in `fam` order whose number is a valid EventFamily.
fn family(i: usize) -> EventFamily {
    EventFamily::try_from(i as i32).unwrap_or(EventFamily::Unspecified)
}

/// One measure: per family (BPF share, trap share) of one CPU, and ebrec's own share.
struct Measure {
    shares: [(f64, f64); FAM_COUNT],
    own: f64,
}

impl Measure {
    fn share(&self, f: EventFamily) -> f64 {
        let s = self.shares[f as usize];
        s.0 + s.1
    }

    fn cost(&self) -> f64 {
        self.shares.iter().map(|s| s.0 + s.1).sum::<f64>() + self.own
    }
}

impl Budget {
    /// `pct`: percent of one CPU.
    /// `sampled`: turn the kernel's BPF stats off between measures while within the budget
    /// ([`REST`]); only when they are on now (the kernel may have refused them: then the
    /// budget measures every tick what it can, its own CPU).
    pub fn new(pct: f64, cfg: &ProbeConfig, trap_ns: f64, p: &Probes<'_>, sampled: bool) -> Budget {
        let can_pause = (0..FAM_COUNT)
            .map(family)
            .filter(|&f| p.can_pause(f))
            .collect();
        let mut b = Budget::with(pct / 100.0, trap_ns, knobs(cfg, p), can_pause);
        b.sampled = sampled && p.stats_on();
        b.last_fam = p.family_costs();
        b.last_cpu_ns = own_cpu_ns();
        b
    }

    /// A budget of `limit` (share of a CPU) steering `knobs`, that may pause `can_pause`.
    fn with(limit: f64, trap_ns: f64, knobs: Vec<Knob>, can_pause: Vec<EventFamily>) -> Budget {
        Budget {
            limit,
            trap_ns,
            last: Instant::now(),
            last_fam: [(0, 0); FAM_COUNT],
            last_cpu_ns: 0,
            knobs,
            stepped: Vec::new(),
            paused: Vec::new(),
            calm_since: None,
            trial: None,
            measures: Vec::new(),
            paused_time: 0.0,
            any_paused_since: None,
            paused_by: Vec::new(),
            can_pause,
            sampled: false,
        }
    }

    fn is_paused(&self, f: EventFamily) -> bool {
        self.paused.iter().any(|x| x.family == f)
    }

    fn steppable(&self, f: EventFamily) -> Option<usize> {
        self.knobs
            .iter()
            .position(|kn| kn.family == f && kn.step + 1 < kn.ladder.len())
    }

    /// Called by the recording loop (often): every `TICK` measures the last interval and
    /// decides. Returns the changes (applied by the caller in order), each with the reason
    /// in words.
    pub fn tick(&mut self, p: &Probes<'_>) -> Vec<(Change, String)> {
        let dt = self.last.elapsed();
        if self.sampled && !p.stats_on() {
            if dt < REST {
                return Vec::new();
            }
            // The next measure starts now: what ran while off was not counted.
            p.set_stats(true);
            self.last = Instant::now();
            self.last_fam = p.family_costs();
            self.last_cpu_ns = own_cpu_ns();
            return Vec::new();
        }
        if dt < TICK {
            return Vec::new();
        }
        let fam = p.family_costs();
        let cpu = own_cpu_ns();
        let wall = dt.as_nanos() as f64;
        let mut m = Measure {
            shares: [(0.0, 0.0); FAM_COUNT],
            own: cpu.saturating_sub(self.last_cpu_ns) as f64 / wall,
        };
        for (i, s) in m.shares.iter_mut().enumerate() {
            s.0 = fam[i].0.saturating_sub(self.last_fam[i].0) as f64 / wall;
            s.1 = fam[i].1.saturating_sub(self.last_fam[i].1) as f64 * self.trap_ns / wall;
        }
        self.last = Instant::now();
        self.last_fam = fam;
        self.last_cpu_ns = cpu;
        let out = self.decide(&m, dt, Instant::now());
        if self.sampled && self.may_rest(&out, m.cost()) {
            p.set_stats(false);
        }
        out
    }

    /// Whether the stats may be off until the next measure: within the budget, no change
    /// just made, no family on trial.
    fn may_rest(&self, changes: &[(Change, String)], cost: f64) -> bool {
        changes.is_empty() && self.trial.is_none() && cost <= self.limit
    }

    /// The seconds measured, when sampled (the stats were off the rest of the time).
    pub fn sampling(&self) -> Option<f64> {
        self.sampled
            .then(|| self.measures.iter().map(|m| m.0).sum())
    }

    /// The decisions on one measure `m` of length `dt`, taken at `now`.
    fn decide(&mut self, m: &Measure, dt: Duration, now: Instant) -> Vec<(Change, String)> {
        let cost = m.cost();
        self.measures.push((dt.as_secs_f64(), cost));
        let why = self.why(m, dt);
        let trial = self.trial.take();
        if cost > self.limit {
            self.calm_since = None;
            return self
                .cut(m, trial, now)
                .into_iter()
                .map(|c| (c, why.clone()))
                .collect();
        }
        if cost >= self.limit / 2.0 {
            self.calm_since = None;
            return Vec::new();
        }
        let calm = *self.calm_since.get_or_insert(now);
        let room = self.limit * 0.8 - cost;
        // A paused family comes back when what it cost fits in the room left, or on trial
        // when its turn comes (the workload may have changed since).
        if let Some(i) = self
            .paused
            .iter()
            .rposition(|x| x.est <= room || now >= x.next_try)
        {
            let x = self.paused.remove(i);
            self.pause_ended(x.family, x.since, now);
            if x.est > room {
                self.trial = Some(x.family);
            }
            self.calm_since = None;
            return vec![(Change::Resumed(x.family), why)];
        }
        // A step back when the calm has lasted and the step's cost fits.
        if now.duration_since(calm) >= Duration::from_secs(CALM_S as u64) {
            if let Some(&k) = self.stepped.last() {
                let kn = &self.knobs[k];
                let more = m.shares[kn.family as usize].0 * (kn.factor - 1.0);
                if more <= room {
                    self.stepped.pop();
                    let kn = &mut self.knobs[k];
                    kn.step -= 1;
                    self.calm_since = None;
                    let c = Change::Rate {
                        family: kn.family,
                        setting: kn.setting,
                        value: kn.value(),
                    };
                    return vec![(c, why)];
                }
            }
        }
        Vec::new()
    }

    /// Over the budget: the changes that bring the cost under 90% of it, costliest family
    /// first: steps down of its rate (as many as the cut needs, as far as its ladder goes),
    /// a pause when it has no step left or when its traps alone are over (they do not go
    /// down with its rate); as far as anything can be cut.
    fn cut(&mut self, m: &Measure, trial: Option<EventFamily>, now: Instant) -> Vec<Change> {
        let target = self.limit * 0.9;
        let mut out = Vec::new();
        let mut done: Vec<EventFamily> = Vec::new();
        // A family tried again and over at once goes back to its pause, and nothing else
        // is cut for it (ebrec's own share of that measure holds the attaching).
        if let Some(f) = trial {
            if !self.is_paused(f) && self.pausable(f) {
                return vec![self.pause(f, m.share(f), now)];
            }
        }
        // ebrec's own CPU is mostly the events it reads: each family is lent a part of it
        // in proportion to its BPF time, which its steps lower with it.
        let total_bpf: f64 = m.shares.iter().map(|s| s.0).sum();
        let lent = |bpf: f64| {
            if total_bpf > 0.0 {
                m.own * bpf / total_bpf
            } else {
                0.0
            }
        };
        // What a family paused before this measure still cost in it is its pause's tail
        // (links closing on their thread for their grace periods, its last events read),
        // gone by the next: not a reason to cut the others (a storm's syscall family,
        // paused, cost 2.4% of a 5% budget in the next quarter second and paused
        // memgrowth, which cost 0.006%).
        let tail: f64 = (0..FAM_COUNT)
            .map(family)
            .filter(|&f| self.is_paused(f))
            .map(|f| m.share(f) + lent(m.shares[f as usize].0))
            .sum();
        let mut predicted = m.cost() - tail;
        while predicted > target {
            let eff = |f: EventFamily| m.share(f) + lent(m.shares[f as usize].0);
            let top = (0..FAM_COUNT)
                .map(family)
                .filter(|&f| m.share(f) > 0.0 && !self.is_paused(f) && !done.contains(&f))
                .max_by(|a, b| eff(*a).total_cmp(&eff(*b)));
            let Some(f) = top else { break };
            done.push(f);
            let (bpf, traps) = m.shares[f as usize];
            let stepped = bpf + lent(bpf);
            let need = predicted - target;
            // A step lowers the BPF time (and the events ebrec reads), not the traps: a
            // family whose traps alone are over is paused.
            let trapping = traps > self.limit * 0.8;
            if let (Some(k), false) = (self.steppable(f), trapping && self.pausable(f)) {
                let kn = &mut self.knobs[k];
                let left = kn.ladder.len() - 1 - kn.step;
                let keep = ((stepped - need) / stepped).max(1e-6);
                let n = ((1.0 / keep).ln() / kn.factor.ln()).ceil().max(1.0) as usize;
                let n = n.min(left);
                kn.step += n;
                self.stepped.extend(std::iter::repeat_n(k, n));
                predicted -= stepped * (1.0 - kn.factor.powi(-(n as i32)));
                out.push(Change::Rate {
                    family: kn.family,
                    setting: kn.setting,
                    value: kn.value(),
                });
                continue;
            }
            if self.pausable(f) {
                predicted -= bpf + traps + lent(bpf);
                out.push(self.pause(f, bpf + traps, now));
            }
        }
        out
    }

    fn pausable(&self, f: EventFamily) -> bool {
        self.can_pause.contains(&f)
    }

    /// Pauses `f`, which cost `est` of a CPU. It is tried again when a quarter second of
    /// that cost spread over the wait is a tenth of the budget shared among the paused
    /// families (a family costing a whole CPU under a 1% budget: every 250 s when alone), at
    /// least 5 s and at most 10 min on.
    fn pause(&mut self, f: EventFamily, est: f64, now: Instant) -> Change {
        let share = (self.limit * 0.1 / (self.paused.len() + 1) as f64).max(1e-9);
        let wait = (est * TICK.as_secs_f64() / share).clamp(CALM_S as f64, 600.0);
        if self.paused.is_empty() {
            self.any_paused_since = Some(now);
        }
        self.paused.push(Paused {
            family: f,
            est,
            next_try: now + Duration::from_secs_f64(wait),
            since: now,
        });
        self.calm_since = None;
        Change::Paused(f)
    }

    fn why(&self, m: &Measure, dt: Duration) -> String {
        let bpf: f64 = m.shares.iter().map(|s| s.0).sum();
        let traps: f64 = m.shares.iter().map(|s| s.1).sum();
        let mut by_family: Vec<String> = (0..FAM_COUNT)
            .map(family)
            .filter(|&f| m.share(f) > 0.0)
            .map(|f| format!("{} {:.3}%", family_name(f), m.share(f) * 100.0))
            .collect();
        if by_family.is_empty() {
            by_family.push("none".into());
        }
        format!(
            "--max-cpu {:.3}%: {:.3}% of a CPU in the last {:.2} s (BPF {:.3}%, traps {:.3}%, ebrec {:.3}%; by family: {})",
            self.limit * 100.0,
            m.cost() * 100.0,
            dt.as_secs_f64(),
            bpf * 100.0,
            traps * 100.0,
            m.own * 100.0,
            by_family.join(", ")
        )
    }

    /// The settings in effect, in words ("alloc: 1 sample per 65536 B, cpu: 12 Hz"), and
    /// what is paused.
    pub fn rates(&self) -> String {
        let mut parts: Vec<String> = self.knobs.iter().map(Knob::describe).collect();
        for x in &self.paused {
            parts.push(format!("{} paused", family_name(x.family)));
        }
        if parts.is_empty() {
            "nothing to steer".into()
        } else {
            parts.join(", ")
        }
    }

    /// Mean cost over the recording (weighted by time) and the cost of its worst second
    /// (measures run together into spans of at least a second; sampled, the worst measure),
    /// as shares of one CPU.
    pub fn summary(&self) -> (f64, f64) {
        let total: f64 = self.measures.iter().map(|m| m.0).sum();
        if total <= 0.0 {
            return (0.0, 0.0);
        }
        let mean = self.measures.iter().map(|m| m.0 * m.1).sum::<f64>() / total;
        if self.sampled {
            // Measures a second apart (or more): each stands for its second.
            let worst = self.measures.iter().map(|m| m.1).fold(0.0, f64::max);
            return (mean, worst);
        }
        let (mut worst, mut span, mut used) = (0.0f64, 0.0, 0.0);
        for &(dt, c) in &self.measures {
            span += dt;
            used += dt * c;
            if span >= 0.99 {
                worst = worst.max(used / span);
                (span, used) = (0.0, 0.0);
            }
        }
        if span > 0.0 && worst == 0.0 {
            worst = used / span;
        }
        (mean, worst)
    }

    /// A pause of `f` since `since` ended at `now`: its time counted.
    fn pause_ended(&mut self, f: EventFamily, since: Instant, now: Instant) {
        add_paused(
            &mut self.paused_by,
            f,
            now.saturating_duration_since(since).as_secs_f64(),
        );
        if self.paused.is_empty() {
            if let Some(a) = self.any_paused_since.take() {
                self.paused_time += now.saturating_duration_since(a).as_secs_f64();
            }
        }
    }

    /// Seconds with some family paused, up to now (wall time).
    pub fn paused_s(&self) -> f64 {
        self.paused_time
            + self
                .any_paused_since
                .map_or(0.0, |a| a.elapsed().as_secs_f64())
    }

    /// Each family paused at some time, and the seconds it was, up to now.
    pub fn paused_by(&self) -> Vec<(EventFamily, f64)> {
        let mut v = self.paused_by.clone();
        for p in &self.paused {
            add_paused(&mut v, p.family, p.since.elapsed().as_secs_f64());
        }
        v
    }
}

/// `s` seconds more for family `f` in a list of pause times.
fn add_paused(v: &mut Vec<(EventFamily, f64)>, f: EventFamily, s: f64) {
    match v.iter_mut().find(|(g, _)| *g == f) {
        Some((_, t)) => *t += s,
        None => v.push((f, s)),
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

/// [`calibrate_trap`], or None after a one-line warning saying what `leaves_out` leaves out.
pub fn calibrate_trap_or_warn(leaves_out: &str) -> Option<f64> {
    calibrate_trap()
        .map_err(|e| {
            eprintln!("ebrec: warning: could not time a uprobe trap here ({e:#}): {leaves_out}")
        })
        .ok()
}

/// ns of one uprobe trap on this machine: calls to `ebrec_trap_calibration` timed without and
/// with a uprobe on it (a perf event that never samples: the trap and the probe's dispatch),
/// rounds of each interleaved, the least of each kept (the machine may be busy).
pub fn calibrate_trap() -> anyhow::Result<f64> {
    use anyhow::Context;
    let exe = std::fs::read_link("/proc/self/exe").context("reading /proc/self/exe")?;
    let syms = ebtrace_elf::Symbols::read(&exe).map_err(|e| anyhow::anyhow!(e))?;
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

#[cfg(test)]
mod tests {
    //! The decisions on made-up measures (the recording tests in `ebrec/tests/e2e/budget.rs`
    //! check them on real probes).
    use super::*;

    const ALLOC: EventFamily = EventFamily::Alloc;
    const CPU: EventFamily = EventFamily::Cpu;
    const OFFCPU: EventFamily = EventFamily::Offcpu;
    const LOCK: EventFamily = EventFamily::Lock;

    /// A 1% budget, cpu at 99 Hz and off-CPU at 100 us with their ladders; alloc, lock
    /// and off-CPU can pause.
    fn budget() -> Budget {
        Budget::with(
            0.01,
            1000.0,
            vec![cpu_knob(99), offcpu_knob(100_000)],
            vec![ALLOC, LOCK, OFFCPU],
        )
    }

    /// A measure: (family, BPF share, trap share) and ebrec's own share.
    fn measure(fams: &[(EventFamily, f64, f64)], own: f64) -> Measure {
        let mut m = Measure {
            shares: [(0.0, 0.0); FAM_COUNT],
            own,
        };
        for &(f, bpf, traps) in fams {
            m.shares[f as usize] = (bpf, traps);
        }
        m
    }

    fn changes(b: &mut Budget, m: &Measure, now: Instant) -> Vec<Change> {
        b.decide(m, TICK, now).into_iter().map(|c| c.0).collect()
    }

    #[test]
    fn traps_over_the_budget_pause_and_the_rest_steps_in_the_same_measure() {
        let mut b = budget();
        let t = Instant::now();
        // The allocator's traps alone are 60 times the budget; cpu costs 4% (BPF).
        let m = measure(&[(ALLOC, 0.2, 0.6), (CPU, 0.04, 0.0)], 0.0);
        let c = changes(&mut b, &m, t);
        assert_eq!(c[0], Change::Paused(ALLOC), "{c:?}");
        // cpu must lose 4% - 0.9% of its 4%: 3 halvings (99 -> 12 Hz).
        assert_eq!(
            c[1],
            Change::Rate {
                family: CPU,
                setting: "cpu-hz",
                value: 12
            },
            "{c:?}"
        );
        assert_eq!(c.len(), 2, "{c:?}");
    }

    #[test]
    fn a_family_without_a_step_left_pauses() {
        let mut b = budget();
        b.knobs[1].step = b.knobs[1].ladder.len() - 1;
        let m = measure(&[(OFFCPU, 0.05, 0.0)], 0.0);
        assert_eq!(
            changes(&mut b, &m, Instant::now()),
            vec![Change::Paused(OFFCPU)]
        );
    }

    #[test]
    fn a_pause_that_would_not_fit_waits_for_its_try_and_a_try_over_goes_back_alone() {
        let mut b = budget();
        let t = Instant::now();
        let over = measure(&[(ALLOC, 0.3, 0.7), (CPU, 0.001, 0.0)], 0.002);
        assert_eq!(changes(&mut b, &over, t), vec![Change::Paused(ALLOC)]);
        // Calm (0.2%): the allocator's 100% does not fit, and its try is due only when a
        // quarter second of it is a tenth of the budget: 250 s on.
        let calm = measure(&[(CPU, 0.001, 0.0)], 0.001);
        for s in [1u64, 10, 100, 249] {
            let c = changes(&mut b, &calm, t + Duration::from_secs(s));
            assert!(c.is_empty(), "at {s} s: {c:?}");
        }
        let c = changes(&mut b, &calm, t + Duration::from_secs(251));
        assert_eq!(c, vec![Change::Resumed(ALLOC)]);
        // The try is over again: back to its pause, and cpu is not cut for it (ebrec's
        // share of that measure is the attaching).
        let tried = measure(&[(ALLOC, 0.3, 0.7), (CPU, 0.001, 0.0)], 0.05);
        let c = changes(&mut b, &tried, t + Duration::from_secs(252));
        assert_eq!(c, vec![Change::Paused(ALLOC)]);
    }

    #[test]
    fn a_paused_familys_tail_cuts_nothing_else() {
        let mut b = budget();
        let t = Instant::now();
        let storm = measure(&[(OFFCPU, 0.8, 0.0), (LOCK, 0.0001, 0.0)], 0.9);
        b.knobs[1].step = b.knobs[1].ladder.len() - 1;
        assert_eq!(changes(&mut b, &storm, t), vec![Change::Paused(OFFCPU)]);
        // The next measure: off-CPU's links still closing and its events read (2.4% and
        // ebrec's 2.7%, over the 1% budget); lock's 0.01% is not cut for them.
        let tail = measure(&[(OFFCPU, 0.024, 0.0), (LOCK, 0.0001, 0.0)], 0.027);
        assert!(changes(&mut b, &tail, t + TICK).is_empty());
        // Lock over the budget by itself is.
        let over = measure(&[(OFFCPU, 0.024, 0.0), (LOCK, 0.02, 0.0)], 0.0);
        assert_eq!(
            changes(&mut b, &over, t + TICK * 2),
            vec![Change::Paused(LOCK)]
        );
    }

    #[test]
    fn a_pause_that_fits_comes_back_when_calm() {
        let mut b = budget();
        let t = Instant::now();
        // lock costs 1.5% with cpu at 0.5%: lock pauses (est 1.5%, over the 0.8% room).
        let m = measure(&[(LOCK, 0.015, 0.0), (CPU, 0.005, 0.0)], 0.0);
        assert_eq!(changes(&mut b, &m, t), vec![Change::Paused(LOCK)]);
        assert!(b.paused.iter().any(|x| x.family == LOCK));
        // The workload calms; lock's last cost still does not fit in the room until its try
        // (5 s at least).
        let calm = measure(&[(CPU, 0.0001, 0.0)], 0.0001);
        assert!(changes(&mut b, &calm, t + Duration::from_secs(1)).is_empty());
        let due = b.paused[0].next_try;
        assert!(due >= t + Duration::from_secs(5), "{:?}", due - t);
        let c = changes(&mut b, &calm, due);
        assert_eq!(c, vec![Change::Resumed(LOCK)]);
    }

    #[test]
    fn a_step_back_waits_for_calm_and_only_when_it_fits() {
        let mut b = budget();
        let t = Instant::now();
        let m = measure(&[(CPU, 0.02, 0.0)], 0.0);
        let c = changes(&mut b, &m, t);
        assert!(matches!(c[..], [Change::Rate { family: CPU, .. }]), "{c:?}");
        let hz = b.knobs[0].value();
        // Calm at 0.1% for cpu: undone only after 5 s of calm, one step at a time.
        let calm = measure(&[(CPU, 0.001, 0.0)], 0.0);
        assert!(changes(&mut b, &calm, t + Duration::from_secs(1)).is_empty());
        assert!(changes(&mut b, &calm, t + Duration::from_secs(4)).is_empty());
        let c = changes(&mut b, &calm, t + Duration::from_secs(7));
        let back = Change::Rate {
            family: CPU,
            setting: "cpu-hz",
            value: b.knobs[0].value(),
        };
        assert_eq!(c, vec![back]);
        assert!(b.knobs[0].value() > hz);
        // At 0.45% a doubling (0.9%) would not fit under 80% of the budget: no step back
        // however long the calm.
        let warm = measure(&[(CPU, 0.0045, 0.0)], 0.0);
        for s in [20u64, 40, 80] {
            assert!(changes(&mut b, &warm, t + Duration::from_secs(s)).is_empty());
        }
    }

    /// Sampled, the stats rest only after a measure within the budget that changed nothing,
    /// with no family on trial.
    #[test]
    fn the_stats_rest_only_within_the_budget_after_no_change_and_no_trial() {
        let mut b = budget();
        let none: Vec<(Change, String)> = Vec::new();
        assert!(b.may_rest(&none, b.limit * 0.99));
        assert!(!b.may_rest(&none, b.limit * 1.01));
        let change = vec![(Change::Paused(EventFamily::Alloc), String::new())];
        assert!(!b.may_rest(&change, b.limit * 0.1));
        b.trial = Some(EventFamily::Alloc);
        assert!(!b.may_rest(&none, b.limit * 0.1));
    }

    #[test]
    fn the_summary_is_time_weighted_with_a_worst_second() {
        let mut b = budget();
        b.measures = vec![(0.25, 1.0), (0.25, 0.0), (0.25, 0.0), (0.25, 0.0)];
        b.measures.extend(std::iter::repeat_n((0.25, 0.004), 36));
        let (mean, worst) = b.summary();
        assert!((mean - (0.25 + 9.0 * 0.004) / 10.0).abs() < 1e-9, "{mean}");
        assert!((worst - 0.25).abs() < 1e-9, "{worst}");
        // Sampled, each measure stands for its second: the worst is the worst measure.
        b.sampled = true;
        let (mean, worst) = b.summary();
        assert!((mean - (0.25 + 9.0 * 0.004) / 10.0).abs() < 1e-9, "{mean}");
        assert!((worst - 1.0).abs() < 1e-9, "{worst}");
    }
}
