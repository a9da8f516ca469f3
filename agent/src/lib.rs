//! `ebrec agent`: a long-running recorder for systemd. It records the targets (by pid,
//! command name, cgroup, or all; processes that start later are picked up) in time
//! windows: each window is a trace file of its own, kept on bounded disk, and/or pushed to
//! the profiling backends (Pyroscope, Parca, OTLP) as one profile per window and kind;
//! `--metrics ADDR` serves ebrec's health and per-target latency histograms to Prometheus.
pub mod latency;
pub mod metrics;
pub mod push;

use anyhow::{bail, Context, Result};
use ebtrace_record::config::RecordConfig as RecordArgs;
use ebtrace_record::host::{self, clock_ns};
use ebtrace_record::{Followed, Recording};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct AgentArgs {
    /// Record processes whose command name (comm, or the executable's file name) matches
    /// this regular expression, including ones that start later. Repeatable.
    #[cfg_attr(feature = "cli", arg(long, value_name = "REGEX"))]
    pub comm: Vec<String>,
    /// Record the processes of this cgroup (v2; a path under /sys/fs/cgroup or relative to
    /// it: a systemd service like system.slice/nginx.service, or a container's), including
    /// ones that start later. Repeatable.
    #[cfg_attr(feature = "cli", arg(long, value_name = "PATH"))]
    pub cgroup: Vec<PathBuf>,
    /// One trace file per window of this many seconds (and one push per window and kind).
    #[cfg_attr(feature = "cli", arg(long, value_name = "SECS", default_value_t = 10))]
    pub window: u64,
    /// Window files kept on disk (the newest; 0: each is deleted once pushed).
    #[cfg_attr(feature = "cli", arg(long, value_name = "N", default_value_t = 6))]
    pub keep: u32,
    /// Push each window's profiles: pyroscope+http(s)://HOST:PORT, parca+http(s)://HOST:PORT,
    /// otlp+http(s)://HOST:PORT. Repeatable.
    #[cfg_attr(feature = "cli", arg(long, value_name = "URL"))]
    pub push: Vec<String>,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub profile: push::ProfileFlags,
    /// Serve Prometheus metrics on ADDR (e.g. 127.0.0.1:9464): ebrec's health, pushes and
    /// drops, per-target latency histograms.
    #[cfg_attr(feature = "cli", arg(long, value_name = "ADDR"))]
    pub metrics: Option<String>,
    #[cfg_attr(feature = "cli", command(flatten))]
    pub record: RecordArgs,
}

/// A closed window on its way to the worker (metrics, pushes).
pub struct Job {
    pub path: PathBuf,
    /// The window's bounds, realtime ns.
    pub from_ns: u64,
    pub until_ns: u64,
    /// Called once the worker is done with the file (it may then be deleted).
    pub done: Box<dyn FnOnce() + Send>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("path", &self.path)
            .field("from_ns", &self.from_ns)
            .field("until_ns", &self.until_ns)
            .finish_non_exhaustive()
    }
}

/// What the worker thread does with each closed window (and, with `None`, at the end).
pub type Process = Box<dyn FnMut(WorkerJob) + Send>;

/// A window, or the end of the recording (`None`).
#[derive(Debug)]
pub struct WorkerJob(Option<Job>);

/// A process's metric series stay this long after it is gone (then they are dropped).
const SERIES_GRACE: Duration = Duration::from_secs(300);

/// Closed windows waiting for the worker beyond this many are not pushed (counted): a slow
/// or dead backend never holds the recording.
const WORKER_QUEUE: usize = 4;

/// How often /proc is read for new processes of --comm and --cgroup: a process is followed
/// within about this long of its start (its events before are not seen).
const SCAN_EVERY: Duration = Duration::from_millis(100);

/// A pid as the last /proc pass saw it.
#[derive(Clone, Copy, Debug)]
struct Seen {
    /// Start time, clock ticks since boot (a reused pid has another).
    start: u64,
    /// Hashes of its comm and (with --cgroup) its cgroup path: an exec or a move changes them.
    comm: u64,
    cgroup: u64,
    /// Whether it matched (and is followed).
    hit: bool,
}

