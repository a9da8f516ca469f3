//! `ebrec`: records allocations, frees and lock contention of C++ processes with eBPF into
//! an ebtrace trace file. It never reads DWARF and never symbolizes.
mod cli;
mod doctor;
mod elf;
mod funcs;
mod kallsyms;
mod perf;
mod placement;
mod probes;
mod procfs;
mod session;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use ebtrace_format::proto::{Header, KeyValue, Trailer};
use ebtrace_format::{TraceWriter, WriterOptions};
use probes::{LockMode, ProbeConfig, Probes};
use std::ffi::{CString, OsString};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(
    name = "ebrec",
    version,
    about = "Record allocations, leaks and lock contention of C++ processes with eBPF"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Record events of running processes (-p), of a command it starts (-- CMD), or of all.
    #[command(after_help = "Examples:
  ebrec record -o trace.pb.zst --alloc=4096 -p 1234
  ebrec record -o trace.pb.zst --alloc --lock=100 -- ./server --port 8080
  ebrec record -o trace.pb.zst --alloc=1024 --sample 10 --all --duration 30
  ebrec record -o trace.pb.zst --lock=50 --lock-mode uprobe -p 1234")]
    Record(Box<RecordArgs>),
    /// List the functions `--func` would attach to, from the target's symbol tables.
    Probes(cli::probes::ProbesArgs),
    /// Check that this machine (and with -p, that process) can be recorded: each check one
    /// line, `ok`, `warn` or `FAIL`, with the fix. Exits 1 when a check FAILs.
    #[command(after_help = "Examples:
  ebrec doctor
  ebrec doctor -p 1234            # also its binaries: frame pointers, symbols, --stack-mode
  ebrec doctor -p 1234 --json")]
    Doctor(doctor::DoctorArgs),
}

