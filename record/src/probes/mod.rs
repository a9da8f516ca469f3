//! Loading the BPF skeletons, attaching them to targets, and reading their counters: the
//! `Probes` (its struct, config and shared small types, here) split by concern into
//! `load` (opening and loading the objects), `attach` (uprobes, sessions, --func, the
//! sampler, tracepoints), `chain` (the system call chain and its hubs), `knobs` (what the
//! budget turns while recording: pause and resume, sample units, stats on or off),
//! `readers` (counters, aggregates, histograms), `stats` (program stats and costs) and
//! `site` (where a probe goes in a binary).
use crate::perf;
use libbpf_rs::Link;
use std::collections::HashMap;
use std::os::fd::OwnedFd;

use alloc_skel::AllocSkel;
use hub_skel::HubSkel;
use lock_skel::LockSkel;
use profile_skel::ProfileSkel;
use sampler_skel::SamplerSkel;
use system_skel::SystemSkel;

use attach::{PausableLink, SessionPlan, TpPausable};
use chain::{ChainMaps, ChainMember, RseqFallback};

/// Event types and constants of `bpf/events.h`.
pub use ebtrace_bpf::*;

pub use ebtrace_bpf::{alloc_skel, hub_skel, lock_skel, profile_skel, sampler_skel, system_skel};

/// Families' numbers (the `type` of an event header, the counters' family dimension) come from
/// the one registry, trace.proto's EventFamily (`ebtrace_format::family`).
pub use ebtrace_format::family::COUNT as FAM_COUNT;

