//! `ebrec doctor`: whether this machine can record, and with `-p PID` whether that process
//! can, each check one line with its verdict and, when something is wrong, the fix.
//!
//! The checks do what a recording does, on the smallest scale: they load a two-instruction
//! BPF program, create a ring buffer and open a perf event (closing each at once), instead of
//! guessing from kernel versions and sysctls. For a target they read the ELF files it maps
//! and say which `--stack-mode` it needs.
//!
//! (each check is one line; the last one is wrapped here)
//!
//! ```text
//! $ ebrec doctor -p 1234
//! ok    kernel: Linux 6.18.44 (x86_64)
//! ok    BTF: /sys/kernel/btf/vmlinux is readable (5.3 MiB)
//! ...
//! warn  executable /srv/server: no frame pointers, .symtab, DWARF, .eh_frame, build-id 1f0c…
//!       — fix: --stack-mode auto (the default) unwinds it with its .eh_frame rows; rebuild …
//! ```
use crate::cli::DoctorArgs;
use anyhow::{bail, Result};
use ebtrace_record::host::{self, kernel_version};
use serde_json::{json, Value};
use std::io::{self, BufRead, Write};
use std::path::Path;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Ok,
    Warn,
    Fail,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        }
    }
}

#[derive(Debug)]
struct Check {
    check: String,
    status: Status,
    finding: String,
    fix: Option<String>,
}

impl Check {
    fn ok(check: &str, finding: impl Into<String>) -> Self {
        Check {
            check: check.into(),
            status: Status::Ok,
            finding: finding.into(),
            fix: None,
        }
    }

    fn warn(check: &str, finding: impl Into<String>, fix: impl Into<String>) -> Self {
        Check {
            status: Status::Warn,
            fix: Some(fix.into()),
            ..Check::ok(check, finding)
        }
    }

    fn fail(check: &str, finding: impl Into<String>, fix: impl Into<String>) -> Self {
        Check {
            status: Status::Fail,
            fix: Some(fix.into()),
            ..Check::ok(check, finding)
        }
    }

    fn line(&self) -> String {
        let mut s = format!(
            "{:<4}  {}: {}",
            self.status.as_str(),
            self.check,
            self.finding
        );
        if let Some(fix) = &self.fix {
            s.push_str(" — fix: ");
            s.push_str(fix);
        }
        s
    }

    fn to_json(&self) -> Value {
        json!({
            "check": self.check,
            "status": self.status.as_str(),
            "finding": self.finding,
            "fix": self.fix,
        })
    }
}

const CAP_SYS_ADMIN: u32 = 21;
const CAP_SYSLOG: u32 = 34;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Who we run as: what decides whether the kernel lets ebrec in.
#[derive(Debug)]
struct Privileges {
    euid: u32,
    cap_eff: u64,
}

impl Privileges {
    fn current() -> Self {
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        let cap_eff = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("CapEff:"))
                    .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            })
            .unwrap_or(0);
        Privileges { euid, cap_eff }
    }

    fn has(&self, cap: u32) -> bool {
        self.cap_eff & (1 << cap) != 0
    }

    /// The kernel's bpf_capable(): CAP_BPF, or CAP_SYS_ADMIN before it existed.
    fn bpf(&self) -> bool {
        self.has(CAP_BPF) || self.has(CAP_SYS_ADMIN)
    }

    /// The kernel's perfmon_capable().
    fn perfmon(&self) -> bool {
        self.has(CAP_PERFMON) || self.has(CAP_SYS_ADMIN)
    }

    fn enough(&self) -> bool {
        self.bpf() && self.perfmon()
    }

    fn missing(&self) -> String {
        let mut m = Vec::new();
        if !self.bpf() {
            m.push("CAP_BPF");
        }
        if !self.perfmon() {
            m.push("CAP_PERFMON");
        }
        m.join(" and ")
    }
}

fn read_sysctl(path: &str) -> io::Result<i64> {
    std::fs::read_to_string(path)?
        .trim()
        .parse()
        .map_err(|_| io::Error::other(format!("{path}: not a number")))
}

fn os_err(errno: i32) -> io::Error {
    io::Error::from_raw_os_error(errno)
}

fn is_perm(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES))
}