#[derive(clap::Args, Debug)]
struct RecordArgs {
    /// Trace file to write (created 0600).
    #[arg(short, long, default_value = "trace.pb.zst")]
    output: PathBuf,
    /// Trace this running process (repeatable).
    #[arg(short, long = "pid")]
    pid: Vec<u32>,
    /// Trace every process (uprobes then cost every process a trap per call).
    #[arg(long)]
    all: bool,
    /// Allocations of at least MIN_BYTES (default 0: all), with frees of traced blocks.
    #[arg(long, value_name = "MIN_BYTES", num_args = 0..=1, require_equals = true, default_missing_value = "0")]
    alloc: Option<u64>,
    /// The allocator library to probe instead of the one found in the target (jemalloc,
    /// tcmalloc); repeatable.
    #[arg(long, value_name = "PATH")]
    alloc_lib: Vec<PathBuf>,
    /// Do not probe free: no leak report, but one uprobe trap less per allocation and free.
    #[arg(long)]
    no_free: bool,
    /// Keep one allocation in N, at random.
    #[arg(long, value_name = "N", default_value_t = 1)]
    sample: u32,
    /// Lock waits of at least MIN_US microseconds (default 0: all contended waits).
    #[arg(long, value_name = "MIN_US", num_args = 0..=1, require_equals = true, default_missing_value = "0")]
    lock: Option<u64>,
    /// futex: contended waits only, at no cost for uncontended locks; uprobe: exact wait and
    /// hold of every pthread_mutex lock (a trap per lock call).
    #[arg(long, value_enum, default_value = "futex")]
    lock_mode: LockModeArg,
    /// On-CPU samples at HZ per CPU (default 99), with user and kernel stacks.
    #[arg(long, value_name = "HZ", num_args = 0..=1, require_equals = true, default_missing_value = "99")]
    cpu: Option<u64>,
    /// Off-CPU blocks of at least MIN_US microseconds (default 100), with the blocking stack
    /// and the waker.
    #[arg(long, value_name = "MIN_US", num_args = 0..=1, require_equals = true, default_missing_value = "100")]
    offcpu: Option<u64>,
    /// Memory growth: brk, mmap, munmap and first-touch page faults, with user stacks.
    #[arg(long)]
    memgrowth: bool,
    /// Calls of a function, with their duration and the stack at entry (repeatable). SPEC:
    /// a demangled C++ name or glob (`ns::Class::method`, `ns::*::get*`), a mangled name,
    /// `LIB:SYMBOL` or `BINARY:0xADDR`; `:MIN_US` keeps only calls that long. `ebrec probes`
    /// lists what a SPEC attaches to.
    #[arg(long, value_name = "SPEC[:MIN_US]")]
    func: Vec<String>,
    /// With --func: also keep the first N integer arguments of each call (0-6). This copies
    /// data of the target (pointers, sizes, ids) into the trace.
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=6))]
    args: u32,
    /// With --func: how the end of a call is caught. auto: a uprobe on each `ret` and tail
    /// jump of the function (a C++ exception through the call just leaves it unfinished), or
    /// a uretprobe for a function that calls nothing; a function whose exits cannot all be
    /// found (an indirect jump) is refused. exits: the exit uprobes even for a function that
    /// calls nothing. uretprobe: always a uretprobe, cheaper per call (a probed `ret` is
    /// single-stepped), but an exception unwinding through a probed call terminates the target.
    #[arg(long, value_enum, default_value = "auto")]
    func_exit: FuncExitMode,
    /// How user stacks are taken: fp (frame-pointer walk in the kernel), dwarf[:BYTES] (also
    /// copy the top BYTES of the stack, default 16384, at most 32768, for ebsym to unwind
    /// with the binaries' CFI: whole stacks through code without frame pointers), auto[:BYTES]
    /// (dwarf only for processes whose executable lacks frame pointers).
    #[arg(long, value_name = "MODE", default_value = "fp", value_parser = parse_stack_mode)]
    stack_mode: StackMode,
    /// With --stack-mode dwarf|auto: do not store the binaries' unwind tables (.eh_frame) in
    /// the trace; ebsym then needs the binaries to unwind.
    #[arg(long)]
    no_unwind_info: bool,
    /// Cap the events kept per second (all families, split evenly over the CPUs, a token
    /// bucket per CPU in BPF with a 100 ms burst); events over the cap are counted as lost
    /// (rate limit). It bounds the BPF work per event, not the uprobe trap itself.
    #[arg(long, value_name = "N")]
    max_events_per_sec: Option<u64>,
    /// Stop cleanly when the trace reaches SIZE bytes (suffixes k, M, G: powers of 1024),
    /// before a disk fills; with --rotate, go on in a new file instead.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    max_size: Option<u64>,
    /// With --max-size: when the trace is full, rename it OUTPUT.1 (older ones shift to .2,
    /// …), keep at most N of them, and go on in a new OUTPUT; each file reads on its own.
    #[arg(long, value_name = "N", requires = "max_size")]
    rotate: Option<u32>,
    /// Stop after SECONDS.
    #[arg(long, value_name = "SECONDS")]
    duration: Option<f64>,
    /// Size of each BPF ring buffer in bytes (a power of two, at least one page; default
    /// 8 MiB, 64 MiB with --stack-mode dwarf or auto).
    #[arg(long)]
    ringbuf_size: Option<u32>,
    /// Most user frames per stack (at most 127).
    #[arg(long, default_value_t = 127, value_parser = clap::value_parser!(u32).range(1..=127))]
    stack_depth: u32,
    /// No live status line.
    #[arg(short, long)]
    quiet: bool,
    /// The command to start and trace from its first instruction.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<OsString>,
}

/// --ringbuf-size, else 8 MiB, or 64 MiB when events carry stack copies (up to 32 KiB each).
fn ringbuf_bytes(a: &RecordArgs) -> u32 {
    a.ringbuf_size.unwrap_or(match a.stack_mode {
        StackMode::Fp => 8 << 20,
        StackMode::Dwarf(_) | StackMode::Auto(_) => 64 << 20,
    })
}

