//! What ebrec prints when it stops: what it kept, lost and filtered per family, what went
//! wrong, and what the BPF programs cost.
use ebtrace_format::proto::FamilyStats;
use std::path::Path;

/// The numbers of a finished recording.
#[derive(Debug)]
pub struct Summary<'a> {
    pub output: &'a Path,
    pub stop_reason: String,
    pub elapsed: f64,
    pub processes: usize,
    /// The size of OUTPUT.
    pub bytes: u64,
    pub families: Vec<FamilyStats>,
    /// What the kernel counted per program.
    pub programs: Vec<crate::probes::ProgStat>,
    /// Tracepoint and perf event program runs and what each costs beyond its measured run
    /// time (`Probes::dispatch_cost`; 0 ns when not calibrated).
    pub dispatch: (u64, f64),
    /// Runs of uprobe programs and what the trap around each costs (calibrated), when the
    /// stats counted some.
    pub traps: Option<(u64, f64)>,
    /// ebrec's own CPU time over the recording, its start included, s.
    pub own_cpu_s: f64,
    /// ebrec's context switches over the recording (every thread's, voluntary and not): each
    /// a moment it took a CPU from the targets, or was taken off one.
    pub own_switches: u64,
    /// `--sched`, as the flag spells it.
    pub sched: &'static str,
    /// --max-cpu measured a part of the time (without --bpf-stats): the seconds measured
    /// (the runs and run time above are of them).
    pub sampled: Option<f64>,
    pub evictions: u64,
    pub rotations: u32,
    pub no_kallsyms: bool,
    pub malformed: u64,
    pub sideband_lost: u64,
    pub copies_missing: u64,
    pub waker_frames_dropped: u64,
    /// Off-CPU blocks given the user stack of a later block of the same system call.
    pub same_call_filled: u64,
    /// --alloc-probes session: child processes probed after their fork, and of those the
    /// ones never probed.
    pub late_attachments: (u64, u64),
    /// --max-cpu: what the budget measured and did.
    pub budget_line: Option<String>,
    /// Per family: user stacks and why some stopped early.
    pub stacks: Vec<String>,
    /// --stack-mode cfi|auto: the unwind tables in the kernel.
    pub cfi: Option<String>,
    /// --offcpu with --offcpu-sample: the blocks seen and those kept.
    pub offcpu_sample: Option<String>,
    /// --offcpu-rate, --syscalls-rate, --runq-rate: the units they raised.
    pub paced: Vec<String>,
    /// --alloc-sampler preload: where the shim's events went (channel or probes).
    pub preload: Option<String>,
}