/// The agent's work once a second on the recording thread (its metrics).
pub type EachSecond = Box<dyn FnMut(&mut Recording<'_>, &Hooks)>;

/// The agent's part of the recording loop (`ebtrace_record::Hooks`).
pub struct Hooks {
    comm: Vec<regex::Regex>,
    cgroups: Vec<String>,
    /// Processes looked at already, as the last pass saw them.
    seen: HashMap<u32, Seen>,
    last_scan: Instant,
    scans: u64,
    /// The host's last pid created (/proc/loadavg) when the last pass began, and whether that
    /// pass left a young process that did not match: a pass between checks with neither a
    /// new pid nor one of those has nothing to look at and reads nothing else.
    last_pid: Option<u64>,
    young_left: bool,
    window: Duration,
    window_started: Instant,
    window_start_real: u64,
    output: PathBuf,
    keep: u32,
    max_size: Option<u64>,
    quiet: bool,
    /// Window files the worker still reads: pruning leaves them.
    in_use: Arc<Mutex<HashSet<PathBuf>>>,
    /// Windows are pushed (--push): each kept window the pushers are through with gets its
    /// `.pushed` mark, and a restarted agent pushes the kept windows without one.
    pushes: bool,
    worker: Option<(SyncSender<Job>, std::thread::JoinHandle<()>)>,
    /// Per-second work (metrics) on the recording thread.
    pub each_second: Option<EachSecond>,
    last_second: Instant,
    pub windows: u64,
    /// Windows not handed to the worker because it was behind.
    pub windows_behind: u64,
    /// Windows not written: a full disk, the directory removed or read-only.
    pub windows_disk: u64,
    /// Since when windows cannot be written whole, and why (one line at each change).
    disk: Option<String>,
    pub followed: u64,
    /// Per ring buffer (named as its BPF object: alloc, lock, profile, sampler, system), the
    /// largest share of it one drain found unread since the last second.
    pub ring_fill: std::collections::BTreeMap<&'static str, f64>,
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks")
            .field("output", &self.output)
            .finish_non_exhaustive()
    }
}

impl ebtrace_record::Hooks for Hooks {
    fn selects(&self) -> bool {
        Hooks::selects(self)
    }
    fn scan(&mut self) -> Vec<u32> {
        Hooks::scan(self)
    }
    fn started(&mut self, r: &mut Recording<'_>) -> Result<()> {
        Hooks::started(self, r)
    }
    fn ring_drained(&mut self, ring: &'static str, fill: f64) {
        let f = self.ring_fill.entry(ring).or_insert(0.0);
        *f = f.max(fill);
    }
    fn tick(&mut self, r: &mut Recording<'_>) -> Result<()> {
        Hooks::tick(self, r)
    }
    fn finished(&mut self) -> Result<()> {
        Hooks::finished(self)
    }
}

/// Where the cgroup v2 hierarchy is mounted: /sys/fs/cgroup, or /sys/fs/cgroup/unified on
/// a host in systemd's hybrid mode (v1 controllers beside it).
pub fn cgroup2_root() -> PathBuf {
    let mi = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    mi.lines()
        .find_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            (post.split(' ').next()? == "cgroup2")
                .then(|| pre.split(' ').nth(4).map(PathBuf::from))
                .flatten()
        })
        .unwrap_or_else(|| PathBuf::from("/sys/fs/cgroup"))
}

/// A cgroup as /proc/PID/cgroup writes it: `/system.slice/x.service` (given as that, as a
/// path relative to the hierarchy, or as its directory).
fn cgroup_key(p: &Path) -> String {
    let root = cgroup2_root();
    let p = p.strip_prefix(&root).unwrap_or(p);
    let s = p.to_string_lossy();
    format!("/{}", s.trim_matches('/'))
}

/// The cgroup v2 path of `pid` (`0::PATH`), if it has one.
pub fn cgroup_of(pid: u32) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|p| p.trim().to_string())
}

/// The last pid the kernel handed out (in this pid namespace), from /proc/loadavg's fifth
/// field: unchanged, no process or thread was created since.
fn last_pid_created() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/loadavg").ok()?;
    s.split_whitespace().nth(4)?.parse().ok()
}

fn comm_of(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim_end().to_string())
}

impl Hooks {
    /// Whether targets are found while the agent runs (--comm, --cgroup).
    pub fn selects(&self) -> bool {
        !self.comm.is_empty() || !self.cgroups.is_empty()
    }

