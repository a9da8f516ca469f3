//! Loading the BPF skeletons, attaching them to targets, and reading their counters.
use crate::perf;
use crate::placement::{self, Placement};
use crate::{features, procfs};
use anyhow::{bail, Context, Result};
use ebtrace_elf::Symbols;
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags};
use std::collections::{BTreeMap, HashMap};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, IntoRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use alloc_skel::{AllocSkel, AllocSkelBuilder};
/// Event types and constants of `bpf/events.h`.
pub use ebtrace_bpf::*;
pub use ebtrace_bpf::{alloc_skel, hub_skel, lock_skel, profile_skel, sampler_skel, system_skel};
/// Families' numbers (the `type` of an event header, the counters' family dimension) come from
/// the one registry, trace.proto's EventFamily (`ebtrace_format::family`).
pub use ebtrace_format::family::COUNT as FAM_COUNT;
use hub_skel::{HubSkel, HubSkelBuilder};
use lock_skel::{LockSkel, LockSkelBuilder};
use profile_skel::{ProfileSkel, ProfileSkelBuilder};
use sampler_skel::{SamplerSkel, SamplerSkelBuilder};
use system_skel::{SystemSkel, SystemSkelBuilder};

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
    /// Kernel BPF stats on (--max-cpu, --bpf-stats).
    pub bpf_stats: bool,
}

impl ProbeConfig {
    fn profile(&self) -> bool {
        self.cpu_hz.is_some() || self.offcpu_min_ns.is_some() || self.memgrowth || self.func
    }
    /// Whether any family of the system object (bpf/system.bpf.c) is on.
    pub fn system(&self) -> bool {
        self.syscall_min_ns.is_some()
            || self.bio_min_ns.is_some()
            || self.runq_min_ns.is_some()
            || self.tcp
    }
}

/// A --func function to probe: its id (the ProbedFunction id in the trace, the BPF cookie)
/// and its shortest call kept.
#[derive(Debug, Clone)]
pub struct FuncSite {
    pub id: u64,
    pub site: Site,
    pub min_ns: u64,
    pub exit: FuncExit,
}

/// How the end of a --func call is caught.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FuncExit {
    /// A uretprobe: one trap, but it swaps the return address on the stack, which a C++
    /// exception unwinding through the call cannot get past (the target terminates). For
    /// functions that call nothing, or when the user accepts that (`--func-exit uretprobe`).
    Uretprobe,
    /// A uprobe on each exit (file offset, is a tail jump): every `ret` (single-stepped:
    /// ≈ 5.4 µs more here) and direct tail jump (emulated). An exception just leaves the call unfinished.
    Sites(Vec<(u64, bool)>),
}

/// Cookie bit of an exit probe on a tail jump: the call's return value is not in %rax yet.
const FUNC_EXIT_TAIL: u64 = 1 << 32;

/// A function of a custom allocator (`--alloc-fn`) to probe.
#[derive(Debug, Clone)]
pub struct CustomSite {
    pub site: Site,
    /// The allocator's number (1-based, the order of `--alloc-fn`).
    pub allocator: u32,
    /// The index of the argument read: the size, or (`free`) the pointer.
    pub arg: u32,
    /// The free function (else the allocation function).
    pub free: bool,
}

/// A function to probe in a binary.
#[derive(Debug, Clone)]
pub struct Site {
    pub lib: PathBuf,
    pub symbol: std::borrow::Cow<'static, str>,
    /// File offset of the function's first byte.
    pub offset: u64,
    /// Where in the function the probe goes (see `placement`).
    pub placement: Placement,
}

impl Site {
    /// The site of the function at file `offset` (`size` bytes, 0: unknown) of `lib`, its
    /// probe placed for a BPF program that reads the registers `keep`.
    pub fn new(
        lib: &Path,
        symbol: impl Into<std::borrow::Cow<'static, str>>,
        offset: u64,
        size: u64,
        keep: &[iced_x86::Register],
    ) -> Site {
        Site {
            lib: lib.to_path_buf(),
            symbol: symbol.into(),
            offset,
            placement: place_in_file(lib, offset, size, keep),
        }
    }

    /// The file offset the uprobe goes to.
    pub fn probe_offset(&self) -> u64 {
        self.offset + self.placement.skip
    }
}

impl std::fmt::Display for Site {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.symbol)?;
        if self.placement.skip > 0 {
            write!(f, "+{:#x}", self.placement.skip)?;
        }
        write!(f, " in {}", self.lib.display())?;
        if self.placement.single_step {
            write!(
                f,
                " (first instruction single-stepped: a second trap per call)"
            )?;
        }
        Ok(())
    }
}

/// `len` bytes at file offset `offset` of `lib`.
pub fn read_at(lib: &Path, offset: u64, len: u64) -> Option<Vec<u8>> {
    use std::io::{Read, Seek};
    let mut code = vec![0u8; usize::try_from(len).ok()?];
    let mut f = std::fs::File::open(lib).ok()?;
    f.seek(std::io::SeekFrom::Start(offset)).ok()?;
    f.read_exact(&mut code).ok()?;
    Some(code)
}