/// Reads a possibly short event into a zeroed full-size struct (events are sent only up to
/// their last used stack slot).
pub fn read_event<T: plain::Plain + Default>(data: &[u8]) -> T {
    let mut t = T::default();
    let n = data.len().min(std::mem::size_of::<T>());
    // SAFETY: T is Plain (any bytes valid) and we copy at most size_of::<T>() bytes.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), (&mut t as *mut T).cast::<u8>(), n) };
    t
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockMode {
    Futex,
    Uprobe,
}

/// What to load.
#[derive(Debug, Clone)]
pub struct ProbeConfig {
    pub alloc_min: Option<u64>,
    /// --alloc-sampler preload: the shim's mean bytes between samples (the alloc object is
    /// not loaded then, the sampler object is).
    pub preload_period: Option<u64>,
    /// The shim writes its events into a channel itself (preload::Chan): no sampler
    /// programs, no probe sites.
    pub preload_chan: bool,
    pub sample_every: u32,
    /// --sample-bytes (0: off).
    pub sample_bytes: u64,
    /// The allocator's probes as one uprobe session link per library (see `use_sessions`).
    pub alloc_sessions: bool,
    /// --no-free: allocations sent from their entry, no return probe.
    pub alloc_entry_only: bool,
    /// --aggregate: counters per stack in BPF maps (entries), no event per call (0: off).
    pub aggregate_stacks: u32,
    pub lock_min_ns: Option<u64>,
    pub lock_mode: LockMode,
    pub stack_depth: u32,
    pub ringbuf_bytes: u32,
    /// Entries of the allocator's live-block table and of the lock holders' table (the
    /// BPF objects' defaults, or less under a memory limit: memlimit.rs).
    pub live_blocks: u32,
    pub held_locks: u32,
    pub all: bool,
    /// --cpu: samples per second per CPU.
    pub cpu_hz: Option<u64>,
    /// --offcpu: shortest block kept, ns.
    pub offcpu_min_ns: Option<u64>,
    /// --offcpu-sample: the time-weighted sample's unit, ns (0: every block).
    pub offcpu_unit_ns: u64,
    /// Off-CPU's user stacks at the return to user space on rseq_update, the syscall exit
    /// only once a thread needs it ([`crate::features::offcpu_rseq`]).
    pub offcpu_rseq: bool,
    /// The run queue's user stacks of woken threads the same way.
    pub runq_rseq: bool,
    pub memgrowth: bool,
    /// --memgrowth-sample: the byte-weighted sample's unit for first-touch page faults, bytes
    /// (0: every fault).
    pub mem_fault_unit: u64,
    /// --func: integer arguments kept per call.
    pub func_args: u32,
    /// --func: whether any function is probed (the sites come later, per target).
    pub func: bool,
    /// --stack-mode dwarf|auto: bytes of user stack copied per event (0: fp).
    pub copy_bytes: u32,
    /// --max-events-per-sec, split evenly over the CPUs (0: no cap).
    pub rate_per_cpu: u64,
    /// --stack-mode cfi|auto: CFI_MODE_CFI or CFI_MODE_AUTO of bpf/unwind.bpf.h (0: off).
    pub cfi_mode: u32,
    /// --syscalls, --bio, --runq: the shortest call, request or wait kept as an event, ns
    /// (every one is counted in the kernel's histograms).
    pub syscall_min_ns: Option<u64>,
    /// --syscalls-sample: the time-weighted sample's unit, ns (0: every slow call).
    pub syscall_unit_ns: u64,
    pub bio_min_ns: Option<u64>,
    pub runq_min_ns: Option<u64>,
    /// --runq-sample: the time-weighted sample's unit, ns (0: every long wait).
    pub runq_unit_ns: u64,
    /// --tcp.
    pub tcp: bool,
    /// --usdt: whether any probe is attached (the probes come later, per target).
    pub usdt: bool,
    /// --usdt-stack.
    pub usdt_stack: bool,
    /// --usdt-string-bytes with --usdt-string (0: none kept).
    pub usdt_string_bytes: u32,
    /// --request with --offcpu: each request's time split in the kernel (its start and
    /// done probes are set after the attach: `set_request_probes`).
    pub request_split: bool,
    /// --request usdt: without --usdt-stack or --usdt-string, the kernel holds each start
    /// hit until its done, whose event carries it (one event a request).
    pub request_hold: bool,
    /// --request-slow's fixed threshold, ns (0: off, or adaptive: set while recording with
    /// `set_request_slow_ns`).
    pub request_slow_ns: u64,
    /// --offcpu-wakers: the wake hook loaded (on unless turned off; --request keeps it).
    pub offcpu_wakers: bool,
    /// Kernel BPF stats on (--max-cpu, --bpf-stats).
    pub bpf_stats: bool,
}

impl ProbeConfig {
    /// The objects loaded with a ring buffer of `ringbuf_bytes`: profile, alloc (or the
    /// preload sampler), lock, system.
    pub(crate) fn rings(&self) -> u32 {
        [
            self.profile(),
            self.alloc_min.is_some(),
            self.lock_min_ns.is_some(),
            self.system(),
        ]
        .iter()
        .filter(|&&on| on)
        .count() as u32
    }

    fn profile(&self) -> bool {
        self.cpu_hz.is_some()
            || self.offcpu_min_ns.is_some()
            || self.memgrowth
            || self.func
            || self.usdt
    }
    /// Whether any family of the system object (bpf/system.bpf.c) is on.
    pub fn system(&self) -> bool {
        self.syscall_min_ns.is_some()
            || self.bio_min_ns.is_some()
            || self.runq_min_ns.is_some()
            || self.tcp
    }
}

pub struct Probes<'obj> {
    pub alloc: Option<AllocSkel<'obj>>,
    pub lock: Option<LockSkel<'obj>>,
    pub profile: Option<ProfileSkel<'obj>>,
    pub sampler: Option<SamplerSkel<'obj>>,
    pub system: Option<SystemSkel<'obj>>,
    /// --alloc-sampler preload: the shim's channel, where it writes the events whose
    /// stacks it walked itself (see preload::Chan).
    pub chan: Option<crate::preload::Chan>,
    links: Vec<Link>,
    /// Inherited perf events without a program: they only tell the kernel which processes
    /// (the targets and all their descendants) the probes are for. See `attach`.
    filter_fds: Vec<OwnedFd>,
    /// Dropped after the events (field order): a probe in use cannot be removed.
    trace_probes: Vec<perf::TraceProbe>,
    pub attached: Vec<String>,
    /// The --usdt probes attached (see `attach_usdt`), in id order.
    pub usdt: Vec<crate::funcs::usdt::UsdtProbe>,
    /// --request's USDT probes by id: REQ_START or REQ_DONE, carried in the top bits of
    /// the probe's BPF cookie (`set_request_probes`, `attach_usdt`).
    req_roles: std::collections::HashMap<u64, u64>,
    /// The kernel's BPF stats, on while this fd is open (`set_stats`).
    stats_fd: std::cell::RefCell<Option<OwnedFd>>,
    /// They could be turned on (--bpf-stats or --max-cpu, and the kernel let us).
    stats_ok: bool,
    /// The system call hubs' time beyond their members' (`family_costs`): per family, the
    /// share it was given so far, and the whole given so far.
    hub_shares: std::cell::RefCell<([u64; FAM_COUNT], u64)>,
    /// The families the hubs' remainder was last charged to as every-call families (indices
    /// into the families' costs), for the read after they paused.
    hub_every: std::cell::RefCell<Vec<usize>>,
    /// --alloc-probes session: per library, the offsets and cookies (AllocKind) of its
    /// allocator functions, to attach for each new process as it forks (a uprobe_multi
    /// link with a pid covers that process only); and those links.
    session_plan: std::cell::RefCell<Vec<SessionPlan>>,
    session_links: std::cell::RefCell<HashMap<i32, Vec<Link>>>,
    session_pids: std::cell::RefCell<std::collections::HashSet<i32>>,
    sessions_paused: std::cell::Cell<bool>,
    /// --no-free: no return probes (see `ProbeConfig::alloc_entry_only`).
    alloc_entry_only: bool,
    /// `ProbeConfig::alloc_sessions`: the alloc object loaded its session program.
    alloc_sessions_cfg: bool,
    /// `sample_bytes` in the alloc object's mmapped .bss (see `set_sample_bytes`).
    sample_bytes_ptr: Option<*mut u64>,
    /// `offcpu_min_ns` in the profile object's mmapped .bss (see `set_offcpu_min_ns`).
    offcpu_min_ptr: Option<*mut u64>,
    /// `req_slow_ns` in the profile object's mmapped .bss (see `set_request_slow_ns`).
    req_slow_ptr: Option<*mut u64>,
    /// `offcpu_epoch` in the profile object's .bss (bumped when off-CPU resumes).
    offcpu_epoch_ptr: Option<*mut u32>,
    /// `req_epoch` in the profile object's .bss: odd while off-CPU's hooks are paused (a
    /// request that saw a pause has no kernel split).
    req_epoch_ptr: Option<*mut u32>,
    /// The time-weighted samples' units in the objects' mmapped .bss (`offcpu_unit_ns`,
    /// `syscall_unit_ns`, `runq_unit_ns`; see `set_sample_unit_ns`).
    unit_ptrs: Vec<(ebtrace_proto::v1::EventFamily, *mut u64)>,
    /// The families that take user stacks on rseq_update, and what brings their syscall
    /// exit back ([`Probes::rseq_fallbacks`]).
    rseq_fallbacks: Vec<RseqFallback>,
    /// The system call hubs' links (sys_enter, sys_exit): attached while a member of their
    /// chain is active (`sync_hubs`), once the chain has started.
    hub_links: std::cell::RefCell<[Option<Link>; 2]>,
    chain_started: std::cell::Cell<bool>,
    /// The links of the members' own per-syscall tracepoint programs (`direct_program`),
    /// by member: attached instead of the chain while no active member on their side
    /// needs every system call (`sync_hubs`).
    direct_links: std::cell::RefCell<std::collections::BTreeMap<u32, Vec<Link>>>,
    /// `EBTRACE_SYSCALL_HUB_ONLY=1`: always the chain on the raw tracepoints (the way
    /// before the per-syscall programs), to compare the two.
    hub_only: bool,
    /// Attaching a per-syscall program failed once (said in a note): the chain from then on.
    direct_failed: std::cell::Cell<bool>,
    /// The threads closing links `sync_hubs` took off (joined at drop).
    closing: std::cell::RefCell<Vec<std::thread::JoinHandle<()>>>,
    /// `sys_epoch` in the system object's .bss (bumped when syscalls or runq resume).
    sys_epoch_ptr: Option<*mut u32>,
    /// `offcpu_ending` and `runq_ending` in their objects' .bss, when those families
    /// record ([`Probes::end_pending`]).
    ending_ptrs: Vec<(*mut u32, &'static str)>,
    /// --cpu: the per-CPU cpu-clock perf events (owned by their links in `links`), for
    /// `set_cpu_hz`.
    cpu_fds: Vec<i32>,
    /// The classic (perf event) uprobe links that --max-cpu may detach and attach again:
    /// the allocator's with --alloc-probes classic, --func's.
    pausable: std::cell::RefCell<Vec<PausableLink>>,
    /// The tracepoint links that --max-cpu may detach and attach again: (family, program,
    /// link; None while paused): lock's futex enter and exit, memgrowth's system call enter
    /// and exit and page faults. On resume the in-flight maps are cleared and the exits
    /// attached before the entries, so nothing pairs across a pause.
    tp_pausable: std::cell::RefCell<Vec<TpPausable>>,
    /// The system call chain's members (see `ChainMember`), its maps, and the hub object
    /// that runs it.
    chain: std::cell::RefCell<Vec<ChainMember>>,
    chain_maps: ChainMaps,
    pub hub: Option<HubSkel<'obj>>,
    /// With BPF stats on: what one tracepoint program run costs beyond the run time the
    /// kernel's stats measure (the dispatch, and the system call slow path the raw syscall
    /// tracepoints put every system call on), ns, calibrated when the hub attaches.
    pub dispatch_ns: f64,
}

impl std::fmt::Debug for Probes<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probes")
            .field("attached", &self.attached)
            .finish_non_exhaustive()
    }
}