    fn matches(&self, pid: u32) -> bool {
        // Kernel threads have no executable: never targets.
        let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe")) else {
            return false;
        };
        if !self.comm.is_empty() {
            let name = exe
                .file_name()
                .map(|n| {
                    n.to_string_lossy()
                        .trim_end_matches(" (deleted)")
                        .to_string()
                })
                .unwrap_or_default();
            let comm = comm_of(pid).unwrap_or_default();
            if !self
                .comm
                .iter()
                .any(|r| r.is_match(&comm) || r.is_match(&name))
            {
                return false;
            }
        }
        if !self.cgroups.is_empty() {
            let Some(cg) = cgroup_of(pid) else {
                return false;
            };
            if !self.cgroups.iter().any(|c| {
                c == "/"
                    || cg == *c
                    || cg
                        .strip_prefix(c.as_str())
                        .is_some_and(|r| r.starts_with('/'))
            }) {
                return false;
            }
        }
        true
    }

    /// The processes that match --comm and --cgroup and were not seen before. Every pass
    /// (100 ms) reads /proc's directory and looks at each new pid, and again at those younger
    /// than 2 s that did not match (a shell's fork that execs into the service); a pass
    /// that has neither (the last pid created is the same) reads only /proc/loadavg. Every tenth
    /// pass (1 s) reads each seen pid's stat (one read: its start time, so a reused pid is
    /// a new process, and its comm, which an exec changes), and with --cgroup its cgroup:
    /// a pid that did not match is looked at again when either changed. Every hundredth pass
    /// (10 s) looks again at every pid that did not match. (Reading every pid's stat on
    /// every pass cost 11.8% of a core with 1,000 idle processes.)
    pub fn scan(&mut self) -> Vec<u32> {
        self.last_scan = Instant::now();
        if !self.selects() {
            return Vec::new();
        }
        self.scans += 1;
        let check = self.scans % 10 == 1;
        let full = self.scans % 100 == 1;
        let last_pid = last_pid_created();
        if !check && !self.young_left && last_pid.is_some() && last_pid == self.last_pid {
            return Vec::new();
        }
        self.last_pid = last_pid;
        self.young_left = false;
        let me = std::process::id();
        let hz = host::clock_ticks().max(1);
        let now_ticks = clock_ns(libc::CLOCK_BOOTTIME) / (1_000_000_000 / hz);
        let mut now_seen = HashMap::with_capacity(self.seen.len());
        let mut found = Vec::new();
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return found;
        };
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if pid == me {
                continue;
            }
            let known = self.seen.get(&pid).copied();
            let young = |t: u64| now_ticks.saturating_sub(t) < 2 * hz;
            // Between checks a pid seen before is not read, unless it is young and did not
            // match.
            if let Some(k) = known {
                if !check && (k.hit || !young(k.start)) {
                    now_seen.insert(pid, k);
                    continue;
                }
            }
            let Some(now) = self.identity(pid) else {
                continue;
            };
            let hit = match known {
                Some(k) if k.start == now.start && k.hit => true,
                Some(k)
                    if k.start == now.start
                        && k.comm == now.comm
                        && k.cgroup == now.cgroup
                        && !full
                        && !young(k.start) =>
                {
                    false
                }
                _ => {
                    let m = self.matches(pid);
                    if m {
                        found.push(pid);
                    }
                    m
                }
            };
            self.young_left |= !hit && young(now.start);
            now_seen.insert(pid, Seen { hit, ..now });
        }
        self.seen = now_seen;
        found.sort_unstable();
        found
    }

    /// What a pass reads of a pid to tell whether it changed: its stat (start time, comm)
    /// and, with --cgroup, its cgroup. None: gone.
    fn identity(&self, pid: u32) -> Option<Seen> {
        use std::hash::{Hash, Hasher};
        let (comm, start) = host::comm_and_start(pid)?;
        let hash = |b: &[u8]| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            b.hash(&mut h);
            h.finish()
        };
        let comm = hash(&comm);
        let cgroup = if self.cgroups.is_empty() {
            0
        } else {
            hash(cgroup_of(pid)?.as_bytes())
        };
        Some(Seen {
            start,
            comm,
            cgroup,
            hit: false,
        })
    }

    /// Makes `pid` a target while recording.
    fn follow(&mut self, r: &mut Recording<'_>, pid: u32) -> Result<()> {
        match r.follow(pid)? {
            // A child of a target, followed from its fork already; or gone already.
            Followed::Known | Followed::Gone => return Ok(()),
            Followed::New { alloc_error } => {
                if let Some(e) = alloc_error {
                    eprintln!("ebrec agent: --alloc: pid {pid}: {e:#}");
                }
            }
        }
        self.followed += 1;
        if !self.quiet {
            eprintln!(
                "ebrec agent: following pid {pid} ({})",
                comm_of(pid).unwrap_or_default()
            );
        }
        Ok(())
    }

    pub fn started(&mut self, _r: &mut Recording<'_>) -> Result<()> {
        self.window_started = Instant::now();
        self.window_start_real = clock_ns(libc::CLOCK_REALTIME);
        Ok(())
    }

    /// Once per pass of the recording loop: new targets (every second), the window's end,
    /// the per-second work.
    pub fn tick(&mut self, r: &mut Recording<'_>) -> Result<()> {
        if self.selects() && self.last_scan.elapsed() >= SCAN_EVERY {
            for pid in self.scan() {
                self.follow(r, pid)?;
            }
        }
        if self.disk.is_none() {
            if let Some(f) = r.write_fault() {
                let why = f
                    .error
                    .io_error()
                    .map_or(f.error.to_string(), |e| e.to_string());
                self.disk_fault(&format!("{why}, writing {}", self.output.display()));
            }
        }
        let hangup = ebtrace_record::take_hangup();
        if hangup && !self.quiet {
            eprintln!("ebrec agent: SIGHUP: the window closes now, a new one starts");
        }
        if hangup || self.window_started.elapsed() >= self.window {
            let closed = self.closed_name();
            let done = r.close_window(&closed)?;
            self.window_done(closed, done);
        }
        if self.last_second.elapsed() >= Duration::from_secs(1) {
            self.last_second = Instant::now();
            if let Some(mut f) = self.each_second.take() {
                f(r, self);
                self.each_second = Some(f);
            }
            self.ring_fill.values_mut().for_each(|f| *f = 0.0);
        }
        Ok(())
    }

    /// A window's close: its file to the worker, or counted as not written; the state
    /// lines of the disk.
    fn window_done(&mut self, closed: PathBuf, done: ebtrace_record::WindowClosed) {
        match &done.not_written {
            None => self.window_closed(closed),
            Some(why) => {
                self.windows_disk += 1;
                self.window_started = Instant::now();
                self.window_start_real = clock_ns(libc::CLOCK_REALTIME);
                if self.disk.is_none() {
                    self.disk_fault(why);
                }
            }
        }
        if let Some(why) = &done.next {
            if self.disk.is_none() {
                self.disk_fault(why);
            }
        }
        if self.disk.is_some() {
            if done.not_written.is_none() && !done.cut && done.next.is_none() {
                self.disk = None;
                if !self.quiet {
                    eprintln!(
                        "ebrec agent: writing windows again ({} not written in all)",
                        self.windows_disk
                    );
                }
            } else {
                // Room for the next one: the oldest window kept goes.
                self.free_oldest();
            }
        }
    }

    /// The first write fault or file not created or moved of a run of them: one line, and
    /// the oldest window kept freed.
    fn disk_fault(&mut self, why: &str) {
        self.disk = Some(why.to_string());
        let freed = self.free_oldest();
        if !self.quiet {
            eprintln!(
                "ebrec agent: cannot write windows ({why}): each is dropped and counted (ebrec_windows_dropped_total{{reason=\"disk\"}}) until one can be written again{}",
                match freed {
                    Some(p) => format!("; freed the oldest kept window, {}", p.display()),
                    None => String::new(),
                }
            );
        }
    }

    /// Removes the oldest kept window the worker does not read; which one.
    fn free_oldest(&self) -> Option<PathBuf> {
        let in_use = self.in_use.lock().unwrap();
        let oldest = self
            .kept_windows()
            .into_iter()
            .map(|f| f.0)
            .find(|p| !in_use.contains(p))?;
        remove_window(&oldest).ok().map(|()| oldest)
    }

    /// After the loop: the last (partial) window is closed like the others, and the worker
    /// finishes what it has.
    pub fn finished(&mut self) -> Result<()> {
        let closed = self.closed_name();
        if std::fs::metadata(&self.output).is_ok_and(|m| m.len() == 0) {
            // A full disk cut it before its first chunk: nothing to read.
            let _ = std::fs::remove_file(&self.output);
            self.windows_disk += 1;
        }
        if self.output.exists() {
            match std::fs::rename(&self.output, &closed) {
                Ok(()) => self.window_closed(closed),
                Err(e) => {
                    self.windows_disk += 1;
                    eprintln!(
                        "ebrec agent: the last window is not kept: cannot rename {} to {}: {e}",
                        self.output.display(),
                        closed.display()
                    );
                }
            }
        }
        if let Some((tx, h)) = self.worker.take() {
            drop(tx);
            let _ = h.join();
        }
        self.prune();
        if !self.quiet {
            eprintln!(
                "ebrec agent: {} windows, {} not handed to the worker (it was behind), {} not written (disk), {} processes followed after the start",
                self.windows, self.windows_behind, self.windows_disk, self.followed
            );
        }
        Ok(())
    }

    /// OUTPUT's stem with the window's start (UTC) and `.pb.zst`: names sort by time.
    fn closed_name(&self) -> PathBuf {
        let stamp = ebtrace_analyze::time::compact_utc(self.window_start_real);
        let s = self.output.to_string_lossy();
        let stem = s.strip_suffix(".pb.zst").unwrap_or(&s);
        let mut p = PathBuf::from(format!("{stem}.{stamp}.pb.zst"));
        let mut k = 1;
        while p.exists() {
            // `_` sorts after the `.` of the first name of the second ('-' sorted before
            // it: a window closed early by SIGHUP came before its elder, and pruning, which
            // goes by name, took the newer one).
            p = PathBuf::from(format!("{stem}.{stamp}_{k}.pb.zst"));
            k += 1;
        }
        p
    }

    fn window_closed(&mut self, closed: PathBuf) {
        let until = clock_ns(libc::CLOCK_REALTIME);
        let from = std::mem::replace(&mut self.window_start_real, until);
        self.window_started = Instant::now();
        self.windows += 1;
        if let Some((tx, _)) = &self.worker {
            self.in_use.lock().unwrap().insert(closed.clone());
            let in_use = self.in_use.clone();
            let done = window_done_fn(in_use, closed.clone(), self.keep == 0, self.pushes);
            let job = Job {
                path: closed,
                from_ns: from,
                until_ns: until,
                done,
            };
            match tx.try_send(job) {
                Ok(()) => {}
                Err(TrySendError::Full(j)) | Err(TrySendError::Disconnected(j)) => {
                    self.windows_behind += 1;
                    eprintln!(
                        "ebrec agent: the worker is {WORKER_QUEUE} windows behind: {} is not pushed",
                        j.path.display()
                    );
                    (j.done)();
                }
            }
        }
        self.prune();
    }

    /// Keeps the newest `keep` window files (and at most `max_size` bytes of them), never
    /// one the worker still reads.
    fn prune(&self) {
        let files = self.kept_windows();
        let in_use = self.in_use.lock().unwrap();
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        let mut count = files.len();
        for (p, len) in &files {
            let over = count > self.keep as usize || self.max_size.is_some_and(|m| total > m);
            if !over {
                break;
            }
            if in_use.contains(p) {
                continue;
            }
            if remove_window(p).is_ok() {
                total -= len;
                count -= 1;
            }
        }
    }

    /// The closed window files in OUTPUT's directory and their sizes, oldest first.
    fn kept_windows(&self) -> Vec<(PathBuf, u64)> {
        let s = self.output.to_string_lossy();
        let stem = s.strip_suffix(".pb.zst").unwrap_or(&s).to_string();
        let Some(dir) = self.output.parent() else {
            return Vec::new();
        };
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        let base = Path::new(&stem)
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        let mut files: Vec<(PathBuf, u64)> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().to_string();
                let rest = name.strip_prefix(&base)?.strip_prefix('.')?;
                let stamp = rest.strip_suffix(".pb.zst")?;
                (stamp.len() >= 16 && stamp.as_bytes()[8] == b'T').then_some(())?;
                Some((e.path(), e.metadata().ok()?.len()))
            })
            .collect();
        files.sort();
        files
    }
}

