//! What the recorder reads from /proc: maps, process identity, and system facts.
use std::io;
use std::path::PathBuf;

/// One line of /proc/PID/maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapEntry {
    pub start: u64,
    pub end: u64,
    pub perms: u32, // 1 r, 2 w, 4 x, 8 shared
    pub offset: u64,
    pub dev: u64, // major << 20 | minor
    pub inode: u64,
    pub path: Vec<u8>,
}

pub fn parse_maps(text: &[u8]) -> Vec<MapEntry> {
    let mut out = Vec::new();
    for line in text.split(|&c| c == b'\n') {
        let mut it = line.splitn(6, |&c| c == b' ');
        let (Some(range), Some(perms), Some(off), Some(dev), Some(inode)) =
            (it.next(), it.next(), it.next(), it.next(), it.next())
        else {
            continue;
        };
        let path = it
            .next()
            .map(|p| p.trim_ascii_start().to_vec())
            .unwrap_or_default();
        let s = std::str::from_utf8(range).unwrap_or("");
        let Some((a, b)) = s.split_once('-') else {
            continue;
        };
        let hex = |x: &[u8]| u64::from_str_radix(std::str::from_utf8(x).unwrap_or(""), 16).ok();
        let (Some(start), Some(end), Some(offset)) = (
            u64::from_str_radix(a, 16).ok(),
            u64::from_str_radix(b, 16).ok(),
            hex(off),
        ) else {
            continue;
        };
        let mut p = 0;
        for (i, bit) in [(0, 1), (1, 2), (2, 4), (3, 8)] {
            if perms.get(i).is_some_and(|&c| c != b'-' && c != b'p') {
                p |= bit;
            }
        }
        let dev = std::str::from_utf8(dev)
            .ok()
            .and_then(|d| d.split_once(':'))
            .and_then(|(ma, mi)| {
                Some((u64::from_str_radix(ma, 16).ok()? << 20) | u64::from_str_radix(mi, 16).ok()?)
            })
            .unwrap_or(0);
        let inode = std::str::from_utf8(inode)
            .ok()
            .and_then(|i| i.parse().ok())
            .unwrap_or(0);
        out.push(MapEntry {
            start,
            end,
            perms: p,
            offset,
            dev,
            inode,
            path,
        });
    }
    out
}

pub fn maps(pid: u32) -> io::Result<Vec<MapEntry>> {
    Ok(parse_maps(&std::fs::read(format!("/proc/{pid}/maps"))?))
}

/// Facts about a process from /proc/PID/stat and friends.
#[derive(Debug, Clone, Default)]
pub struct ProcInfo {
    pub ppid: u32,
    /// Start time in clock ticks since boot.
    pub start_ticks: u64,
    pub comm: Vec<u8>,
    pub exe: Vec<u8>,
    pub cmdline: Vec<Vec<u8>>,
    pub pid_ns: u64,
    /// The innermost pid (`NSpid:`'s last), 0 when the process is in the recorder's pid
    /// namespace or not known.
    pub ns_pid: u32,
    /// `NSpid:` of /proc/PID/status: the pid in the recorder's namespace first, innermost
    /// last; empty if unknown.
    pub ns_pids: Vec<u32>,
    /// The cgroup v2 path (`0::` of /proc/PID/cgroup), empty if unknown.
    pub cgroup: Vec<u8>,
    /// The container id found in the cgroup paths ([`container_id`]), empty if none.
    pub container_id: String,
}