const ROOT_FIX: &str = "run ebrec as root (sudo ebrec …), or give it CAP_BPF and CAP_PERFMON";

fn check_kernel(release: &str, machine: &str) -> Check {
    match kernel_version(release) {
        Some(v) if v >= host::MIN_KERNEL => {
            Check::ok("kernel", format!("Linux {release} ({machine})"))
        }
        Some(_) => Check::fail(
            "kernel",
            format!(
                "Linux {release} ({machine}) is older than 5.8: no BPF ring buffer, no CAP_BPF"
            ),
            "run on Linux 5.8 or newer",
        ),
        None => Check::warn(
            "kernel",
            format!("cannot tell the version of Linux {release:?} ({machine})"),
            "ebrec needs Linux 5.8 or newer",
        ),
    }
}

fn check_btf() -> Check {
    const PATH: &str = "/sys/kernel/btf/vmlinux";
    const FIX: &str =
        "run a kernel built with CONFIG_DEBUG_INFO_BTF=y (the BPF programs are CO-RE)";
    let mut magic = [0u8; 2];
    let r = std::fs::File::open(PATH).and_then(|mut f| {
        use std::io::Read;
        f.read_exact(&mut magic)?;
        f.metadata()
    });
    match r {
        Ok(_) if magic != [0x9f, 0xeb] => Check::fail(
            "BTF",
            format!("{PATH} does not start with the BTF magic"),
            FIX,
        ),
        Ok(m) => Check::ok(
            "BTF",
            format!(
                "{PATH} is readable ({:.1} MiB)",
                m.len() as f64 / (1 << 20) as f64
            ),
        ),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            Check::fail("BTF", format!("{PATH} does not exist"), FIX)
        }
        Err(e) => Check::fail(
            "BTF",
            format!("cannot read {PATH}: {e}"),
            "run ebrec as root",
        ),
    }
}

fn check_privileges(p: &Privileges) -> Check {
    match (p.euid, p.enough()) {
        (0, true) => Check::ok("privileges", "root (uid 0), with CAP_BPF and CAP_PERFMON"),
        (0, false) => Check::fail(
            "privileges",
            format!("uid 0 but without {} (a container?)", p.missing()),
            "give it CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN (docker run --privileged, or \
             --cap-add)",
        ),
        (uid, true) => Check::ok(
            "privileges",
            format!(
                "uid {uid} with CAP_BPF and CAP_PERFMON: BPF and perf events are allowed \
                 (uprobes also need write access to tracefs, other users' processes CAP_SYS_PTRACE)"
            ),
        ),
        (uid, false) => Check::fail(
            "privileges",
            format!(
                "uid {uid} without {}: the kernel refuses ebrec's BPF programs",
                p.missing()
            ),
            ROOT_FIX,
        ),
    }
}

fn check_paranoid(p: &Privileges) -> Check {
    const NAME: &str = "perf_event_paranoid";
    let v = match read_sysctl("/proc/sys/kernel/perf_event_paranoid") {
        Ok(v) => v,
        Err(e) => {
            return Check::ok(
                NAME,
                format!("cannot read it ({e}): only CAP_PERFMON counts"),
            )
        }
    };
    if p.perfmon() {
        Check::ok(NAME, format!("{v} (does not apply: CAP_PERFMON)"))
    } else if v <= -1 {
        Check::ok(
            NAME,
            format!("{v}: perf events of every process allowed without CAP_PERFMON"),
        )
    } else {
        Check::warn(
            NAME,
            format!("{v}: without CAP_PERFMON no system-wide or kernel events"),
            "run ebrec as root, or give it CAP_PERFMON (lowering the sysctl does not let BPF \
             tracing programs load)",
        )
    }
}

fn check_unprivileged_bpf(p: &Privileges) -> Check {
    const NAME: &str = "unprivileged_bpf_disabled";
    let v = match read_sysctl("/proc/sys/kernel/unprivileged_bpf_disabled") {
        Ok(v) => v,
        Err(e) => return Check::ok(NAME, format!("cannot read it ({e}): only CAP_BPF counts")),
    };
    if p.bpf() {
        Check::ok(NAME, format!("{v} (does not apply: CAP_BPF)"))
    } else if v == 0 {
        Check::warn(
            NAME,
            "0: bpf() is open to all, but tracing programs still need CAP_BPF and CAP_PERFMON",
            ROOT_FIX,
        )
    } else {
        Check::warn(
            NAME,
            format!("{v}: bpf() is refused without CAP_BPF"),
            ROOT_FIX,
        )
    }
}