impl Summary<'_> {
    /// Prints it on stderr.
    pub fn print(self) {
        eprintln!(
            "ebrec: {} after {:.1} s: {} processes, {} ({:.2} MiB)",
            self.stop_reason,
            self.elapsed,
            self.processes,
            self.output.display(),
            self.bytes as f64 / (1 << 20) as f64
        );
        for f in &self.families {
            let name = ebtrace_format::family::by_number(f.family).map_or("other", |f| f.name);
            eprintln!(
                "ebrec:   {name:<9} kept {:>9}  lost {:>7}  filtered {:>9}  probe hits {:>10}",
                f.kept, f.lost, f.filtered, f.hits
            );
        }
        for l in self.notes() {
            eprintln!("ebrec:   {l}");
        }
        self.print_cost();
    }

    /// What the families' counts do not say: sampling, stacks, unwinding, rotation, losses
    /// outside the families, the budget, the kernel's skipped runs.
    fn notes(&self) -> Vec<String> {
        let mut n: Vec<String> = Vec::new();
        n.extend(self.offcpu_sample.clone());
        n.extend(self.paced.iter().cloned());
        n.extend(self.preload.clone());
        n.extend(self.stacks.iter().map(|l| format!("stacks {l}")));
        n.extend(self.cfi.clone());
        let (evictions, rotations) = (self.evictions, self.rotations);
        if evictions > 0 {
            n.push(format!("stack table emptied {evictions} times (bounded memory): stacks seen again were written again"));
        }
        if rotations > 0 {
            n.push(format!(
                "rotated {rotations} times; older files: {} …",
                crate::rotate::rotated_name(self.output, 1).display()
            ));
        }
        if self.no_kallsyms {
            n.push("kernel frames are unnamed: /proc/kallsyms shows no addresses (kernel.kptr_restrict)".into());
        }
        let (malformed, sideband_lost) = (self.malformed, self.sideband_lost);
        if malformed > 0 || sideband_lost > 0 {
            n.push(format!(
                "malformed events {malformed}, side-band records lost {sideband_lost}"
            ));
        }
        let copies_missing = self.copies_missing;
        if copies_missing > 0 {
            n.push(format!(
                "{copies_missing} events kept their frame-pointer stack: their stack copy was lost"
            ));
        }
        n.extend(self.budget_line.clone());
        if self.late_attachments.0 > 0 {
            n.push(format!(
                "alloc: {} child processes probed after their fork ({} of them never: gone first); their allocations in between were not seen (the trace marks them; --alloc-probes classic follows children from their first instruction)",
                self.late_attachments.0, self.late_attachments.1
            ));
        }
        if self.same_call_filled > 0 {
            n.push(format!(
                "{} off-CPU blocks followed by another in the same system call (an fsync's waits) got the call's user stack from the last",
                self.same_call_filled
            ));
        }
        let waker_frames_dropped = self.waker_frames_dropped;
        if waker_frames_dropped > 0 {
            n.push(format!("{waker_frames_dropped} off-CPU wakers outside the traced processes: their user frames dropped, kernel frames kept"));
        }
        for p in self.programs.iter().filter(|p| p.recursion_misses > 0) {
            n.push(format!(
                "{} runs of {} skipped by the kernel (a BPF program was already running on that CPU): what they would have recorded is lost",
                p.recursion_misses, p.name
            ));
        }
        n
    }

    /// What the BPF programs cost, program by program, and ebrec's whole cost.
    fn print_cost(&self) {
        let (sampled, elapsed) = (self.sampled, self.elapsed);
        let programs: Vec<_> = self.programs.iter().filter(|p| p.runs > 0).collect();
        let total_ns: u64 = programs.iter().map(|p| p.run_time_ns).sum();
        let total_runs: u64 = programs.iter().map(|p| p.runs).sum();
        if total_runs == 0 {
            eprintln!("ebrec:   BPF run time not measured (--bpf-stats measures it, at about 30 ns per program run)");
            return;
        }
        if let Some(on) = sampled {
            eprintln!(
                "ebrec:   BPF run time measured {on:.1} s of the {elapsed:.1} s (--max-cpu turns the kernel's BPF stats off between its measures while within the budget: they cost every program run two clock reads; --bpf-stats measures all the time):"
            );
        }
        eprintln!(
            "ebrec:   BPF run time {:.1} ms for {} program runs ({:.0} ns per run; uprobes add the trap itself, ~1 µs per call):",
            total_ns as f64 / 1e6,
            total_runs,
            total_ns as f64 / total_runs as f64
        );
        for p in &programs {
            eprintln!(
                "ebrec:     {:<22} {:>10} runs {:>8.0} ns/run",
                p.name,
                p.runs,
                p.run_time_ns as f64 / p.runs as f64
            );
        }
        let measured = sampled.unwrap_or(elapsed).max(1e-9);
        let pct = |ns: f64| ns / 1e9 / measured * 100.0;
        let (runs, ns) = self.dispatch;
        let dispatch_ns = if ns > 0.0 && runs > 0 {
            let total = runs as f64 * ns;
            eprintln!(
                "ebrec:   tracepoint dispatch {:.1} ms more ({runs} runs of tracepoint and perf event programs, {ns:.0} ns each beyond their run time, calibrated at start on a system call loop): {:.2}% of a CPU",
                total / 1e6,
                pct(total)
            );
            total
        } else {
            0.0
        };
        let trap_ns = match self.traps {
            Some((runs, ns)) => {
                let total = runs as f64 * ns;
                eprintln!(
                    "ebrec:   uprobe traps {:.1} ms more ({runs} runs of uprobe programs, {ns:.0} ns each beyond their run time, timed on a uprobe of ebrec's own; a function probed in several processes costs more a trap): {:.2}% of a CPU",
                    total / 1e6,
                    pct(total)
                );
                total
            }
            None => 0.0,
        };
        let bpf = pct(total_ns as f64);
        let own = self.own_cpu_s / elapsed.max(1e-9) * 100.0;
        eprintln!(
            "ebrec:   cost {:.2}% of a CPU: BPF {bpf:.2}%, tracepoint dispatch {:.2}%, uprobe traps {:.2}%, ebrec's process {own:.2}% (its start included; {:.0} context switches a second, --sched {})",
            bpf + pct(dispatch_ns) + pct(trap_ns) + own,
            pct(dispatch_ns),
            pct(trap_ns),
            self.own_switches as f64 / elapsed.max(1e-9),
            self.sched,
        );
    }
}