/// Reads /proc/PID/{stat,exe,cmdline,ns/pid,status,cgroup}. The start time is read again
/// at the end: an error if `pid` is another process by then (it exited and its pid was
/// given to a new one while the files were read), so the facts are one process's.
pub fn proc_info(pid: u32) -> io::Result<ProcInfo> {
    let stat = std::fs::read(format!("/proc/{pid}/stat"))?;
    // comm may contain spaces and parentheses: split at the last ')'.
    let close = stat
        .iter()
        .rposition(|&c| c == b')')
        .ok_or_else(|| io::Error::other("bad stat"))?;
    let open = stat.iter().position(|&c| c == b'(').unwrap_or(0);
    let comm = stat[open + 1..close].to_vec();
    let rest = String::from_utf8_lossy(&stat[close + 1..]).into_owned();
    let f: Vec<&str> = rest.split_whitespace().collect();
    // after ')': state(0) ppid(1) ... starttime is field 22 overall = index 19 here
    let ppid = f.get(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let start_ticks = f.get(19).and_then(|s| s.parse().ok()).unwrap_or(0);
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| p.into_os_string().into_encoded_bytes())
        .unwrap_or_default();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| a.to_vec())
                .collect()
        })
        .unwrap_or_default();
    let pid_ns = std::fs::metadata(format!("/proc/{pid}/ns/pid"))
        .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
        .unwrap_or(0);
    let ns_pids = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map(|s| parse_ns_pids(&s))
        .unwrap_or_default();
    let ns_pid = match ns_pids[..] {
        [_, .., last] => last,
        _ => 0,
    };
    let (cgroup, container_id) = std::fs::read(format!("/proc/{pid}/cgroup"))
        .map(|c| parse_cgroup(&c))
        .unwrap_or_default();
    if self::start_ticks(pid) != Some(start_ticks) {
        return Err(io::Error::other("the process changed while it was read"));
    }
    Ok(ProcInfo {
        ppid,
        start_ticks,
        comm,
        exe,
        cmdline,
        pid_ns,
        ns_pid,
        ns_pids,
        cgroup,
        container_id,
    })
}

/// [`proc_info`] of the process that started at `start_ns` (boottime ns: a fork's time),
/// or None when `pid` has exited or is another process by now.
pub fn proc_info_started(pid: u32, start_ns: u64) -> Option<ProcInfo> {
    let info = proc_info(pid).ok()?;
    started_at(info.start_ticks, start_ns).then_some(info)
}

/// Whether a /proc start time (`ticks`, clock ticks since boot) is that of a process that
/// started at `start_ns` (boottime ns; the kernel truncates it to a tick): within a tick
/// either way.
pub fn started_at(ticks: u64, start_ns: u64) -> bool {
    let expected = (u128::from(start_ns) * u128::from(clock_ticks().max(1)) / 1_000_000_000) as u64;
    ticks.abs_diff(expected) <= 1
}

