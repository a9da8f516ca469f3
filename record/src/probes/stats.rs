//! The kernel's view of the programs: their run time and runs (program stats), what the
//! stats do not see (the dispatch), and each family's cost.
use super::chain::chain_syscalls;
use super::prog::{prog_info, prog_run_stats};
use super::*;
use libbpf_rs::skel::Skel;
use libbpf_rs::{MapCore, MapFlags};
use std::os::fd::AsFd;

impl<'obj> Probes<'obj> {
    /// What the kernel's stats do not see, with them on: (runs of tracepoint and perf event
    /// programs, `dispatch_ns` each; runs of uprobe programs, the kprobe program type:
    /// uprobe, uretprobe, uprobe_multi and session, each one trap or return). Chain members
    /// are not dispatched: the hub is.
    pub fn dispatch_cost(&self) -> (u64, f64, u64) {
        let (mut runs, mut uprobe_runs) = (0u64, 0u64);
        each_skel!(self, s => {
            for p in s.object().progs() {
                let n = prog_run_stats(p.as_fd()).1;
                if p.prog_type() == libbpf_rs::ProgramType::Kprobe {
                    uprobe_runs += n;
                } else {
                    runs += n;
                }
            }
        });
        (runs, self.dispatch_ns, uprobe_runs)
    }

    /// Per chain member, with BPF stats on: its run time (ns) and runs, summed over the
    /// CPUs (the kernel's stats count them in the hub program they run inside).
    fn chain_stats(&self) -> Vec<(ChainMember, u64, u64)> {
        let mut out = Vec::new();
        for m in self.chain.borrow().iter() {
            let mut ns = 0u64;
            let mut runs = 0u64;
            if let Ok(Some(vals)) = self
                .chain_maps
                .costs
                .lookup_percpu(&m.member.to_ne_bytes(), MapFlags::ANY)
            {
                for v in vals {
                    if v.len() >= 16 {
                        ns += u64::from_ne_bytes(v[..8].try_into().unwrap_or([0; 8]));
                        runs += u64::from_ne_bytes(v[8..16].try_into().unwrap_or([0; 8]));
                    }
                }
            }
            out.push((m.clone(), ns, runs));
        }
        out
    }