/// Loads `r0 = 0; exit` as a tracepoint program (the kind of program ebrec loads needs
/// CAP_BPF and CAP_PERFMON, a socket filter would not), and closes it.
fn check_bpf_load() -> Check {
    use libbpf_rs::libbpf_sys as sys;
    let mut mov = sys::bpf_insn {
        code: (sys::BPF_ALU64 | sys::BPF_MOV | sys::BPF_K) as u8,
        ..Default::default()
    };
    mov.set_dst_reg(0);
    let exit = sys::bpf_insn {
        code: (sys::BPF_JMP | sys::BPF_EXIT) as u8,
        ..Default::default()
    };
    let insns = [mov, exit];
    // SAFETY: the strings are NUL-terminated, insns holds insn_cnt instructions, and null
    // options are allowed.
    let fd = unsafe {
        sys::bpf_prog_load(
            sys::BPF_PROG_TYPE_TRACEPOINT,
            c"ebrec_doctor".as_ptr(),
            c"GPL".as_ptr(),
            insns.as_ptr(),
            insns.len() as _,
            std::ptr::null_mut(),
        )
    };
    const NAME: &str = "BPF program";
    if fd < 0 {
        let e = os_err(-fd);
        let fix = if is_perm(&e) {
            ROOT_FIX
        } else {
            "run a kernel with CONFIG_BPF_SYSCALL=y and CONFIG_BPF_EVENTS=y"
        };
        return Check::fail(
            NAME,
            format!("loading a tracepoint program failed: {e}"),
            fix,
        );
    }
    // SAFETY: fd is a fresh descriptor nobody else owns; dropping it closes it.
    drop(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) });
    Check::ok(NAME, "a tracepoint program loaded (and was closed)")
}

/// Creates a BPF ring buffer of ebrec's default size (8 MiB), and closes it.
fn check_ringbuf() -> Check {
    use libbpf_rs::libbpf_sys as sys;
    const SIZE: u32 = 8 << 20;
    // SAFETY: the name is NUL-terminated; null options are allowed.
    let fd = unsafe {
        sys::bpf_map_create(
            sys::BPF_MAP_TYPE_RINGBUF,
            c"ebrec_doctor".as_ptr(),
            0,
            0,
            SIZE,
            std::ptr::null(),
        )
    };
    const NAME: &str = "ring buffer";
    if fd < 0 {
        let e = os_err(-fd);
        let fix = if is_perm(&e) {
            ROOT_FIX.to_string()
        } else if e.raw_os_error() == Some(libc::EINVAL) {
            "run Linux 5.8 or newer (BPF ring buffers)".to_string()
        } else {
            "raise the memlock limit (ulimit -l unlimited) or use a smaller --ringbuf-size"
                .to_string()
        };
        return Check::fail(
            NAME,
            format!("creating an 8 MiB BPF ring buffer failed: {e}"),
            fix,
        );
    }
    // SAFETY: as in check_bpf_load.
    drop(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) });
    Check::ok(NAME, "an 8 MiB BPF ring buffer was created (and closed)")
}

/// Uprobe sessions (6.13): the allocator's one-trap path (`--alloc-probes`).
fn check_uprobe_sessions(version: Option<(u32, u32)>) -> Check {
    match version {
        Some(v) if v >= host::UPROBE_SESSIONS => Check::ok(
            "uprobe sessions",
            "kernel >= 6.13: --alloc pays the return probe only for the calls it keeps (one trap for the others)",
        ),
        _ => Check::warn(
            "uprobe sessions",
            "kernel older than 6.13: --alloc probes every allocator call's entry and return (two traps a call)",
            "a 6.13 or later kernel halves --alloc's traps; meanwhile prefer --alloc with a threshold and --no-free, or --memgrowth",
        ),
    }
}