fn parse_size(s: &str) -> std::result::Result<u64, String> {
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

/// OUTPUT with `.k` before its `.pb.zst` (or at the end): the k-th older file of a rotation.
fn rotated_name(output: &Path, k: u32) -> PathBuf {
    let s = output.to_string_lossy();
    match s.strip_suffix(".pb.zst") {
        Some(stem) => PathBuf::from(format!("{stem}.{k}.pb.zst")),
        None => PathBuf::from(format!("{s}.{k}")),
    }
}

/// Shifts OUTPUT.1 … OUTPUT.(keep-1) up by one (dropping OUTPUT.keep) and moves OUTPUT to
/// OUTPUT.1.
fn shift_rotated(output: &Path, keep: u32) -> Result<()> {
    if keep == 0 {
        std::fs::remove_file(output)?;
        return Ok(());
    }
    let _ = std::fs::remove_file(rotated_name(output, keep));
    for k in (1..keep).rev() {
        let from = rotated_name(output, k);
        if from.exists() {
            std::fs::rename(&from, rotated_name(output, k + 1))?;
        }
    }
    std::fs::rename(output, rotated_name(output, 1))?;
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StackMode {
    Fp,
    Dwarf(u32),
    Auto(u32),
}

impl std::fmt::Display for StackMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StackMode::Fp => write!(f, "fp"),
            StackMode::Dwarf(b) => write!(f, "dwarf:{b}"),
            StackMode::Auto(b) => write!(f, "auto:{b}"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum FuncExitMode {
    Auto,
    Exits,
    Uretprobe,
}

/// How the end of `m`'s calls is caught (see `--func-exit` and `placement::exits`).
fn func_exit(m: &funcs::FuncMatch, mode: FuncExitMode) -> Result<probes::FuncExit> {
    if mode == FuncExitMode::Uretprobe {
        return Ok(probes::FuncExit::Uretprobe);
    }
    let what = || format!("--func {}: {}", m.spec, m.demangled);
    let read = |off: u64, size: u64| {
        probes::read_at(&m.path, off, size)
            .with_context(|| format!("{}: cannot read its code in {}", what(), m.binary))
    };
    if m.size == 0 || m.size > 16 << 20 {
        bail!(
            "{}: its size is unknown, so its exits cannot be found; --func-exit uretprobe \
             probes its return instead (an exception unwinding through it then terminates \
             the target)",
            what()
        );
    }
    let body = read(m.file_offset, m.size)?;
    let cold = match m.cold {
        Some((va, off, size)) if size > 0 && size <= 16 << 20 => Some((va, off, read(off, size)?)),
        _ => None,
    };
    let mut parts = vec![(m.vaddr, body.as_slice())];
    if let Some((va, _, code)) = &cold {
        parts.push((*va, code.as_slice()));
    }
    let e = placement::exits(&parts);
    if !e.calls_out && mode == FuncExitMode::Auto {
        // Nothing can unwind through a function that calls nothing: the uretprobe is safe.
        return Ok(probes::FuncExit::Uretprobe);
    }
    if e.sites.is_empty() && e.ambiguous.is_none() {
        bail!(
            "{}: it never returns (no ret and no tail jump in its code): there is no call \
             duration to measure",
            what()
        );
    }
    if let Some((at, what_is_there)) = e.ambiguous {
        let place = match &cold {
            Some((cva, _, code)) if at >= *cva && at - cva < code.len() as u64 => {
                format!("+{:#x} of its .cold part", at - cva)
            }
            _ => format!("+{:#x}", at.wrapping_sub(m.vaddr)),
        };
        bail!(
            "{}: it may call other code, so a C++ exception may unwind through it, and its exits \
             cannot all be found ({what_is_there} at {place}); --func-exit uretprobe probes its \
             return instead (an exception unwinding through it then terminates the target)",
            what()
        );
    }
    let offset = |va: u64| match &cold {
        Some((cva, coff, code)) if va >= *cva && va - cva < code.len() as u64 => coff + (va - cva),
        _ => m.file_offset + (va - m.vaddr),
    };
    Ok(probes::FuncExit::Sites(
        e.sites
            .iter()
            .map(|&va| (offset(va), e.tails.contains(&va)))
            .collect(),
    ))
}

fn parse_stack_mode(s: &str) -> std::result::Result<StackMode, String> {
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
        "dwarf" => Ok(StackMode::Dwarf(bytes)),
        "auto" => Ok(StackMode::Auto(bytes)),
        _ => Err(format!("'{s}': use fp, dwarf[:BYTES] or auto[:BYTES]")),
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum LockModeArg {
    Futex,
    Uprobe,
}

static SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNAL.store(sig, Ordering::SeqCst);
}

fn main() {
    let cli = Cli::parse();
    let r = match cli.command {
        Command::Record(a) => record(*a),
        Command::Probes(a) => cli::probes::probes(a),
        Command::Doctor(a) => doctor::run(a),
    };
    if let Err(e) = r {
        let chain: Vec<String> = e.chain().map(|c| c.to_string()).collect();
        eprintln!("ebrec: {}", chain.join(": "));
        std::process::exit(1);
    }
}

/// The launched command, held on a pipe until the probes are attached.
struct Launched {
    pid: u32,
    release: Option<std::os::fd::OwnedFd>,
    exe: PathBuf,
}

fn find_in_path(cmd: &OsString) -> Option<PathBuf> {
    let p = Path::new(cmd);
    if p.components().count() > 1 {
        return p.is_file().then(|| p.to_path_buf());
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join(p))
            .find(|c| c.is_file())
    })
}

fn launch(cmd: &[OsString]) -> Result<Launched> {
    use std::os::fd::FromRawFd;
    use std::os::unix::ffi::OsStrExt;
    let exe = find_in_path(&cmd[0])
        .with_context(|| format!("command not found: {}", cmd[0].to_string_lossy()))?;
    let args: Vec<CString> = cmd
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<_, _>>()?;
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let file = CString::new(exe.as_os_str().as_bytes())?;
    let mut fds = [0; 2];
    // SAFETY: fds is a valid out array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        bail!("pipe: {}", std::io::Error::last_os_error());
    }
    // SAFETY: ebrec is single-threaded here; the child only calls async-signal-safe
    // functions (read, close, execv, write, _exit) before exec.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        bail!("fork: {}", std::io::Error::last_os_error());
    }
    if pid == 0 {
        unsafe {
            libc::close(fds[1]);
            let mut b = 0u8;
            // Wait until the parent has attached (it closes its end).
            while libc::read(fds[0], (&mut b as *mut u8).cast(), 1) < 0 {}
            libc::close(fds[0]);
            libc::execv(file.as_ptr(), argv.as_ptr());
            let msg = b"ebrec: cannot execute the command\n";
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::_exit(127);
        }
    }
    // SAFETY: fds[0] and fds[1] are ours; the child has its own copies.
    unsafe { libc::close(fds[0]) };
    let release = unsafe { std::os::fd::OwnedFd::from_raw_fd(fds[1]) };
    Ok(Launched {
        pid: pid as u32,
        release: Some(release),
        exe,
    })
}

