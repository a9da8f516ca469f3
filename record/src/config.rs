//! What `ebrec record` (and each window of `ebrec agent`) records: every option of a
//! recording. With the `cli` feature (ebrec's) the same structs are clap's arguments, so
//! each flag and its help are written once; the library itself links no clap.
pub use crate::reqslow::RequestSlow;
use std::ffi::OsString;
use std::path::PathBuf;

#[derive(Debug, Clone)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct RecordConfig {
    /// Trace file to write (created 0600).
    #[cfg_attr(feature = "cli", arg(short, long, default_value = "trace.pb.zst"))]
    pub output: PathBuf,
    /// Trace this running process (repeatable).
    #[cfg_attr(feature = "cli", arg(short, long = "pid"))]
    pub pid: Vec<u32>,
    /// Trace every process (uprobes then cost every process a trap per call).
    #[cfg_attr(feature = "cli", arg(long))]
    pub all: bool,
    /// Allocations of at least MIN_BYTES (default 0: all), with frees of traced blocks.
    #[cfg_attr(feature = "cli", arg(long, value_name = "MIN_BYTES", num_args = 0..=1, require_equals = true, default_missing_value = "0"))]
    pub alloc: Option<u64>,
    /// The allocator library to probe instead of the one found in the target (jemalloc,
    /// tcmalloc); repeatable.
    #[cfg_attr(feature = "cli", arg(long, value_name = "PATH"))]
    pub alloc_lib: Vec<PathBuf>,
    /// A custom allocator profiled as malloc is (repeatable): NAME its allocation function,
    /// SIZE_ARG the 0-based index of its size argument (a member function's `this` is 0),
    /// FREE_NAME its free function and PTR_ARG the index of the freed pointer (default 0).
    /// Names as --func takes them (demangled, with or without parameters, or mangled), in
    /// the target's executable or libraries: `Arena::Allocate:1:Arena::Free:1`. Needs
    /// --alloc (uprobe sampler); its events are allocations with their own address space,
    /// marked with the allocator in the reports.
    #[cfg_attr(
        feature = "cli",
        arg(long, value_name = "NAME:SIZE_ARG[:FREE_NAME[:PTR_ARG]]")
    )]
    pub alloc_fn: Vec<String>,
    /// Do not probe free: no leak report, but one uprobe trap less per allocation and free.
    #[cfg_attr(feature = "cli", arg(long))]
    pub no_free: bool,
    /// Keep one allocation in N, at random.
    #[cfg_attr(feature = "cli", arg(long, value_name = "N", default_value_t = 1))]
    pub sample: u32,
    /// How --alloc sees allocations. uprobe: a uprobe on the allocator's functions in the
    /// targets (any process, -p too; every call pays the trap). preload: start the command
    /// (-- CMD only) with a small preloaded shim that samples allocations by bytes inside
    /// the process (--sample-bytes) and traps only for the sampled ones and their frees:
    /// a few ns per call, estimates in the reports.
    #[cfg_attr(
        feature = "cli",
        arg(
            long,
            value_enum,
            value_name = "uprobe|preload",
            default_value = "uprobe"
        )
    )]
    pub alloc_sampler: AllocSampler,
    /// Sample allocations by bytes: on average one event per N bytes allocated (an
    /// allocation of S bytes is kept with probability 1 - exp(-S/N)); reports scale the
    /// events back and say they are estimates. 1 keeps every allocation (exact counts).
    /// Default with --alloc-sampler preload: 524288.
    #[cfg_attr(feature = "cli", arg(long, value_name = "N"))]
    pub sample_bytes: Option<u64>,
    /// Count in the kernel instead of sending an event per call, per process and stack, in
    /// BPF maps written to the trace every SECS seconds (default 10) and at the end: --alloc
    /// calls and bytes (and with frees tracked, the live blocks and bytes for the leak
    /// report), --cpu samples, --offcpu blocks and time (no waker stacks), --lock waits and
    /// time waited and held (per lock; no waker stacks, no percentiles). The same reports
    /// work; there is no per-event timeline. --func and --memgrowth still send events.
    #[cfg_attr(feature = "cli", arg(long, value_name = "SECS", num_args = 0..=1, require_equals = true, default_missing_value = "10"))]
    pub aggregate: Option<u64>,
    /// --aggregate: the most distinct (process, stack) keys counted at once; calls under a
    /// new stack past it are counted as lost (map full).
    #[cfg_attr(feature = "cli", arg(long, value_name = "N", default_value_t = 65536))]
    pub aggregate_stacks: u32,
    /// How the allocator's uprobes run: `session` (kernel >= 6.13: one uprobe_multi link per
    /// library; the return probe runs only for calls kept at entry, so an allocation that is
    /// not kept costs one trap), `classic` (entry and return probes on every call), or
    /// `auto` (session where the kernel has it).
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value = "auto"))]
    pub alloc_probes: AllocProbesArg,
    /// Lock waits of at least MIN_US microseconds (default 0: all contended waits).
    #[cfg_attr(feature = "cli", arg(long, value_name = "MIN_US", num_args = 0..=1, require_equals = true, default_missing_value = "0"))]
    pub lock: Option<u64>,
    /// futex: contended waits only, at no cost for uncontended locks; uprobe: exact wait and
    /// hold of every pthread_mutex lock (a trap per lock call).
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value = "futex"))]
    pub lock_mode: LockModeArg,
    /// On-CPU samples at HZ per CPU (default 99), with user and kernel stacks.
    #[cfg_attr(feature = "cli", arg(long, value_name = "HZ", num_args = 0..=1, require_equals = true, default_missing_value = "99"))]
    pub cpu: Option<u64>,
    /// Off-CPU blocks of at least MIN_US microseconds (default 100), with the blocking stack
    /// and the waker.
    #[cfg_attr(feature = "cli", arg(long, value_name = "MIN_US", num_args = 0..=1, require_equals = true, default_missing_value = "100"))]
    pub offcpu: Option<u64>,
    /// Off-CPU sampling unit, microseconds (0: every block past the threshold, exact). A
    /// block shorter than US is kept, with its stacks and waker, with probability
    /// duration/US and stands for US of off-CPU time in the totals (a time-weighted sample:
    /// a rare long block is never lost, the many short ones cost a timestamp); longer
    /// blocks are all kept. At most 1 s.
    #[cfg_attr(feature = "cli", arg(long, value_name = "US", default_value_t = 10000, value_parser = clap::value_parser!(u64).range(0..=1_000_000)))]
    pub offcpu_sample: u64,
    /// With --offcpu: the wake hook (sched_waking), which names who woke each kept block (its
    /// thread and stacks) and how long the block then waited for a CPU. off: one program
    /// fewer at every wakeup of the machine (about a third of --offcpu's BPF time on a busy
    /// server), no waker in the trace. Default: on, but off for `ebrec agent` (the profiles
    /// it pushes have no wakers). --request keeps it on (each request's split needs it).
    #[cfg_attr(feature = "cli", arg(long, value_name = "on|off", value_parser = parse_on_off))]
    pub offcpu_wakers: Option<bool>,
    /// Off-CPU blocks kept a second that --offcpu-sample's sample aims at (0: the unit stays as
    /// given). Checked every second: past 1.5 times N the unit is multiplied by the power of
    /// two that brings them back under N (up to 1 s), under a quarter of N halved (not below
    /// --offcpu-sample); each event stands for the unit it was kept under, so totals stay
    /// unbiased, and one at least as long as the unit is always kept. The trace records each
    /// change (ebsym info).
    #[cfg_attr(feature = "cli", arg(long, value_name = "N", default_value_t = 200))]
    pub offcpu_rate: u64,
    /// Memory growth: brk, mmap, munmap and first-touch page faults, with user stacks.
    #[cfg_attr(feature = "cli", arg(long))]
    pub memgrowth: bool,
    /// Page-fault sampling unit, bytes (0: every first-touch fault). A fault of one page is
    /// kept, with its stack, with probability PAGE/BYTES and stands for BYTES in the totals
    /// (a byte-weighted sample, as heap profilers sample allocations: a stack that touches
    /// much new memory is never missed, the many single pages cost a tracepoint each, no
    /// stack); brk, mmap and munmap are all kept. At most 1 GiB.
    #[cfg_attr(feature = "cli", arg(long, value_name = "BYTES", default_value_t = 65536, value_parser = clap::value_parser!(u64).range(0..=1 << 30)))]
    pub memgrowth_sample: u64,
    /// Every system call counted in a latency histogram per (process, syscall) in the
    /// kernel; calls of at least MIN_US microseconds (default 1000) kept with the caller's
    /// stack.
    #[cfg_attr(feature = "cli", arg(long, value_name = "MIN_US", num_args = 0..=1, require_equals = true, default_missing_value = "1000"))]
    pub syscalls: Option<u64>,
    /// Slow-call sampling unit, microseconds (0: every call past --syscalls' threshold). A
    /// slow call shorter than US is kept, with its stack, with probability duration/US and
    /// stands for US of time in the totals (a time-weighted sample, as --offcpu-sample);
    /// the latency histograms still count every call. At most 1 s.
    #[cfg_attr(feature = "cli", arg(long, value_name = "US", default_value_t = 10000, value_parser = clap::value_parser!(u64).range(0..=1_000_000)))]
    pub syscalls_sample: u64,
    /// Slow calls kept a second that --syscalls-sample's sample aims at (0: the unit stays as
    /// given). Checked every second: past 1.5 times N the unit is multiplied by the power of
    /// two that brings them back under N (up to 1 s), under a quarter of N halved (not below
    /// --syscalls-sample); each event stands for the unit it was kept under, so totals stay
    /// unbiased, and one at least as long as the unit is always kept. The trace records each
    /// change (ebsym info).
    #[cfg_attr(feature = "cli", arg(long, value_name = "N", default_value_t = 200))]
    pub syscalls_rate: u64,
    /// Block I/O requests issued by the targets: device, sector, bytes, op, start to
    /// completion, the issuing stack; requests of at least MIN_US (default 0: all) kept as
    /// events, all counted in histograms per (process, device, op).
    #[cfg_attr(feature = "cli", arg(long, value_name = "MIN_US", num_args = 0..=1, require_equals = true, default_missing_value = "0"))]
    pub bio: Option<u64>,
    /// Run-queue latency (runnable to running) of every thread of the targets in histograms;
    /// waits of at least MIN_US (default 1000) kept with the waiting thread's stack.
    #[cfg_attr(feature = "cli", arg(long, value_name = "MIN_US", num_args = 0..=1, require_equals = true, default_missing_value = "1000"))]
    pub runq: Option<u64>,
    /// Run-queue wait sampling unit, microseconds (0: every wait past --runq's threshold). A
    /// long wait shorter than US is kept, with its stack, with probability duration/US and
    /// stands for US of time in the totals (a time-weighted sample, as --offcpu-sample: on a
    /// saturated CPU most waits pass the threshold, and a stack each cost more than the
    /// rest of the family); the latency histograms still count every wait. At most 1 s.
    #[cfg_attr(feature = "cli", arg(long, value_name = "US", default_value_t = 10000, value_parser = clap::value_parser!(u64).range(0..=1_000_000)))]
    pub runq_sample: u64,
    /// Long run-queue waits kept a second that --runq-sample's sample aims at (0: the unit stays as
    /// given). Checked every second: past 1.5 times N the unit is multiplied by the power of
    /// two that brings them back under N (up to 1 s), under a quarter of N halved (not below
    /// --runq-sample); each event stands for the unit it was kept under, so totals stay
    /// unbiased, and one at least as long as the unit is always kept. The trace records each
    /// change (ebsym info).
    #[cfg_attr(feature = "cli", arg(long, value_name = "N", default_value_t = 200))]
    pub runq_rate: u64,
    /// The targets' TCP connections: connects and accepts with their stacks, state changes,
    /// lifetimes, bytes, retransmits and resets.
    #[cfg_attr(feature = "cli", arg(long))]
    pub tcp: bool,
    /// Calls of a function, with their duration and the stack at entry (repeatable). SPEC:
    /// a demangled C++ name or glob (`ns::Class::method`, `ns::*::get*`), a mangled name,
    /// `LIB:SYMBOL` or `BINARY:0xADDR`; `:MIN_US` keeps only calls that long. `ebrec probes`
    /// lists what a SPEC attaches to.
    #[cfg_attr(feature = "cli", arg(long, value_name = "SPEC[:MIN_US]"))]
    pub func: Vec<String>,
    /// With --func: also keep the first N integer arguments of each call (0-6). This copies
    /// data of the target (pointers, sizes, ids) into the trace.
    #[cfg_attr(feature = "cli", arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=6)))]
    pub args: u32,
    /// Take --alloc-fn's argument indices, and --args' arguments, as they are also where a
    /// name is a GCC clone (`.isra`, `.constprop`): the compiler may have removed or
    /// reordered its parameters (an unused `this`), so the source's argument N is not
    /// always the clone's, and ebrec reads no debug info to map them. Without it such a
    /// name is refused when an argument is asked of it.
    #[cfg_attr(feature = "cli", arg(long))]
    pub clone_args: bool,
    /// With --func: how the end of a call is caught. auto: a uprobe on each `ret` and tail
    /// jump of the function (a C++ exception through the call just leaves it unfinished), or
    /// a uretprobe for a function that calls nothing; a function whose exits cannot all be
    /// found (an indirect jump) is refused. exits: the exit uprobes even for a function that
    /// calls nothing. uretprobe: always a uretprobe, cheaper per call (a probed `ret` is
    /// single-stepped), but an exception unwinding through a probed call terminates the target.
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value = "auto"))]
    pub func_exit: FuncExitMode,
    /// Hits of a USDT probe (`.note.stapsdt`, from <sys/sdt.h>), with its numeric arguments
    /// (repeatable). SPEC: BINARY_OR_LIB:PROVIDER:NAME (or PROVIDER:NAME: every binary of the
    /// target), globs (`*`, `?`) on PROVIDER and NAME, BINARY_OR_LIB a path or a file name
    /// as --func's LIB. A probe guarded by a semaphore is enabled while recording. An
    /// argument is a number: a string (`char *`) is its address in the target, never its
    /// text. `ebrec probes BINARY` lists the probes.
    #[cfg_attr(feature = "cli", arg(long, value_name = "BINARY_OR_LIB:PROVIDER:NAME"))]
    pub usdt: Vec<String>,
    /// With --usdt: also take the user stack at each hit.
    #[cfg_attr(feature = "cli", arg(long))]
    pub usdt_stack: bool,
    /// With --usdt: also keep the text of one string argument of a probe
    /// (PROVIDER:NAME:ARG, ARG its 0-based index, as `ebrec probes` lists the arguments;
    /// repeatable), such as PostgreSQL's query text (`postgresql:query__start:0`): `ebsym
    /// requests` shows it for the slowest requests. This copies the target's memory into
    /// the trace (queries carry data): the header says so, and `ebsym strip` removes it.
    #[cfg_attr(feature = "cli", arg(long, value_name = "PROVIDER:NAME:ARG"))]
    pub usdt_string: Vec<String>,
    /// With --usdt-string: the most bytes kept of each string (1-256; longer is cut).
    #[cfg_attr(feature = "cli", arg(long, value_name = "N", default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=256)))]
    pub usdt_string_bytes: u32,
    /// With --usdt: START and DONE probes (names, or PROVIDER:NAME) that begin and end one
    /// operation on a thread, for `ebsym latency --kind usdt` (repeatable). Without it,
    /// X__start pairs with X__done (or X__end), X_start with X_end (or X_done).
    #[cfg_attr(feature = "cli", arg(long, value_name = "START,DONE"))]
    pub usdt_pair: Vec<String>,
    /// Every C++ exception thrown or rethrown, with its stack and the exception's type
    /// (`ebsym top --kind exception`): libstdc++'s USDT probes libstdcxx:throw and
    /// libstdcxx:rethrow, in every binary of the target that has them (the shared
    /// libstdc++, or a program linked with it statically). The type is recorded as the
    /// address of its type_info object and named offline from the binary's symbols: no
    /// target memory is read. Costs a trap per throw (~1-2 us), nothing when none is thrown.
    #[cfg_attr(feature = "cli", arg(long))]
    pub exceptions: bool,
    /// Request boundaries on a thread, for `ebsym requests` (the slow requests' time by
    /// cause, the tail against the median): `usdt:[BINARY_OR_LIB:]PROVIDER:START,DONE` (a
    /// USDT start/done pair, paired per thread; the start's first argument, where it has
    /// one, is the request's id) or `func:SPEC` (a function's calls, entry to return, as
    /// --func SPEC). Record the causes with it: --cpu, --offcpu, --runq. With --offcpu the
    /// kernel also splits every request's time on its thread, exactly: on CPU, run queue,
    /// off CPU (interruptible, uninterruptible), carried by the done's event; the
    /// time-weighted sample of the blocks (--offcpu-sample, 1 ms by default with --request,
    /// and inside a request the blocks under the threshold too) names that time's causes.
    /// A USDT start hit sends no event of its own: the kernel holds it (time, arguments)
    /// until the thread's done, whose event carries it (one event a request; not with
    /// --usdt-stack or --usdt-string, which need the start's own event).
    #[cfg_attr(
        feature = "cli",
        arg(long, value_name = "usdt:PROVIDER:START,DONE|func:SPEC")
    )]
    pub request: Option<String>,
    /// With --request and --offcpu: when a request is slow, so that every block of it that
    /// ends from then on is kept whole with its stacks and waker, whatever its length and the
    /// sample (tail-based detail: only the slow requests pay, and only past the threshold).
    /// auto (the default): p99 of the latest 4,096 requests done, updated each second (the
    /// first once ten requests lie past it: 1,000 done for p99); pNN[.N]: another quantile
    /// (p95, p99.9); a duration (500us, 5ms, 1s): fixed; off: the sample alone names every
    /// request's blocks.
    #[cfg_attr(
        feature = "cli",
        arg(long, value_name = "auto|pNN|DURATION|off", default_value = "auto")
    )]
    pub request_slow: RequestSlow,
    /// How user stacks are taken. auto (the default): unwound in the kernel with each
    /// binary's unwind rows (from .eh_frame, loaded once per file), and with the frame
    /// pointer in code that has no rows loaded: whole stacks with or without frame pointers,
    /// return addresses only. cfi: the rows only (a frame without rows ends the stack,
    /// marked). fp: the kernel's frame-pointer walk, the cheapest. dwarf[:BYTES]: also copy
    /// the top BYTES of the stack (default 16384, at most 32768) for ebsym to unwind offline:
    /// for code no CFI rows describe; the trace then holds the target's stack memory.
    #[cfg_attr(feature = "cli", arg(long, value_name = "MODE", default_value = "auto", value_parser = parse_stack_mode))]
    pub stack_mode: StackMode,
    /// With --stack-mode cfi|auto: most memory for the unwind rows in the kernel (suffixes
    /// k, M, G). A binary whose rows do not fit is counted and walked with the frame
    /// pointer (auto), or ends its stacks (cfi); tables no process maps any more are
    /// evicted first.
    #[cfg_attr(feature = "cli", arg(long, value_name = "SIZE", default_value = "64M", value_parser = parse_size))]
    pub cfi_memory: u64,
    /// With --stack-mode dwarf|auto: do not store the binaries' unwind tables (.eh_frame) in
    /// the trace; ebsym then needs the binaries to unwind.
    #[cfg_attr(feature = "cli", arg(long))]
    pub no_unwind_info: bool,
    /// Cap the events kept per second (all families, split evenly over the CPUs, a token
    /// bucket per CPU in BPF with a 100 ms burst); events over the cap are counted as lost
    /// (rate limit). It bounds the BPF work per event, not the uprobe trap itself.
    #[cfg_attr(feature = "cli", arg(long, value_name = "N"))]
    pub max_events_per_sec: Option<u64>,
    /// Keep ebrec's cost under PCT percent of one CPU (its BPF run time, the uprobe traps at
    /// a cost calibrated at start, and its own CPU, measured each second): above it, the
    /// family that costs most is sampled less (coarser --sample-bytes, lower --cpu Hz, higher
    /// --offcpu threshold), and uprobe families whose traps cost too much (the allocator's,
    /// --func's) pause; they come back when the cost allows. Every change is in the trace,
    /// and the reports show the effective rates and the paused periods.
    #[cfg_attr(feature = "cli", arg(long, value_name = "PCT"))]
    pub max_cpu: Option<f64>,
    /// Stop cleanly when the trace reaches SIZE bytes (suffixes k, M, G: powers of 1024),
    /// before a disk fills; with --rotate, go on in a new file instead.
    #[cfg_attr(feature = "cli", arg(long, value_name = "SIZE", value_parser = parse_size))]
    pub max_size: Option<u64>,
    /// With --max-size: when the trace is full, rename it OUTPUT.1 (older ones shift to .2,
    /// …), keep at most N of them, and go on in a new OUTPUT; each file reads on its own.
    #[cfg_attr(feature = "cli", arg(long, value_name = "N", requires = "max_size"))]
    pub rotate: Option<u32>,
    /// Stop after SECONDS.
    #[cfg_attr(feature = "cli", arg(long, value_name = "SECONDS"))]
    pub duration: Option<f64>,
    /// Size of each BPF ring buffer in bytes (a power of two, at least one page; default
    /// 8 MiB, 64 MiB with --stack-mode dwarf).
    #[cfg_attr(feature = "cli", arg(long))]
    pub ringbuf_size: Option<u32>,
    /// Most user frames per stack (at most 127).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 127, value_parser = clap::value_parser!(u32).range(1..=127)))]
    pub stack_depth: u32,
    /// No live status line.
    #[cfg_attr(feature = "cli", arg(short, long))]
    pub quiet: bool,
    /// Measure each BPF program's run time (kernel BPF stats) for the exit summary and the
    /// trace's Stats; the summary adds what the stats do not see (the tracepoints' dispatch,
    /// the uprobe traps, each timed here) and ebrec's own CPU, and prints the sum. They cost
    /// every BPF program run on the machine two clock reads (about 30 ns here), so they are
    /// off unless asked for; --max-cpu turns them on (it measures with them).
    #[cfg_attr(feature = "cli", arg(long))]
    pub bpf_stats: bool,
    /// How ebrec's own threads are scheduled. batch: never preempts the traced service's
    /// threads when it wakes, yet gets its fair share of CPU; idle: runs only on CPUs nothing
    /// else wants (on a saturated machine the ring buffers then fill: events lost, counted);
    /// normal: as any process. A launched command keeps its own policy.
    #[cfg_attr(
        feature = "cli",
        arg(long, value_name = "POLICY", value_enum, default_value = "batch")
    )]
    pub sched: SchedPolicy,
    /// The command to start and trace from its first instruction.
    #[cfg_attr(feature = "cli", arg(last = true, value_name = "CMD"))]
    pub command: Vec<OsString>,
}