/// The rseq_update tracepoint: --offcpu and --runq take a kept event's user stack there,
/// where the thread returns to user space, instead of at syscall exits.
fn check_rseq_update() -> Check {
    if host::has_btf_type("btf_trace_rseq_update") {
        Check::ok(
            "rseq_update",
            "--offcpu and --runq take user stacks where a thread with rseq (glibc 2.35+) returns to user space: no program at anyone's system calls",
        )
    } else {
        Check::warn(
            "rseq_update",
            "no rseq_update tracepoint in the kernel's BTF: --offcpu and --runq take user stacks at syscall exits, which puts every system call on the tracepoint's slow path",
            "a kernel with CONFIG_RSEQ and its BTF; meanwhile raise --offcpu's threshold or record for shorter times",
        )
    }
}

fn check_uprobes() -> Check {
    const PATH: &str = "/sys/bus/event_source/devices/uprobe/type";
    match std::fs::read_to_string(PATH) {
        Ok(t) => Check::ok("uprobes", format!("uprobe PMU present (type {})", t.trim())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Check::fail(
            "uprobes",
            format!("{PATH} does not exist: this kernel has no uprobes"),
            "run a kernel with CONFIG_UPROBES=y and CONFIG_UPROBE_EVENTS=y (--cpu, --offcpu and \
             --lock work without)",
        ),
        Err(e) => Check::warn(
            "uprobes",
            format!("cannot read {PATH}: {e}"),
            "run ebrec as root",
        ),
    }
}

fn check_tracefs(p: &Privileges) -> Check {
    const NAME: &str = "tracefs";
    const USERS: &str = "--alloc, --lock-mode uprobe, --func";
    for dir in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
        let events = Path::new(dir).join("uprobe_events");
        match std::fs::metadata(&events) {
            Ok(_) => {
                let c = std::ffi::CString::new(events.as_os_str().as_encoded_bytes());
                // With the effective ids (AT_EACCESS), as the write itself would be checked.
                let writable = c.is_ok_and(|c| {
                    // SAFETY: c is a NUL-terminated string that outlives the call.
                    let r = unsafe {
                        libc::faccessat(libc::AT_FDCWD, c.as_ptr(), libc::W_OK, libc::AT_EACCESS)
                    };
                    r == 0
                });
                return if writable {
                    Check::ok(NAME, format!("mounted at {dir}, uprobe_events is writable"))
                } else {
                    Check::warn(
                        NAME,
                        format!(
                            "mounted at {dir}, but {} is not writable: no uprobes ({USERS})",
                            events.display()
                        ),
                        "run ebrec as root",
                    )
                };
            }
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                return Check::warn(
                    NAME,
                    format!("{dir} is not accessible: no uprobes ({USERS})"),
                    "run ebrec as root",
                );
            }
            Err(_) => {}
        }
    }
    let known = std::fs::read_to_string("/proc/filesystems")
        .map(|s| {
            s.lines()
                .any(|l| l.split_whitespace().last() == Some("tracefs"))
        })
        .unwrap_or(false);
    if known && Path::new("/sys/kernel/tracing").is_dir() {
        let who = if p.euid == 0 && p.has(CAP_SYS_ADMIN) {
            "ebrec mounts it itself when it needs uprobes"
        } else {
            "ebrec mounts it itself when it needs uprobes, as root"
        };
        Check::warn(
            NAME,
            format!("not mounted; {who} ({USERS})"),
            "nothing to do, or mount it: mount -t tracefs tracefs /sys/kernel/tracing",
        )
    } else {
        Check::fail(
            NAME,
            format!("not mounted, and this kernel has no tracefs to mount: no uprobes ({USERS})"),
            "run a kernel with CONFIG_FTRACE=y and CONFIG_UPROBE_EVENTS=y",
        )
    }
}

fn check_perf_event() -> Check {
    const NAME: &str = "perf events";
    let cpu = host::online_cpus()
        .ok()
        .and_then(|c| c.first().copied())
        .unwrap_or(0);
    match host::open_cpu_clock(cpu as i32, 99) {
        Ok(fd) => {
            drop(fd);
            Check::ok(
                NAME,
                format!("a software cpu-clock event opened on CPU {cpu} (and was closed)"),
            )
        }
        Err(e) => {
            let fix = if is_perm(&e) {
                "run ebrec as root, or give it CAP_PERFMON"
            } else {
                "run a kernel with CONFIG_PERF_EVENTS=y"
            };
            Check::fail(
                NAME,
                format!("opening a cpu-clock event on CPU {cpu} failed: {e}"),
                fix,
            )
        }
    }
}

