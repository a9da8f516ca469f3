//! The targets: the command ebrec starts (held on a pipe until the probes are attached),
//! the pids the probes are for, and what is attached in each (allocator, lock and `--func`
//! uprobes, stack copies for `--stack-mode auto`).
use crate::config::{FuncExitMode, RecordConfig};
use crate::preload::RELEASED_FD;
use crate::probes::{self, LockMode, ProbeConfig, Probes};
use crate::{funcs, placement};
use anyhow::{bail, Context, Result};
use std::ffi::{CString, OsString};
use std::path::{Path, PathBuf};

/// The launched command, held on a pipe until the probes are attached.
pub struct Launched {
    pub pid: u32,
    pub release: Option<std::os::fd::OwnedFd>,
    pub exe: PathBuf,
}

impl Launched {
    /// Lets the command exec, handing it `fd` (as RELEASED_FD) if given.
    pub fn release_with(&mut self, fd: Option<std::os::fd::BorrowedFd<'_>>) {
        use std::os::fd::AsRawFd;
        let Some(sock) = self.release.take() else {
            return;
        };
        let Some(fd) = fd else {
            return; // closing our end releases it
        };
        let mut byte = 1u8;
        let mut iov = libc::iovec {
            iov_base: (&mut byte as *mut u8).cast(),
            iov_len: 1,
        };
        let mut cbuf = [0u64; 8];
        // SAFETY: plain structs filled as cmsg(3) says; the buffers outlive the call.
        unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = cbuf.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(4) as _;
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(4) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut i32, fd.as_raw_fd());
            // a failure leaves the command without the descriptor (no back-pressure)
            let _ = libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL);
        }
    }
}

impl std::fmt::Debug for Launched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Launched").finish_non_exhaustive()
    }
}