impl RecordConfig {
    /// The unwind rows' tables are loaded (`--cfi-memory` applies): the in-kernel CFI walk,
    /// and the lock holders' and off-CPU wakers' stacks in every mode.
    pub fn uses_cfi_tables(&self) -> bool {
        self.stack_mode.in_kernel_cfi() || self.lock.is_some() || self.offcpu.is_some()
    }

    /// `--alloc --alloc-sampler preload`: the shim's mean bytes between samples.
    pub fn preload_period(&self) -> Option<u64> {
        (self.alloc.is_some() && self.alloc_sampler == AllocSampler::Preload)
            .then(|| self.sample_bytes.unwrap_or(crate::preload::DEFAULT_PERIOD))
    }
}

/// --ringbuf-size, else 8 MiB, or 64 MiB when events carry stack copies (up to 32 KiB each).
pub fn ringbuf_bytes(a: &RecordConfig) -> u32 {
    a.ringbuf_size.unwrap_or(match a.stack_mode {
        StackMode::Fp | StackMode::Cfi | StackMode::Auto => 8 << 20,
        StackMode::Dwarf(_) => 64 << 20,
    })
}

/// `on` or `off`.
pub fn parse_on_off(s: &str) -> std::result::Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("{s:?}: expected on or off")),
    }
}

pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        None => (t, 1u64),
        Some((i, _)) => {
            let m = match t[i..].to_ascii_lowercase().trim_end_matches(['b', 'i']) {
                "k" => 1 << 10,
                "m" => 1 << 20,
                "g" => 1 << 30,
                "" => 1,
                _ => return Err(format!("'{s}': a size is a number with k, M or G")),
            };
            (&t[..i], m)
        }
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("'{s}': a size is a number with k, M or G"))?;
    let v = n
        .checked_mul(mult)
        .ok_or_else(|| format!("'{s}' is too large"))?;
    if v < 64 << 10 {
        return Err(format!("'{s}': at least 64k"));
    }
    Ok(v)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackMode {
    Fp,
    Dwarf(u32),
    Cfi,
    Auto,
}

impl StackMode {
    /// The walk in the kernel with unwind rows (cfi, auto).
    pub fn in_kernel_cfi(self) -> bool {
        matches!(self, StackMode::Cfi | StackMode::Auto)
    }
}

impl std::fmt::Display for StackMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StackMode::Fp => write!(f, "fp"),
            StackMode::Dwarf(b) => write!(f, "dwarf:{b}"),
            StackMode::Cfi => write!(f, "cfi"),
            StackMode::Auto => write!(f, "auto"),
        }
    }
}