fn check_kallsyms(p: &Privileges) -> Check {
    const NAME: &str = "kernel symbols";
    let restrict = read_sysctl("/proc/sys/kernel/kptr_restrict")
        .map(|v| v.to_string())
        .unwrap_or_else(|_| "?".into());
    // The first non-zero address among the first lines: on some kernels the file starts
    // with per-CPU symbols at 0 ("0000000000000000 A fixed_percpu_data" on 6.1) even when
    // addresses are shown.
    let first = std::fs::File::open("/proc/kallsyms").and_then(|f| {
        let mut r = io::BufReader::new(f);
        let mut line = String::new();
        for _ in 0..1000 {
            line.clear();
            if r.read_line(&mut line)? == 0 {
                break;
            }
            let a = line
                .split_whitespace()
                .next()
                .and_then(|a| u64::from_str_radix(a, 16).ok());
            if a.is_some_and(|a| a != 0) {
                break;
            }
        }
        Ok(line)
    });
    let addr = match first {
        Ok(l) => l
            .split_whitespace()
            .next()
            .and_then(|a| u64::from_str_radix(a, 16).ok()),
        Err(e) => {
            return Check::warn(
                NAME,
                format!("cannot read /proc/kallsyms ({e}): kernel frames stay unnamed"),
                "run ebrec as root",
            )
        }
    };
    match addr {
        Some(a) if a != 0 => Check::ok(
            NAME,
            format!(
                "kptr_restrict={restrict}, /proc/kallsyms shows addresses: kernel frames get names"
            ),
        ),
        _ => {
            // The kernel's kallsyms_show_value: with kptr_restrict=0 addresses show to a
            // reader without CAP_SYSLOG only when perf_event_paranoid is 1 or less; with 1,
            // to CAP_SYSLOG only; with 2, to no one.
            let paranoid = read_sysctl("/proc/sys/kernel/perf_event_paranoid").unwrap_or(2);
            let fix = if restrict == "2" {
                if p.has(CAP_SYSLOG) {
                    "sysctl kernel.kptr_restrict=1 (then ebrec, with CAP_SYSLOG, sees addresses)"
                } else {
                    "sysctl kernel.kptr_restrict=1 and run ebrec as root or with CAP_SYSLOG"
                }
            } else if p.has(CAP_SYSLOG) {
                "the capability was not in force when /proc/kallsyms was opened: run ebrec as root"
            } else if restrict == "0" && paranoid > 1 {
                "run ebrec as root or with CAP_SYSLOG (with kptr_restrict=0 the kernel shows \
                 addresses without it only when kernel.perf_event_paranoid is 1 or less)"
            } else {
                "run ebrec as root or with CAP_SYSLOG"
            };
            Check::warn(
                NAME,
                format!(
                    "kptr_restrict={restrict}, /proc/kallsyms hides addresses: kernel frames \
                     (--cpu, --offcpu) stay unnamed"
                ),
                fix,
            )
        }
    }
}

/// `memlock` is RLIMIT_MEMLOCK as it was before libbpf raised it (it does so on old kernels).
fn check_memlock(memlock: (u64, u64), version: Option<(u32, u32)>) -> Check {
    const NAME: &str = "memlock";
    let show = |v: u64| {
        if v == libc::RLIM_INFINITY {
            "unlimited".to_string()
        } else if v >= 1 << 20 {
            format!("{} MiB", v >> 20)
        } else {
            format!("{} KiB", v >> 10)
        }
    };
    let (cur, max) = memlock;
    let limit = format!("RLIMIT_MEMLOCK {} (hard {})", show(cur), show(max));
    if version.is_some_and(|v| v >= (5, 11)) {
        Check::ok(
            NAME,
            format!(
                "{limit}; does not matter: since Linux 5.11 BPF memory is charged to the \
                 memory cgroup"
            ),
        )
    } else if cur == libc::RLIM_INFINITY || cur >= 512 << 20 {
        Check::ok(NAME, limit)
    } else {
        Check::warn(
            NAME,
            format!("{limit}: before Linux 5.11 BPF maps and ring buffers count against it"),
            "ulimit -l unlimited before starting ebrec (libbpf raises it itself when it may)",
        )
    }
}

