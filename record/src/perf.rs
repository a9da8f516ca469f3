//! perf_event_open, for two jobs libbpf does not do for us:
//! - uprobes with `inherit`, so that a probe on a target also covers the children it forks
//!   from their first instruction, with no race against the recorder attaching to them;
//! - the side band: a dummy software event per CPU whose ring buffer the kernel fills with
//!   MMAP2 (with the build-id read by the kernel), FORK, EXIT and COMM/exec records at the
//!   moment they happen, so a process that exits before user space looks still has its maps.
use perf_event_open_sys as sys;
use std::collections::HashSet;
use std::io;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};

fn open(attr: &mut sys::bindings::perf_event_attr, pid: i32, cpu: i32) -> io::Result<OwnedFd> {
    // SAFETY: attr is a valid, fully initialized perf_event_attr that outlives the call.
    let fd = unsafe {
        sys::perf_event_open(attr, pid, cpu, -1, sys::bindings::PERF_FLAG_FD_CLOEXEC as _)
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A cpu-clock sampling event on `cpu` for every process, `hz` samples per second (the
/// kernel adjusts the period; no hardware PMU is needed). The sampler program filters.
pub fn open_cpu_clock(cpu: i32, hz: u64) -> io::Result<OwnedFd> {
    let mut attr = sys::bindings::perf_event_attr {
        size: std::mem::size_of::<sys::bindings::perf_event_attr>() as u32,
        type_: sys::bindings::PERF_TYPE_SOFTWARE,
        config: u64::from(sys::bindings::PERF_COUNT_SW_CPU_CLOCK),
        ..Default::default()
    };
    attr.__bindgen_anon_1.sample_freq = hz;
    attr.set_freq(1);
    open(&mut attr, -1, cpu)
}

/// Where tracefs is, mounting it if it is not (ebrec runs as root).
fn tracefs() -> io::Result<std::path::PathBuf> {
    for d in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
        let p = std::path::Path::new(d);
        if p.join("uprobe_events").exists() {
            return Ok(p.to_path_buf());
        }
    }
    let target = c"/sys/kernel/tracing";
    // SAFETY: plain mount(2) with NUL-terminated strings.
    let r = unsafe {
        libc::mount(
            c"tracefs".as_ptr(),
            target.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if r != 0 {
        return Err(io::Error::other(format!(
            "tracefs is not mounted and mounting it failed: {}",
            io::Error::last_os_error()
        )));
    }
    Ok("/sys/kernel/tracing".into())
}

/// A uprobe defined in tracefs' uprobe_events, removed again on drop.
///
/// Why not the perf uprobe PMU, which needs no tracefs: an inherited PMU uprobe event is
/// re-initialized in the *forking target's* context, where the kernel re-reads the probe's
/// path through our user pointer; that fails and makes the target's fork() fail with
/// EFAULT (seen here with kernel 6.18). Tracefs probes are tracepoints: inheriting them
/// reads nothing from user memory, so children are traced from their first instruction.
#[derive(Debug)]
pub struct TraceProbe {
    dir: std::path::PathBuf,
    name: String,
    pub id: u64,
}

static PROBE_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn group() -> String {
    format!("ebrec_{}", std::process::id())
}

impl TraceProbe {
    pub fn new(path: &std::path::Path, offset: u64, retprobe: bool) -> io::Result<Self> {
        use std::io::Write;
        let dir = tracefs()?;
        let seq = PROBE_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("{}/p{seq}", group());
        let p = path.to_string_lossy();
        if p.contains(char::is_whitespace) {
            return Err(io::Error::other(format!(
                "cannot probe a path with spaces: {p}"
            )));
        }
        let def = format!(
            "{}:{name} {p}:{offset:#x}",
            if retprobe { 'r' } else { 'p' }
        );
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join("uprobe_events"))?
            .write_all(def.as_bytes())
            .map_err(|e| io::Error::other(format!("defining uprobe {def:?}: {e}")))?;
        let id = std::fs::read_to_string(dir.join("events").join(&name).join("id"))?
            .trim()
            .parse()
            .map_err(|_| io::Error::other("bad tracepoint id"))?;
        Ok(TraceProbe { dir, name, id })
    }

    /// A perf event for this probe on `pid`, inherited by its future children and threads
    /// when `inherit`.
    pub fn open(&self, pid: i32, inherit: bool) -> io::Result<OwnedFd> {
        let mut attr = sys::bindings::perf_event_attr {
            size: std::mem::size_of::<sys::bindings::perf_event_attr>() as u32,
            type_: sys::bindings::PERF_TYPE_TRACEPOINT,
            config: self.id,
            ..Default::default()
        };
        attr.__bindgen_anon_1.sample_period = 1;
        attr.set_inherit(u64::from(inherit));
        if pid == -1 {
            // A system-wide tracepoint event is per CPU; libbpf attaches one program per
            // event, so the caller opens one per CPU.
            return Err(io::Error::other("use open_cpu for pid -1"));
        }
        open(&mut attr, pid, -1)
    }

    /// A perf event for this probe on `pid` that never samples (the probe fires, nothing is
    /// recorded): for timing the trap itself.
    pub fn open_quiet(&self, pid: i32) -> io::Result<OwnedFd> {
        let mut attr = sys::bindings::perf_event_attr {
            size: std::mem::size_of::<sys::bindings::perf_event_attr>() as u32,
            type_: sys::bindings::PERF_TYPE_TRACEPOINT,
            config: self.id,
            ..Default::default()
        };
        attr.__bindgen_anon_1.sample_period = 1 << 62;
        open(&mut attr, pid, -1)
    }

    /// A perf event for every process on one CPU.
    pub fn open_cpu(&self, cpu: i32) -> io::Result<OwnedFd> {
        let mut attr = sys::bindings::perf_event_attr {
            size: std::mem::size_of::<sys::bindings::perf_event_attr>() as u32,
            type_: sys::bindings::PERF_TYPE_TRACEPOINT,
            config: self.id,
            ..Default::default()
        };
        attr.__bindgen_anon_1.sample_period = 1;
        open(&mut attr, -1, cpu)
    }
}

impl Drop for TraceProbe {
    fn drop(&mut self) {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .append(true)
            .open(self.dir.join("uprobe_events"))
        {
            let _ = f.write_all(format!("-:{}", self.name).as_bytes());
        }
    }
}

/// Removes probes left by ebrec processes that died without cleaning up (kill -9).
pub fn remove_stale_probes() {
    use std::io::Write;
    let Ok(dir) = tracefs() else { return };
    let Ok(text) = std::fs::read_to_string(dir.join("uprobe_events")) else {
        return;
    };
    for line in text.lines() {
        // "p:ebrec_123/p4 /path:0x..."
        let Some(name) = line
            .split_whitespace()
            .next()
            .and_then(|d| d.split_once(':'))
            .map(|x| x.1)
        else {
            continue;
        };
        let Some(pid) = name
            .strip_prefix("ebrec_")
            .and_then(|r| r.split('/').next())
        else {
            continue;
        };
        let alive = pid
            .parse::<u32>()
            .is_ok_and(|p| std::path::Path::new(&format!("/proc/{p}")).exists());
        if !alive {
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .append(true)
                .open(dir.join("uprobe_events"))
            {
                let _ = f.write_all(format!("-:{name}").as_bytes());
            }
        }
    }
}

/// Side-band records the recorder uses.
#[derive(Debug, Clone)]
pub enum SideBand {
    Mmap {
        pid: u32,
        time: u64,
        start: u64,
        len: u64,
        pgoff: u64,
        /// (major, minor, inode) when the kernel did not send a build-id.
        inode: Option<(u32, u32, u64)>,
        build_id: Option<Vec<u8>>,
        prot: u32,
        flags: u32,
        path: Vec<u8>,
    },
    /// A new task: a process when pid != ppid, else a thread.
    Fork {
        pid: u32,
        ppid: u32,
        tid: u32,
        time: u64,
    },
    /// A task ended: the process when tid == pid.
    Exit {
        pid: u32,
        tid: u32,
        time: u64,
    },
    Exec {
        pid: u32,
        time: u64,
        comm: Vec<u8>,
    },
    Lost {
        count: u64,
        cpu: u32,
    },
}

impl SideBand {
    /// When it happened (CLOCK_BOOTTIME ns; 0 for a loss).
    pub fn time(&self) -> u64 {
        match self {
            SideBand::Mmap { time, .. }
            | SideBand::Fork { time, .. }
            | SideBand::Exit { time, .. }
            | SideBand::Exec { time, .. } => *time,
            SideBand::Lost { .. } => 0,
        }
    }

    /// Whose it is (0 for a loss).
    pub fn pid(&self) -> u32 {
        match self {
            SideBand::Mmap { pid, .. }
            | SideBand::Fork { pid, .. }
            | SideBand::Exit { pid, .. }
            | SideBand::Exec { pid, .. } => *pid,
            SideBand::Lost { .. } => 0,
        }
    }
}

/// The records of the processes in `watch` among `fresh` and those `held` from the pass
/// before, in time order, into `out`; another process's fresh ones into `held`.
fn select(
    watch: &mut HashSet<u32>,
    held: &mut Vec<SideBand>,
    fresh: Vec<SideBand>,
    out: &mut Vec<SideBand>,
) {
    let mut all: Vec<(bool, SideBand)> = std::mem::take(held)
        .into_iter()
        .map(|r| (true, r))
        .chain(fresh.into_iter().map(|r| (false, r)))
        .collect();
    all.sort_by_key(|(_, r)| r.time());
    for (old, r) in all {
        if follow(watch, &r) {
            out.push(r);
        } else if !old {
            held.push(r); // not a target's so far: dropped after its second pass
        }
    }
}

/// Whether record `r` is of the processes in `watch`, which a fork of one of them joins and
/// the exit of one leaves (a thread's records are its process's; a loss is everyone's).
fn follow(watch: &mut HashSet<u32>, r: &SideBand) -> bool {
    match *r {
        SideBand::Lost { .. } => true,
        SideBand::Fork { pid, ppid, .. } if pid != ppid && watch.contains(&ppid) => {
            watch.insert(pid);
            true
        }
        SideBand::Exit { pid, tid, .. } if pid == tid && watch.contains(&pid) => {
            watch.remove(&pid);
            true
        }
        _ => watch.contains(&r.pid()),
    }
}

/// One CPU's side-band ring buffer.
#[derive(Debug)]
struct Ring {
    fd: OwnedFd,
    base: *mut u8,
    len: usize,
    data_size: usize,
    cpu: u32,
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: base/len are the mapping made in SideBandReader::open_all.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// Reads MMAP2/FORK/EXIT/COMM records for some processes and their children, or for every
/// process.
///
/// One dummy event per CPU for the whole machine, whatever the targets: the records of other
/// processes are dropped here. An event bound to a task (`pid` in perf_event_open) with
/// `inherit`, as this reader opened before, gives every thread of the targets and of their
/// children a perf context of its own, which the scheduler switches out and in at each of
/// their context switches: ~0.3 us more a switch, measured with `perf bench sched pipe`
/// (6.8 us an op untraced, 7.4 with the task-bound side band, 6.9 with the CPU-wide one), and
/// paid under the run queue's lock, on the path of a server's every request.
#[derive(Debug, Default)]
pub struct SideBandReader {
    rings: Vec<Ring>,
    scratch: Vec<u8>,
    /// Every process's records (`add(-1)`), not only those in `watch`.
    all: bool,
    /// The processes whose records are kept (their children join at their fork).
    watch: HashSet<u32>,
    /// Records of processes not watched yet, kept for one more pass: a child's first
    /// records on one CPU may be read before its fork's on another.
    held: Vec<SideBand>,
}

const SAMPLE_ID_LEN: usize = 16; // u32 pid, u32 tid, u64 time

impl SideBandReader {
    /// Follows `pid` and the children it forks from now on (-1: every process). An error
    /// when the process is gone (ESRCH) or the events cannot be opened.
    pub fn add(&mut self, pid: i32, pages: usize) -> io::Result<()> {
        if pid == -1 {
            self.all = true;
        } else {
            // SAFETY: signal 0 only checks that the process exists.
            if unsafe { libc::kill(pid, 0) } != 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::ESRCH) {
                    return Err(e);
                }
            }
            self.follow_from_now(pid as u32);
        }
        if self.rings.is_empty() {
            if let Err(e) = self.open_all(pages) {
                self.rings.clear();
                return Err(e);
            }
        }
        Ok(())
    }

    /// Follows `pid` from now: what it did before, held from the last pass, is dropped, as
    /// an event bound to it would not have seen it (the caller snapshots its maps now).
    fn follow_from_now(&mut self, pid: u32) {
        self.held.retain(|r| r.pid() != pid);
        self.watch.insert(pid);
    }

    /// One dummy event per CPU for every process, with its ring buffer.
    fn open_all(&mut self, pages: usize) -> io::Result<()> {
        let ncpu = crate::procfs::possible_cpus()?;
        for cpu in 0..ncpu {
            let mut attr = sys::bindings::perf_event_attr {
                size: std::mem::size_of::<sys::bindings::perf_event_attr>() as u32,
                type_: sys::bindings::PERF_TYPE_SOFTWARE,
                config: sys::bindings::PERF_COUNT_SW_DUMMY as u64,
                sample_type: (sys::bindings::PERF_SAMPLE_TID | sys::bindings::PERF_SAMPLE_TIME)
                    as u64,
                clockid: libc::CLOCK_BOOTTIME,
                ..Default::default()
            };
            attr.set_mmap(1);
            attr.set_mmap2(1);
            attr.set_comm(1);
            attr.set_comm_exec(1);
            attr.set_task(1);
            attr.set_sample_id_all(1);
            attr.set_use_clockid(1);
            attr.set_build_id(1);
            attr.set_watermark(1);
            attr.__bindgen_anon_2.wakeup_watermark = 1 << 30;
            let fd = match open(&mut attr, -1, cpu as i32) {
                Ok(fd) => fd,
                // CPUs that are possible but offline.
                Err(e) if e.raw_os_error() == Some(libc::ENODEV) => continue,
                Err(e) => return Err(e),
            };
            let page = crate::procfs::page_size();
            let len = page * (1 + pages);
            // mapping a perf fd is how its ring buffer is read
            let base = crate::procfs::map_shared(fd.as_fd(), len)?;
            self.rings.push(Ring {
                fd,
                base: base.cast(),
                len,
                data_size: page * pages,
                cpu: cpu as u32,
            });
        }
        Ok(())
    }

    /// Reads every pending record of every CPU: those of the processes followed.
    pub fn drain(&mut self, out: &mut Vec<SideBand>) {
        if self.all {
            for i in 0..self.rings.len() {
                self.drain_ring(i, out);
            }
            return;
        }
        let mut fresh = Vec::new();
        for i in 0..self.rings.len() {
            self.drain_ring(i, &mut fresh);
        }
        select(&mut self.watch, &mut self.held, fresh, out);
    }

    fn drain_ring(&mut self, i: usize, out: &mut Vec<SideBand>) {
        let ring = &self.rings[i];
        let meta = ring.base.cast::<sys::bindings::perf_event_mmap_page>();
        // SAFETY: meta points at the mapped control page; the kernel writes data_head,
        // we write data_tail, as the perf ABI documents (acquire head, release tail).
        let (head, tail) = unsafe {
            let head = std::ptr::read_volatile(&(*meta).data_head);
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
            (head, (*meta).data_tail)
        };
        let data = unsafe { ring.base.add(crate::procfs::page_size()) };
        let size = ring.data_size as u64;
        let mut pos = tail;
        while pos + 8 <= head {
            let off = (pos % size) as usize;
            let mut hdr = [0u8; 8];
            copy_wrapped(data, ring.data_size, off, &mut hdr);
            let ty = u32::from_ne_bytes(hdr[0..4].try_into().unwrap());
            let misc = u16::from_ne_bytes(hdr[4..6].try_into().unwrap());
            let rsize = u16::from_ne_bytes(hdr[6..8].try_into().unwrap()) as usize;
            if rsize < 8 || pos + rsize as u64 > head {
                break;
            }
            self.scratch.resize(rsize, 0);
            copy_wrapped(data, ring.data_size, off, &mut self.scratch);
            if let Some(r) = parse(ty, misc, &self.scratch[8..], ring.cpu) {
                out.push(r);
            }
            pos += rsize as u64;
        }
        // SAFETY: as above.
        unsafe {
            std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
            std::ptr::write_volatile(&mut (*meta).data_tail, pos);
        }
        let _ = &ring.fd;
    }
}

fn copy_wrapped(data: *const u8, size: usize, off: usize, dst: &mut [u8]) {
    let first = dst.len().min(size - off);
    // SAFETY: off < size and first <= size - off; the rest wraps to the start.
    unsafe {
        std::ptr::copy_nonoverlapping(data.add(off), dst.as_mut_ptr(), first);
        std::ptr::copy_nonoverlapping(data, dst.as_mut_ptr().add(first), dst.len() - first);
    }
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    b.get(i..i + 4)
        .map(|s| u32::from_ne_bytes(s.try_into().unwrap()))
        .unwrap_or(0)
}
fn u64_at(b: &[u8], i: usize) -> u64 {
    b.get(i..i + 8)
        .map(|s| u64::from_ne_bytes(s.try_into().unwrap()))
        .unwrap_or(0)
}

fn cstr(b: &[u8]) -> Vec<u8> {
    b.split(|&c| c == 0).next().unwrap_or_default().to_vec()
}

fn parse(ty: u32, misc: u16, body: &[u8], cpu: u32) -> Option<SideBand> {
    let time_of = |b: &[u8]| u64_at(b, b.len().saturating_sub(8));
    let misc = u32::from(misc);
    match ty {
        sys::bindings::PERF_RECORD_MMAP2 => {
            if body.len() < 72 + SAMPLE_ID_LEN {
                return None;
            }
            let has_build_id = misc & sys::bindings::PERF_RECORD_MISC_MMAP_BUILD_ID != 0;
            let (inode, build_id) = if has_build_id {
                // union { u8 build_id_size; u8, u16 reserved; u8 build_id[20] } at 32
                let n = (body[32] as usize).min(20);
                (None, Some(body[36..36 + n].to_vec()))
            } else {
                (
                    Some((u32_at(body, 32), u32_at(body, 36), u64_at(body, 40))),
                    None,
                )
            };
            Some(SideBand::Mmap {
                pid: u32_at(body, 0),
                start: u64_at(body, 8),
                len: u64_at(body, 16),
                pgoff: u64_at(body, 24),
                inode,
                build_id,
                prot: u32_at(body, 56),
                flags: u32_at(body, 60),
                path: cstr(&body[64..body.len() - SAMPLE_ID_LEN]),
                time: time_of(body),
            })
        }
        sys::bindings::PERF_RECORD_FORK | sys::bindings::PERF_RECORD_EXIT => {
            // u32 pid, ppid, tid, ptid; u64 time
            let (pid, ppid, tid, time) = (
                u32_at(body, 0),
                u32_at(body, 4),
                u32_at(body, 8),
                u64_at(body, 16),
            );
            Some(if ty == sys::bindings::PERF_RECORD_FORK {
                SideBand::Fork {
                    pid,
                    ppid,
                    tid,
                    time,
                }
            } else {
                SideBand::Exit { pid, tid, time }
            })
        }
        sys::bindings::PERF_RECORD_COMM
            if misc & sys::bindings::PERF_RECORD_MISC_COMM_EXEC != 0 =>
        {
            Some(SideBand::Exec {
                pid: u32_at(body, 0),
                comm: cstr(body.get(8..body.len().saturating_sub(SAMPLE_ID_LEN))?),
                time: time_of(body),
            })
        }
        sys::bindings::PERF_RECORD_LOST => Some(SideBand::Lost {
            count: u64_at(body, 8),
            cpu,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mmap(pid: u32, time: u64) -> SideBand {
        SideBand::Mmap {
            pid,
            time,
            start: 0x1000,
            len: 0x1000,
            pgoff: 0,
            inode: None,
            build_id: None,
            prot: 5,
            flags: 2,
            path: b"/bin/x".to_vec(),
        }
    }

    fn pids(v: &[SideBand]) -> Vec<(u32, u64)> {
        v.iter().map(|r| (r.pid(), r.time())).collect()
    }

    #[test]
    fn a_child_read_before_its_fork_is_kept_and_others_dropped() {
        let mut watch = HashSet::from([10]);
        let mut held = Vec::new();
        let mut out = Vec::new();
        // Pass 1: the child's first mapping (another CPU's ring) before its fork is read,
        // a stranger's, and the target's own.
        select(
            &mut watch,
            &mut held,
            vec![mmap(11, 5), mmap(99, 6), mmap(10, 3)],
            &mut out,
        );
        assert_eq!(pids(&out), [(10, 3)]);
        assert_eq!(held.len(), 2);
        // Pass 2: the fork (earlier than the child's mapping) arrives.
        out.clear();
        let fork = SideBand::Fork {
            pid: 11,
            ppid: 10,
            tid: 11,
            time: 4,
        };
        select(&mut watch, &mut held, vec![fork, mmap(11, 7)], &mut out);
        assert_eq!(pids(&out), [(11, 4), (11, 5), (11, 7)]);
        // The stranger's record was dropped after its second pass.
        assert!(held.is_empty());
        // The child's exit leaves the set: a later process with its pid is not followed.
        out.clear();
        let exit = SideBand::Exit {
            pid: 11,
            tid: 11,
            time: 8,
        };
        select(&mut watch, &mut held, vec![exit, mmap(11, 9)], &mut out);
        assert_eq!(pids(&out), [(11, 8)]);
        assert_eq!(watch, HashSet::from([10]));
    }

    #[test]
    fn a_process_followed_later_starts_from_then() {
        let mut r = SideBandReader::default();
        r.watch.insert(10);
        let mut out = Vec::new();
        select(&mut r.watch, &mut r.held, vec![mmap(20, 1)], &mut out);
        assert!(out.is_empty());
        // The agent follows 20 now and snapshots its maps: its mapping before is not replayed.
        r.follow_from_now(20);
        select(&mut r.watch, &mut r.held, vec![mmap(20, 5)], &mut out);
        assert_eq!(pids(&out), [(20, 5)]);
    }
}