/// `--sched`: the scheduling policy of ebrec's own threads (record/src/sched.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum SchedPolicy {
    #[default]
    Batch,
    Idle,
    Normal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum FuncExitMode {
    Auto,
    Exits,
    Uretprobe,
}

pub fn parse_stack_mode(s: &str) -> std::result::Result<StackMode, String> {
    let (mode, bytes) = match s.split_once(':') {
        Some((m, b)) => (m, Some(b)),
        None => (s, None),
    };
    let bytes = match bytes {
        None => 16384,
        Some(b) => {
            let n: u32 = b
                .parse()
                .map_err(|_| format!("'{b}' is not a number of bytes"))?;
            if !(512..=32768).contains(&n) {
                return Err(format!(
                    "the stack copy must be 512 to 32768 bytes (got {n})"
                ));
            }
            n & !7
        }
    };
    match mode {
        "fp" if bytes == 16384 => Ok(StackMode::Fp),
        "cfi" if bytes == 16384 => Ok(StackMode::Cfi),
        "auto" if bytes == 16384 => Ok(StackMode::Auto),
        "dwarf" => Ok(StackMode::Dwarf(bytes)),
        _ => Err(format!("'{s}': use auto, cfi, fp or dwarf[:BYTES]")),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum AllocProbesArg {
    Auto,
    Session,
    Classic,
}

/// Whether the allocator probes run as uprobe sessions for `arg` (`ProbeConfig`'s
/// `alloc_sessions`, with the uprobe sampler).
pub fn use_sessions(arg: AllocProbesArg) -> bool {
    match arg {
        AllocProbesArg::Classic => false,
        AllocProbesArg::Session => true,
        AllocProbesArg::Auto => crate::features::uprobe_sessions(),
    }
}

/// `--alloc-sampler`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum AllocSampler {
    Uprobe,
    Preload,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum LockModeArg {
    Futex,
    Uprobe,
}