fn check_bpf_stats() -> Check {
    const NAME: &str = "BPF stats";
    match read_sysctl("/proc/sys/kernel/bpf_stats_enabled") {
        Ok(v) => Check::ok(
            NAME,
            format!(
                "bpf_stats_enabled={v}; ebrec turns run-time stats on for its own programs while \
                 it records"
            ),
        ),
        Err(e) => Check::ok(
            NAME,
            format!("/proc/sys/kernel/bpf_stats_enabled is not readable ({e}); informational only"),
        ),
    }
}

/// What one mapped ELF file offers the recorder and the symbolizer.
#[derive(Debug, Default)]
struct BinaryReport {
    /// The path as the target sees it.
    path: String,
    executable: bool,
    frame_pointers: Option<bool>,
    symtab: bool,
    dynsym: bool,
    debug_info: bool,
    eh_frame: bool,
    debuglink: Option<String>,
    build_id: Option<String>,
    error: Option<String>,
}

impl BinaryReport {
    fn read(path: String, file: &Path, executable: bool) -> Self {
        let mut r = BinaryReport {
            path,
            executable,
            ..Default::default()
        };
        let elf = match ebtrace_elf::Elf::open(file) {
            Ok(e) => e,
            Err(e) => {
                r.error = Some(format!("cannot read {}: {e}", file.display()));
                return r;
            }
        };
        if let Err(e) = elf.object() {
            r.error = Some(format!("not an ELF file we can read: {e}"));
            return r;
        }
        r.symtab = elf.has_section(".symtab");
        r.dynsym = elf.has_section(".dynsym");
        r.debug_info = elf.has_section(".debug_info") || elf.has_section(".zdebug_info");
        r.eh_frame = elf.has_section(".eh_frame");
        r.debuglink = elf
            .debuglink()
            .map(|(name, _)| String::from_utf8_lossy(name).into_owned());
        r.build_id = elf
            .build_id()
            .map(|b| b.iter().map(|x| format!("{x:02x}")).collect());
        r.frame_pointers = elf.has_frame_pointers();
        r
    }

    fn file_name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }

    fn check(&self) -> Check {
        let name = format!(
            "{} {}",
            if self.executable {
                "executable"
            } else {
                "library"
            },
            self.path
        );
        if let Some(e) = &self.error {
            return Check::warn(
                &name,
                e.clone(),
                "run ebrec as root; restart the process if its file was replaced",
            );
        }
        let mut facts = vec![match self.frame_pointers {
            Some(true) => "frame pointers",
            Some(false) => "no frame pointers",
            None => "frame pointers unknown (no symbols to judge by)",
        }
        .to_string()];
        facts.push(
            match (self.symtab, self.dynsym) {
                (true, _) => ".symtab",
                (false, true) => ".dynsym only",
                (false, false) => "no symbols",
            }
            .into(),
        );
        facts.push(if self.debug_info { "DWARF" } else { "no DWARF" }.into());
        facts.push(
            if self.eh_frame {
                ".eh_frame"
            } else {
                "no .eh_frame"
            }
            .into(),
        );
        if let Some(l) = &self.debuglink {
            facts.push(format!(".gnu_debuglink {l}"));
        }
        facts.push(match &self.build_id {
            Some(b) => format!("build-id {b}"),
            None => "no build-id".into(),
        });
        let finding = facts.join(", ");
        if !self.symtab && !self.dynsym && !self.debug_info {
            Check::warn(
                &name,
                finding,
                "keep its symbols (do not strip it), or install its debug file for ebsym",
            )
        } else if self.executable && self.frame_pointers == Some(false) {
            Check::warn(
                &name,
                finding,
                "--stack-mode auto (the default) unwinds it with its .eh_frame rows; rebuild \
                 with -fno-omit-frame-pointer for the cheaper --stack-mode fp",
            )
        } else if self.build_id.is_none() {
            Check::warn(
                &name,
                finding,
                "link with -Wl,--build-id so that ebsym can match its debug file",
            )
        } else {
            Check::ok(&name, finding)
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "path": self.path,
            "executable": self.executable,
            "frame_pointers": self.frame_pointers,
            "symtab": self.symtab,
            "dynsym": self.dynsym,
            "debug_info": self.debug_info,
            "eh_frame": self.eh_frame,
            "debuglink": self.debuglink,
            "build_id": self.build_id,
            "error": self.error,
        })
    }
}

