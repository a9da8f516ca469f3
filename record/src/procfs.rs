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
    pub ns_pid: u32,
}

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
    let ns_pid = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("NSpid:"))
                .and_then(|l| l.split_whitespace().last().and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0);
    Ok(ProcInfo {
        ppid,
        start_ticks,
        comm,
        exe,
        cmdline,
        pid_ns,
        ns_pid,
    })
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
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
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
}