fn header(a: &RecordArgs) -> Header {
    let (host, release, arch) = procfs::uname();
    let mut options = Vec::new();
    let mut opt = |k: &str, v: String| {
        options.push(KeyValue {
            key: k.into(),
            value: v,
        })
    };
    if let Some(m) = a.alloc {
        opt("alloc", m.to_string());
        opt("sample", a.sample.to_string());
        if a.no_free {
            opt("no-free", "true".into());
        }
    }
    if let Some(m) = a.lock {
        opt("lock", m.to_string());
        opt("lock-mode", format!("{:?}", a.lock_mode).to_lowercase());
    }
    if let Some(hz) = a.cpu {
        opt("cpu", hz.to_string());
    }
    if let Some(us) = a.offcpu {
        opt("offcpu", us.to_string());
    }
    if a.memgrowth {
        opt("memgrowth", "true".into());
    }
    if let Some(n) = a.max_events_per_sec {
        opt("max-events-per-sec", n.to_string());
    }
    if let Some(n) = a.max_size {
        opt("max-size", n.to_string());
    }
    if let Some(n) = a.rotate {
        opt("rotate", n.to_string());
    }
    for f in &a.func {
        opt("func", f.clone());
    }
    if a.args > 0 {
        opt("args", a.args.to_string());
    }
    for l in &a.alloc_lib {
        opt("alloc-lib", l.display().to_string());
    }
    opt("stack-mode", a.stack_mode.to_string());
    if a.no_unwind_info {
        opt("no-unwind-info", "true".into());
    }
    opt("stack-depth", a.stack_depth.to_string());
    opt("ringbuf-size", ringbuf_bytes(a).to_string());
    if a.all {
        opt("all", "true".into());
    }
    Header {
        format_version: 0,
        recorder_version: format!("ebrec {}", env!("CARGO_PKG_VERSION")),
        hostname: host,
        kernel_release: release,
        arch,
        page_size: procfs::page_size() as u32,
        cpu_count: procfs::possible_cpus().unwrap_or(1) as u32,
        boot_id: procfs::boot_id(),
        clock: "boottime".into(),
        options,
        argv: std::env::args().collect(),
        start_time_ns: procfs::clock_ns(libc::CLOCK_BOOTTIME),
        start_realtime_ns: procfs::clock_ns(libc::CLOCK_REALTIME),
        clock_ticks_per_sec: procfs::clock_ticks() as u32,
    }
}