impl Hooks {
    /// Before the recording: what an earlier run left. Its last window, cut by a kill (the
    /// open OUTPUT), is kept as a closed window (it reads up to its last whole chunk); with
    /// --push, the kept windows without a `.pushed` mark (the pushers were not through with
    /// them when it stopped) go to the worker, oldest first, from a thread of their own so
    /// that a slow backend does not hold the recording's start. At most a window whose
    /// push ended as the earlier run was killed, before its mark, is pushed twice.
    pub fn resume(&mut self) {
        if std::fs::metadata(&self.output).is_ok_and(|m| m.len() > 0) {
            let end = modified_ns(&self.output).unwrap_or(self.window_start_real);
            let now = std::mem::replace(&mut self.window_start_real, end);
            let closed = self.closed_name();
            self.window_start_real = now;
            match std::fs::rename(&self.output, &closed) {
                Ok(()) if !self.quiet => eprintln!(
                    "ebrec agent: the last window of an earlier run (cut: no trailer) kept as {}",
                    closed.display()
                ),
                Ok(()) => {}
                Err(e) => eprintln!(
                    "ebrec agent: the last window of an earlier run, {}, is overwritten: cannot rename it to {}: {e}",
                    self.output.display(),
                    closed.display()
                ),
            }
        }
        let Some((tx, _)) = &self.worker else {
            return;
        };
        if !self.pushes {
            return;
        }
        let todo: Vec<PathBuf> = self
            .kept_windows()
            .into_iter()
            .map(|(p, _)| p)
            .filter(|p| !pushed_mark(p).exists())
            .collect();
        if todo.is_empty() {
            return;
        }
        if !self.quiet {
            eprintln!(
                "ebrec agent: {} windows of an earlier run not pushed yet: pushing them, oldest first",
                todo.len()
            );
        }
        let mut jobs = Vec::new();
        for path in todo {
            // A cut window has no trailer to end it: its file's last write does.
            let written = modified_ns(&path).unwrap_or(0);
            let Ok((from_ns, until_ns)) = push::trace_bounds(&path)
                .map(|(f, u)| (f, if written > f { u.max(written) } else { u }))
            else {
                eprintln!(
                    "ebrec agent: {} does not read: not pushed (kept)",
                    path.display()
                );
                continue;
            };
            self.in_use.lock().unwrap().insert(path.clone());
            let done = window_done_fn(self.in_use.clone(), path.clone(), self.keep == 0, true);
            jobs.push(Job {
                path,
                from_ns,
                until_ns,
                done,
            });
        }
        let tx = tx.clone();
        let _ = std::thread::Builder::new()
            .name("ebrec-agent-resume".into())
            .spawn(move || {
                for j in jobs {
                    if let Err(e) = tx.send(j) {
                        (e.0.done)();
                    }
                }
            });
    }
}