impl Drop for Probes<'_> {
    fn drop(&mut self) {
        // Closing a uprobe's perf event waits for the kernel to retire the probe (~100 ms
        // each here): one after the other, an --alloc recording took 2-3 s to stop. All at
        // once instead. (The tracefs probes are removed after, by the field's own drop.)
        let mut links = std::mem::take(&mut self.links);
        links.extend(self.session_links.get_mut().drain().flat_map(|(_, l)| l));
        let mut fds = std::mem::take(&mut self.filter_fds);
        for p in self.pausable.get_mut().drain(..) {
            links.extend(p.link);
            fds.extend(p.filter);
        }
        links.extend(self.tp_pausable.get_mut().drain(..).flat_map(|t| t.2));
        links.extend(self.hub_links.get_mut().iter_mut().filter_map(Option::take));
        links.extend(
            std::mem::take(self.direct_links.get_mut())
                .into_values()
                .flatten(),
        );
        std::thread::scope(|s| {
            for l in links {
                s.spawn(move || drop(l));
            }
            for f in fds {
                s.spawn(move || drop(f));
            }
        });
        self.finish_closing();
    }
}

/// Runs `$body` with `$s` bound to each loaded skeleton (for what they all have).
macro_rules! each_skel {
    ($self:expr, $s:ident => $body:expr) => {{
        if let Some($s) = &$self.alloc {
            $body;
        }
        if let Some($s) = &$self.lock {
            $body;
        }
        if let Some($s) = &$self.profile {
            $body;
        }
        if let Some($s) = &$self.sampler {
            $body;
        }
        if let Some($s) = &$self.system {
            $body;
        }
        if let Some($s) = &$self.hub {
            $body;
        }
    }};
}

mod attach;
mod chain;
mod knobs;
mod load;
mod prog;
mod readers;
mod site;
mod stats;

pub use load::ProbeObjects;
pub use site::{
    find_provider, place_in_file, read_at, sites, CustomSite, FuncExit, FuncSite, Site,
    ALLOC_FUNCS, ALLOC_KEEP, LOCK_FUNCS, LOCK_KEEP,
};
pub use stats::ProgStat;