pub fn find_in_path(cmd: &OsString) -> Option<PathBuf> {
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

/// Starts `cmd` held on a pipe, with `env` set on top of ebrec's environment.
pub fn launch(cmd: &[OsString], env: &[(OsString, OsString)]) -> Result<Launched> {
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
    let mut vars: Vec<CString> = Vec::new();
    for (k, v) in std::env::vars_os() {
        if !env.iter().any(|(ek, _)| *ek == k) {
            vars.push(CString::new([k.as_bytes(), b"=", v.as_bytes()].concat())?);
        }
    }
    for (k, v) in env {
        vars.push(CString::new([k.as_bytes(), b"=", v.as_bytes()].concat())?);
    }
    let mut envp: Vec<*const libc::c_char> = vars.iter().map(|v| v.as_ptr()).collect();
    envp.push(std::ptr::null());
    let mut fds = [0; 2];
    // A socket pair, not a pipe: the release may carry a descriptor (`release_with`).
    // SAFETY: fds is a valid out array of two ints.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } != 0
    {
        bail!("socketpair: {}", std::io::Error::last_os_error());
    }
    // The child's receive buffers, made before fork (nothing allocates after it).
    let mut byte = 0u8;
    let mut iov = libc::iovec {
        iov_base: (&mut byte as *mut u8).cast(),
        iov_len: 1,
    };
    let mut cbuf = [0u64; 8];
    // SAFETY: ebrec is single-threaded here; the child only calls async-signal-safe
    // functions (read, close, execve, write, _exit) before exec.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        bail!("fork: {}", std::io::Error::last_os_error());
    }
    if pid == 0 {
        unsafe {
            libc::close(fds[1]);
            // Wait until the parent has attached: it sends a byte, maybe with a
            // descriptor for the command (RELEASED_FD), or closes its end.
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = cbuf.as_mut_ptr().cast();
            msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
            while libc::recvmsg(fds[0], &mut msg, 0) < 0 {}
            let c = libc::CMSG_FIRSTHDR(&msg);
            if !c.is_null()
                && (*c).cmsg_level == libc::SOL_SOCKET
                && (*c).cmsg_type == libc::SCM_RIGHTS
            {
                let fd = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const i32);
                // dup2 clears close-on-exec: the command (and its children) keep it
                libc::dup2(fd, RELEASED_FD);
                libc::close(fd);
            }
            libc::close(fds[0]);
            libc::execve(file.as_ptr(), argv.as_ptr(), envp.as_ptr());
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

/// The pids the probes are for: the `-p` ones and the launched command, or -1 for `--all`.
pub fn pids(a: &RecordConfig, launched: Option<&Launched>) -> Vec<i32> {
    let mut pids: Vec<i32> = a.pid.iter().map(|&p| p as i32).collect();
    if let Some(l) = launched {
        pids.push(l.pid as i32);
    }
    if a.all {
        pids = vec![-1];
    }
    pids
}

/// What `attach` attaches, and to what.
#[derive(Debug, Clone, Copy)]
pub struct AttachTo<'a> {
    pub a: &'a RecordConfig,
    pub cfg: &'a ProbeConfig,
    pub func_specs: &'a [funcs::FuncSpec],
    pub launched: Option<&'a Launched>,
    /// The targets' pids, or -1 for `--all`.
    pub pids: &'a [i32],
    /// `--alloc-sampler preload`: the shim, whose sites get the sampler's probes.
    pub shim: Option<&'a Path>,
}

/// Attaches the uprobes of every target (allocator, locks, `--func`) and makes each a
/// target. Returns the `--func` functions: (match, build-id), the id being the index + 1.
pub fn attach(
    to: AttachTo<'_>,
    probes: &mut Probes<'_>,
) -> Result<Vec<(funcs::FuncMatch, Vec<u8>)>> {
    let AttachTo {
        a,
        cfg,
        func_specs,
        launched,
        pids,
        shim,
    } = to;
    let mut probed: Vec<(funcs::FuncMatch, Vec<u8>)> = Vec::new();
    for &pid in pids {
        let (lookup_pid, exe) = match launched {
            Some(l) if l.pid as i32 == pid => (None, Some(l.exe.clone())),
            _ if pid == -1 => (None, None),
            _ => (Some(pid as u32), None),
        };
        let mut alloc_sites = Vec::new();
        if let Some(shim) = shim {
            probes.attach_sampler(shim, !a.no_free, pid)?;
        } else if cfg.alloc_min.is_some() {
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
        if cfg.alloc_min.is_some() && shim.is_none() && !a.alloc_fn.is_empty() {
            let bins = match (&lookup_pid, &exe) {
                (Some(p), _) => funcs::Binaries::of_pid(*p)?,
                (None, Some(exe)) => funcs::Binaries::of_command(exe)?,
                (None, None) => bail!("--alloc-fn needs a target process"),
            };
            let sites = custom_alloc_sites(a, &bins)?;
            probes.attach_custom_alloc(&sites, pid)?;
        }
        if !func_specs.is_empty() {
            let bins = match (&lookup_pid, &exe) {
                (Some(p), _) => funcs::Binaries::of_pid(*p)?,
                (None, Some(exe)) => funcs::Binaries::of_command(exe)?,
                (None, None) => bail!("--func needs a target process"),
            };
            let mut sites = Vec::new();
            let request_fn = a.request.as_deref().and_then(|r| r.strip_prefix("func:"));
            let mut request_ids = Vec::new();
            for m in funcs::resolve_all(&bins, func_specs)? {
                // One id per function, whichever targets share it.
                let id = match probed
                    .iter()
                    .position(|(p, _)| p.path == m.path && p.vaddr == m.vaddr)
                {
                    Some(i) => i as u64 + 1,
                    None => {
                        probed.push((
                            m.clone(),
                            ebtrace_elf::build_id(&m.path).unwrap_or_default(),
                        ));
                        probed.len() as u64
                    }
                };
                if !a.quiet {
                    eprintln!("ebrec: --func {}: {m}", m.spec);
                }
                if request_fn == Some(m.spec.as_str()) {
                    request_ids.push(id);
                }
                if a.args > 0 {
                    check_clone_args(a, &m, &format!("--func {} with --args", m.spec), 0)?;
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
            probes.set_request_funcs(&request_ids)?;
        }
        attach_usdt(a, probes, lookup_pid, exe.as_deref())?;
        if pid > 0 {
            probes.add_target(pid as u32)?;
        }
    }
    Ok(probed)
}

/// Resolves the `--usdt` specs in one target's binaries (a running process, or a command
/// not started) and attaches the probes not attached yet, paired (`--usdt-pair`).
fn attach_usdt(
    a: &RecordConfig,
    probes: &mut Probes<'_>,
    pid: Option<u32>,
    exe: Option<&Path>,
) -> Result<()> {
    if a.usdt.is_empty() && !a.exceptions {
        return Ok(());
    }
    let bins = match (pid, exe) {
        (Some(p), _) => funcs::Binaries::of_pid(p)?,
        (None, Some(exe)) => funcs::Binaries::of_command(exe)?,
        (None, None) => bail!("--usdt needs a target process"),
    };
    let specs: Vec<funcs::usdt::UsdtSpec> =
        a.usdt.iter().map(|s| s.parse()).collect::<Result<_>>()?;
    let mut all = probes.usdt.clone();
    funcs::usdt::resolve(&bins, &specs, &mut all)?;
    if a.exceptions {
        let specs: Vec<funcs::usdt::UsdtSpec> = funcs::usdt::EXCEPTION_PROBES
            .iter()
            .map(|s| s.parse())
            .collect::<Result<_>>()?;
        funcs::usdt::resolve(&bins, &specs, &mut all).map_err(|_| {
            anyhow::anyhow!(
                "--exceptions: no binary of the target has libstdc++'s USDT probes \
                 (libstdcxx:throw, libstdcxx:rethrow): not a C++ program, or a C++ runtime \
                 built without <sys/sdt.h> (libc++, a static libstdc++ without notes)"
            )
        })?;
    }
    funcs::usdt::pair(&mut all, &a.usdt_pair)?;
    probes.set_usdt_strings(&usdt_strings(a, &all)?)?;
    if let Some((start, done)) = request_pair(a) {
        let pairs: Vec<(u64, u64)> = all
            .iter()
            .filter(|p| p.provider == start.0 && p.name == start.1 && p.done != 0)
            .filter(|p| all.iter().any(|d| d.id == p.done && d.name == done))
            .map(|p| (p.id, p.done))
            .collect();
        probes.set_request_probes(&pairs);
    }
    if !a.quiet {
        for p in all.iter().skip(probes.usdt.len()) {
            if let Some(why) = &p.unreadable {
                eprintln!("ebrec: note: --usdt {}:{}: its argument spec cannot be read ({why}); libbpf may refuse it", p.provider, p.name);
            }
        }
    }
    probes.attach_usdt(&all)
}

/// The probe sites of `--alloc-fn`: each spec's allocation function and free function,
/// numbered in order from 1; a name that resolves to nothing is the error.
fn custom_alloc_sites(a: &RecordConfig, bins: &funcs::Binaries) -> Result<Vec<probes::CustomSite>> {
    let mut out = Vec::new();
    for (i, text) in a.alloc_fn.iter().enumerate() {
        let spec: funcs::AllocFnSpec = text.parse()?;
        let mut sides = vec![(&spec.alloc, spec.size_arg, false)];
        if let Some((f, arg)) = &spec.free {
            sides.push((f, *arg, true));
        }
        for (f, arg, free) in sides {
            let found = bins
                .resolve(f)
                .with_context(|| format!("--alloc-fn '{text}'"))?;
            for m in found {
                check_clone_args(a, &m, &format!("--alloc-fn '{text}'"), arg)?;
                if !a.quiet {
                    eprintln!(
                        "ebrec: --alloc-fn {text}: {} {m}",
                        if free { "free" } else { "allocation" }
                    );
                }
                out.push(probes::CustomSite {
                    site: probes::Site::new(
                        &m.path,
                        m.demangled.clone(),
                        m.file_offset,
                        m.size,
                        &placement::ARGS,
                    ),
                    allocator: i as u32 + 1,
                    arg,
                    free,
                });
            }
        }
    }
    Ok(out)
}

/// GCC's clones that change a function's parameters: IPA-SRA (`.isra`) drops or splits
/// them (an unused `this`), constant propagation (`.constprop`) drops those it fixed.
fn is_param_clone(symbol: &str) -> bool {
    symbol.contains(".isra.") || symbol.contains(".constprop.")
}

/// An argument (index `arg`, 0 for the first register) asked of a clone whose parameters the
/// compiler may have changed is refused, unless --clone-args confirms it.
fn check_clone_args(a: &RecordConfig, m: &funcs::FuncMatch, what: &str, arg: u32) -> Result<()> {
    if a.clone_args || !is_param_clone(&m.symbol) {
        return Ok(());
    }
    bail!(
        "{what}: {} is a GCC clone here ({}): IPA-SRA and constant propagation remove or \
         reorder parameters (an unused `this`), so the source's argument {arg} may not be the \
         clone's (ebrec reads no debug info to map them); read the clone's code \
         (objdump -d --disassemble='{}' {}) and give --clone-args to take the index as it \
         is, or name a function that is not cloned",
        m.demangled,
        m.symbol,
        m.symbol,
        m.binary
    )
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

/// `--usdt-string PROVIDER:NAME:ARG`: (probe id, ARG) of each attached probe it names; a
/// spec that names none, or an argument the probe does not have, is the error.
fn usdt_strings(a: &RecordConfig, all: &[funcs::usdt::UsdtProbe]) -> Result<Vec<(u64, u32)>> {
    let mut out = Vec::new();
    for spec in &a.usdt_string {
        let bad = || {
            anyhow::anyhow!(
                "--usdt-string '{spec}': give PROVIDER:NAME:ARG (ARG the 0-based argument index)"
            )
        };
        let (probe, arg) = spec.rsplit_once(':').ok_or_else(bad)?;
        let (provider, name) = probe.split_once(':').ok_or_else(bad)?;
        let arg: u32 = arg.parse().map_err(|_| bad())?;
        let named: Vec<&funcs::usdt::UsdtProbe> = all
            .iter()
            .filter(|p| p.provider == provider && p.name == name)
            .collect();
        if named.is_empty() {
            bail!("--usdt-string '{spec}': no attached --usdt probe {provider}:{name} (add it with --usdt)");
        }
        for p in named {
            if arg >= p.arg_count {
                bail!(
                    "--usdt-string '{spec}': {provider}:{name} has {} argument{} ('{}')",
                    p.arg_count,
                    if p.arg_count == 1 { "" } else { "s" },
                    p.args_spec
                );
            }
            out.push((p.id, arg));
        }
    }
    Ok(out)
}

/// `--request usdt:[BINARY_OR_LIB:]PROVIDER:START,DONE`: ((PROVIDER, START), DONE).
fn request_pair(a: &RecordConfig) -> Option<((String, String), String)> {
    let rest = a.request.as_deref()?.strip_prefix("usdt:")?;
    let (start, done) = rest.rsplit_once(',')?;
    let (prefix, start_name) = start.rsplit_once(':')?;
    let provider = prefix.rsplit(':').next().unwrap_or(prefix);
    let done_name = done.rsplit(':').next().unwrap_or(done);
    Some((
        (provider.to_string(), start_name.to_string()),
        done_name.to_string(),
    ))
}