/// The `NSpid:` line of a /proc/PID/status text: outermost (the reader's namespace) first.
pub fn parse_ns_pids(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .map(|v| {
            v.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The cgroup v2 path (the `0::` line) of a /proc/PID/cgroup text, and the container id of
/// the v2 path, else of the first v1 line that has one.
pub fn parse_cgroup(text: &[u8]) -> (Vec<u8>, String) {
    let mut v2 = Vec::new();
    let mut v1_id = String::new();
    for line in text.split(|&c| c == b'\n') {
        // hierarchy-ID:controllers:path (the path may contain ':')
        let mut it = line.splitn(3, |&c| c == b':');
        let (Some(id), Some(controllers), Some(path)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        if id == b"0" && controllers.is_empty() {
            v2 = path.to_vec();
        } else if v1_id.is_empty() {
            v1_id = container_id(path);
        }
    }
    let id = container_id(&v2);
    (v2, if id.is_empty() { v1_id } else { id })
}

/// The container id in a cgroup path: the innermost component that is 64 hex digits, or
/// ends in `-` and 64 hex digits, less a `.scope`/`.slice` suffix (`docker-ID.scope`,
/// `libpod-ID`, `cri-containerd-ID.scope`, `crio-ID.scope`, kubepods' `…/pod<uid>/ID`,
/// cgroupfs drivers' `/docker/ID`); a `*-conmon-ID` component (podman's and CRI-O's
/// monitor, outside the container) is none. Lowercase; empty when there is none.
pub fn container_id(path: &[u8]) -> String {
    let is_id = |s: &[u8]| s.len() == 64 && s.iter().all(u8::is_ascii_hexdigit);
    for comp in path.rsplit(|&c| c == b'/') {
        let c = comp
            .strip_suffix(b".scope")
            .or_else(|| comp.strip_suffix(b".slice"))
            .unwrap_or(comp);
        let (prefix, id) = match c.iter().rposition(|&b| b == b'-') {
            Some(i) => (&c[..=i], &c[i + 1..]),
            None => (&c[..0], c),
        };
        if !is_id(id) {
            continue;
        }
        if prefix.ends_with(b"conmon-") {
            return String::new();
        }
        return String::from_utf8_lossy(id).to_ascii_lowercase();
    }
    String::new()
}

/// The path under which the recorder can open a file that `pid` sees at `path` (its root
/// may differ: containers).
pub fn path_in(pid: u32, path: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let mut p = PathBuf::from(format!("/proc/{pid}/root"));
    p.push(std::ffi::OsStr::from_bytes(
        path.strip_prefix(b"/").unwrap_or(path),
    ));
    p
}

/// The start time of `pid` in clock ticks since boot (with the pid, names one process).
pub fn start_ticks(pid: u32) -> Option<u64> {
    comm_and_start(pid).map(|(_, t)| t)
}

/// `pid`'s comm (as bytes: it may hold any) and start time, from one read of its stat.
pub fn comm_and_start(pid: u32) -> Option<(Vec<u8>, u64)> {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    // comm may contain spaces and parentheses: it ends at the last ')'.
    let open = stat.iter().position(|&c| c == b'(')?;
    let close = stat.iter().rposition(|&c| c == b')')?;
    let after = std::str::from_utf8(stat.get(close + 1..)?).ok()?;
    let start = after.split_whitespace().nth(19)?.parse().ok()?;
    Some((stat.get(open + 1..close)?.to_vec(), start))
}

/// Whether `pid` is stopped, or has a SIGSTOP pending (sent, not yet acted on): a child
/// held at its fork (alloc_fork). None when the process is gone.
pub fn stopped_or_stopping(pid: u32) -> Option<bool> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let sigstop = 1u64 << (libc::SIGSTOP - 1);
    let mut held = false;
    for line in status.lines() {
        if let Some(v) = line.strip_prefix("State:") {
            held |= matches!(v.trim_start().chars().next(), Some('T' | 't'));
        } else if let Some(v) = line
            .strip_prefix("SigPnd:")
            .or_else(|| line.strip_prefix("ShdPnd:"))
        {
            held |= u64::from_str_radix(v.trim(), 16).is_ok_and(|m| m & sigstop != 0);
        }
    }
    Some(held)
}

pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// Maps `len` bytes of `fd` shared, readable and writable (a perf ring, a BPF array map, a
/// memfd); the caller unmaps them.
pub fn map_shared(fd: std::os::fd::BorrowedFd<'_>, len: usize) -> std::io::Result<*mut u8> {
    use std::os::fd::AsRawFd;
    // SAFETY: a new mapping chosen by the kernel; nothing is read or written here.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(p.cast())
}

pub fn clock_ticks() -> u64 {
    // SAFETY: as above.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) as u64 }
}

/// Number of possible CPUs ("0-3" style list in /sys).
pub fn possible_cpus() -> io::Result<usize> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let mut n = 0;
    for part in s.trim().split(',') {
        let last = part.split('-').next_back().unwrap_or("0");
        n = n.max(
            last.parse::<usize>()
                .map_err(|_| io::Error::other("bad cpu list"))?
                + 1,
        );
    }
    Ok(n)
}

/// The online CPUs ("0-3,5" style list in /sys).
pub fn online_cpus() -> io::Result<Vec<u32>> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/online")?;
    let bad = || io::Error::other("bad cpu list");
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let mut it = part.splitn(2, '-');
        let a: u32 = it.next().unwrap_or("").parse().map_err(|_| bad())?;
        let b: u32 = match it.next() {
            Some(b) => b.parse().map_err(|_| bad())?,
            None => a,
        };
        if b < a || b - a > 65536 {
            return Err(bad());
        }
        out.extend(a..=b);
    }
    Ok(out)
}

pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .unwrap_or_default()
        .trim()
        .into()
}