/// `placement::place` on the `size` bytes at `offset` in `lib` (at most 64 KiB are looked at;
/// an unreadable file or an unknown size keeps the entry).
pub fn place_in_file(lib: &Path, offset: u64, size: u64, keep: &[iced_x86::Register]) -> Placement {
    let entry = Placement {
        skip: 0,
        single_step: false,
    };
    if size == 0 {
        return entry;
    }
    match read_at(lib, offset, size.min(64 << 10)) {
        Some(code) => placement::place(&code, keep),
        None => entry,
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
    /// `offcpu_epoch` in the profile object's .bss (bumped when off-CPU resumes).
    offcpu_epoch_ptr: Option<*mut u32>,
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

/// A family that takes its user stacks on rseq_update, and the syscall-exit member that
/// takes them for threads without rseq once one is seen ([`Probes::rseq_fallbacks`]).
#[derive(Debug)]
struct RseqFallback {
    family: ebtrace_proto::v1::EventFamily,
    what: &'static str,
    name: &'static str,
    member: u32,
    fd: i32,
    /// Its object's counters (mmapped .bss): kept events of threads without rseq, and kept
    /// events whose rseq_update never came.
    norseq: *const u64,
    missed: *const u64,
    added: std::cell::Cell<bool>,
}

/// A tracepoint link that --max-cpu may detach: (family, program name, link; None while
/// paused).
type TpPausable = (ebtrace_proto::v1::EventFamily, &'static str, Option<Link>);

/// A family's program on raw sys_enter or sys_exit: not attached, but a member of the
/// system call chain (bpf/hub.bpf.c) that the hub's one program per tracepoint runs.
#[derive(Debug, Clone)]
struct ChainMember {
    family: ebtrace_proto::v1::EventFamily,
    name: &'static str,
    /// Its CM_* (the order of the chain, and its slot of `chain_costs`).
    member: u32,
    exit: bool,
    /// The loaded program's fd (owned by its skeleton, which lives as long as the Probes).
    fd: i32,
    /// Its own per-syscall program (`direct_program`) is loaded.
    direct: bool,
    /// False while --max-cpu pauses its family.
    active: bool,
}

/// The system calls a chain member acts on (None: every one); the hub tail-calls it for
/// these only. Its program checks the number again (bpf/*.bpf.c: NR_FUTEX, NR_BRK, ...).
fn chain_syscalls(member: u32) -> Option<&'static [u32]> {
    const FUTEX: &[u32] = &[202];
    const MEM: &[u32] = &[9, 11, 12]; // mmap, munmap, brk
    const ACCEPT: &[u32] = &[43, 288]; // accept, accept4
    match member {
        m if m == CM_FUTEX_ENTER as u32 || m == CM_FUTEX_EXIT as u32 => Some(FUTEX),
        m if m == CM_MEM_ENTER as u32 || m == CM_MEM_EXIT as u32 => Some(MEM),
        m if m == CM_TCP_SYS_EXIT as u32 => Some(ACCEPT),
        _ => None,
    }
}

/// A chain member's own program on the per-syscall tracepoints of `chain_syscalls`
/// (bpf/common.bpf.h, `sc_exit_ctx`), and those tracepoints (category syscalls).
fn direct_program(member: u32) -> Option<(&'static str, &'static [&'static str])> {
    Some(match member {
        m if m == CM_FUTEX_ENTER as u32 => ("futex_enter_tp", &["sys_enter_futex"]),
        m if m == CM_FUTEX_EXIT as u32 => ("futex_exit_tp", &["sys_exit_futex"]),
        m if m == CM_MEM_ENTER as u32 => (
            "mem_enter_tp",
            &["sys_enter_mmap", "sys_enter_munmap", "sys_enter_brk"],
        ),
        m if m == CM_MEM_EXIT as u32 => (
            "mem_exit_tp",
            &["sys_exit_mmap", "sys_exit_munmap", "sys_exit_brk"],
        ),
        m if m == CM_TCP_SYS_EXIT as u32 => {
            ("tcp_accept_tp", &["sys_exit_accept", "sys_exit_accept4"])
        }
        _ => return None,
    })
}

/// The u64 words at `idx` of entry 0 of a per-CPU array, each summed over the CPUs; None
/// when the map cannot be read.
fn percpu_words<const N: usize>(map: &libbpf_rs::MapMut<'_>, idx: [usize; N]) -> Option<[u64; N]> {
    let cpus = map
        .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
        .ok()??;
    let mut sum = [0u64; N];
    for v in cpus {
        for (s, &i) in sum.iter_mut().zip(&idx) {
            *s += v
                .get(i * 8..i * 8 + 8)
                .map_or(0, |b| u64::from_ne_bytes(b.try_into().unwrap()));
        }
    }
    Some(sum)
}

/// The chain member a program is, if it is one.
fn chain_member(name: &str) -> Option<(u32, bool)> {
    Some(match name {
        "futex_enter" => (CM_FUTEX_ENTER as u32, false),
        "mem_enter" => (CM_MEM_ENTER as u32, false),
        "sys_enter" => (CM_SYS_ENTER as u32, false),
        "futex_exit" => (CM_FUTEX_EXIT as u32, true),
        "mem_exit" => (CM_MEM_EXIT as u32, true),
        "offcpu_sys_exit" => (CM_OFFCPU_SYS_EXIT as u32, true),
        "sys_exit" => (CM_SYS_EXIT as u32, true),
        "runq_sys_exit" => (CM_RUNQ_SYS_EXIT as u32, true),
        "tcp_sys_exit" => (CM_TCP_SYS_EXIT as u32, true),
        _ => return None,
    })
}

/// The maps every object shares (created here, their fds reused by each object at load):
/// the system call chain's, and the targets bitmap the chain's hubs and every other
/// program that sees all processes test.
#[derive(Debug)]
struct ChainMaps {
    enter: libbpf_rs::MapHandle,
    exit: libbpf_rs::MapHandle,
    state: libbpf_rs::MapHandle,
    costs: libbpf_rs::MapHandle,
    /// Per system call number, the slots whose member wants it (`chain_wants`).
    wants: libbpf_rs::MapHandle,
    /// Entry 0: the members are timed now (`chain_timing`), with the kernel's BPF stats.
    timing: libbpf_rs::MapHandle,
    /// The traced processes, one bit per pid (`targets`, shared by every object).
    targets: TargetBits,
}

/// The `targets` bitmap (bpf/targets.bpf.h): an mmapable array of TARGET_WORDS u64 words,
/// bit pid & 63 of word pid >> 6. User space sets bits through the mapping with atomic ORs,
/// as the fork programs do in the kernel, so that neither loses the other's bit of a word.
#[derive(Debug)]
struct TargetBits {
    map: libbpf_rs::MapHandle,
    words: *const std::sync::atomic::AtomicU64,
}

impl TargetBits {
    const BYTES: usize = TARGET_WORDS * 8;

    fn create() -> Result<Self> {
        let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
            sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
            map_flags: libbpf_rs::libbpf_sys::BPF_F_MMAPABLE,
            ..Default::default()
        };
        let map = libbpf_rs::MapHandle::create(
            libbpf_rs::MapType::Array,
            Some("targets"),
            4,
            8,
            TARGET_WORDS as u32,
            &opts,
        )
        .context("creating the BPF map targets")?;
        // SAFETY: a shared mapping of the whole array (page-aligned: 512 KiB), unmapped in
        // drop; the kernel keeps the map while it is mapped.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                Self::BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                map.as_fd().as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            bail!(
                "mapping the BPF map targets: {}",
                std::io::Error::last_os_error()
            );
        }
        Ok(TargetBits {
            map,
            words: p as *const std::sync::atomic::AtomicU64,
        })
    }

    fn set(&self, pid: u32) -> Result<()> {
        let w = (pid >> 6) as usize;
        if w >= TARGET_WORDS {
            bail!("process id {pid} is above the kernel's limit of 2^22");
        }
        // SAFETY: w is within the mapping; u64 words of an array map are 8-byte aligned.
        let word = unsafe { &*self.words.add(w) };
        word.fetch_or(1u64 << (pid & 63), std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

impl Drop for TargetBits {
    fn drop(&mut self) {
        // SAFETY: the mapping made in create, of BYTES bytes, no longer used.
        unsafe { libc::munmap(self.words as *mut libc::c_void, Self::BYTES) };
    }
}

impl ChainMaps {
    fn create() -> Result<Self> {
        use libbpf_rs::{MapHandle, MapType};
        let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
            sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
            ..Default::default()
        };
        let prog_array = |name: &str| {
            MapHandle::create(
                MapType::ProgArray,
                Some(name),
                4,
                4,
                CHAIN_SLOTS as u32,
                &opts,
            )
            .with_context(|| format!("creating the BPF map {name}"))
        };
        Ok(ChainMaps {
            enter: prog_array("sys_enter_chain")?,
            exit: prog_array("sys_exit_chain")?,
            state: MapHandle::create(MapType::PercpuArray, Some("chain_state"), 4, 16, 1, &opts)
                .context("creating the BPF map chain_state")?,
            costs: MapHandle::create(
                MapType::PercpuArray,
                Some("chain_costs"),
                4,
                std::mem::size_of::<chain_cost>() as u32,
                CHAIN_MEMBERS as u32,
                &opts,
            )
            .context("creating the BPF map chain_costs")?,
            wants: MapHandle::create(
                MapType::Array,
                Some("chain_wants"),
                4,
                4,
                2 * CHAIN_NRS as u32,
                &opts,
            )
            .context("creating the BPF map chain_wants")?,
            timing: MapHandle::create(MapType::Array, Some("chain_timing"), 4, 4, 1, &opts)
                .context("creating the BPF map chain_timing")?,
            targets: TargetBits::create()?,
        })
    }
}

/// Attaches `progs` (tracepoint programs of `family`) as links --max-cpu may pause.
fn attach_tps(
    into: &mut Vec<TpPausable>,
    chain: &mut Vec<ChainMember>,
    family: ebtrace_proto::v1::EventFamily,
    progs: &[(&libbpf_rs::ProgramMut<'_>, &'static str)],
) -> Result<()> {
    for &(prog, name) in progs {
        if let Some((member, exit)) = chain_member(name) {
            chain.push(ChainMember {
                family,
                name,
                member,
                exit,
                fd: prog.as_fd().as_raw_fd(),
                direct: direct_program(member).is_some(),
                active: true,
            });
            continue;
        }
        let link = prog
            .attach()
            .with_context(|| format!("attaching {name}'s tracepoint"))?;
        into.push((family, name, Some(link)));
    }
    Ok(())
}

/// [`attach_tps`] of the programs not in `missing` (the system object's programs whose
/// tracepoint the kernel lacks, said in one line at load and not loaded).
fn attach_present(
    missing: &[String],
    into: &mut Vec<TpPausable>,
    chain: &mut Vec<ChainMember>,
    family: ebtrace_proto::v1::EventFamily,
    progs: &[(&libbpf_rs::ProgramMut<'_>, &'static str)],
) -> Result<()> {
    let present: Vec<_> = progs
        .iter()
        .copied()
        .filter(|(_, name)| !missing.iter().any(|m| m == name))
        .collect();
    attach_tps(into, chain, family, &present)
}

/// A classic uprobe link that can be detached and attached again (see `pause_classic`).
struct PausableLink {
    family: ebtrace_proto::v1::EventFamily,
    /// Index of its probe in `Probes::trace_probes`.
    probe: usize,
    /// The program's name (see `Probes::pausable_prog`).
    prog: String,
    pid: i32,
    cookie: u64,
    /// None while paused.
    link: Option<Link>,
    /// The inherited event without a program (none for pid -1).
    filter: Option<OwnedFd>,
}

/// A library's allocator functions for one session link: (path, file offsets, cookies).
type SessionPlan = (PathBuf, Vec<u64>, Vec<u64>);

/// Whether the allocator probes run as uprobe sessions for `arg`.
pub fn use_sessions(arg: crate::config::AllocProbesArg) -> bool {
    match arg {
        crate::config::AllocProbesArg::Classic => false,
        crate::config::AllocProbesArg::Session => true,
        crate::config::AllocProbesArg::Auto => features::uprobe_sessions(),
    }
}

/// The session plan's cookie for free (AllocKind values are 1..10): its offset goes to the
/// free_multi link, not to the session program.
const AK_FREE: u64 = 100;

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

/// The settings every object shares (they all include `common.bpf.h`): stack depth, stack
/// copies, the rate cap, the ring buffer and the per-CPU copy buffers. A macro because each
/// skeleton has its own generated types.
macro_rules! common_setup {
    ($open:expr, $ro:expr, $cfg:expr, $depth:expr, $ncpu:expr, $cfi:expr, $chain:expr) => {{
        $ro.max_frames = $depth;
        $ro.chain_timed = $cfg.bpf_stats;
        $open.maps.sys_enter_chain.reuse_fd($chain.enter.as_fd())?;
        $open.maps.sys_exit_chain.reuse_fd($chain.exit.as_fd())?;
        $open.maps.chain_state.reuse_fd($chain.state.as_fd())?;
        $open.maps.chain_costs.reuse_fd($chain.costs.as_fd())?;
        $open.maps.chain_wants.reuse_fd($chain.wants.as_fd())?;
        $open.maps.chain_timing.reuse_fd($chain.timing.as_fd())?;
        $open.maps.targets.reuse_fd($chain.targets.map.as_fd())?;
        if let Some(fds) = $cfi {
            $ro.cfi_mode = $cfg.cfi_mode;
            $ro.cfi_wakers = true;
            $open.maps.cfi_rows.reuse_fd(fds.rows)?;
            $open.maps.cfi_pages.reuse_fd(fds.pages)?;
            $open.maps.cfi_files.reuse_fd(fds.files)?;
            $open.maps.cfi_procs.reuse_fd(fds.procs)?;
            $open.maps.cfi_inodes.reuse_fd(fds.inodes)?;
            $open.maps.cfi_early.reuse_fd(fds.early)?;
        }
        $ro.copy_bytes = $cfg.copy_bytes;
        $ro.rate_per_cpu = $cfg.rate_per_cpu;
        $ro.uw_memo_on = $cfg.aggregate_stacks == 0;
        $open.maps.events.set_max_entries($cfg.ringbuf_bytes)?;
        $open.maps.copy_scratch.set_max_entries($ncpu)?;
        $open
            .maps
            .uw_frames
            .set_max_entries($ncpu * MAX_FRAMES as u32)?;
    }};
}

/// --aggregate's switch and map sizes, for the objects that aggregate (aggregate.bpf.h).
macro_rules! agg_setup {
    ($open:expr, $ro:expr, $cfg:expr) => {{
        $ro.aggregate = $cfg.aggregate_stacks > 0;
        let n = $cfg.aggregate_stacks.max(1);
        $open.maps.agg_counts.set_max_entries(n)?;
        $open.maps.agg_stacks.set_max_entries(n)?;
    }};
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

thread_local! {
    static VERIFIER_LOG: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn libbpf_print(level: libbpf_rs::PrintLevel, msg: String) {
    if std::env::var_os("EBREC_DEBUG").is_some() {
        eprint!("libbpf: {msg}");
    }
    if level != libbpf_rs::PrintLevel::Debug {
        VERIFIER_LOG.with(|l| {
            let mut l = l.borrow_mut();
            l.extend(msg.lines().map(String::from));
            let n = l.len();
            if n > 40 {
                l.drain(..n - 40);
            }
        });
    }
}

fn load_error(what: &str, e: libbpf_rs::Error) -> anyhow::Error {
    let log = VERIFIER_LOG.with(|l| l.borrow().clone());
    let perm = matches!(e.kind(), libbpf_rs::ErrorKind::PermissionDenied)
        || e.to_string().contains("Operation not permitted");
    // The verifier refuses a program with EACCES too: then it wrote a log, and the log is
    // the message (as root, EACCES is never a missing privilege).
    // SAFETY: plain syscall.
    let root = unsafe { libc::geteuid() } == 0;
    // EPERM with no verifier log (libbpf's own lines may be there): a missing capability,
    // also for root in a reduced capability set (a container, a systemd unit).
    let eperm = e.to_string().contains("Operation not permitted");
    let verified = log.iter().any(|l| l.contains("BEGIN PROG LOAD LOG"));
    if perm && ((!root && log.is_empty()) || (eperm && !verified)) {
        return anyhow::anyhow!(
            "loading the {what} BPF programs was refused: run ebrec as root or with CAP_BPF and CAP_PERFMON ({e})"
        );
    }
    if let Some(v) = verifier_rejection(&log) {
        return anyhow::anyhow!(
            "loading the {what} BPF programs failed: the BPF verifier of this kernel (Linux {}) refused {v} (EBREC_DEBUG=1 prints the whole log)",
            procfs::uname().1
        );
    }
    let tail: Vec<&String> = log
        .iter()
        .rev()
        .take(8)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    anyhow::anyhow!(
        "loading the {what} BPF programs failed: {e}{}",
        if tail.is_empty() {
            String::new()
        } else {
            format!(
                " | last lines of the log: {}",
                tail.iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(" | ")
            )
        }
    )
}

/// A verifier rejection in libbpf's log (its last program load log, `-- BEGIN PROG LOAD
/// LOG --` .. `-- END PROG LOAD LOG --`): "program 'P' (function F): REASON | last lines
/// of the verifier's log: ...", or None when the log holds no program load log.
fn verifier_rejection(log: &[String]) -> Option<String> {
    let end = log
        .iter()
        .rposition(|l| l.contains("-- END PROG LOAD LOG --"))?;
    let begin = log[..end]
        .iter()
        .rposition(|l| l.contains("-- BEGIN PROG LOAD LOG --"));
    let body: Vec<&str> = log[begin.map_or(0, |b| b + 1)..end]
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty())
        .collect();
    // The program: "prog 'NAME': -- BEGIN PROG LOAD LOG --", or libbpf's "prog 'NAME':
    // failed to load" after the log.
    let quoted = |l: &str| {
        l.split_once("prog '")
            .and_then(|(_, r)| r.split_once('\''))
            .map(|(n, _)| n.to_string())
    };
    let prog = begin
        .and_then(|b| quoted(&log[b]))
        .or_else(|| log[end..].iter().find_map(|l| quoted(l)))
        .unwrap_or_else(|| "a program".into());
    // The global function being checked when it failed ("Validating F() func#N...").
    let func = body
        .iter()
        .rev()
        .find_map(|l| l.strip_prefix("Validating "))
        .and_then(|l| l.split_once("()"))
        .map(|(f, _)| format!(" (in {f})"))
        .unwrap_or_default();
    // The reason: the last line before the counters ("processed N insns ...").
    let last = body
        .iter()
        .rposition(|l| !l.starts_with("processed ") && !l.starts_with("verification time"))?;
    let tail = body[last.saturating_sub(4)..last].join(" | ");
    Some(format!(
        "program '{prog}'{func}: {} | last lines of the verifier's log: {tail}",
        body[last]
    ))
}

impl<'obj> Probes<'obj> {
    pub fn load(
        cfg: &ProbeConfig,
        alloc_obj: &'obj mut MaybeUninit<libbpf_rs::OpenObject>,
        lock_obj: &'obj mut MaybeUninit<libbpf_rs::OpenObject>,
        profile_obj: &'obj mut MaybeUninit<libbpf_rs::OpenObject>,
        sampler_obj: &'obj mut MaybeUninit<libbpf_rs::OpenObject>,
        system_obj: &'obj mut MaybeUninit<libbpf_rs::OpenObject>,
        hub_obj: &'obj mut MaybeUninit<libbpf_rs::OpenObject>,
        cfi: Option<crate::cfi::Fds<'_>>,
    ) -> Result<Self> {
        libbpf_rs::set_print(Some((libbpf_rs::PrintLevel::Debug, libbpf_print)));
        // Kernel BPF stats (run time per program) stay on while this fd is open. They cost
        // every BPF program run on the machine two clock reads (about 30 ns a run here: a
        // getppid loop under --syscalls went from 350 to 415 ns a call), so only --max-cpu
        // (which measures with them) and --bpf-stats turn them on.
        // SAFETY: plain syscall wrapper.
        let stats_fd = if cfg.bpf_stats {
            unsafe {
                libbpf_rs::libbpf_sys::bpf_enable_stats(libbpf_rs::libbpf_sys::BPF_STATS_RUN_TIME)
            }
        } else {
            -1
        };
        if cfg.bpf_stats && stats_fd < 0 {
            // Say why BPF time will not be measured (BPF_ENABLE_STATS needs CAP_SYS_ADMIN).
            eprintln!(
                "ebrec: warning: BPF run time is not measured: the kernel refused to turn its BPF stats on ({}; it needs CAP_SYS_ADMIN)",
                std::io::Error::from_raw_os_error(-stats_fd)
            );
        }
        let stats_fd = (stats_fd >= 0).then(|| {
            // SAFETY: a fresh fd we own.
            unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(stats_fd) }
        });
        let depth = cfg.stack_depth.clamp(1, 127);
        let ncpu = procfs::possible_cpus().unwrap_or(1).max(1) as u32;
        let chain_maps = ChainMaps::create()?;
        let alloc = match cfg.alloc_min {
            _ if cfg.preload_period.is_some() => None,
            None => None,
            Some(min) => {
                let mut open = AllocSkelBuilder::default()
                    .open(alloc_obj)
                    .map_err(|e| load_error("allocation", e))?;
                let ro = open.maps.rodata_data.as_deref_mut().context("no rodata")?;
                ro.min_size = min;
                ro.sample_every = cfg.sample_every.max(1);
                ro.hold_children = cfg.alloc_sessions && !cfg.all;
                ro.entry_only = cfg.alloc_entry_only;
                common_setup!(open, ro, cfg, depth, ncpu, cfi, chain_maps);
                agg_setup!(open, ro, cfg);
                if let Some(d) = open.maps.bss_data.as_deref_mut() {
                    d.sample_bytes = cfg.sample_bytes;
                }
                // Either the session program or the entry/return programs (the session
                // program type does not load before 6.13).
                for mut p in open.open_object_mut().progs_mut() {
                    let name = p.name().to_string_lossy().into_owned();
                    // --alloc-fn's programs are classic uprobes in both modes.
                    let uprobe = (name.ends_with("_enter") || name == "alloc_return")
                        && !name.starts_with("custom_");
                    if name == "alloc_session" || name == "alloc_fork" || name == "free_multi" {
                        p.set_autoload(cfg.alloc_sessions);
                    } else if uprobe {
                        p.set_autoload(!cfg.alloc_sessions);
                    }
                }
                let skel = open.load().map_err(|e| load_error("allocation", e))?;
                Some(skel)
            }
        };
        let lock = match cfg.lock_min_ns {
            None => None,
            Some(min) => {
                let mut open = LockSkelBuilder::default()
                    .open(lock_obj)
                    .map_err(|e| load_error("lock", e))?;
                let ro = open.maps.rodata_data.as_deref_mut().context("no rodata")?;
                ro.min_wait_ns = min;
                ro.min_hold_ns = min;
                ro.all_processes = cfg.all;
                common_setup!(open, ro, cfg, depth, ncpu, cfi, chain_maps);
                agg_setup!(open, ro, cfg);
                // Only the programs of the chosen mode get loaded.
                let futex = cfg.lock_mode == LockMode::Futex;
                for mut p in open.open_object_mut().progs_mut() {
                    let name = p.name().to_string_lossy().into_owned();
                    let is_futex = name.starts_with("futex_") || name.starts_with("lock_");
                    p.set_autoload(is_futex == futex);
                }
                Some(open.load().map_err(|e| load_error("lock", e))?)
            }
        };
        let profile = if cfg.profile() {
            let mut open = ProfileSkelBuilder::default()
                .open(profile_obj)
                .map_err(|e| load_error("profiling", e))?;
            let ro = open.maps.rodata_data.as_deref_mut().context("no rodata")?;
            ro.all_processes = cfg.all;
            ro.func_args = cfg.func_args.min(6);
            ro.page_size = procfs::page_size() as u64;
            ro.mem_fault_unit = cfg.mem_fault_unit.min(1 << 30);
            ro.offcpu_rseq_mode = cfg.offcpu_rseq;
            common_setup!(open, ro, cfg, depth, ncpu, cfi, chain_maps);
            agg_setup!(open, ro, cfg);
            if let Some(d) = open.maps.bss_data.as_deref_mut() {
                d.offcpu_min_ns = cfg.offcpu_min_ns.unwrap_or(0);
                d.offcpu_unit_ns = cfg.offcpu_unit_ns.min(1_000_000_000);
            }
            for mut p in open.open_object_mut().progs_mut() {
                let name = p.name().to_string_lossy().into_owned();
                let on = if name.starts_with("cpu_") {
                    cfg.cpu_hz.is_some()
                } else if name == "offcpu_rseq" {
                    cfg.offcpu_min_ns.is_some() && cfg.offcpu_rseq
                } else if name.starts_with("offcpu_") {
                    cfg.offcpu_min_ns.is_some()
                } else if name.starts_with("mem_") {
                    cfg.memgrowth
                } else if name.starts_with("func_") {
                    cfg.func
                } else {
                    true // prof_fork, prof_exit
                };
                p.set_autoload(on);
            }
            Some(open.load().map_err(|e| load_error("profiling", e))?)
        } else {
            None
        };
        let sampler = match cfg.preload_period {
            None => None,
            Some(_) if cfg.preload_chan => None,
            Some(period) => {
                let mut open = SamplerSkelBuilder::default()
                    .open(sampler_obj)
                    .map_err(|e| load_error("allocation sampler", e))?;
                let ro = open.maps.rodata_data.as_deref_mut().context("no rodata")?;
                // --sample-bytes 1 keeps every allocation (the shim samples none away):
                // the events say they are not sampled, so reports count them exactly.
                ro.sample_period = if period == 1 { 0 } else { period };
                common_setup!(open, ro, cfg, depth, ncpu, cfi, chain_maps);
                Some(
                    open.load()
                        .map_err(|e| load_error("allocation sampler", e))?,
                )
            }
        };
        // The system object's programs whose tracepoint this kernel lacks (not loaded).
        let mut missing_tps: Vec<String> = Vec::new();
        let system = if cfg.system() {
            let mut open = SystemSkelBuilder::default()
                .open(system_obj)
                .map_err(|e| load_error("system", e))?;
            let ro = open.maps.rodata_data.as_deref_mut().context("no rodata")?;
            ro.all_processes = cfg.all;
            ro.self_pid = std::process::id();
            ro.syscall_min_ns = cfg.syscall_min_ns.unwrap_or(0);
            ro.bio_min_ns = cfg.bio_min_ns.unwrap_or(0);
            ro.runq_min_ns = cfg.runq_min_ns.unwrap_or(0);
            ro.runq_rseq_mode = cfg.runq_rseq;
            common_setup!(open, ro, cfg, depth, ncpu, cfi, chain_maps);
            if let Some(d) = open.maps.bss_data.as_deref_mut() {
                d.syscall_unit_ns = cfg.syscall_unit_ns.min(1_000_000_000);
                d.runq_unit_ns = cfg.runq_unit_ns.min(1_000_000_000);
            }
            // The histograms (one value for all CPUs): HIST_KEYS keys at the most, 33.4 MiB
            // (`hist_tests`; a full map is a counted loss).
            let new_bio = features::has_btf_type("btf_trace_block_io_start");
            for mut p in open.open_object_mut().progs_mut() {
                let name = p.name().to_string_lossy().into_owned();
                let on = if name.starts_with("sys_") {
                    cfg.syscall_min_ns.is_some()
                } else if name.starts_with("bio_io_") {
                    cfg.bio_min_ns.is_some() && new_bio
                } else if name.starts_with("bio_rq_") {
                    cfg.bio_min_ns.is_some() && !new_bio
                } else if name == "runq_rseq" {
                    cfg.runq_min_ns.is_some() && cfg.runq_rseq
                } else if name.starts_with("runq_") {
                    cfg.runq_min_ns.is_some()
                } else if name.starts_with("tcp_") {
                    cfg.tcp
                } else {
                    true // proc_fork, proc_exit
                };
                // A tracepoint this kernel does not have: one line, and the rest loads.
                let section = p.section().to_string_lossy().into_owned();
                let tp = section.strip_prefix("tp_btf/").map(str::to_string);
                let missing = on
                    && tp
                        .as_ref()
                        .is_some_and(|tp| !features::has_btf_type(&format!("btf_trace_{tp}")));
                let tp = tp.unwrap_or(section);
                if missing && !(name.starts_with("bio_io_") || name.starts_with("bio_rq_")) {
                    eprintln!("ebrec: note: this kernel has no tracepoint {tp}: {name} is not attached, and what it records is missing from the trace");
                    missing_tps.push(name.clone());
                }
                p.set_autoload(on && !missing);
            }
            Some(open.load().map_err(|e| load_error("system", e))?)
        } else {
            None
        };
        // The hub: the system call chain when a family has a program on raw sys_enter or
        // sys_exit, and always the targets' thread renames (task_rename).
        let hub = {
            let mut open = HubSkelBuilder::default()
                .open(hub_obj)
                .map_err(|e| load_error("system call hub", e))?;
            let ro = open.maps.rodata_data.as_deref_mut().context("no rodata")?;
            ro.all_processes = cfg.all;
            common_setup!(open, ro, cfg, depth, ncpu, cfi, chain_maps);
            // It sends only thread renames: a small ring.
            open.maps.events.set_max_entries(64 * 1024)?;
            Some(open.load().map_err(|e| load_error("system call hub", e))?)
        };
        let mut p = Probes {
            alloc,
            lock,
            profile,
            sampler,
            system,
            chan: None,
            links: Vec::new(),
            filter_fds: Vec::new(),
            trace_probes: Vec::new(),
            attached: Vec::new(),
            stats_ok: stats_fd.is_some(),
            hub_shares: Default::default(),
            hub_every: Default::default(),
            stats_fd: std::cell::RefCell::new(stats_fd),
            session_plan: Default::default(),
            session_links: Default::default(),
            session_pids: Default::default(),
            sessions_paused: Default::default(),
            alloc_entry_only: cfg.alloc_entry_only,
            alloc_sessions_cfg: cfg.alloc_sessions,
            sample_bytes_ptr: None,
            offcpu_min_ptr: None,
            offcpu_epoch_ptr: None,
            unit_ptrs: Vec::new(),
            rseq_fallbacks: Vec::new(),
            hub_links: Default::default(),
            chain_started: Default::default(),
            direct_links: Default::default(),
            hub_only: std::env::var_os("EBTRACE_SYSCALL_HUB_ONLY").is_some_and(|v| v == "1"),
            direct_failed: Default::default(),
            closing: Default::default(),
            sys_epoch_ptr: None,
            ending_ptrs: Vec::new(),
            cpu_fds: Vec::new(),
            pausable: Default::default(),
            tp_pausable: Default::default(),
            chain: Default::default(),
            chain_maps,
            hub,
            dispatch_ns: 0.0,
        };
        p.offcpu_min_ptr = p
            .profile
            .as_mut()
            .and_then(|a| a.maps.bss_data.as_deref_mut())
            .map(|b| &mut b.offcpu_min_ns as *mut u64);
        {
            use ebtrace_proto::v1::EventFamily as F;
            if let Some(b) = p
                .profile
                .as_mut()
                .and_then(|a| a.maps.bss_data.as_deref_mut())
            {
                p.unit_ptrs
                    .push((F::Offcpu, &mut b.offcpu_unit_ns as *mut u64));
            }
            if let Some(b) = p
                .system
                .as_mut()
                .and_then(|a| a.maps.bss_data.as_deref_mut())
            {
                p.unit_ptrs
                    .push((F::Syscall, &mut b.syscall_unit_ns as *mut u64));
                p.unit_ptrs.push((F::Runq, &mut b.runq_unit_ns as *mut u64));
            }
        }
        p.offcpu_epoch_ptr = p
            .profile
            .as_mut()
            .and_then(|a| a.maps.bss_data.as_deref_mut())
            .map(|b| &mut b.offcpu_epoch as *mut u32);
        if cfg.offcpu_rseq {
            if let Some(pr) = p.profile.as_mut() {
                let fd = pr.progs.offcpu_sys_exit.as_fd().as_raw_fd();
                if let Some(b) = pr.maps.bss_data.as_deref_mut() {
                    p.rseq_fallbacks.push(RseqFallback {
                        family: ebtrace_proto::v1::EventFamily::Offcpu,
                        what: "off-CPU",
                        name: "offcpu_sys_exit",
                        member: CM_OFFCPU_SYS_EXIT as u32,
                        fd,
                        norseq: &b.offcpu_norseq as *const u64,
                        missed: &b.offcpu_rseq_missed as *const u64,
                        added: Default::default(),
                    });
                }
            }
        }
        if cfg.runq_rseq && cfg.runq_min_ns.is_some() {
            if let Some(sy) = p.system.as_mut() {
                let fd = sy.progs.runq_sys_exit.as_fd().as_raw_fd();
                if let Some(b) = sy.maps.bss_data.as_deref_mut() {
                    p.rseq_fallbacks.push(RseqFallback {
                        family: ebtrace_proto::v1::EventFamily::Runq,
                        what: "run queue",
                        name: "runq_sys_exit",
                        member: CM_RUNQ_SYS_EXIT as u32,
                        fd,
                        norseq: &b.runq_norseq as *const u64,
                        missed: &b.runq_rseq_missed as *const u64,
                        added: Default::default(),
                    });
                }
            }
        }
        p.sys_epoch_ptr = p
            .system
            .as_mut()
            .and_then(|a| a.maps.bss_data.as_deref_mut())
            .map(|b| &mut b.sys_epoch as *mut u32);
        // The families that hold kept waits for their thread's return to user space.
        let ending = [
            (
                cfg.offcpu_min_ns.is_some(),
                p.profile
                    .as_mut()
                    .and_then(|a| a.maps.bss_data.as_deref_mut())
                    .map(|b| &mut b.offcpu_ending as *mut u32),
                "offcpu_end",
            ),
            (
                cfg.runq_min_ns.is_some(),
                p.system
                    .as_mut()
                    .and_then(|a| a.maps.bss_data.as_deref_mut())
                    .map(|b| &mut b.runq_ending as *mut u32),
                "runq_end",
            ),
        ];
        p.ending_ptrs = ending
            .into_iter()
            .filter_map(|(on, ptr, name)| Some((ptr.filter(|_| on)?, name)))
            .collect();
        p.sample_bytes_ptr = p
            .alloc
            .as_mut()
            .and_then(|a| a.maps.bss_data.as_deref_mut())
            .map(|b| &mut b.sample_bytes as *mut u64);
        if let Some(a) = &p.alloc {
            // Only the targets' exits matter, but the tracepoint sees all: the programs
            // return at once for a pid with no blocks (an empty map walk).
            if cfg.alloc_sessions {
                p.links.push(
                    a.progs
                        .alloc_fork
                        .attach()
                        .context("attaching the fork tracepoint (uprobe sessions)")?,
                );
            }
            for prog in [&a.progs.alloc_exit, &a.progs.alloc_exec] {
                p.links.push(
                    prog.attach()
                        .context("attaching the process exit/exec tracepoints")?,
                );
            }
        }
        if let Some(l) = &p.lock {
            if cfg.lock_mode == LockMode::Futex {
                for prog in [&l.progs.lock_fork, &l.progs.lock_exit] {
                    let link = prog.attach().context("attaching the futex tracepoints")?;
                    p.links.push(link);
                }
                // The exit first: a resume attaches them in this order.
                attach_tps(
                    p.tp_pausable.get_mut(),
                    p.chain.get_mut(),
                    ebtrace_proto::v1::EventFamily::Lock,
                    &[
                        (&l.progs.futex_exit, "futex_exit"),
                        (&l.progs.futex_enter, "futex_enter"),
                    ],
                )?;
                p.attached
                    .push("futex's syscalls:sys_enter/exit (raw sys_enter/exit with --syscalls), tp_btf/sched_process_fork/exit".into());
            }
        }
        if let Some(pr) = &p.profile {
            let g = &pr.progs;
            let tps = vec![
                (&g.prof_fork, "sched_process_fork"),
                (&g.prof_exit, "sched_process_exit"),
            ];
            if cfg.offcpu_min_ns.is_some() {
                // The one that takes the user stacks first: a resume attaches them in
                // this order.
                let first = if cfg.offcpu_rseq {
                    (&g.offcpu_rseq, "offcpu_rseq")
                } else {
                    (&g.offcpu_sys_exit, "offcpu_sys_exit")
                };
                attach_tps(
                    p.tp_pausable.get_mut(),
                    p.chain.get_mut(),
                    ebtrace_proto::v1::EventFamily::Offcpu,
                    &[
                        first,
                        (&g.offcpu_waking, "offcpu_waking"),
                        (&g.offcpu_switch, "offcpu_switch"),
                    ],
                )?;
                p.attached.push(if cfg.offcpu_rseq {
                    "tp_btf/sched_switch, sched_waking, rseq_update (off-CPU)".into()
                } else {
                    "tp_btf/sched_switch, sched_waking, sys_exit (off-CPU)".into()
                });
            }
            if cfg.memgrowth {
                attach_tps(
                    p.tp_pausable.get_mut(),
                    p.chain.get_mut(),
                    ebtrace_proto::v1::EventFamily::MemGrowth,
                    &[
                        (&g.mem_exit, "mem_exit"),
                        (&g.mem_enter, "mem_enter"),
                        (&g.mem_fault, "mem_fault"),
                    ],
                )?;
                p.attached.push(
                    "brk, mmap and munmap's syscalls:sys_enter/exit (raw with --syscalls), tp_btf/page_fault_user (memory growth)"
                        .into(),
                );
            }
            for (prog, what) in tps {
                p.links.push(
                    prog.attach()
                        .with_context(|| format!("attaching tp_btf/{what}"))?,
                );
            }
            if let Some(hz) = cfg.cpu_hz {
                let cpus = procfs::online_cpus().context("reading the online CPUs")?;
                for &cpu in &cpus {
                    let fd = perf::open_cpu_clock(cpu as i32, hz)
                        .with_context(|| format!("cpu-clock perf event on CPU {cpu}"))?;
                    p.cpu_fds.push(fd.as_raw_fd());
                    p.links.push(
                        g.cpu_sample
                            .attach_perf_event(fd.into_raw_fd())
                            .with_context(|| format!("attaching the sampler on CPU {cpu}"))?,
                    );
                }
                p.attached.push(format!(
                    "cpu-clock sampling at {hz} Hz on {} CPUs",
                    cpus.len()
                ));
            }
        }
        if let Some(sy) = &p.system {
            let mut what = Vec::new();
            let g = &sy.progs;
            for (prog, tp) in [
                (&g.proc_fork, "sched_process_fork"),
                (&g.proc_exit, "sched_process_exit"),
            ] {
                p.links.push(
                    prog.attach()
                        .with_context(|| format!("attaching tp_btf/{tp}"))?,
                );
            }
            use ebtrace_proto::v1::EventFamily as F;
            // Exits before entries: a resume attaches them in this order.
            if cfg.syscall_min_ns.is_some() {
                attach_present(
                    &missing_tps,
                    p.tp_pausable.get_mut(),
                    p.chain.get_mut(),
                    F::Syscall,
                    &[(&g.sys_exit, "sys_exit"), (&g.sys_enter, "sys_enter")],
                )?;
                what.push("sys_enter, sys_exit (syscalls)");
            }
            if cfg.runq_min_ns.is_some() {
                attach_present(
                    &missing_tps,
                    p.tp_pausable.get_mut(),
                    p.chain.get_mut(),
                    F::Runq,
                    &[
                        if cfg.runq_rseq {
                            (&g.runq_rseq, "runq_rseq")
                        } else {
                            (&g.runq_sys_exit, "runq_sys_exit")
                        },
                        (&g.runq_switch, "runq_switch"),
                        (&g.runq_wakeup, "runq_wakeup"),
                        (&g.runq_wakeup_new, "runq_wakeup_new"),
                    ],
                )?;
                what.push(if cfg.runq_rseq {
                    "sched_wakeup, sched_wakeup_new, sched_switch, rseq_update (run queue)"
                } else {
                    "sched_wakeup, sched_wakeup_new, sched_switch, sys_exit (run queue)"
                });
            }
            if cfg.bio_min_ns.is_some() {
                if features::has_btf_type("btf_trace_block_io_start") {
                    attach_present(
                        &missing_tps,
                        p.tp_pausable.get_mut(),
                        p.chain.get_mut(),
                        F::Bio,
                        &[
                            (&g.bio_io_done, "bio_io_done"),
                            (&g.bio_io_start, "bio_io_start"),
                        ],
                    )?;
                    what.push("block_io_start, block_io_done (block I/O)");
                } else {
                    eprintln!("ebrec: note: this kernel has no block:block_io_start (6.5): block I/O is timed from block_rq_issue (the driver's queue), and attributed to the task that issued it to the driver, which is not always the one that made the request");
                    attach_present(
                        &missing_tps,
                        p.tp_pausable.get_mut(),
                        p.chain.get_mut(),
                        F::Bio,
                        &[
                            (&g.bio_rq_complete, "bio_rq_complete"),
                            (&g.bio_rq_issue, "bio_rq_issue"),
                        ],
                    )?;
                    what.push("block_rq_issue, block_rq_complete (block I/O)");
                }
            }
            if cfg.tcp {
                attach_present(
                    &missing_tps,
                    p.tp_pausable.get_mut(),
                    p.chain.get_mut(),
                    F::Tcp,
                    &[
                        (&g.tcp_set_state, "tcp_set_state"),
                        (&g.tcp_sys_exit, "tcp_sys_exit"),
                        (&g.tcp_retransmit, "tcp_retransmit"),
                        (&g.tcp_send_reset, "tcp_send_reset"),
                        (&g.tcp_receive_reset, "tcp_receive_reset"),
                    ],
                )?;
                what.push("inet_sock_set_state, tcp_retransmit_skb, tcp_send_reset, tcp_receive_reset, syscalls:sys_exit_accept/accept4 (TCP)");
            }
            for w in what {
                p.attached.push(format!("tp_btf/{w}"));
            }
        }
        if p.stats_ok {
            p.set_chain_timing(true);
        }
        p.start_chain(p.stats_ok)?;
        Ok(p)
    }

    /// Marks `pid` as a target of the in-kernel filters (futex mode, and the tracepoint and
    /// sampling families).
    pub fn add_target(&self, pid: u32) -> Result<()> {
        self.chain_maps.targets.set(pid)
    }

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

    /// Fills the chain's program arrays and attaches the hub's programs (the fork and exit
    /// ones keep its targets; sys_enter and sys_exit only when they have members).
    fn start_chain(&mut self, calibrate: bool) -> Result<()> {
        let Some(h) = &self.hub else {
            return Ok(());
        };
        self.chain.get_mut().sort_by_key(|m| m.member);
        self.sync_chain()?;
        let (enter, exit) = {
            let c = self.chain.borrow();
            (c.iter().any(|m| !m.exit), c.iter().any(|m| m.exit))
        };
        let g = &h.progs;
        let bare = if calibrate && enter && exit {
            Some(time_syscalls())
        } else {
            None
        };
        for (prog, on, what) in [
            (&g.hub_rename, true, "task_rename"),
            (&g.hub_fork, true, "sched_process_fork"),
            (&g.hub_exit, true, "sched_process_exit"),
        ] {
            if on {
                self.links.push(
                    prog.attach()
                        .with_context(|| format!("attaching the hub's tp_btf/{what}"))?,
                );
            }
        }
        self.chain_started.set(true);
        self.sync_hubs()?;
        if let Some(bare) = bare {
            // ebrec is not a target: its calls stop at the hubs. What a call costs more now,
            // less the hubs' measured run time, is what the stats do not see, for two runs.
            let before = [&g.hub_sys_enter, &g.hub_sys_exit].map(|p| prog_run_stats(p.as_fd()));
            let hooked = time_syscalls();
            let after = [&g.hub_sys_enter, &g.hub_sys_exit].map(|p| prog_run_stats(p.as_fd()));
            let runs: u64 = (0..2).map(|i| after[i].1 - before[i].1).sum();
            let ns: u64 = (0..2).map(|i| after[i].0 - before[i].0).sum();
            let measured = if runs > 0 {
                ns as f64 / runs as f64
            } else {
                0.0
            };
            self.dispatch_ns = ((hooked - bare) / 2.0 - measured).clamp(5.0, 1000.0);
        }
        Ok(())
    }

    /// For each family on rseq_update (--offcpu, --runq): once a kept event came from a
    /// thread without rseq (or rseq_update did not come for 16 of them), adds the family's
    /// syscall-exit member to the system call chain (attaching the hub's sys_exit if it was
    /// not), so that user stacks are taken at syscall exits from then on; one line for each
    /// (once) to say so.
    pub fn rseq_fallbacks(&self) -> Result<Vec<String>> {
        let mut lines = Vec::new();
        for f in &self.rseq_fallbacks {
            if f.added.get() {
                continue;
            }
            // SAFETY: aligned u64 loads in an object's mmapped .bss, alive as long as self
            // (as in set_offcpu_min_ns); BPF adds to them atomically.
            let (norseq, missed) = unsafe {
                (
                    std::ptr::read_volatile(f.norseq),
                    std::ptr::read_volatile(f.missed),
                )
            };
            if norseq == 0 && missed < 16 {
                continue;
            }
            if self.hub.is_none() {
                continue;
            };
            f.added.set(true);
            // Paused by --max-cpu: it joins inactive, and the resume activates it.
            let active = !self
                .tp_pausable
                .borrow()
                .iter()
                .any(|t| t.0 == f.family && t.2.is_none());
            {
                let mut chain = self.chain.borrow_mut();
                chain.push(ChainMember {
                    family: f.family,
                    name: f.name,
                    member: f.member,
                    exit: true,
                    fd: f.fd,
                    direct: false,
                    active,
                });
                chain.sort_by_key(|m| m.member);
            }
            self.sync_chain()?;
            let what = f.what;
            lines.push(if norseq > 0 {
                format!(
                    "{what}: {norseq} kept events of threads without rseq (glibc before 2.35, or rseq turned off): user stacks are now taken at syscall exits, which puts every system call on the tracepoint's slow path"
                )
            } else {
                format!(
                    "{what}: rseq_update did not come for {missed} kept events: user stacks are now taken at syscall exits, which puts every system call on the tracepoint's slow path"
                )
            });
        }
        Ok(lines)
    }

    /// Writes the active members into the chain's program arrays, in their order, exits
    /// first (a resumed family's exits are in before its entries), and empties the slots
    /// after them.
    fn sync_chain(&self) -> Result<()> {
        let chain = self.chain.borrow();
        for (exit, map) in [
            (true, &self.chain_maps.exit),
            (false, &self.chain_maps.enter),
        ] {
            let members: Vec<&ChainMember> = chain
                .iter()
                .filter(|m| m.exit == exit && m.active)
                .collect();
            for (slot, m) in members.iter().enumerate() {
                map.update(
                    &(slot as u32).to_ne_bytes(),
                    &(m.fd as u32).to_ne_bytes(),
                    MapFlags::ANY,
                )
                .with_context(|| format!("putting {} in the system call chain", m.name))?;
            }
            for slot in members.len()..CHAIN_SLOTS {
                let _ = map.delete(&(slot as u32).to_ne_bytes());
            }
            // Each system call number's slots, for the hub's dispatch.
            let mut wants = vec![0u32; CHAIN_NRS as usize];
            for (slot, m) in members.iter().enumerate() {
                match chain_syscalls(m.member) {
                    Some(nrs) => nrs.iter().for_each(|&nr| wants[nr as usize] |= 1 << slot),
                    None => wants.iter_mut().for_each(|w| *w |= 1 << slot),
                }
            }
            let base = if exit { CHAIN_NRS as u32 } else { 0 };
            for (nr, w) in wants.iter().enumerate() {
                self.chain_maps
                    .wants
                    .update(
                        &(base + nr as u32).to_ne_bytes(),
                        &w.to_ne_bytes(),
                        MapFlags::ANY,
                    )
                    .context("writing the system call chain's dispatch")?;
            }
        }
        drop(chain);
        if self.chain_started.get() {
            self.sync_hubs()?;
        }
        Ok(())
    }

    /// Attaches each system call hub whose chain has an active member and detaches the
    /// others: with every member paused (--max-cpu), no system call of the machine pays the
    /// tracepoint's slow path and the hub's target check for nothing. A side whose active
    /// members all want a few system calls (futex, brk/mmap/munmap, accept) and have their
    /// own programs for those calls' tracepoints (`direct_program`) gets these instead of
    /// its hub: the other calls of the machine then pass a bit test in the kernel, not a
    /// BPF program (a getppid loop of an untraced process under `--lock`: +50 ns a call
    /// instead of +200). Links go before links come, so a switch may miss a call, never
    /// count one twice (a member's state is the same maps either way).
    fn sync_hubs(&self) -> Result<()> {
        let Some(h) = &self.hub else {
            return Ok(());
        };
        // Per side: (the hub attached, the members to run by their own programs).
        let mut plan: [(bool, Vec<u32>); 2] = Default::default();
        {
            let c = self.chain.borrow();
            for (i, exit) in [(0, false), (1, true)] {
                let active: Vec<&ChainMember> =
                    c.iter().filter(|m| m.exit == exit && m.active).collect();
                let direct = !self.hub_only
                    && !self.direct_failed.get()
                    && active
                        .iter()
                        .all(|m| chain_syscalls(m.member).is_some() && m.direct);
                plan[i] = if direct {
                    (false, active.iter().map(|m| m.member).collect())
                } else {
                    (!active.is_empty(), Vec::new())
                };
            }
        }
        // Exits before entries (as the chain's slots): no entry is recorded whose exit
        // is not seen.
        let want_direct: Vec<u32> = plan
            .iter()
            .rev()
            .flat_map(|p| p.1.iter().copied())
            .collect();
        let mut links = self.hub_links.borrow_mut();
        let mut direct = self.direct_links.borrow_mut();
        // Leaving first. A tracepoint link's close waits for the kernel's RCU grace periods
        // (the syscall tracepoints are faultable: RCU tasks trace too): 20-60 ms each here,
        // over half a second for a switch of eight links in the budget's tick, while the
        // ring buffers filled. Closed on a thread of their own instead; until then a member
        // may run twice for a call, which its state makes harmless (an exit finds its
        // entry gone, an accepted socket known).
        let mut gone: Vec<Link> = Vec::new();
        direct.retain(|m, l| {
            let keep = want_direct.contains(m);
            if !keep {
                gone.append(l);
            }
            keep
        });
        for (i, (want, _)) in plan.iter().enumerate() {
            if !want {
                gone.extend(links[i].take());
            }
        }
        if !gone.is_empty() {
            let t = std::thread::spawn(move || drop(gone));
            self.closing.borrow_mut().push(t);
        }
        for (i, prog, what) in [
            (0, &h.progs.hub_sys_enter, "sys_enter"),
            (1, &h.progs.hub_sys_exit, "sys_exit"),
        ] {
            if plan[i].0 && links[i].is_none() {
                // A link of the same program still closing on its thread (a switch back
                // within its grace periods) makes the kernel refuse the program twice
                // (EEXIST): wait for the closes and try again.
                let l = match prog.attach() {
                    Ok(l) => l,
                    Err(_) => {
                        self.finish_closing();
                        prog.attach()
                            .with_context(|| format!("attaching the hub's tp_btf/{what}"))?
                    }
                };
                links[i] = Some(l);
            }
        }
        let mut attach = || -> Result<()> {
            for &m in &want_direct {
                if direct.contains_key(&m) {
                    continue;
                }
                let (name, tps) = direct_program(m).context("a member without its own program")?;
                let prog = self
                    .direct_prog(name)
                    .with_context(|| format!("no program {name}"))?;
                let mut ls = Vec::new();
                for tp in tps {
                    ls.push(
                        prog.attach_tracepoint(libbpf_rs::TracepointCategory::Syscalls, *tp)
                            .with_context(|| format!("attaching {name} to syscalls:{tp}"))?,
                    );
                }
                direct.insert(m, ls);
            }
            Ok(())
        };
        let mut tried = attach();
        if tried.is_err() {
            // As the hubs: a member's own links of a moment ago may still be closing
            // (EEXIST on the same program and tracepoint).
            self.finish_closing();
            tried = attach();
        }
        if let Err(e) = tried {
            // A kernel without the syscall events (CONFIG_FTRACE_SYSCALLS), or no tracefs:
            // the chain on the raw tracepoints, as before, for the rest of the recording.
            eprintln!("ebrec: note: {e:#}: the system call families stay on the raw sys_enter/sys_exit tracepoints");
            self.direct_failed.set(true);
            direct.clear();
            drop((links, direct));
            return self.sync_hubs();
        }
        Ok(())
    }

    /// Waits for the links `sync_hubs` took off to be closed.
    fn finish_closing(&self) {
        let closing = std::mem::take(&mut *self.closing.borrow_mut());
        for t in closing {
            let _ = t.join();
        }
    }

    /// A member's own per-syscall program (`direct_program`), loaded.
    fn direct_prog(&self, name: &str) -> Option<&libbpf_rs::ProgramMut<'obj>> {
        match name {
            "futex_enter_tp" => self.lock.as_ref().map(|l| &l.progs.futex_enter_tp),
            "futex_exit_tp" => self.lock.as_ref().map(|l| &l.progs.futex_exit_tp),
            "mem_enter_tp" => self.profile.as_ref().map(|p| &p.progs.mem_enter_tp),
            "mem_exit_tp" => self.profile.as_ref().map(|p| &p.progs.mem_exit_tp),
            "tcp_accept_tp" => self.system.as_ref().map(|p| &p.progs.tcp_accept_tp),
            _ => None,
        }
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

    /// Attaches the --func probes (entry and return, the function's id as the BPF cookie)
    /// to `pid` (-1: all).
    pub fn attach_funcs(&mut self, funcs: &[FuncSite], pid: i32) -> Result<()> {
        let Some(pr) = &self.profile else {
            return Ok(());
        };
        for f in funcs {
            let key = u32::try_from(f.id)
                .ok()
                .filter(|&k| k < 4096)
                .context("too many --func functions (at most 4095)")?;
            pr.maps
                .func_min
                .update(&key.to_ne_bytes(), &f.min_ns.to_ne_bytes(), MapFlags::ANY)?;
            let func = ebtrace_proto::v1::EventFamily::Func;
            attach_pausable(
                &mut self.trace_probes,
                &self.pausable,
                func,
                &pr.progs.func_enter,
                &f.site,
                false,
                pid,
                f.id,
            )?;
            match &f.exit {
                FuncExit::Uretprobe => {
                    attach_pausable(
                        &mut self.trace_probes,
                        &self.pausable,
                        func,
                        &pr.progs.func_return,
                        &f.site,
                        true,
                        pid,
                        f.id,
                    )?;
                    self.attached.push(format!("{} (uretprobe)", f.site));
                }
                FuncExit::Sites(offsets) => {
                    let mut rets = 0;
                    for &(off, tail) in offsets {
                        let is_ret = !tail;
                        rets += usize::from(is_ret);
                        let exit = Site {
                            offset: off,
                            placement: Placement {
                                skip: 0,
                                single_step: is_ret,
                            },
                            ..f.site.clone()
                        };
                        let cookie = f.id | if is_ret { 0 } else { FUNC_EXIT_TAIL };
                        attach_pausable(
                            &mut self.trace_probes,
                            &self.pausable,
                            func,
                            &pr.progs.func_exit,
                            &exit,
                            false,
                            pid,
                            cookie,
                        )?;
                    }
                    self.attached.push(format!(
                        "{} (exits: {rets} ret, {} tail jump)",
                        f.site,
                        offsets.len() - rets
                    ));
                }
            }
        }
        Ok(())
    }

    /// Attaches the sampler's programs to the probe sites of the preloaded shim at `shim`
    /// (`--alloc-sampler preload`) for `pid` and its descendants; without `frees`, only the
    /// allocation site (--no-free).
    pub fn attach_sampler(&mut self, shim: &Path, frees: bool, pid: i32) -> Result<()> {
        let Some(sm) = &self.sampler else {
            return Ok(());
        };
        let syms = Symbols::read(shim).map_err(|e| anyhow::anyhow!(e))?;
        // The *_forked sites are what a forked child calls (see the shim).
        let mut plan = vec![
            ("ebtrace_sampled_alloc", &sm.progs.sampled_alloc),
            ("ebtrace_sampled_alloc_rc", &sm.progs.sampled_alloc),
            ("ebtrace_sampled_alloc_forked", &sm.progs.sampled_alloc),
            ("ebtrace_sampled_alloc_rc_forked", &sm.progs.sampled_alloc),
        ];
        if frees {
            plan.push(("ebtrace_sampled_free", &sm.progs.sampled_free));
            plan.push(("ebtrace_sampled_free_forked", &sm.progs.sampled_free));
        }
        for (name, prog) in plan {
            let offset = syms
                .function(name)
                .and_then(|(addr, _)| syms.file_offset(addr))
                .with_context(|| format!("no {name} in the sampler shim {}", shim.display()))?;
            // At the nop the site starts with (5 bytes: the kernel can turn it into a call of
            // its uprobe trampoline, no trap); never moved past it.
            let site = Site {
                lib: shim.to_path_buf(),
                symbol: name.into(),
                offset,
                placement: Placement {
                    skip: 0,
                    single_step: false,
                },
            };
            let links = attach(
                &mut self.trace_probes,
                &mut self.filter_fds,
                prog,
                &site,
                false,
                pid,
                0,
            )?;
            self.links.extend(links);
            self.attached.push(site.to_string());
        }
        Ok(())
    }

    /// Attaches the uprobes of the allocation and lock families to `pid` (-1: all), for the
    /// sites found in `libs`.
    pub fn attach_uprobes(
        &mut self,
        alloc_sites: &[Site],
        lock_sites: &[Site],
        pid: i32,
    ) -> Result<()> {
        // (site, entry program, return program, an allocator probe: pausable)
        let mut plan: Vec<(
            &Site,
            &libbpf_rs::ProgramMut<'_>,
            Option<&libbpf_rs::ProgramMut<'_>>,
            bool,
        )> = Vec::new();
        if let (Some(a), true) = (&self.alloc, self.alloc_sessions_cfg) {
            let _ = a;
            let mut plan: Vec<SessionPlan> = Vec::new();
            for s in alloc_sites {
                let Some(kind) = alloc_kind_cookie(&s.symbol) else {
                    continue;
                };
                let i = match plan.iter().position(|p| p.0 == s.lib) {
                    Some(i) => i,
                    None => {
                        plan.push((s.lib.clone(), Vec::new(), Vec::new()));
                        plan.len() - 1
                    }
                };
                plan[i].1.push(s.probe_offset());
                plan[i].2.push(kind);
                self.attached.push(if kind == AK_FREE {
                    format!("{s} (uprobe_multi, no return probe)")
                } else {
                    format!("{s} (uprobe session)")
                });
            }
            *self.session_plan.borrow_mut() = plan;
            self.attach_sessions(pid)?;
        } else if let Some(a) = &self.alloc {
            let pr = &a.progs;
            for s in alloc_sites {
                let entry = match s.symbol.as_ref() {
                    "malloc" => &pr.malloc_enter,
                    "calloc" => &pr.calloc_enter,
                    "realloc" => &pr.realloc_enter,
                    "reallocarray" => &pr.reallocarray_enter,
                    "posix_memalign" => &pr.posix_memalign_enter,
                    "aligned_alloc" => &pr.aligned_alloc_enter,
                    "memalign" => &pr.memalign_enter,
                    "valloc" => &pr.valloc_enter,
                    "pvalloc" => &pr.pvalloc_enter,
                    "free" => &pr.free_enter,
                    _ => continue,
                };
                let ret =
                    (s.symbol != "free" && !self.alloc_entry_only).then_some(&pr.alloc_return);
                plan.push((s, entry, ret, true));
            }
        }
        if let Some(l) = &self.lock {
            let pr = &l.progs;
            for s in lock_sites {
                let (entry, ret) = match s.symbol.as_ref() {
                    "pthread_mutex_lock" => (&pr.mutex_lock_enter, Some(&pr.mutex_lock_return)),
                    "pthread_mutex_trylock" => {
                        (&pr.mutex_trylock_enter, Some(&pr.mutex_lock_return))
                    }
                    "pthread_mutex_unlock" => (&pr.mutex_unlock_enter, None),
                    _ => continue,
                };
                plan.push((s, entry, ret, false));
            }
        }
        let mut links = Vec::new();
        let mut attached = Vec::new();
        for (s, entry, ret, pausable) in plan {
            if pausable {
                let alloc = ebtrace_proto::v1::EventFamily::Alloc;
                attach_pausable(
                    &mut self.trace_probes,
                    &self.pausable,
                    alloc,
                    entry,
                    s,
                    false,
                    pid,
                    0,
                )?;
                if let Some(ret) = ret {
                    attach_pausable(
                        &mut self.trace_probes,
                        &self.pausable,
                        alloc,
                        ret,
                        s,
                        true,
                        pid,
                        0,
                    )?;
                }
                attached.push(s.to_string());
                continue;
            }
            links.extend(attach(
                &mut self.trace_probes,
                &mut self.filter_fds,
                entry,
                s,
                false,
                pid,
                0,
            )?);
            if let Some(ret) = ret {
                links.extend(attach(
                    &mut self.trace_probes,
                    &mut self.filter_fds,
                    ret,
                    s,
                    true,
                    pid,
                    0,
                )?);
            }
            attached.push(s.to_string());
        }
        self.links.extend(links);
        self.attached.extend(attached);
        Ok(())
    }

    /// `--alloc-fn`: attaches a custom allocator's functions to `pid` (-1: every process),
    /// as classic uprobes whatever `--alloc-probes` says (pausable like the allocator's). Its
    /// allocation function gets the entry and (unless `--no-free`) the return program, the
    /// free function the free program; the cookie is the allocator's number << 8 and the
    /// index of the argument read.
    pub fn attach_custom_alloc(&mut self, sites: &[CustomSite], pid: i32) -> Result<()> {
        let Some(a) = &self.alloc else {
            bail!("--alloc-fn needs --alloc");
        };
        let pr = &a.progs;
        let alloc = ebtrace_proto::v1::EventFamily::Alloc;
        for c in sites {
            let cookie = (u64::from(c.allocator) << 8) | u64::from(c.arg);
            let progs: Vec<(&libbpf_rs::ProgramMut<'_>, bool)> = if c.free {
                vec![(&pr.custom_free_enter, false)]
            } else if self.alloc_entry_only {
                vec![(&pr.custom_alloc_enter, false)]
            } else {
                vec![
                    (&pr.custom_alloc_enter, false),
                    (&pr.custom_alloc_return, true),
                ]
            };
            for (prog, ret) in progs {
                attach_pausable(
                    &mut self.trace_probes,
                    &self.pausable,
                    alloc,
                    prog,
                    &c.site,
                    ret,
                    pid,
                    cookie,
                )?;
            }
            self.attached.push(format!("{} (--alloc-fn)", c.site));
        }
        Ok(())
    }

    /// --alloc-probes session: attaches the allocator session links to `pid` (-1: every
    /// process), one per library.
    pub fn attach_sessions(&self, pid: i32) -> Result<()> {
        let Some(a) = &self.alloc else {
            return Ok(());
        };
        if !self.session_pids.borrow_mut().insert(pid) {
            return Ok(()); // attached already
        }
        if self.sessions_paused.get() {
            return Ok(()); // --max-cpu paused them: attached at resume
        }
        if pid > 0 {
            // Its children are held at fork until they have links too (alloc_fork).
            a.maps
                .session_pids
                .update(&(pid as u32).to_ne_bytes(), &[1], MapFlags::ANY)?;
        }
        let plan = self.session_plan.borrow();
        for (lib, offsets, cookies) in plan.iter() {
            // free in a link of its own that is not a session (see free_multi in
            // bpf/alloc.bpf.c): the sessions' other consumers would give it a return probe.
            let (free, alloc): (Vec<_>, Vec<_>) = offsets
                .iter()
                .zip(cookies)
                .map(|(&o, &c)| (o as usize, c))
                .partition(|&(_, c)| c == AK_FREE);
            let context = || {
                format!(
                    "attaching the allocator's uprobe session to {} (pid {pid}); --alloc-probes classic uses entry and return probes",
                    lib.display()
                )
            };
            for (prog, sites, session) in [
                (&a.progs.alloc_session, alloc, true),
                (&a.progs.free_multi, free, false),
            ] {
                if sites.is_empty() {
                    continue;
                }
                let link = prog
                    .attach_uprobe_multi_with_opts(
                        pid,
                        lib,
                        "",
                        libbpf_rs::UprobeMultiOpts {
                            offsets: sites.iter().map(|s| s.0).collect(),
                            cookies: sites.iter().map(|s| s.1).collect(),
                            session,
                            ..Default::default()
                        },
                    )
                    .with_context(context)?;
                self.session_links
                    .borrow_mut()
                    .entry(pid)
                    .or_default()
                    .push(link);
            }
        }
        Ok(())
    }

    /// Whether the allocator runs as uprobe sessions (its links then follow each new
    /// process by hand: see `attach_sessions`).
    pub fn alloc_sessions(&self) -> bool {
        !self.session_plan.borrow().is_empty()
    }

    /// Whether new children of session-probed processes are held stopped at fork until
    /// their links are attached (see bpf/alloc.bpf.c, alloc_fork).
    pub fn holds_children(&self) -> bool {
        self.alloc_sessions()
            && self
                .alloc
                .as_ref()
                .is_some_and(|a| a.maps.rodata_data.as_ref().is_some_and(|r| r.hold_children))
    }

    /// Per-CPU counters of every loaded object, summed by (family, counter) and kept per CPU
    /// for the loss counters.
    pub fn counters(&self) -> Counters {
        let mut c = Counters::default();
        let mut read = |map: &dyn MapCore| {
            for key in 0..(FAM_COUNT * CTR_STRIDE) as u32 {
                if let Ok(Some(per_cpu)) = map.lookup_percpu(&key.to_ne_bytes(), MapFlags::ANY) {
                    for (cpu, v) in per_cpu.iter().enumerate() {
                        let v = u64::from_ne_bytes(v[..8].try_into().unwrap_or([0; 8]));
                        if v > 0 {
                            *c.values.entry((key as usize, cpu as u32)).or_default() += v;
                        }
                    }
                }
            }
        };
        each_skel!(self, s => read(&s.maps.counters));
        if let Some(ch) = &self.chan {
            let (hits, lost) = ch.counts();
            let fams = [
                ebtrace_proto::v1::EventFamily::Alloc as usize,
                ebtrace_proto::v1::EventFamily::Free as usize,
            ];
            for (i, fam) in fams.into_iter().enumerate() {
                for (ctr, v) in [(CTR_HITS, hits[i]), (CTR_LOST_RINGBUF, lost[i])] {
                    if v > 0 {
                        *c.values.entry((fam * CTR_STRIDE + ctr, 0)).or_default() += v;
                    }
                }
            }
        }
        c
    }

    /// Sets the allocation sampling period (bytes per sample, 0: off) while recording.
    pub fn set_sample_bytes(&self, period: u64) {
        if let Some(p) = self.sample_bytes_ptr {
            // SAFETY: points into the mmapped .bss of the alloc object, which lives as long
            // as `self`; an aligned u64 store is atomic on x86-64 and the BPF side only
            // reads it.
            unsafe { std::ptr::write_volatile(p, period) };
        }
    }

    /// The preload sampler's ring buffer (`--alloc-sampler preload`), for the shim's
    /// back-pressure; None without it.
    pub fn sampler_ring(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.sampler.as_ref().map(|s| s.maps.events.as_fd())
    }

    /// The recording's end, before the last drain: a kept off-CPU block or run-queue wait
    /// waits in its thread's storage for the thread's return to user space (for its user
    /// stack), and a thread of a `-p` recording may still be in the kernel when it stops
    /// (woken, then blocked again in the same system call). The programs stop keeping
    /// (`*_ending`), and a task iterator sends what every thread holds, with its kernel
    /// stack (flagged: no user stack at the exit), so that the trace has it and its
    /// family's counts add up. A program that passed the flag before it was set has 20 ms
    /// to finish; a thread's exit and the iterator take the event by compare-and-swap.
    pub fn end_pending(&self) -> Result<()> {
        if self.ending_ptrs.is_empty() {
            return Ok(());
        }
        for &(ptr, _) in &self.ending_ptrs {
            // SAFETY: points into an object's mmapped .bss, alive as long as `self`; an
            // aligned u32 store is atomic on x86-64.
            unsafe { std::ptr::write_volatile(ptr, 1) };
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        for &(_, name) in &self.ending_ptrs {
            let prog = match name {
                "offcpu_end" => self.profile.as_ref().map(|p| &p.progs.offcpu_end),
                _ => self.system.as_ref().map(|p| &p.progs.runq_end),
            };
            let Some(prog) = prog else { continue };
            let link = prog
                .attach_iter_with_opts(libbpf_rs::IterOpts::None)
                .with_context(|| format!("attaching the task iterator {name}"))?;
            let mut it = libbpf_rs::Iter::new(&link)
                .with_context(|| format!("opening the task iterator {name}"))?;
            std::io::copy(&mut it, &mut std::io::sink())
                .with_context(|| format!("reading the task iterator {name}"))?;
        }
        Ok(())
    }

    /// --offcpu: the blocks past the threshold so far, kept or left out by the sample, and
    /// their ns off the CPU (exact); None without the off-CPU programs.
    pub fn offcpu_seen(&self) -> Option<(u64, u64)> {
        let p = self.profile.as_ref()?;
        let [n, ns] = percpu_words(&p.maps.offcpu_seen, [0, 1])?;
        Some((n, ns))
    }

    /// --stack-mode cfi|auto: (walks that could use their thread's memo, walks that did),
    /// summed over the objects and CPUs (`uw_rec` in bpf/unwind.bpf.h).
    pub fn unwind_memo(&self) -> (u64, u64) {
        let maps = [
            self.alloc.as_ref().map(|o| &o.maps.uw_rec),
            self.lock.as_ref().map(|o| &o.maps.uw_rec),
            self.profile.as_ref().map(|o| &o.maps.uw_rec),
            self.system.as_ref().map(|o| &o.maps.uw_rec),
        ];
        let mut sum = (0u64, 0u64);
        for [walks, hits] in maps
            .into_iter()
            .flatten()
            .filter_map(|m| percpu_words(m, [1, 2]))
        {
            sum.0 += walks;
            sum.1 += hits;
        }
        sum
    }

    /// Sets the off-CPU threshold (shortest block kept, ns) while recording; each block is
    /// judged by the value in force when it ends.
    pub fn set_offcpu_min_ns(&self, ns: u64) {
        if let Some(p) = self.offcpu_min_ptr {
            // SAFETY: as in `set_sample_bytes`, in the profile object's mmapped .bss.
            unsafe { std::ptr::write_volatile(p, ns) };
        }
    }

    /// Sets the unit of a family's time-weighted sample (off-CPU, syscalls, run queue), ns,
    /// at most 1 s, while recording; each block, call or wait is judged by the value it
    /// reads once when it is decided (record/src/pacer.rs).
    pub fn set_sample_unit_ns(&self, family: ebtrace_proto::v1::EventFamily, ns: u64) {
        for &(f, p) in &self.unit_ptrs {
            if f == family {
                // SAFETY: as in `set_sample_bytes`, an aligned u64 in an object's mmapped
                // .bss, alive as long as self.
                unsafe { std::ptr::write_volatile(p, ns.min(crate::pacer::UNIT_CEIL_NS)) };
            }
        }
    }

    /// Sets the on-CPU sampling frequency of every per-CPU cpu-clock event while recording,
    /// with PERF_EVENT_IOC_PERIOD. cpu-clock is an hrtimer event: at open the kernel turns
    /// its frequency into a fixed period (1e9 / Hz ns) and clears `freq` (seen on 6.18: a
    /// frequency passed to the ioctl was taken as a period in ns, 1 Hz became a period of
    /// 10 µs, the hrtimer's least), so the new rate goes in as a period in ns.
    pub fn set_cpu_hz(&self, hz: u64) -> Result<()> {
        let period: u64 = 1_000_000_000 / hz.max(1);
        for &fd in &self.cpu_fds {
            // SAFETY: fd is a perf event owned by a live link of `self`; the kernel reads one
            // u64 at the pointer.
            let r = unsafe {
                libc::ioctl(
                    fd,
                    perf_event_open_sys::bindings::PERIOD as _,
                    &period as *const u64,
                )
            };
            if r != 0 {
                bail!(
                    "PERF_EVENT_IOC_PERIOD {period} ns ({hz} Hz) on the cpu-clock events: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
        Ok(())
    }

    /// Each family's BPF run time (ns) and uprobe traps (runs of its uprobe programs) so
    /// far, indexed by EventFamily number. A program belongs to the family of its object
    /// (alloc and sampler: alloc; lock: lock) or, in the profile object, to the family its
    /// name starts with (cpu_, offcpu_, mem_, func_); the profile object's fork and exit
    /// tracepoints serve all its families and count as unspecified (0). A tracepoint or
    /// perf event program's runs also cost `dispatch_ns` each, which the stats do not see;
    /// the hub's runs and time are shared by the families in the system call chain.
    /// Whether the kernel's BPF stats (and the chain's member timing) are on now.
    pub fn stats_on(&self) -> bool {
        self.stats_fd.borrow().is_some()
    }

    /// Turns the kernel's BPF stats and the chain's member timing on or off (--max-cpu
    /// measures a part of the time: each run of every BPF program on the machine pays two
    /// clock reads while they are on, and a guest's clock can be slow to read). Nothing
    /// when they could not be turned on at the start. Runs and run time stand still while
    /// off (unless another tool keeps the kernel's stats on): measure between two reads
    /// taken while on.
    pub fn set_stats(&self, on: bool) {
        if !self.stats_ok || self.stats_on() == on {
            return;
        }
        if on {
            // SAFETY: plain syscall wrapper.
            let fd = unsafe {
                libbpf_rs::libbpf_sys::bpf_enable_stats(libbpf_rs::libbpf_sys::BPF_STATS_RUN_TIME)
            };
            if fd < 0 {
                return;
            }
            // SAFETY: a fresh fd we own.
            *self.stats_fd.borrow_mut() =
                Some(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) });
            self.set_chain_timing(true);
        } else {
            self.set_chain_timing(false);
            self.stats_fd.borrow_mut().take();
        }
    }

    fn set_chain_timing(&self, on: bool) {
        let v = u32::from(on).to_ne_bytes();
        if let Err(e) =
            self.chain_maps
                .timing
                .update(&0u32.to_ne_bytes(), &v, libbpf_rs::MapFlags::ANY)
        {
            eprintln!(
                "ebrec: warning: could not turn the chain's timing {}: {e}",
                if on { "on" } else { "off" }
            );
        }
    }

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

    /// Whether --max-cpu can pause `family` (detach its uprobes, and attach them again).
    pub fn can_pause(&self, family: ebtrace_proto::v1::EventFamily) -> bool {
        (family == ebtrace_proto::v1::EventFamily::Alloc && self.alloc_sessions())
            || self.pausable.borrow().iter().any(|p| p.family == family)
            || self.tp_pausable.borrow().iter().any(|t| t.0 == family)
            || self.chain.borrow().iter().any(|m| m.family == family)
    }

    /// --max-cpu: detaches `family`'s uprobes (their traps go with them), or the tracepoint
    /// programs that start its events (lock in futex mode, memgrowth), until `resume`.
    pub fn pause(&self, family: ebtrace_proto::v1::EventFamily) {
        if family == ebtrace_proto::v1::EventFamily::Alloc && self.alloc_sessions() {
            self.pause_sessions();
        }
        // Each close waits for the kernel to retire the probe (~100 ms): all at once.
        let mut gone: Vec<(Option<Link>, Option<OwnedFd>)> = Vec::new();
        for p in self.pausable.borrow_mut().iter_mut() {
            if p.family == family {
                gone.push((p.link.take(), p.filter.take()));
            }
        }
        for t in self.tp_pausable.borrow_mut().iter_mut() {
            if t.0 == family {
                gone.push((t.2.take(), None));
            }
        }
        let mut chain_changed = false;
        for m in self.chain.borrow_mut().iter_mut() {
            if m.family == family && m.active {
                m.active = false;
                chain_changed = true;
            }
        }
        if chain_changed {
            if let Err(e) = self.sync_chain() {
                eprintln!("ebrec: warning: pausing {family:?}'s system call programs: {e:#}");
            }
        }
        std::thread::scope(|s| {
            for g in gone {
                s.spawn(move || drop(g));
            }
        });
    }

    /// Attaches `family`'s uprobes again after `pause`: the classic ones to the process they
    /// were attached to (and its threads and later children; children forked before the
    /// resume are not probed again), if it still runs.
    pub fn resume(&self, family: ebtrace_proto::v1::EventFamily) -> Result<()> {
        if family == ebtrace_proto::v1::EventFamily::Alloc && self.alloc_sessions() {
            self.resume_sessions()?;
        }
        // What was in flight at the pause never saw its exit: forgotten, so that no exit after
        // the resume pairs with an entry from before the pause.
        fn clear(m: &libbpf_rs::MapMut<'_>) {
            let keys: Vec<Vec<u8>> = m.keys().collect();
            for k in keys {
                let _ = m.delete(&k);
            }
        }
        let chain_paused = self
            .chain
            .borrow()
            .iter()
            .any(|m| m.family == family && !m.active);
        if chain_paused
            || self
                .tp_pausable
                .borrow()
                .iter()
                .any(|t| t.0 == family && t.2.is_none())
        {
            match family {
                ebtrace_proto::v1::EventFamily::Lock => {
                    if let Some(l) = &self.lock {
                        clear(&l.maps.waits);
                    }
                }
                ebtrace_proto::v1::EventFamily::MemGrowth => {
                    if let Some(p) = &self.profile {
                        clear(&p.maps.mem_calls);
                    }
                }
                ebtrace_proto::v1::EventFamily::Syscall | ebtrace_proto::v1::EventFamily::Runq => {
                    // Task storage cannot be listed: a new epoch makes the old state stale.
                    if let Some(e) = self.sys_epoch_ptr {
                        // SAFETY: the mmapped .bss of the system object, alive as long as
                        // self; an aligned u32 store.
                        unsafe {
                            std::ptr::write_volatile(e, std::ptr::read_volatile(e).wrapping_add(1))
                        };
                    }
                }
                ebtrace_proto::v1::EventFamily::Offcpu => {
                    // Task storage cannot be listed: a new epoch makes the old state stale.
                    if let Some(e) = self.offcpu_epoch_ptr {
                        // SAFETY: as in set_offcpu_min_ns (the mmapped .bss of the profile
                        // object, alive as long as self; an aligned u32 store).
                        unsafe {
                            std::ptr::write_volatile(e, std::ptr::read_volatile(e).wrapping_add(1))
                        };
                    }
                }
                _ => {}
            }
        }
        for t in self.tp_pausable.borrow_mut().iter_mut() {
            if t.0 != family || t.2.is_some() {
                continue;
            }
            let prog = match t.1 {
                "futex_exit" => self.lock.as_ref().map(|l| &l.progs.futex_exit),
                "mem_exit" => self.profile.as_ref().map(|p| &p.progs.mem_exit),
                "offcpu_sys_exit" => self.profile.as_ref().map(|p| &p.progs.offcpu_sys_exit),
                "offcpu_rseq" => self.profile.as_ref().map(|p| &p.progs.offcpu_rseq),
                "offcpu_waking" => self.profile.as_ref().map(|p| &p.progs.offcpu_waking),
                "offcpu_switch" => self.profile.as_ref().map(|p| &p.progs.offcpu_switch),
                "futex_enter" => self.lock.as_ref().map(|l| &l.progs.futex_enter),
                "mem_enter" => self.profile.as_ref().map(|p| &p.progs.mem_enter),
                "mem_fault" => self.profile.as_ref().map(|p| &p.progs.mem_fault),
                name => self.system.as_ref().and_then(|s| {
                    let g = &s.progs;
                    Some(match name {
                        "sys_exit" => &g.sys_exit,
                        "sys_enter" => &g.sys_enter,
                        "runq_sys_exit" => &g.runq_sys_exit,
                        "runq_rseq" => &g.runq_rseq,
                        "runq_switch" => &g.runq_switch,
                        "runq_wakeup" => &g.runq_wakeup,
                        "runq_wakeup_new" => &g.runq_wakeup_new,
                        "bio_io_done" => &g.bio_io_done,
                        "bio_io_start" => &g.bio_io_start,
                        "bio_rq_complete" => &g.bio_rq_complete,
                        "bio_rq_issue" => &g.bio_rq_issue,
                        "tcp_set_state" => &g.tcp_set_state,
                        "tcp_sys_exit" => &g.tcp_sys_exit,
                        "tcp_retransmit" => &g.tcp_retransmit,
                        "tcp_send_reset" => &g.tcp_send_reset,
                        "tcp_receive_reset" => &g.tcp_receive_reset,
                        _ => return None,
                    })
                }),
            };
            let prog = prog.with_context(|| format!("no program {} to attach again", t.1))?;
            t.2 = Some(
                prog.attach()
                    .with_context(|| format!("attaching {} again", t.1))?,
            );
        }
        if chain_paused {
            for m in self.chain.borrow_mut().iter_mut() {
                if m.family == family {
                    m.active = true;
                }
            }
            self.sync_chain()?;
        }
        for p in self.pausable.borrow_mut().iter_mut() {
            if p.family != family || p.link.is_some() {
                continue;
            }
            if p.pid != -1 && !Path::new(&format!("/proc/{}", p.pid)).exists() {
                continue;
            }
            let prog = self
                .pausable_prog(&p.prog)
                .with_context(|| format!("no program {} to attach again", p.prog))?;
            let (link, filter) = open_link(&self.trace_probes[p.probe], prog, p.pid, p.cookie)
                .with_context(|| format!("attaching {} again (pid {})", p.prog, p.pid))?;
            p.link = Some(link);
            p.filter = filter;
        }
        Ok(())
    }

    /// The program of a pausable link, by name.
    fn pausable_prog(&self, name: &str) -> Option<&libbpf_rs::ProgramMut<'obj>> {
        if let Some(a) = &self.alloc {
            let p = &a.progs;
            let prog = match name {
                "malloc_enter" => Some(&p.malloc_enter),
                "calloc_enter" => Some(&p.calloc_enter),
                "realloc_enter" => Some(&p.realloc_enter),
                "reallocarray_enter" => Some(&p.reallocarray_enter),
                "posix_memalign_enter" => Some(&p.posix_memalign_enter),
                "aligned_alloc_enter" => Some(&p.aligned_alloc_enter),
                "memalign_enter" => Some(&p.memalign_enter),
                "valloc_enter" => Some(&p.valloc_enter),
                "pvalloc_enter" => Some(&p.pvalloc_enter),
                "free_enter" => Some(&p.free_enter),
                "alloc_return" => Some(&p.alloc_return),
                "custom_alloc_enter" => Some(&p.custom_alloc_enter),
                "custom_alloc_return" => Some(&p.custom_alloc_return),
                "custom_free_enter" => Some(&p.custom_free_enter),
                _ => None,
            };
            if prog.is_some() {
                return prog;
            }
        }
        let p = &self.profile.as_ref()?.progs;
        match name {
            "func_enter" => Some(&p.func_enter),
            "func_return" => Some(&p.func_return),
            "func_exit" => Some(&p.func_exit),
            _ => None,
        }
    }

    /// --max-cpu: detaches the allocator's session links (their traps go with them) until
    /// `resume_sessions`; new children are not attached meanwhile.
    pub fn pause_sessions(&self) {
        self.sessions_paused.set(true);
        let links = std::mem::take(&mut *self.session_links.borrow_mut());
        drop(links);
    }

    /// A process with session links exited: its links go (a link of a dead task would stay
    /// a consumer of the uprobes, costing every later hit a filter call), and a new process
    /// that gets the pid again is attached anew.
    pub fn forget_session_pid(&self, pid: i32) {
        self.session_pids.borrow_mut().remove(&pid);
        let links = self.session_links.borrow_mut().remove(&pid);
        drop(links);
    }

    /// Attaches the session links again to every process that had them and still runs.
    pub fn resume_sessions(&self) -> Result<()> {
        self.sessions_paused.set(false);
        let pids: Vec<i32> = self.session_pids.borrow_mut().drain().collect();
        for pid in pids {
            if pid == -1 || std::path::Path::new(&format!("/proc/{pid}")).exists() {
                self.attach_sessions(pid)?;
            }
        }
        Ok(())
    }

    /// --aggregate: every (key, counters) of the counters maps (the key says the family).
    pub fn agg_counts(&self) -> Vec<(agg_key, agg_val)> {
        fn read(m: &libbpf_rs::MapMut<'_>) -> Vec<(Vec<u8>, Vec<u8>)> {
            match m.lookup_batch(1024, MapFlags::ANY, MapFlags::ANY) {
                Ok(it) => it.collect(),
                // Batch lookups need 5.6; one key at a time otherwise.
                Err(_) => m
                    .keys()
                    .filter_map(|k| {
                        let v = m.lookup(&k, MapFlags::ANY).ok()??;
                        Some((k, v))
                    })
                    .collect(),
            }
        }
        let mut rows = Vec::new();
        if let Some(a) = &self.alloc {
            rows.extend(read(&a.maps.agg_counts));
        }
        if let Some(l) = &self.lock {
            rows.extend(read(&l.maps.agg_counts));
        }
        if let Some(p) = &self.profile {
            rows.extend(read(&p.maps.agg_counts));
        }
        rows.into_iter()
            .map(|(k, v)| (read_event::<agg_key>(&k), read_event::<agg_val>(&v)))
            .collect()
    }

    /// --syscalls, --bio, --runq: every histogram the kernel keeps (cumulative counts; the
    /// 32-bit bucket counts wrap).
    pub fn histograms(&self) -> Vec<(hist_key, hist_val)> {
        let Some(sy) = &self.system else {
            return Vec::new();
        };
        let m = &sy.maps.hists;
        let keys: Vec<Vec<u8>> = m.keys().collect();
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            let Ok(Some(v)) = m.lookup(&k, MapFlags::ANY) else {
                continue; // deleted since the key was listed
            };
            out.push((read_event::<hist_key>(&k), read_event::<hist_val>(&v)));
        }
        out
    }

    /// Forgets histograms read for the last time (their process ended).
    pub fn histograms_forget(&self, keys: &[hist_key]) {
        if let Some(sy) = &self.system {
            for k in keys {
                // SAFETY: hist_key is plain old data of the map's key size.
                let _ = sy.maps.hists.delete(unsafe { plain::as_bytes(k) });
            }
        }
    }

    /// The stacks map of the object that counts `family`.
    fn agg_stacks_of(
        &self,
        family: u32,
    ) -> Option<(&libbpf_rs::MapMut<'_>, &libbpf_rs::MapMut<'_>)> {
        use ebtrace_format::proto::EventFamily as F;
        match family {
            f if f == F::Alloc as u32 => self
                .alloc
                .as_ref()
                .map(|a| (&a.maps.agg_counts, &a.maps.agg_stacks)),
            f if f == F::Lock as u32 => self
                .lock
                .as_ref()
                .map(|a| (&a.maps.agg_counts, &a.maps.agg_stacks)),
            f if f == F::Cpu as u32 || f == F::Offcpu as u32 => self
                .profile
                .as_ref()
                .map(|a| (&a.maps.agg_counts, &a.maps.agg_stacks)),
            _ => None,
        }
    }

    /// --aggregate: the stack written for `key` (None: not there, a full map).
    pub fn agg_stack(&self, key: &agg_key) -> Option<agg_stack> {
        let (_, stacks) = self.agg_stacks_of(key.family)?;
        // SAFETY: agg_key is plain old data of the map's key size.
        let k = unsafe { plain::as_bytes(key) };
        let v = stacks.lookup(k, MapFlags::ANY).ok()??;
        Some(read_event::<agg_stack>(&v))
    }

    /// --aggregate: forgets keys read for the last time (their process ended).
    pub fn agg_forget(&self, keys: &[agg_key]) {
        for key in keys {
            let Some((counts, stacks)) = self.agg_stacks_of(key.family) else {
                continue;
            };
            // SAFETY: as in agg_stack.
            let k = unsafe { plain::as_bytes(key) };
            let _ = counts.delete(k);
            let _ = stacks.delete(k);
        }
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

/// ns per getppid system call in a loop here (the least of 40 rounds of 2,000).
fn time_syscalls() -> f64 {
    // Many short loops (about half a millisecond each), their best: a loop that a switch
    // or an interrupt stretched is not the best, and on a busy machine (the load ebrec
    // is started under) a long loop seldom runs undisturbed. Five loops of 20,000 once
    // measured 547 ns a run where the truth was about 50.
    const N: u32 = 2_000;
    let mut best = f64::MAX;
    for _ in 0..40 {
        let t = std::time::Instant::now();
        for _ in 0..N {
            // SAFETY: getppid has no arguments and no preconditions.
            unsafe { libc::syscall(libc::SYS_getppid) };
        }
        best = best.min(t.elapsed().as_nanos() as f64 / f64::from(N));
    }
    best
}

/// A loaded program's kernel info (its run time, runs and recursion misses among it).
fn prog_info(fd: std::os::fd::BorrowedFd<'_>) -> Option<libbpf_rs::libbpf_sys::bpf_prog_info> {
    let mut info = libbpf_rs::libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of_val(&info) as u32;
    // SAFETY: info is a valid out buffer of len bytes.
    let r = unsafe {
        libbpf_rs::libbpf_sys::bpf_prog_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len)
    };
    (r == 0).then_some(info)
}

/// A loaded program's kernel stats: (run time ns, runs).
fn prog_run_stats(fd: std::os::fd::BorrowedFd<'_>) -> (u64, u64) {
    prog_info(fd).map_or((0, 0), |i| (i.run_time_ns, i.run_cnt))
}

/// What the kernel counted for one BPF program ([`Probes::program_stats`]).
#[derive(Debug, Clone)]
pub struct ProgStat {
    pub name: String,
    pub run_time_ns: u64,
    pub runs: u64,
    pub recursion_misses: u64,
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

/// The session plan's cookie for an allocator function: its AllocKind, AK_FREE for free.
fn alloc_kind_cookie(symbol: &str) -> Option<u64> {
    use ebtrace_proto::v1::AllocKind as K;
    Some(match symbol {
        "malloc" => K::Malloc as u64,
        "calloc" => K::Calloc as u64,
        "realloc" => K::Realloc as u64,
        "reallocarray" => K::Reallocarray as u64,
        "posix_memalign" => K::PosixMemalign as u64,
        "aligned_alloc" => K::AlignedAlloc as u64,
        "memalign" => K::Memalign as u64,
        "valloc" => K::Valloc as u64,
        "pvalloc" => K::Pvalloc as u64,
        "free" => AK_FREE,
        _ => return None,
    })
}

/// Attaches `prog` to a uprobe at `s` for `pid` (-1: every process) and its descendants.
///
/// Two perf events per target, on purpose. An inherited event that carries the program
/// would be copied into every child, program included, and when such a child exits the
/// kernel detaches *the program itself* from the shared tracepoint, for everyone (seen here
/// on 6.18: children and threads after the first child's exit went unrecorded). So the
/// program goes on a non-inherited event, and a second, inherited event without a program
/// makes the probe fire in the target's descendants: the kernel runs a tracepoint's programs
/// whenever any of its events wants the current process.
fn attach(
    probes: &mut Vec<perf::TraceProbe>,
    filters: &mut Vec<OwnedFd>,
    prog: &libbpf_rs::ProgramMut<'_>,
    s: &Site,
    ret: bool,
    pid: i32,
    cookie: u64,
) -> Result<Vec<Link>> {
    let what = || s.to_string();
    let probe = perf::TraceProbe::new(&s.lib, s.probe_offset(), ret)
        .with_context(|| format!("uprobe on {}", what()))?;
    let fds = if pid == -1 {
        // One system-wide event makes the probe fire in every process on every CPU (the
        // program belongs to the tracepoint, not to the event; a second event would be
        // refused with EEXIST).
        vec![probe
            .open_cpu(0)
            .with_context(|| format!("perf event for {}", what()))?]
    } else {
        filters.push(
            probe
                .open(pid, true)
                .with_context(|| format!("perf event for {} (pid {pid})", what()))?,
        );
        vec![probe
            .open(pid, false)
            .with_context(|| format!("perf event for {} (pid {pid})", what()))?]
    };
    probes.push(probe);
    fds.into_iter()
        .map(|fd| {
            // The link owns the perf fd from here and closes it on detach. The cookie lives
            // in the tracepoint's program array, so it reaches the program whichever event
            // (this one or the inherited filter) made the probe fire.
            prog.attach_perf_event_with_opts(
                fd.into_raw_fd(),
                libbpf_rs::PerfEventOpts {
                    cookie,
                    ..Default::default()
                },
            )
            .with_context(|| format!("attaching to {}", what()))
        })
        .collect()
}

/// Opens `probe`'s events for `pid` (-1: every process) and attaches `prog` to them: the
/// link, and the inherited event without a program (see `attach`).
fn open_link(
    probe: &perf::TraceProbe,
    prog: &libbpf_rs::ProgramMut<'_>,
    pid: i32,
    cookie: u64,
) -> std::io::Result<(Link, Option<OwnedFd>)> {
    let (fd, filter) = if pid == -1 {
        (probe.open_cpu(0)?, None)
    } else {
        let filter = probe.open(pid, true)?;
        (probe.open(pid, false)?, Some(filter))
    };
    let link = prog
        .attach_perf_event_with_opts(
            fd.into_raw_fd(),
            libbpf_rs::PerfEventOpts {
                cookie,
                ..Default::default()
            },
        )
        .map_err(std::io::Error::other)?;
    Ok((link, filter))
}

/// [`attach`], the link kept where `Probes::pause_classic` can detach it.
#[allow(clippy::too_many_arguments)]
fn attach_pausable(
    probes: &mut Vec<perf::TraceProbe>,
    pausable: &std::cell::RefCell<Vec<PausableLink>>,
    family: ebtrace_proto::v1::EventFamily,
    prog: &libbpf_rs::ProgramMut<'_>,
    s: &Site,
    ret: bool,
    pid: i32,
    cookie: u64,
) -> Result<()> {
    let probe = perf::TraceProbe::new(&s.lib, s.probe_offset(), ret)
        .with_context(|| format!("uprobe on {s}"))?;
    let (link, filter) = open_link(&probe, prog, pid, cookie)
        .with_context(|| format!("attaching to {s} (pid {pid})"))?;
    probes.push(probe);
    pausable.borrow_mut().push(PausableLink {
        family,
        probe: probes.len() - 1,
        prog: prog.name().to_string_lossy().into_owned(),
        pid,
        cookie,
        link: Some(link),
        filter,
    });
    Ok(())
}

/// Summed counter values, keyed by (family * CTR_STRIDE + counter, cpu).
#[derive(Debug, Default, Clone)]
pub struct Counters {
    pub values: BTreeMap<(usize, u32), u64>,
}

impl Counters {
    pub fn total(&self, family: usize, counter: usize) -> u64 {
        let key = family * CTR_STRIDE + counter;
        self.values
            .range((key, 0)..(key + 1, 0))
            .map(|(_, v)| v)
            .sum()
    }
}

pub const ALLOC_FUNCS: &[&str] = &[
    "malloc",
    "calloc",
    "realloc",
    "reallocarray",
    "posix_memalign",
    "aligned_alloc",
    "memalign",
    "valloc",
    "pvalloc",
    "free",
];
/// What the allocator entry programs read: up to three arguments (posix_memalign's).
pub const ALLOC_KEEP: &[iced_x86::Register] = &crate::placement::ARGS_3;
/// What the lock entry programs read: the mutex.
pub const LOCK_KEEP: &[iced_x86::Register] = &crate::placement::ARGS_1;
pub const LOCK_FUNCS: &[&str] = &[
    "pthread_mutex_lock",
    "pthread_mutex_trylock",
    "pthread_mutex_unlock",
];

/// The probe sites for `funcs` in the library at `lib`: one per distinct address (glibc's
/// aligned_alloc and memalign are one function: probing both would count each call twice).
/// `keep`: the argument registers the entry programs read.
pub fn sites(lib: &Path, funcs: &[&'static str], keep: &[iced_x86::Register]) -> Result<Vec<Site>> {
    let syms = Symbols::read(lib).map_err(|e| anyhow::anyhow!(e))?;
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for &f in funcs {
        let Some((addr, size)) = syms.function(f) else {
            continue;
        };
        let Some(offset) = syms.file_offset(addr) else {
            continue;
        };
        if seen.insert(offset) {
            out.push(Site::new(lib, f, offset, size, keep));
        }
    }
    Ok(out)
}

/// The libraries of `pid` that provide `needed` (e.g. "malloc"): an interposing allocator
/// (the executable itself, jemalloc, tcmalloc) wins over libc.
pub fn find_provider(pid: Option<u32>, exe: Option<&Path>, needed: &str) -> Result<Vec<PathBuf>> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(exe) = exe {
        candidates.push(exe.to_path_buf());
    }
    let maps = match pid {
        Some(pid) => procfs::maps(pid).with_context(|| format!("reading /proc/{pid}/maps"))?,
        None => procfs::maps(std::process::id())?,
    };
    let see_pid = pid.unwrap_or(std::process::id());
    for m in maps
        .iter()
        .filter(|m| m.perms & 4 != 0 && m.path.starts_with(b"/"))
    {
        let p = procfs::path_in(see_pid, &m.path);
        if !candidates.contains(&p) {
            candidates.push(p);
        }
    }
    let mut libc = Vec::new();
    let mut others = Vec::new();
    let mut refused = None;
    for c in candidates {
        let syms = match Symbols::read(&c) {
            Ok(s) => s,
            Err(e) => {
                // Symbols::read's error is the io error's text.
                let denied = e.contains("Permission denied")
                    || std::fs::File::open(&c)
                        .is_err_and(|io| io.kind() == std::io::ErrorKind::PermissionDenied);
                if denied && refused.is_none() {
                    refused = Some(c.clone());
                }
                continue;
            }
        };
        if syms.function(needed).is_none() {
            continue;
        }
        let name = c
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name.starts_with("libc.so") || name.starts_with("libc-") {
            libc.push(c);
        } else if name.starts_with("ld-linux") || name.starts_with("ld-") {
            // the dynamic loader's private minimal malloc: never what the program calls
        } else {
            others.push(c);
        }
    }
    if needed == "malloc" && !others.is_empty() {
        return Ok(others);
    }
    libc.extend(others);
    if libc.is_empty() {
        if let Some(c) = refused {
            bail!(
                "cannot read the target's libraries ({}: permission denied): run ebrec as root, or with CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH beside CAP_BPF and CAP_PERFMON",
                c.display()
            );
        }
        bail!(
            "no {needed} found in {}",
            match pid {
                Some(p) => format!("process {p}"),
                None => "the command or ebrec's own libc".into(),
            }
        );
    }
    Ok(libc)
}

#[cfg(test)]
mod hist_tests {
    /// The kernel's histograms: one shared value per key (not per CPU), 2,136 bytes, so
    /// the map holds at most 33.4 MiB of values whatever the CPU count.
    #[test]
    fn histogram_map_stays_under_34_mib() {
        use ebtrace_format::latency as l;
        assert_eq!(std::mem::size_of::<super::hist_val>(), 2136);
        let bytes = super::HIST_KEYS * std::mem::size_of::<super::hist_val>();
        assert_eq!(super::HIST_KEYS, 16384);
        assert!(bytes <= 34 << 20, "{bytes}");
        // The kernel's layout is the one the records say (sub_buckets 16).
        assert_eq!(super::HIST_BUCKETS, l::LOG_LINEAR_BUCKETS as usize);
        assert_eq!(super::HIST_SUB, l::SUB_BUCKETS as usize);
        assert_eq!(super::HIST_SUB_BITS, l::SUB_BITS as usize);
    }
}

#[cfg(test)]
mod load_error_tests {
    /// Linux 6.1's log of a map key in a global function's argument (PTR_TO_MEM), as libbpf
    /// prints it: the rejection is named with its program, function and reason.
    #[test]
    fn a_verifier_rejection_is_named_as_one() {
        let log: Vec<String> = [
            "libbpf: prog 'cpu_sample': BPF program load failed: -EACCES",
            "libbpf: prog 'cpu_sample': -- BEGIN PROG LOAD LOG --",
            "Validating uw_frame() func#3...",
            "790: R1=mem_or_null(id=2,off=0,imm=0) R10=fp0",
            "827: (07) r7 += 72                    ; R7_w=mem(off=72,imm=0)",
            "831: (85) call bpf_map_lookup_elem#1",
            "R2 type=mem expected=fp, pkt, pkt_meta, map_key, map_value",
            "processed 40 insns (limit 1000000) max_states_per_insn 0 total_states 4",
            "-- END PROG LOAD LOG --",
            "libbpf: prog 'cpu_sample': failed to load: -EACCES",
            "libbpf: failed to load object 'profile_bpf'",
        ]
        .map(String::from)
        .to_vec();
        let v = super::verifier_rejection(&log).unwrap();
        assert!(
            v.starts_with(
                "program 'cpu_sample' (in uw_frame): R2 type=mem expected=fp, pkt, pkt_meta, map_key, map_value | last lines of the verifier's log: "
            ),
            "{v}"
        );
        assert!(v.contains("831: (85) call bpf_map_lookup_elem#1"), "{v}");
        assert!(super::verifier_rejection(&log[..2]).is_none());
    }
}