fn record(a: RecordArgs) -> Result<()> {
    let targets =
        usize::from(!a.pid.is_empty()) + usize::from(a.all) + usize::from(!a.command.is_empty());
    if targets != 1 {
        bail!("say what to trace: -p PID (repeatable), --all, or -- CMD ARGS...");
    }
    if a.alloc.is_none()
        && a.lock.is_none()
        && a.cpu.is_none()
        && a.offcpu.is_none()
        && !a.memgrowth
        && a.func.is_empty()
    {
        bail!("say what to record: --alloc[=MIN_BYTES], --lock[=MIN_US], --cpu[=HZ], --offcpu[=MIN_US], --memgrowth, --func SPEC");
    }
    let func_specs: Vec<funcs::FuncSpec> =
        a.func.iter().map(|s| s.parse()).collect::<Result<_>>()?;
    if !func_specs.is_empty() && a.all {
        bail!("--func needs targets to resolve its names in: use -p PID or -- CMD, not --all");
    }
    if a.args > 0 && func_specs.is_empty() {
        bail!("--args applies to --func calls: add --func SPEC");
    }
    if let Some(hz) = a.cpu {
        if hz == 0 || hz > 100_000 {
            bail!("--cpu=HZ must be between 1 and 100000 (got {hz})");
        }
    }
    let rb = ringbuf_bytes(&a);
    if !rb.is_power_of_two() || (rb as usize) < procfs::page_size() {
        bail!(
            "--ringbuf-size must be a power of two of at least one page ({} bytes)",
            procfs::page_size()
        );
    }
    for &pid in &a.pid {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            bail!("no process with pid {pid}");
        }
    }
    let lock_mode = match a.lock_mode {
        LockModeArg::Futex => LockMode::Futex,
        LockModeArg::Uprobe => LockMode::Uprobe,
    };
    let cfg = ProbeConfig {
        alloc_min: a.alloc,
        sample_every: a.sample.max(1),
        lock_min_ns: a.lock.map(|us| us * 1000),
        lock_mode,
        stack_depth: a.stack_depth,
        ringbuf_bytes: rb,
        all: a.all,
        cpu_hz: a.cpu,
        offcpu_min_ns: a.offcpu.map(|us| us * 1000),
        memgrowth: a.memgrowth,
        func_args: a.args,
        func: !func_specs.is_empty(),
        copy_bytes: match a.stack_mode {
            StackMode::Fp => 0,
            StackMode::Dwarf(b) | StackMode::Auto(b) => b,
        },
        copy_all: matches!(a.stack_mode, StackMode::Dwarf(_)),
        rate_per_cpu: a.max_events_per_sec.map_or(0, |n| {
            let cpus = procfs::online_cpus().map_or(1, |c| c.len().max(1)) as u64;
            n.div_ceil(cpus).max(1)
        }),
    };

    let mut launched = if a.command.is_empty() {
        None
    } else {
        Some(launch(&a.command)?)
    };
    let result = record_with(&a, &cfg, &func_specs, &mut launched);
    if let Some(l) = &mut launched {
        // Never leave the command blocked: release it even when setting up failed.
        if result.is_err() {
            // SAFETY: kill has no memory preconditions.
            unsafe { libc::kill(l.pid as i32, libc::SIGKILL) };
            l.release.take();
            let mut st = 0;
            unsafe { libc::waitpid(l.pid as i32, &mut st, 0) };
        }
    }
    result
}