pub fn uname() -> (String, String, String) {
    // SAFETY: utsname is plain data; uname fills it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    unsafe { libc::uname(&mut u) };
    let f = |b: &[libc::c_char]| {
        // SAFETY: uname NUL-terminates every field.
        unsafe { std::ffi::CStr::from_ptr(b.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    };
    (f(&u.nodename), f(&u.release), f(&u.machine))
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_maps_lines() {
        let m = super::parse_maps(b"55d0a1e00000-55d0a1e02000 r-xp 00002000 fd:01 1234   /usr/bin/a b\n7ffd1000-7ffd2000 rw-p 00000000 00:00 0 [stack]\n");
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].start, 0x55d0a1e00000);
        assert_eq!(m[0].perms, 5);
        assert_eq!(m[0].offset, 0x2000);
        assert_eq!(m[0].dev, (0xfd << 20) | 1);
        assert_eq!(m[0].inode, 1234);
        assert_eq!(m[0].path, b"/usr/bin/a b");
        assert_eq!(m[1].path, b"[stack]");
        assert_eq!(m[1].perms, 3);
    }

    const ID: &str = "4f3c2b1a00112233445566778899aabbccddeeff00112233445566778899aabb";

    #[test]
    fn finds_container_ids_in_cgroup_paths() {
        use super::container_id;
        let id = |p: String| container_id(p.as_bytes());
        assert_eq!(id(format!("/system.slice/docker-{ID}.scope")), ID);
        assert_eq!(id(format!("/docker/{ID}")), ID);
        assert_eq!(
            id(format!("/machine.slice/libpod-{ID}.scope/container")),
            ID
        );
        assert_eq!(
            id(format!(
                "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}"
            )),
            ID
        );
        assert_eq!(
            id(format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0a1b2c3d_4e5f_6789_abcd_ef0123456789.slice/cri-containerd-{ID}.scope")),
            ID
        );
        assert_eq!(
            id(format!(
                "/kubepods/besteffort/pod0a1b2c3d-4e5f-6789-abcd-ef0123456789/{ID}"
            )),
            ID
        );
        assert_eq!(id(format!("/kubepods.slice/crio-{ID}.scope")), ID);
        assert_eq!(id(format!("/docker-{}.scope", ID.to_uppercase())), ID);
        assert_eq!(id(format!("/machine.slice/libpod-conmon-{ID}.scope")), "");
        assert_eq!(id("/".into()), "");
        assert_eq!(id("/user.slice/user-1000.slice/session-2.scope".into()), "");
        assert_eq!(id(format!("/docker-{}.scope", &ID[1..])), "");
        assert_eq!(id(format!("/x/docker-{ID}x.scope")), "");
    }

    #[test]
    fn reads_the_v2_path_and_falls_back_to_v1_for_the_id() {
        let text = format!("12:pids:/docker/{ID}\n1:name=systemd:/docker/{ID}\n0::/\n");
        assert_eq!(
            super::parse_cgroup(text.as_bytes()),
            (b"/".to_vec(), ID.to_string())
        );
        let text = format!("0::/system.slice/docker-{ID}.scope\n");
        let (path, id) = super::parse_cgroup(text.as_bytes());
        assert_eq!(
            path,
            format!("/system.slice/docker-{ID}.scope").into_bytes()
        );
        assert_eq!(id, ID);
        assert_eq!(super::parse_cgroup(b"0::/a:b\n").0, b"/a:b");
        assert_eq!(super::parse_cgroup(b""), (Vec::new(), String::new()));
    }

    #[test]
    fn reads_nested_pids() {
        let s = "Name:\tx\nNSpid:\t4242\t17\t1\nNSpgid:\t1\n";
        assert_eq!(super::parse_ns_pids(s), vec![4242, 17, 1]);
        assert_eq!(super::parse_ns_pids("Name:\tx\n"), Vec::<u32>::new());
    }

    #[test]
    fn start_times_within_a_tick() {
        let hz = super::clock_ticks();
        let ns = 123_456 * (1_000_000_000 / hz) + 5;
        assert!(super::started_at(123_456, ns));
        assert!(super::started_at(123_455, ns));
        assert!(!super::started_at(123_450, ns));
    }
}