/// A file's last write, realtime ns.
fn modified_ns(p: &Path) -> Option<u64> {
    let t = std::fs::metadata(p).and_then(|m| m.modified()).ok()?;
    Some(t.duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos() as u64)
}

/// The `.pushed` mark of a window file.
fn pushed_mark(window: &Path) -> PathBuf {
    let mut s = window.as_os_str().to_owned();
    s.push(".pushed");
    PathBuf::from(s)
}

/// A window file and its mark removed.
fn remove_window(p: &Path) -> std::io::Result<()> {
    std::fs::remove_file(p)?;
    let _ = std::fs::remove_file(pushed_mark(p));
    Ok(())
}

/// What the worker calls when it is through with a window: it is no longer in use, and it
/// is deleted (--keep 0) or, when pushed, marked so.
fn window_done_fn(
    in_use: Arc<Mutex<HashSet<PathBuf>>>,
    path: PathBuf,
    delete: bool,
    pushes: bool,
) -> Box<dyn FnOnce() + Send> {
    Box::new(move || {
        in_use.lock().unwrap().remove(&path);
        if delete {
            let _ = remove_window(&path);
        } else if pushes {
            let _ = std::fs::write(pushed_mark(&path), b"");
        }
    })
}

/// The checks of the agent's flags, before anything is loaded.
fn check(a: &AgentArgs) -> Result<()> {
    let r = &a.record;
    if !r.command.is_empty() {
        bail!("ebrec agent follows running processes (-p PID, --comm REGEX, --cgroup PATH, --all), it does not start a command: use ebrec record -- CMD");
    }
    let by_name = !a.comm.is_empty() || !a.cgroup.is_empty();
    if r.all && (by_name || !r.pid.is_empty()) {
        bail!("--all traces every process: leave out -p, --comm and --cgroup");
    }
    if !r.all && !by_name && r.pid.is_empty() {
        bail!("say what to trace: -p PID, --comm REGEX, --cgroup PATH (each repeatable), or --all");
    }
    if a.window == 0 {
        bail!("--window SECS must be at least 1");
    }
    if r.rotate.is_some() {
        bail!(
            "--rotate is for ebrec record; the agent rotates every --window and keeps --keep files"
        );
    }
    if a.keep == 0 && a.push.is_empty() && a.metrics.is_none() {
        bail!("--keep 0 deletes every window once pushed: add --push URL (or keep some windows)");
    }
    if by_name {
        if !r.func.is_empty() {
            bail!("--func resolves its functions in the targets at the start: use -p PID with --func, not --comm or --cgroup");
        }
        if r.lock.is_some() && matches!(r.lock_mode, ebtrace_record::config::LockModeArg::Uprobe) {
            bail!("--lock-mode uprobe attaches to each target at the start: use the default futex mode with --comm or --cgroup");
        }
        if r.alloc.is_some()
            && (r.alloc_probes == ebtrace_record::config::AllocProbesArg::Classic
                || !ebtrace_record::host::uprobe_sessions())
        {
            bail!("--alloc with --comm or --cgroup attaches the allocator probes to each process found, which needs uprobe sessions (kernel 6.13; this is {}): use -p PID", host::uname().1);
        }
    }
    for c in &a.cgroup {
        let dir = cgroup2_root().join(cgroup_key(c).trim_start_matches('/'));
        if !dir.is_dir() {
            bail!(
                "--cgroup {}: no such cgroup ({} is not a directory)",
                c.display(),
                dir.display()
            );
        }
    }
    Ok(())
}