fn record_with(
    a: &RecordArgs,
    cfg: &ProbeConfig,
    func_specs: &[funcs::FuncSpec],
    launched: &mut Option<Launched>,
) -> Result<()> {
    let mut alloc_obj = std::mem::MaybeUninit::uninit();
    let mut lock_obj = std::mem::MaybeUninit::uninit();
    let mut profile_obj = std::mem::MaybeUninit::uninit();
    perf::remove_stale_probes();
    let mut probes = Probes::load(cfg, &mut alloc_obj, &mut lock_obj, &mut profile_obj)?;

    // Where to probe, and for whom.
    let mut pids: Vec<i32> = a.pid.iter().map(|&p| p as i32).collect();
    if let Some(l) = launched.as_ref() {
        pids.push(l.pid as i32);
    }
    if a.all {
        pids = vec![-1];
    }
    // --stack-mode auto: stack copies for the targets whose executable lacks frame pointers.
    if matches!(a.stack_mode, StackMode::Auto(_)) {
        for &pid in &pids {
            let exe = match launched.as_ref() {
                Some(l) if l.pid as i32 == pid => l.exe.clone(),
                _ if pid > 0 => PathBuf::from(format!("/proc/{pid}/exe")),
                _ => continue,
            };
            if elf::has_frame_pointers(&exe) == Some(false) {
                probes.set_copy_pid(pid as u32)?;
                if !a.quiet {
                    eprintln!(
                        "ebrec: {} has no frame pointers: copying its stacks (--stack-mode auto)",
                        exe.display()
                    );
                }
            }
        }
    }
    // --func functions: (match, build-id), the id being the index + 1.
    let mut probed: Vec<(funcs::FuncMatch, Vec<u8>)> = Vec::new();
    for &pid in &pids {
        let (lookup_pid, exe) = match launched.as_ref() {
            Some(l) if l.pid as i32 == pid => (None, Some(l.exe.clone())),
            _ if pid == -1 => (None, None),
            _ => (Some(pid as u32), None),
        };
        let mut alloc_sites = Vec::new();
        if cfg.alloc_min.is_some() {
            let libs = if a.alloc_lib.is_empty() {
                probes::find_provider(lookup_pid, exe.as_deref(), "malloc")
                    .context("no allocator to probe (give one with --alloc-lib PATH)")?
            } else {
                a.alloc_lib.clone()
            };
            for lib in libs {
                alloc_sites.extend(probes::sites(
                    &lib,
                    probes::ALLOC_FUNCS,
                    probes::ALLOC_KEEP,
                )?);
            }
            if a.no_free {
                alloc_sites.retain(|s| s.symbol != "free");
            }
        }
        let mut lock_sites = Vec::new();
        if cfg.lock_min_ns.is_some() && cfg.lock_mode == LockMode::Uprobe {
            for lib in probes::find_provider(lookup_pid, exe.as_deref(), "pthread_mutex_lock")? {
                lock_sites.extend(probes::sites(&lib, probes::LOCK_FUNCS, probes::LOCK_KEEP)?);
            }
            if lock_sites.is_empty() {
                bail!("no pthread_mutex_lock to probe in the target");
            }
        }
        probes.attach_uprobes(&alloc_sites, &lock_sites, pid)?;
        if !func_specs.is_empty() {
            let bins = match (&lookup_pid, &exe) {
                (Some(p), _) => funcs::Binaries::of_pid(*p)?,
                (None, Some(exe)) => funcs::Binaries::of_command(exe)?,
                (None, None) => bail!("--func needs a target process"),
            };
            let mut sites = Vec::new();
            for m in funcs::resolve_all(&bins, func_specs)? {
                // One id per function, whichever targets share it.
                let id = match probed
                    .iter()
                    .position(|(p, _)| p.path == m.path && p.vaddr == m.vaddr)
                {
                    Some(i) => i as u64 + 1,
                    None => {
                        probed.push((m.clone(), crate::elf::build_id(&m.path).unwrap_or_default()));
                        probed.len() as u64
                    }
                };
                if !a.quiet {
                    eprintln!("ebrec: --func {}: {m}", m.spec);
                }
                let exit = func_exit(&m, a.func_exit)?;
                sites.push(probes::FuncSite {
                    id,
                    exit,
                    site: probes::Site::new(
                        &m.path,
                        m.demangled.clone(),
                        m.file_offset,
                        m.size,
                        &placement::ARGS,
                    ),
                    min_ns: m.min_ns,
                });
            }
            probes.attach_funcs(&sites, pid)?;
        }
        if pid > 0 {
            probes.add_target(pid as u32)?;
        }
    }
    if !a.quiet {
        for s in &probes.attached {
            eprintln!("ebrec: attached {s}");
        }
        if cfg.alloc_min.is_some() {
            eprintln!("ebrec: note: every allocator call of the targets now pays a uprobe trap, whatever --alloc's threshold");
        }
        if cfg.lock_min_ns.is_some() && cfg.lock_mode == LockMode::Uprobe {
            eprintln!("ebrec: note: --lock-mode uprobe costs a trap at every pthread_mutex lock and unlock, contended or not");
        }
    }

    // Side band: maps, forks, execs, exits, as they happen.
    let mut side = perf::SideBandReader::default();
    for &pid in &pids {
        side.add(pid, 64).context("opening the perf side band")?;
    }

    let mut w = TraceWriter::create(&a.output, header(a), WriterOptions::default())
        .with_context(|| format!("cannot create {}", a.output.display()))?;
    let _ = &mut w;
    let probes_ref = &probes;
    let mut s = session::Session::new(w, probes_ref, !a.all);
    s.copies = cfg.copy_bytes > 0;
    s.auto_copies = matches!(a.stack_mode, StackMode::Auto(_));
    s.unwind_info = cfg.copy_bytes > 0 && !a.no_unwind_info;
    s.clock_sync()?;
    for (i, (m, bid)) in probed.iter().enumerate() {
        s.probed_function(i as u64 + 1, m, bid)?;
    }
    let now = procfs::clock_ns(libc::CLOCK_BOOTTIME);
    for &pid in &a.pid {
        s.snapshot(pid, now)?;
        s.live.insert(pid);
    }
    if let Some(l) = launched.as_ref() {
        s.live.insert(l.pid);
        s.launched = Some(l.pid);
    }

    let pending = std::rc::Rc::new(std::cell::RefCell::new(Vec::<u8>::with_capacity(1 << 20)));
    let mut rbb = libbpf_rs::RingBufferBuilder::new();
    let push = |p: std::rc::Rc<std::cell::RefCell<Vec<u8>>>| {
        move |data: &[u8]| -> i32 {
            let mut b = p.borrow_mut();
            b.extend_from_slice(&(data.len() as u32).to_ne_bytes());
            b.extend_from_slice(data);
            0
        }
    };
    if let Some(al) = &probes_ref.alloc {
        rbb.add(&al.maps.events, push(pending.clone()))?;
    }
    if let Some(lk) = &probes_ref.lock {
        rbb.add(&lk.maps.events, push(pending.clone()))?;
    }
    if let Some(pr) = &probes_ref.profile {
        rbb.add(&pr.maps.events, push(pending.clone()))?;
    }
    let rb = rbb.build()?;

    // SAFETY: installing a handler that only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    // The header and the targets reach the disk now: a recorder killed in its first second
    // still leaves a file that says what it was recording.
    s.w.flush()?;
    // Tests and scripts wait for this line before starting the workload of a -p target.
    eprintln!(
        "ebrec: recording to {} (Ctrl-C to stop)",
        a.output.display()
    );
    if let Some(l) = launched.as_mut() {
        l.release.take(); // closing our end lets the command exec
    }

    let started = Instant::now();
    let deadline = a.duration.map(|d| started + Duration::from_secs_f64(d));
    let tty = std::io::stderr().is_terminal() && !a.quiet;
    let mut last_stats = Instant::now();
    let mut last_sync = Instant::now();
    let mut last_kept = 0u64;
    let mut rotations = 0u32;
    let stop_reason;
    loop {
        std::thread::sleep(Duration::from_millis(10));
        session::drain_once(&mut s, &rb, &pending, &mut side)?;
        if let Some(l) = launched.as_ref() {
            let mut st = 0;
            // SAFETY: st is a valid out pointer.
            let r = unsafe { libc::waitpid(l.pid as i32, &mut st, libc::WNOHANG) };
            if r == l.pid as i32 {
                let code = if libc::WIFEXITED(st) {
                    libc::WEXITSTATUS(st)
                } else {
                    128 + libc::WTERMSIG(st)
                };
                session::drain_once(&mut s, &rb, &pending, &mut side)?;
                s.launched_exited(l.pid, code)?;
            }
        }
        for &pid in &a.pid {
            // SAFETY: signal 0 only checks existence.
            if s.live.contains(&pid) && unsafe { libc::kill(pid as i32, 0) } != 0 {
                s.live.remove(&pid);
            }
        }
        s.w.flush_if_due()?;
        if let Some(max) = a.max_size {
            if s.w.stats().bytes_written >= max {
                let Some(keep) = a.rotate else {
                    stop_reason = "max size".to_string();
                    break;
                };
                // A new file: the old one ends with its trailer and is shifted to .1.
                let now = procfs::clock_ns(libc::CLOCK_BOOTTIME);
                let families = s.stats(now)?;
                let trailer = Trailer {
                    end_time_ns: now,
                    end_realtime_ns: procfs::clock_ns(libc::CLOCK_REALTIME),
                    stop_reason: "rotated".into(),
                    families,
                    ..Default::default()
                };
                let tmp = a.output.with_extension("next");
                let next = TraceWriter::create(&tmp, header(a), WriterOptions::default())
                    .with_context(|| format!("cannot create {}", tmp.display()))?;
                s.rotate(next, trailer, now)?;
                s.w.flush()?;
                shift_rotated(&a.output, keep)?;
                std::fs::rename(&tmp, &a.output)?;
                rotations += 1;
            }
        }
        let sig = SIGNAL.load(Ordering::SeqCst);
        if sig != 0 {
            stop_reason = format!(
                "signal {}",
                if sig == libc::SIGINT {
                    "SIGINT"
                } else {
                    "SIGTERM"
                }
            );
            break;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            stop_reason = "duration".to_string();
            break;
        }
        if !a.all && s.live.is_empty() {
            stop_reason = "targets exited".to_string();
            break;
        }
        if last_stats.elapsed() >= Duration::from_secs(1) {
            last_stats = Instant::now();
            let fam = s.stats(procfs::clock_ns(libc::CLOCK_BOOTTIME))?;
            if tty {
                let kept: u64 = s.kept.0.iter().sum();
                let lost: u64 = fam.iter().map(|f| f.lost).sum();
                eprint!(
                    "\rebrec: {:>6.1} s  {:>8} events  {:>7.0}/s  {:>7.2} MiB  lost {}   ",
                    started.elapsed().as_secs_f64(),
                    kept,
                    (kept - last_kept) as f64,
                    s.w.stats().bytes_written as f64 / (1 << 20) as f64,
                    lost
                );
                last_kept = kept;
            }
        }
        if last_sync.elapsed() >= Duration::from_secs(10) {
            last_sync = Instant::now();
            s.clock_sync()?;
        }
    }
    if tty {
        eprintln!();
    }
    // Last events, then the final counters and the trailer.
    std::thread::sleep(Duration::from_millis(20));
    session::drain_once(&mut s, &rb, &pending, &mut side)?;
    let end = procfs::clock_ns(libc::CLOCK_BOOTTIME);
    s.clock_sync()?;
    let families = s.stats(end)?;
    let programs = probes_ref.program_stats();
    let elapsed = started.elapsed().as_secs_f64();
    let processes = s.processes();
    let malformed = s.malformed;
    let sideband_lost = s.sideband_lost();
    let (copies_missing, waker_frames_dropped) = (s.copies_missing, s.waker_frames_dropped);
    let no_kallsyms = s.kernel.unavailable();
    let evictions = s.w.stats().stack_evictions;
    let out = s.w.finish(Some(Trailer {
        end_time_ns: end,
        end_realtime_ns: procfs::clock_ns(libc::CLOCK_REALTIME),
        stop_reason: stop_reason.clone(),
        families: families.clone(),
        ..Default::default()
    }))?;
    drop(out);
    let bytes = std::fs::metadata(&a.output).map(|m| m.len()).unwrap_or(0);

    // What it cost.
    eprintln!(
        "ebrec: {} after {:.1} s: {} processes, {} ({:.2} MiB)",
        stop_reason,
        elapsed,
        processes,
        a.output.display(),
        bytes as f64 / (1 << 20) as f64
    );
    for f in &families {
        let name = ebtrace_format::family::by_number(f.family).map_or("other", |f| f.name);
        eprintln!(
            "ebrec:   {name:<9} kept {:>9}  lost {:>7}  filtered {:>9}  probe hits {:>10}",
            f.kept, f.lost, f.filtered, f.hits
        );
    }
    if evictions > 0 {
        eprintln!("ebrec:   stack table emptied {evictions} times (bounded memory): stacks seen again were written again");
    }
    if rotations > 0 {
        eprintln!(
            "ebrec:   rotated {rotations} times; older files: {} …",
            rotated_name(&a.output, 1).display()
        );
    }
    if no_kallsyms {
        eprintln!("ebrec:   kernel frames are unnamed: /proc/kallsyms shows no addresses (kernel.kptr_restrict)");
    }
    if malformed > 0 || sideband_lost > 0 {
        eprintln!("ebrec:   malformed events {malformed}, side-band records lost {sideband_lost}");
    }
    if copies_missing > 0 {
        eprintln!("ebrec:   {copies_missing} events kept their frame-pointer stack: their stack copy was lost");
    }
    if waker_frames_dropped > 0 {
        eprintln!("ebrec:   {waker_frames_dropped} off-CPU wakers outside the traced processes: their user frames dropped, kernel frames kept");
    }
    let total_ns: u64 = programs.iter().map(|p| p.1).sum();
    let total_runs: u64 = programs.iter().map(|p| p.2).sum();
    if total_runs > 0 {
        eprintln!(
            "ebrec:   BPF run time {:.1} ms for {} program runs ({:.0} ns per run; uprobes add the trap itself, ~1 µs per call):",
            total_ns as f64 / 1e6,
            total_runs,
            total_ns as f64 / total_runs as f64
        );
        for (name, ns, n) in &programs {
            eprintln!(
                "ebrec:     {name:<22} {n:>10} runs {:>8.0} ns/run",
                *ns as f64 / *n as f64
            );
        }
    }
    Ok(())
}