/// The target's checks and binaries, and the stack mode it needs (`fp`, `dwarf`, or None
/// when its executable could not be judged).
fn check_process(pid: u32) -> (Vec<Check>, Vec<BinaryReport>, Option<&'static str>) {
    let name = format!("process {pid}");
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim().to_string())
        .unwrap_or_default();
    let maps = match host::maps(pid) {
        Ok(m) => m,
        Err(e) => {
            return (
                vec![Check::fail(
                    &name,
                    format!("{comm}: cannot read /proc/{pid}/maps: {e}"),
                    "run ebrec as root, or as the process's user",
                )],
                Vec::new(),
                None,
            )
        }
    };
    let exe_link = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    let exe_ino = std::fs::metadata(format!("/proc/{pid}/exe"))
        .ok()
        .map(|m| std::os::unix::fs::MetadataExt::ino(&m));
    let mut seen = std::collections::HashSet::new();
    let mut bins = Vec::new();
    for m in &maps {
        if m.perms & 4 == 0 || !m.path.starts_with(b"/") || !seen.insert(m.path.clone()) {
            continue;
        }
        let path = String::from_utf8_lossy(&m.path).into_owned();
        let executable = exe_link
            .as_deref()
            .is_some_and(|l| l.as_os_str().as_encoded_bytes() == m.path.as_slice())
            || (m.inode != 0 && exe_ino == Some(m.inode));
        if let Some(live) = path.strip_suffix(" (deleted)") {
            bins.push(BinaryReport {
                path: live.to_string(),
                executable,
                error: Some(
                    "deleted or replaced since the process mapped it: ebrec cannot read it".into(),
                ),
                ..Default::default()
            });
            continue;
        }
        bins.push(BinaryReport::read(
            path,
            &host::path_in(pid, &m.path),
            executable,
        ));
    }
    // The executable first, then the libraries in map order.
    bins.sort_by_key(|b| !b.executable);
    if bins.is_empty() {
        return (
            vec![Check::fail(
                &name,
                format!("{comm} maps no executable file (a kernel thread?)"),
                "pick a user-space process",
            )],
            bins,
            None,
        );
    }
    let mut checks = vec![Check::ok(
        &name,
        format!(
            "{comm} is running and readable; it maps {} executable file{}",
            bins.len(),
            if bins.len() == 1 { "" } else { "s" }
        ),
    )];
    checks.extend(bins.iter().map(BinaryReport::check));
    let (check, mode) = stack_mode(&bins);
    checks.push(check);
    (checks, bins, mode)
}

/// Which --stack-mode the target needs, from its binaries' frame pointers and unwind tables.
fn stack_mode(bins: &[BinaryReport]) -> (Check, Option<&'static str>) {
    const NAME: &str = "stack mode";
    let no_fp: Vec<&str> = bins
        .iter()
        .filter(|b| !b.executable && b.frame_pointers == Some(false))
        .map(BinaryReport::file_name)
        .collect();
    let libs = if no_fp.is_empty() {
        String::new()
    } else {
        format!(
            "; {} {} no frame pointers: --stack-mode fp would lose the frames of stacks \
             taken inside them (allocations, lock waits), auto unwinds them with their rows",
            no_fp.join(", "),
            if no_fp.len() == 1 { "has" } else { "have" }
        )
    };
    match bins.iter().find(|b| b.executable) {
        Some(exe) if exe.frame_pointers == Some(true) && no_fp.is_empty() => (
            Check::ok(
                NAME,
                "--stack-mode fp (the cheapest) or auto: every binary keeps frame pointers",
            ),
            Some("fp"),
        ),
        Some(exe) if exe.frame_pointers == Some(true) => (
            Check::ok(
                NAME,
                format!("--stack-mode auto (the default): the executable keeps frame pointers{libs}"),
            ),
            Some("auto"),
        ),
        Some(exe) if exe.frame_pointers == Some(false) && exe.eh_frame => (
            Check::ok(
                NAME,
                format!(
                    "--stack-mode auto (the default): the executable has no frame pointers; \
                     its .eh_frame rows unwind it in the kernel{libs}"
                ),
            ),
            Some("auto"),
        ),
        Some(exe) if exe.frame_pointers == Some(false) => (
            Check::warn(
                NAME,
                "the executable has no frame pointers and no .eh_frame: no mode can unwind it",
                "rebuild with -fno-omit-frame-pointer, or keep .eh_frame (-fasynchronous-unwind-tables)",
            ),
            None,
        ),
        Some(_) => (
            Check::ok(
                NAME,
                format!(
                    "--stack-mode auto (the default): cannot tell whether the executable keeps \
                     frame pointers (no symbols to judge by), and auto works either way{libs}"
                ),
            ),
            Some("auto"),
        ),
        None => (
            Check::warn(
                NAME,
                "the executable is not among the readable mapped files",
                "run ebrec as root; --stack-mode auto (the default) works either way",
            ),
            None,
        ),
    }
}