pub fn run(a: AgentArgs) -> Result<()> {
    check(&a)?;
    let comm = a
        .comm
        .iter()
        .map(|c| {
            regex::Regex::new(c).map_err(|e| {
                // regex's messages are several lines (the pattern, a caret, the error).
                let why = e.to_string();
                let why = why.lines().last().unwrap_or("").trim().to_string();
                anyhow::anyhow!("--comm {c}: not a regular expression ({why})")
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let push_config = a.profile.config(&a.push);
    let mut record = a.record;
    // Always on: the wake hook costs a program run at every wakeup of the machine, for
    // wakers the pushed profiles do not carry (--offcpu-wakers on brings them back).
    record.offcpu_wakers.get_or_insert(false);
    // --max-size bounds the windows kept, not one file.
    let max_size = record.max_size.take();
    if let Some(dir) = record.output.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
    }
    let metrics = match &a.metrics {
        Some(addr) => {
            let m = metrics::Metrics::new();
            let at = m.serve(addr)?;
            if !record.quiet {
                eprintln!("ebrec agent: metrics on http://{at}/metrics");
            }
            Some(m)
        }
        None => None,
    };
    let process = worker_process(push_config, metrics.clone(), record.quiet)?;
    let worker = process.map(|mut p| {
        let (tx, rx) = sync_channel::<Job>(WORKER_QUEUE);
        let h = std::thread::Builder::new()
            .name("ebrec-agent-worker".into())
            .spawn(move || {
                for job in rx {
                    p(WorkerJob(Some(job)));
                }
                p(WorkerJob(None));
            })
            .expect("spawning the agent's worker thread");
        (tx, h)
    });
    let mut hooks = Hooks {
        comm,
        cgroups: a.cgroup.iter().map(|c| cgroup_key(c)).collect(),
        seen: HashMap::new(),
        last_scan: Instant::now(),
        scans: 0,
        last_pid: None,
        young_left: false,
        window: Duration::from_secs(a.window),
        window_started: Instant::now(),
        window_start_real: clock_ns(libc::CLOCK_REALTIME),
        output: record.output.clone(),
        keep: a.keep,
        max_size,
        quiet: record.quiet,
        in_use: Default::default(),
        pushes: !a.push.is_empty(),
        worker,
        each_second: None,
        last_second: Instant::now(),
        windows: 0,
        windows_behind: 0,
        windows_disk: 0,
        disk: None,
        followed: 0,
        ring_fill: Default::default(),
    };
    if let Some(m) = metrics {
        hooks.each_second = Some(Box::new(move |r: &mut Recording<'_>, h: &Hooks| {
            let health = r.health();
            metrics::health(&m, health.families, &health.programs);
            if let Some(u) = health.unseen {
                metrics::unseen(&m, u.tracepoint_dispatch, u.uprobe_traps);
            }
            metrics::targets(&m, health.targets);
            for (ring, fill) in &h.ring_fill {
                metrics::ringbuf_fill(&m, ring, fill.min(1.0));
            }
            metrics::windows(&m, h.windows, h.windows_behind, h.windows_disk);
        }));
    }
    hooks.resume();
    ebtrace_record::run(record, Some(&mut hooks))
}

/// What the worker does with a closed window: its latencies into the metrics, then to the
/// pusher (which converts and pushes on threads of its own and calls `done` when every
/// backend is through with it). None: nothing to do (windows are only kept on disk).
fn worker_process(
    config: push::PushConfig,
    metrics: Option<Arc<metrics::Metrics>>,
    quiet: bool,
) -> Result<Option<Process>> {
    if config.urls.is_empty() && metrics.is_none() {
        return Ok(None);
    }
    let mut pusher = if config.urls.is_empty() {
        None
    } else {
        Some(push::Pusher::new(config, metrics.clone())?)
    };
    let mut failed_once = false;
    let mut gone_at: HashMap<u32, Instant> = HashMap::new();
    let mut last_pushed: HashMap<String, u64> = HashMap::new();
    Ok(Some(Box::new(move |job: WorkerJob| {
        let Some(job) = job.0 else {
            // The end: flush what the backends will still take.
            if let Some(p) = pusher.take() {
                let (st, why) = p.finish(Duration::from_secs(10));
                if let Some(m) = &metrics {
                    push_metrics(m, &st, &mut last_pushed);
                }
                if !quiet {
                    for b in &st.backends {
                        eprintln!(
                            "ebrec agent: {}: {} pushed, {} failed attempts, {} dropped{}",
                            b.url,
                            b.pushed,
                            b.failed,
                            b.dropped,
                            b.last_error
                                .as_deref()
                                .map(|w| format!(" (last error: {w})"))
                                .unwrap_or_default()
                        );
                    }
                    if let Some(w) = why {
                        eprintln!("ebrec agent: the first push dropped: {w}");
                    }
                }
            }
            return;
        };
        if let Some(m) = &metrics {
            // Series of processes gone for SERIES_GRACE are dropped: the number of series
            // stays that of the processes alive or recently gone.
            let now = Instant::now();
            let newly_gone = std::cell::RefCell::new(Vec::new());
            m.retain(|labels| {
                labels.iter().all(|(k, v)| {
                    if k != "pid" {
                        return true;
                    }
                    let Ok(pid) = v.parse::<u32>() else {
                        return true;
                    };
                    match gone_at.get(&pid) {
                        Some(t) => now.duration_since(*t) < SERIES_GRACE,
                        None => {
                            if !Path::new(&format!("/proc/{pid}")).exists() {
                                newly_gone.borrow_mut().push(pid);
                            }
                            true
                        }
                    }
                })
            });
            gone_at.retain(|_, t| now.duration_since(*t) < SERIES_GRACE * 2);
            for p in newly_gone.into_inner() {
                gone_at.entry(p).or_insert(now);
            }
            if let Err(e) = latency::observe_window(m, &job.path) {
                if !failed_once {
                    eprintln!(
                        "ebrec agent: the metrics could not read {}: {e:#}",
                        job.path.display()
                    );
                    failed_once = true;
                }
            }
        }
        match &pusher {
            Some(p) => {
                p.window(job.path, job.from_ns, job.until_ns, job.done);
                if let Some(m) = &metrics {
                    push_metrics(m, &p.stats(), &mut last_pushed);
                }
            }
            None => (job.done)(),
        }
    })))
}

/// The pushers' counts as metrics: pushes by result, drops, queue lengths; the latest push's
/// duration observed once per window in which a push succeeded.
fn push_metrics(m: &metrics::Metrics, st: &push::PushStats, last: &mut HashMap<String, u64>) {
    for b in &st.backends {
        let l = [("backend", b.backend), ("url", b.url.as_str())];
        let help = "Pushes of window profiles to a backend, by result (ok; error: a failed attempt, retried or not).";
        m.set_counter(
            "ebrec_pushes_total",
            help,
            &[l[0], l[1], ("result", "ok")],
            b.pushed as f64,
        );
        m.set_counter(
            "ebrec_pushes_total",
            help,
            &[l[0], l[1], ("result", "error")],
            b.failed as f64,
        );
        metrics::push_queue(m, b.backend, b.queued as usize, b.dropped);
        let before = last.insert(b.url.clone(), b.pushed).unwrap_or(0);
        if b.pushed > before {
            m.observe(
                "ebrec_push_duration_seconds",
                "Time one push to a backend took (the latest of each window, request and response).",
                &[("backend", b.backend)],
                &metrics::PUSH_BOUNDS,
                b.last_latency_ms as f64 / 1e3,
            );
        }
    }
    m.set_counter(
        "ebrec_windows_unpushed_total",
        "Windows the pusher could not convert (unreadable) or dropped because it was behind.",
        &[],
        (st.windows_dropped + st.windows_failed) as f64,
    );
}