    /// Each family's BPF run time (ns) and uprobe traps (runs of its uprobe programs) so
    /// far, indexed by EventFamily number. A program belongs to the family of its object
    /// (alloc and sampler: alloc; lock: lock) or, in the profile object, to the family its
    /// name starts with (cpu_, offcpu_, mem_, func_); the profile object's fork and exit
    /// tracepoints serve all its families and count as unspecified (0). A tracepoint or
    /// perf event program's runs also cost `dispatch_ns` each, which the stats do not see;
    /// the hub's runs and time are shared by the families in the system call chain.
    pub fn family_costs(&self) -> [(u64, u64); FAM_COUNT] {
        use ebtrace_proto::v1::EventFamily as F;
        let mut out = [(0u64, 0u64); FAM_COUNT];
        let dispatch_ns = self.dispatch_ns;
        let mut add = |p: &libbpf_rs::Program<'_>, fam: F| {
            if let Some(info) = prog_info(p.as_fd()) {
                let e = &mut out[(fam as usize).min(FAM_COUNT - 1)];
                e.0 += info.run_time_ns;
                if p.prog_type() == libbpf_rs::ProgramType::Kprobe {
                    e.1 += info.run_cnt;
                } else {
                    // What the stats do not see of a tracepoint or perf event run.
                    e.0 += (info.run_cnt as f64 * dispatch_ns) as u64;
                }
            }
        };
        if let Some(s) = &self.alloc {
            s.object().progs().for_each(|p| add(&p, F::Alloc));
        }
        if let Some(s) = &self.sampler {
            s.object().progs().for_each(|p| add(&p, F::Alloc));
        }
        if let Some(s) = &self.lock {
            s.object().progs().for_each(|p| add(&p, F::Lock));
        }
        if let Some(s) = &self.profile {
            for p in s.object().progs() {
                let name = p.name().to_string_lossy().into_owned();
                let fam = if name.starts_with("cpu_") {
                    F::Cpu
                } else if name.starts_with("offcpu_") {
                    F::Offcpu
                } else if name.starts_with("mem_") {
                    F::MemGrowth
                } else if name.starts_with("func_") {
                    F::Func
                } else if name.starts_with("usdt_") {
                    F::Usdt
                } else {
                    F::Unspecified
                };
                add(&p, fam);
            }
        }
        if let Some(s) = &self.system {
            for p in s.object().progs() {
                let name = p.name().to_string_lossy().into_owned();
                add(&p, system_family(&name));
            }
        }
        if let Some(h) = &self.hub {
            // The chain's members by their own time; the hub's remainder (dispatch, target
            // check) shared by the families with an active member.
            let mut hub_ns = 0u64;
            let mut hub_dispatch = 0u64;
            for p in [&h.progs.hub_sys_enter, &h.progs.hub_sys_exit] {
                let (ns, runs) = prog_run_stats(p.as_fd());
                hub_ns += ns;
                hub_dispatch += (runs as f64 * dispatch_ns) as u64;
            }
            // Shared by the families whose active members need every call (the hubs are
            // attached for them: without them the few-call members would be on their own
            // tracepoints), or by all the active ones when those would keep the hubs too.
            let direct = !self.hub_only && !self.direct_failed.get();
            let mut fams: Vec<F> = Vec::new();
            let mut every: Vec<F> = Vec::new();
            for (m, ns, _) in self.chain_stats() {
                out[(m.family as usize).min(FAM_COUNT - 1)].0 += ns;
                hub_ns = hub_ns.saturating_sub(ns);
                if m.active && !fams.contains(&m.family) {
                    fams.push(m.family);
                }
                let needs_all = !m.direct || chain_syscalls(m.member).is_none();
                if m.active && needs_all && !every.contains(&m.family) {
                    every.push(m.family);
                }
            }
            let mut fams: Vec<usize> = fams
                .iter()
                .map(|&f| (f as usize).min(FAM_COUNT - 1))
                .collect();
            let every: Vec<usize> = every
                .iter()
                .map(|&f| (f as usize).min(FAM_COUNT - 1))
                .collect();
            let mut last = self.hub_every.borrow_mut();
            if direct && !every.is_empty() {
                fams = every.clone();
                *last = every;
            } else if direct && !last.is_empty() {
                // The every-call families were paused: the hubs went with them, and what
                // they ran until then (read now) is those families' (charged to the
                // few-call ones left, it once paused memgrowth after --syscalls).
                fams = std::mem::take(&mut *last);
            }
            // Shared as it grows: the remainder added since the last call goes to the
            // families active now (dividing the whole by the families active now would move
            // what ran before a pause or a resume onto the families left, and a family on
            // trial after a pause would seem to cost the whole hub's past).
            let mut sh = self.hub_shares.borrow_mut();
            let total = hub_ns + hub_dispatch;
            let new = total.saturating_sub(sh.1);
            sh.1 = sh.1.max(total);
            if fams.is_empty() {
                // No member active (all paused): the hubs still run, counted as "other".
                sh.0[F::Unspecified as usize] += new;
            } else {
                let share = new / fams.len() as u64;
                for f in fams {
                    sh.0[f] += share;
                }
            }
            for (o, s) in out.iter_mut().zip(sh.0) {
                o.0 += s;
            }
        }
        out
    }

    /// Every loaded program that ran or was skipped: its name, run time and runs (with
    /// `--bpf-stats`), and the runs the kernel skipped because a program was already running
    /// on that CPU (`recursion_misses`, always counted): an event of a skipped run is lost.
    pub fn program_stats(&self) -> Vec<ProgStat> {
        let mut out = Vec::new();
        let mut add = |p: &libbpf_rs::Program<'_>| {
            let Some(info) = prog_info(p.as_fd()) else {
                return;
            };
            if info.run_cnt > 0 || info.recursion_misses > 0 {
                out.push(ProgStat {
                    name: p.name().to_string_lossy().into_owned(),
                    run_time_ns: info.run_time_ns,
                    runs: info.run_cnt,
                    recursion_misses: info.recursion_misses,
                });
            }
        };
        each_skel!(self, s => {
            for p in s.object().progs() {
                add(&p);
            }
        });
        // The chain's members ran inside the hub's programs: each gets its own time, and
        // the hub's keeps what is left (its dispatch and target check).
        for (m, ns, runs) in self.chain_stats() {
            let hub = if m.exit {
                "hub_sys_exit"
            } else {
                "hub_sys_enter"
            };
            if let Some(h) = out.iter_mut().find(|p| p.name == hub) {
                h.run_time_ns = h.run_time_ns.saturating_sub(ns);
            }
            if runs > 0 {
                out.push(ProgStat {
                    name: m.name.to_string(),
                    run_time_ns: ns,
                    runs,
                    recursion_misses: 0,
                });
            }
        }
        out
    }
}

/// What the kernel counted for one BPF program ([`Probes::program_stats`]).
#[derive(Debug, Clone)]
pub struct ProgStat {
    pub name: String,
    pub run_time_ns: u64,
    pub runs: u64,
    pub recursion_misses: u64,
}

impl From<ProgStat> for ebtrace_proto::v1::ProgramStats {
    /// As the trace's `Stats` record and the agent's metrics carry it.
    fn from(p: ProgStat) -> Self {
        ebtrace_proto::v1::ProgramStats {
            name: p.name,
            run_time_ns: p.run_time_ns,
            run_count: p.runs,
            recursion_misses: p.recursion_misses,
        }
    }
}

/// The family of a program of the system object, by its name's prefix (the fork and exit
/// tracepoints serve all its families: unspecified).
fn system_family(name: &str) -> ebtrace_proto::v1::EventFamily {
    use ebtrace_proto::v1::EventFamily as F;
    if name.starts_with("sys_") {
        F::Syscall
    } else if name.starts_with("bio_") {
        F::Bio
    } else if name.starts_with("runq_") {
        F::Runq
    } else if name.starts_with("tcp_") {
        F::Tcp
    } else {
        F::Unspecified
    }
}