/// Runs `ebrec doctor`: exits 1 when a check FAILs.
pub fn run(a: DoctorArgs) -> Result<()> {
    if let Some(pid) = a.pid {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            bail!("no process with pid {pid}");
        }
    }
    // The loads below may fail on purpose; their errors are the findings, not libbpf's logs.
    libbpf_rs::set_print(None);
    let privileges = Privileges::current();
    // Before any BPF call: libbpf raises the limit itself on kernels that need it.
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: rl is a valid out pointer.
    unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) };
    let (_, release, machine) = host::uname();
    let version = kernel_version(&release);

    let mut checks = vec![
        check_kernel(&release, &machine),
        check_btf(),
        check_privileges(&privileges),
        check_paranoid(&privileges),
        check_unprivileged_bpf(&privileges),
        check_bpf_load(),
        check_ringbuf(),
        check_uprobes(),
        check_uprobe_sessions(version),
        check_rseq_update(),
        check_tracefs(&privileges),
        check_perf_event(),
        check_kallsyms(&privileges),
        check_memlock((rl.rlim_cur, rl.rlim_max), version),
        check_bpf_stats(),
    ];
    let mut bins = Vec::new();
    let mut mode = None;
    if let Some(pid) = a.pid {
        let (c, b, m) = check_process(pid);
        checks.extend(c);
        bins = b;
        mode = m;
    }

    let failed = checks.iter().any(|c| c.status == Status::Fail);
    let mut out = io::stdout().lock();
    let written = if a.json {
        // schema_version first (docs/json.md), as ebsym's objects have it.
        let v = json!({
            "checks": checks.iter().map(Check::to_json).collect::<Vec<_>>(),
            "binaries": bins.iter().map(BinaryReport::to_json).collect::<Vec<_>>(),
            "stack_mode": mode,
        });
        let rest = v.to_string();
        writeln!(
            out,
            "{{\"schema_version\":{},{}",
            ebtrace_format::JSON_SCHEMA_VERSION,
            &rest[1..]
        )
    } else {
        checks
            .iter()
            .try_for_each(|c| writeln!(out, "{}", c.line()))
    };
    match written.and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
        r => r?,
    }
    if failed {
        std::process::exit(1);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_have_verdict_check_finding_and_fix() {
        assert_eq!(Check::ok("BTF", "fine").line(), "ok    BTF: fine");
        assert_eq!(
            Check::fail("privileges", "uid 1", "be root").line(),
            "FAIL  privileges: uid 1 — fix: be root"
        );
    }

    #[test]
    fn capability_bits() {
        let p = Privileges {
            euid: 1000,
            cap_eff: (1 << CAP_BPF) | (1 << CAP_PERFMON),
        };
        assert!(p.enough());
        let p = Privileges {
            euid: 1000,
            cap_eff: 1 << CAP_BPF,
        };
        assert!(!p.enough());
        assert_eq!(p.missing(), "CAP_PERFMON");
        let p = Privileges {
            euid: 0,
            cap_eff: 1 << CAP_SYS_ADMIN,
        };
        assert!(p.enough());
    }
}
