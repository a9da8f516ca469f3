//! `--stack-mode cfi|auto`: the unwind rows of every mapped binary, loaded once per file into
//! BPF maps that every BPF object shares, and each target process's executable mappings, so
//! that the kernel side (`bpf/unwind.bpf.h`) unwinds user stacks without frame pointers and
//! without copying stack memory.
//!
//! - `cfi_rows` / `cfi_pages`: two mmapable arrays (rows, and the per-4 KiB-page index into
//!   them), written through a mapping; each loaded file owns one range of each, from a
//!   first-fit allocator. Their sizes are the `--cfi-memory` budget.
//! - `cfi_files`: per file slot, where its rows and pages are.
//! - `cfi_procs`: per process, its executable mappings sorted by start, with their file slots.
//!
//! A file that does not fit is counted and its frames walk with the frame pointer (auto) or
//! stop there, marked (cfi). Tables no process maps any more stay cached and are evicted,
//! least recently used first, when a new file needs the room.
pub mod rows;

use anyhow::Result;
use ebtrace_bpf::{
    cfi_file, cfi_inode, cfi_map, cfi_proc, CFI_MAX_FILES, CFI_MAX_MAPS, CFI_PAGE_SHIFT,
};
use ebtrace_elf::Elf;
use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::Path;

/// The maps' fds, for the skeletons to reuse before they load.
#[derive(Debug, Clone, Copy)]
pub struct Fds<'a> {
    pub rows: BorrowedFd<'a>,
    pub pages: BorrowedFd<'a>,
    pub files: BorrowedFd<'a>,
    pub procs: BorrowedFd<'a>,
    pub inodes: BorrowedFd<'a>,
    pub early: BorrowedFd<'a>,
}

/// A mapping of a BPF array map's values.
struct Mapped<T> {
    ptr: *mut T,
    len: usize,
}

impl<T> Mapped<T> {
    fn new(map: &MapHandle, len: usize) -> Result<Self> {
        let bytes = (len * std::mem::size_of::<T>()).next_multiple_of(crate::procfs::page_size());
        // A BPF_F_MMAPABLE array map of `len` values of T: the kernel keeps the map alive
        // while mapped, and Drop unmaps it.
        let ptr = crate::procfs::map_shared(map.as_fd(), bytes)
            .map_err(|e| anyhow::anyhow!("mapping the unwind-row map: {e}"))?;
        Ok(Mapped {
            ptr: ptr.cast(),
            len,
        })
    }
    fn write(&mut self, at: usize, vals: &[T])
    where
        T: Copy,
    {
        assert!(at + vals.len() <= self.len);
        // SAFETY: in bounds (checked above) of a live shared mapping of T values.
        unsafe { std::ptr::copy_nonoverlapping(vals.as_ptr(), self.ptr.add(at), vals.len()) };
    }
}

impl<T> Drop for Mapped<T> {
    fn drop(&mut self) {
        let bytes =
            (self.len * std::mem::size_of::<T>()).next_multiple_of(crate::procfs::page_size());
        // SAFETY: the mapping made in `new`.
        unsafe { libc::munmap(self.ptr.cast(), bytes) };
    }
}

/// First-fit ranges of an array.
#[derive(Debug)]
struct Ranges {
    /// free ranges: start -> len
    free: BTreeMap<usize, usize>,
}

impl Ranges {
    fn new(len: usize) -> Self {
        let mut free = BTreeMap::new();
        if len > 0 {
            free.insert(0, len);
        }
        Ranges { free }
    }
    fn alloc(&mut self, n: usize) -> Option<usize> {
        let (&start, &len) = self.free.iter().find(|(_, &l)| l >= n)?;
        self.free.remove(&start);
        if len > n {
            self.free.insert(start + n, len - n);
        }
        Some(start)
    }
    fn release(&mut self, start: usize, n: usize) {
        if n == 0 {
            return;
        }
        let mut start = start;
        let mut n = n;
        if let Some((&s, &l)) = self.free.range(..start).next_back() {
            if s + l == start {
                self.free.remove(&s);
                start = s;
                n += l;
            }
        }
        if let Some(&l) = self.free.get(&(start + n)) {
            self.free.remove(&(start + n));
            n += l;
        }
        self.free.insert(start, n);
    }
}

#[derive(Debug)]
struct Loaded {
    slot: u32,
    rows_at: usize,
    nrows: usize,
    pages_at: usize,
    npages: usize,
    /// the kernel's name of the file (s_dev, i_ino), for a mapping found in BPF
    inodes: Vec<cfi_inode>,
    last_use: u64,
}

/// What happened to the files the targets mapped.
#[derive(Debug, Default, Clone)]
pub struct Stats {
    pub files_loaded: u64,
    pub rows_loaded: u64,
    /// Files with no .eh_frame (or unreadable): their frames have no rows.
    pub files_without_cfi: u64,
    /// Files whose rows did not fit in the budget, by path.
    pub did_not_fit: Vec<String>,
    pub evicted: u64,
    /// Rows with a rule the walk cannot do (kept as "no rule").
    pub rows_unsupported: u64,
    /// Time spent building rows, ns.
    pub build_ns: u64,
    /// Processes with more executable mappings than the kernel side holds.
    pub maps_over_limit: u64,
}

/// The unwind tables in the kernel, and the processes' mappings.
pub struct Tables {
    rows_map: MapHandle,
    pages_map: MapHandle,
    files_map: MapHandle,
    procs_map: MapHandle,
    inodes_map: MapHandle,
    early_map: MapHandle,
    rows: Mapped<u64>,
    pages: Mapped<u64>,
    free_rows: Ranges,
    free_pages: Ranges,
    free_slots: Vec<u32>,
    /// by file key (build-id, or path when there is none)
    files: HashMap<Vec<u8>, Loaded>,
    /// keys without a table, so that they are not tried again
    failed: HashSet<Vec<u8>>,
    /// per process: start -> (end, delta, slot)
    procs: HashMap<u32, BTreeMap<u64, (u64, u64, u32)>>,
    dirty: Vec<u32>,
    /// The number of the last table written (`cfi_proc.gen`: the kernel side caches rows
    /// per table number, so each write gets a new one).
    table_gen: u32,
    /// per file slot: the process mappings that use it (0: evictable)
    users: Vec<u64>,
    clock: u64,
    pub stats: Stats,
    pub budget: u64,
}

impl std::fmt::Debug for Tables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tables")
            .field("files", &self.files.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// An executable mapping of a target process, as `Tables::map_path` takes it.
#[derive(Debug, Clone, Copy)]
pub struct ProcMapping<'a> {
    pub pid: u32,
    /// The mapped range [start, end).
    pub start: u64,
    pub end: u64,
    /// The file offset the range starts at.
    pub pgoff: u64,
    /// The path the kernel or /proc/PID/maps gave (`[vdso]` for the vDSO).
    pub path: &'a [u8],
    /// Where the mapped file can be opened from here (None: no file, or none reachable).
    pub file: Option<&'a Path>,
    /// The file's build-id, when the kernel gave it.
    pub build_id: Option<&'a [u8]>,
}

/// One of the BPF maps `Tables` creates (`create`).
#[derive(Debug, Clone, Copy)]
struct MapSpec<'a> {
    kind: MapType,
    name: &'a str,
    /// Key size in bytes.
    key: u32,
    /// Value size in bytes.
    value: u32,
    /// Most entries.
    n: u32,
    /// `BPF_F_*` map flags.
    flags: u32,
}

fn create(spec: MapSpec<'_>) -> Result<MapHandle> {
    let MapSpec {
        kind,
        name,
        key,
        value,
        n,
        flags,
    } = spec;
    let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
        map_flags: flags,
        ..Default::default()
    };
    MapHandle::create(kind, Some(name), key, value, n, &opts).map_err(|e| {
        if matches!(e.kind(), libbpf_rs::ErrorKind::PermissionDenied)
            || e.to_string().contains("Operation not permitted")
        {
            anyhow::anyhow!(
                "creating the unwind-row BPF maps was refused: run ebrec as root or with CAP_BPF and CAP_PERFMON ({e})"
            )
        } else {
            anyhow::anyhow!("creating the BPF map {name} ({n} entries): {e}")
        }
    })
}

const BPF_F_NO_PREALLOC: u32 = 1;
const BPF_F_MMAPABLE: u32 = 1 << 10;
const PAGE: u64 = 1 << CFI_PAGE_SHIFT;

impl Tables {
    /// Maps for a budget of `budget` bytes of rows and page index.
    pub fn new(budget: u64) -> Result<Tables> {
        // The page index is ~1/500 of the code; rows ~1/5: give the index 1/32. (Array
        // values are 8 bytes apart whatever their size: both hold u64s.)
        let page_bytes = (budget / 32).max(64 << 10);
        let row_bytes = budget.saturating_sub(page_bytes).max(64 << 10);
        let nrows = u32::try_from(row_bytes / 8).unwrap_or(u32::MAX / 2);
        let npages = u32::try_from(page_bytes / 8).unwrap_or(u32::MAX / 2);
        let rows_map = create(MapSpec {
            kind: MapType::Array,
            name: "cfi_rows",
            key: 4,
            value: 8,
            n: nrows,
            flags: BPF_F_MMAPABLE,
        })?;
        let pages_map = create(MapSpec {
            kind: MapType::Array,
            name: "cfi_pages",
            key: 4,
            value: 8,
            n: npages,
            flags: BPF_F_MMAPABLE,
        })?;
        let files_map = create(MapSpec {
            kind: MapType::Array,
            name: "cfi_files",
            key: 4,
            value: std::mem::size_of::<cfi_file>() as u32,
            n: CFI_MAX_FILES as u32,
            flags: 0,
        })?;
        let procs_map = create(MapSpec {
            kind: MapType::Hash,
            name: "cfi_procs",
            key: 4,
            value: std::mem::size_of::<cfi_proc>() as u32,
            n: 16384,
            flags: BPF_F_NO_PREALLOC,
        })?;
        let inodes_map = create(MapSpec {
            kind: MapType::Hash,
            name: "cfi_inodes",
            key: std::mem::size_of::<cfi_inode>() as u32,
            value: 4,
            n: CFI_MAX_FILES as u32,
            flags: 0,
        })?;
        let early_map = create(MapSpec {
            kind: MapType::Hash,
            name: "cfi_early",
            key: 4,
            value: std::mem::size_of::<ebtrace_bpf::cfi_early>() as u32,
            n: 4096,
            flags: 0,
        })?;
        let rows = Mapped::new(&rows_map, nrows as usize)?;
        let pages = Mapped::new(&pages_map, npages as usize)?;
        Ok(Tables {
            rows_map,
            pages_map,
            files_map,
            procs_map,
            inodes_map,
            early_map,
            rows,
            pages,
            free_rows: Ranges::new(nrows as usize),
            free_pages: Ranges::new(npages as usize),
            free_slots: (1..CFI_MAX_FILES as u32).rev().collect(),
            files: HashMap::new(),
            failed: HashSet::new(),
            users: vec![0; CFI_MAX_FILES],
            procs: HashMap::new(),
            dirty: Vec::new(),
            table_gen: 0,
            clock: 0,
            stats: Stats::default(),
            budget,
        })
    }

    pub fn fds(&self) -> Fds<'_> {
        Fds {
            rows: self.rows_map.as_fd(),
            pages: self.pages_map.as_fd(),
            files: self.files_map.as_fd(),
            procs: self.procs_map.as_fd(),
            inodes: self.inodes_map.as_fd(),
            early: self.early_map.as_fd(),
        }
    }

    /// The exit summary's line.
    pub fn summary(&self) -> String {
        let st = &self.stats;
        let mut s = format!(
            "unwind rows: {} binaries, {} rows, {:.1} MiB of {:.0} MiB (--cfi-memory), built in {:.0} ms",
            st.files_loaded,
            st.rows_loaded,
            self.bytes_used() as f64 / (1 << 20) as f64,
            self.budget as f64 / (1 << 20) as f64,
            st.build_ns as f64 / 1e6
        );
        if st.files_without_cfi > 0 {
            s += &format!("; {} without .eh_frame", st.files_without_cfi);
        }
        if st.evicted > 0 {
            s += &format!("; {} evicted", st.evicted);
        }
        if !st.did_not_fit.is_empty() {
            s += &format!(
                "; {} did not fit: {}",
                st.did_not_fit.len(),
                st.did_not_fit.join(", ")
            );
        }
        if st.maps_over_limit > 0 {
            s += &format!(
                "; {} processes with more than {CFI_MAX_MAPS} executable mappings",
                st.maps_over_limit
            );
        }
        s
    }

    /// Bytes of rows and page index in use.
    pub fn bytes_used(&self) -> u64 {
        self.files
            .values()
            .map(|l| l.nrows as u64 * 8 + l.npages as u64 * 8)
            .sum()
    }

    /// `m.pid` maps [start, end) of `path` at file offset `pgoff`: a file (opened at
    /// `file`, its build-id `build_id` when the kernel gave it), or the vDSO; any other
    /// mapping (no file: JIT code, the stack) gets no rows.
    pub fn map_path(&mut self, m: &ProcMapping<'_>) {
        let ProcMapping {
            pid,
            start,
            end,
            pgoff,
            path,
            file,
            build_id,
        } = *m;
        let (slot, pgoff) = match file {
            Some(f) => (self.slot(&key(build_id, f), f), pgoff),
            None if path == b"[vdso]" => (self.vdso_slot(), 0),
            None => return,
        };
        self.map(pid, start, end, pgoff, slot);
    }

    /// The slot of the file `key` (its build-id, else its path), loading its rows from
    /// `file` the first time; 0: no rows (none, unreadable, or no room).
    pub fn slot(&mut self, key: &[u8], file: &Path) -> u32 {
        self.cached(key, |t| match Elf::open(file) {
            Ok(e) => t.load_elf(key, &e, file),
            Err(_) => {
                t.stats.files_without_cfi += 1;
                0
            }
        })
    }

    /// The slot of the vDSO's rows (every process of this kernel maps the same image as
    /// ebrec's own), loaded the first time; 0: none.
    fn vdso_slot(&mut self) -> u32 {
        const KEY: &[u8] = b"[vdso]";
        self.cached(KEY, |t| {
            own_vdso().map_or(0, |e| t.load_elf(KEY, &e, Path::new("[vdso]")))
        })
    }

    /// The slot of `key` if loaded, else `load`'s (0: none, remembered: not tried again).
    fn cached(&mut self, key: &[u8], load: impl FnOnce(&mut Self) -> u32) -> u32 {
        self.clock += 1;
        if let Some(l) = self.files.get_mut(key) {
            l.last_use = self.clock;
            return l.slot;
        }
        if self.failed.contains(key) {
            return 0;
        }
        let slot = load(self);
        if slot == 0 {
            self.failed.insert(key.to_vec());
        }
        slot
    }

    /// Builds `elf`'s rows and writes them to the kernel under `key`; its slot, 0: none.
    fn load_elf(&mut self, key: &[u8], elf: &Elf, file: &Path) -> u32 {
        let t0 = std::time::Instant::now();
        let built = rows::build(elf);
        self.stats.build_ns += t0.elapsed().as_nanos() as u64;
        let Some(built) = built.filter(|b| !b.rows.is_empty()) else {
            self.stats.files_without_cfi += 1;
            return 0;
        };
        self.stats.rows_unsupported += built.unsupported;
        let rows = &built.rows;
        let first_off = u64::from(rows[0].offset) & !(PAGE - 1);
        let last = u64::from(rows[rows.len() - 1].offset);
        let npages = ((last - first_off) / PAGE + 1) as usize;
        // first[i]: the first row at or after page i's start; index[i]: first[i] and
        // first[i + 1] (the rows a lookup in page i searches)
        let mut first = Vec::with_capacity(npages + 1);
        let mut r = 0usize;
        for i in 0..=npages {
            let page_start = first_off + i as u64 * PAGE;
            while r < rows.len() && u64::from(rows[r].offset) < page_start {
                r += 1;
            }
            first.push(r as u64);
        }
        let index: Vec<u64> = first.windows(2).map(|w| w[0] | (w[1] << 32)).collect();
        let (rows_at, pages_at) = loop {
            match (
                self.free_rows.alloc(rows.len()),
                self.free_pages.alloc(index.len()),
            ) {
                (Some(a), Some(b)) => break (a, b),
                (a, b) => {
                    if let Some(a) = a {
                        self.free_rows.release(a, rows.len());
                    }
                    if let Some(b) = b {
                        self.free_pages.release(b, index.len());
                    }
                    if !self.evict_one() {
                        self.stats
                            .did_not_fit
                            .push(file.to_string_lossy().into_owned());
                        return 0;
                    }
                }
            }
        };
        let Some(slot) = self.free_slots.pop().or_else(|| {
            self.evict_one();
            self.free_slots.pop()
        }) else {
            self.free_rows.release(rows_at, rows.len());
            self.free_pages.release(pages_at, index.len());
            self.stats
                .did_not_fit
                .push(file.to_string_lossy().into_owned());
            return 0;
        };
        let packed: Vec<u64> = rows.iter().map(|r| r.pack()).collect();
        self.rows.write(rows_at, &packed);
        self.pages.write(pages_at, &index);
        let f = cfi_file {
            row_base: rows_at as u32,
            nrows: rows.len() as u32,
            page_base: pages_at as u32,
            npages: npages as u32,
            first_off,
        };
        if self
            .files_map
            .update(&slot.to_ne_bytes(), plain_bytes(&f), MapFlags::ANY)
            .is_err()
        {
            self.free_rows.release(rows_at, rows.len());
            self.free_pages.release(pages_at, index.len());
            self.free_slots.push(slot);
            return 0;
        }
        let inodes = kernel_inodes(file);
        for k in &inodes {
            let _ = self
                .inodes_map
                .update(plain_bytes(k), &slot.to_ne_bytes(), MapFlags::ANY);
        }
        self.stats.files_loaded += 1;
        self.stats.rows_loaded += rows.len() as u64;
        self.files.insert(
            key.to_vec(),
            Loaded {
                slot,
                rows_at,
                nrows: rows.len(),
                pages_at,
                npages: index.len(),
                inodes,
                last_use: self.clock,
            },
        );
        slot
    }

    /// Evicts the least recently used table no process maps; false: none.
    fn evict_one(&mut self) -> bool {
        let Some(key) = self
            .files
            .iter()
            .filter(|(_, l)| self.users[l.slot as usize] == 0)
            .min_by_key(|(_, l)| l.last_use)
            .map(|(k, _)| k.clone())
        else {
            return false;
        };
        let l = self.files.remove(&key).expect("present");
        for k in &l.inodes {
            let _ = self.inodes_map.delete(plain_bytes(k));
        }
        let zero = cfi_file::default();
        let _ = self
            .files_map
            .update(&l.slot.to_ne_bytes(), plain_bytes(&zero), MapFlags::ANY);
        self.free_rows.release(l.rows_at, l.nrows);
        self.free_pages.release(l.pages_at, l.npages);
        self.free_slots.push(l.slot);
        self.stats.evicted += 1;
        true
    }

    fn use_slot(&mut self, slot: u32, delta: i64) {
        if let Some(u) = self.users.get_mut(slot as usize).filter(|_| slot != 0) {
            *u = u.saturating_add_signed(delta);
        }
    }

    /// `pid` maps [start, end) at file offset `pgoff` of the file in `slot`.
    fn map(&mut self, pid: u32, start: u64, end: u64, pgoff: u64, slot: u32) {
        let mut dropped = Vec::new();
        let m = self.procs.entry(pid).or_default();
        // a new mapping replaces what it overlaps
        let over: Vec<u64> = m
            .range(..end)
            .filter(|(_, v)| v.0 > start)
            .map(|(k, _)| *k)
            .collect();
        for k in over {
            if let Some(v) = m.remove(&k) {
                dropped.push(v.2);
            }
        }
        m.insert(start, (end, pgoff.wrapping_sub(start), slot));
        for s in dropped {
            self.use_slot(s, -1);
        }
        self.use_slot(slot, 1);
        self.dirty.push(pid);
    }

    /// A new process `child` has its parent's mappings (fork).
    pub fn fork(&mut self, parent: u32, child: u32) {
        let Some(m) = self.procs.get(&parent).cloned() else {
            return;
        };
        for v in m.values() {
            self.use_slot(v.2, 1);
        }
        if let Some(old) = self.procs.insert(child, m) {
            for v in old.values() {
                self.use_slot(v.2, -1);
            }
        }
        self.dirty.push(child);
    }

    /// `pid` exec'd or exited: its mappings are gone.
    pub fn forget(&mut self, pid: u32) {
        if let Some(old) = self.procs.remove(&pid) {
            for v in old.values() {
                self.use_slot(v.2, -1);
            }
        }
        self.dirty.push(pid);
    }

    /// Writes the changed processes' tables to the kernel.
    pub fn flush(&mut self) {
        let mut dirty = std::mem::take(&mut self.dirty);
        dirty.sort_unstable();
        dirty.dedup();
        for pid in dirty {
            let key = pid.to_ne_bytes();
            let Some(m) = self.procs.get(&pid) else {
                let _ = self.procs_map.delete(&key);
                let _ = self.early_map.delete(&key);
                continue;
            };
            let mut p = Box::<cfi_proc>::default();
            let mut n = 0usize;
            for (&start, &(end, delta, slot)) in m {
                if n >= CFI_MAX_MAPS {
                    self.stats.maps_over_limit += 1;
                    break;
                }
                p.m[n] = cfi_map {
                    start,
                    end,
                    delta,
                    file: slot,
                    pad: 0,
                };
                n += 1;
            }
            p.n = n as u32;
            self.table_gen = self.table_gen.wrapping_add(1).max(1);
            p.gen = self.table_gen;
            let _ = self.procs_map.update(&key, plain_bytes(&*p), MapFlags::ANY);
            // the kernel side's own finds of the process's first moments are not needed now
            let _ = self.early_map.delete(&key);
        }
    }
}

fn plain_bytes<T: plain::Plain>(t: &T) -> &[u8] {
    // SAFETY: T is a plain C struct; viewing it as bytes is sound.
    unsafe { plain::as_bytes(t) }
}

/// The names (s_dev, i_ino) the kernel side may find `file`'s mappings under (the
/// vm_file of a mapping bpf_find_vma found): stat's, and a mapping's when it differs. On
/// overlayfs (containers; virtme-ng's guests) stat shows the overlay's device, while a
/// mapping's vm_file is the file of the layer below, as /proc/PID/maps shows: without it,
/// a process's first events (before user space wrote its table) found no rows there.
fn kernel_inodes(file: &Path) -> Vec<cfi_inode> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    if let Ok(m) = std::fs::metadata(file) {
        let dev = m.dev();
        out.push(cfi_inode {
            dev: (u64::from(libc::major(dev)) << 20) | u64::from(libc::minor(dev)),
            ino: m.ino(),
        });
    }
    if let Some(k) = mapped_inode(file) {
        if !out.iter().any(|o| o.dev == k.dev && o.ino == k.ino) {
            out.push(k);
        }
    }
    out
}

/// The (s_dev, i_ino) of a one-page mapping of `file` in ebrec itself, from
/// /proc/self/maps ("START-END PERMS OFFSET MAJ:MIN INODE", the device in hex).
fn mapped_inode(file: &Path) -> Option<cfi_inode> {
    let f = std::fs::File::open(file).ok()?;
    // SAFETY: a private read-only mapping of the file's first page, never read, unmapped
    // below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ,
            libc::MAP_PRIVATE,
            f.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    let maps = std::fs::read_to_string("/proc/self/maps");
    // SAFETY: p is the mapping made above, of 4096 bytes.
    unsafe { libc::munmap(p, 4096) };
    let start = format!("{:x}-", p as usize);
    let maps = maps.ok()?;
    let line = maps.lines().find(|l| l.starts_with(&start))?;
    let mut it = line.split_whitespace().skip(3);
    let (major, minor) = it.next()?.split_once(':')?;
    let ino = it.next()?.parse::<u64>().ok()?;
    let major = u64::from_str_radix(major, 16).ok()?;
    let minor = u64::from_str_radix(minor, 16).ok()?;
    Some(cfi_inode {
        dev: (major << 20) | minor,
        ino,
    })
}

/// The key a file's table is cached under: its build-id, else its path.
fn key(build_id: Option<&[u8]>, file: &Path) -> Vec<u8> {
    match build_id {
        Some(b) if !b.is_empty() => b.to_vec(),
        _ => match ebtrace_elf::build_id(file) {
            Some(b) if !b.is_empty() => b,
            _ => {
                use std::os::unix::ffi::OsStrExt;
                let mut k = b"path:".to_vec();
                k.extend_from_slice(file.as_os_str().as_bytes());
                k
            }
        },
    }
}

/// Loads the rows of a command's executable, interpreter and libraries before it runs, so
/// that its first events unwind whole (its mappings come through the side band).
pub fn preload(t: &mut Tables, exe: &Path) {
    let Ok(bins) = crate::funcs::Binaries::of_command(exe) else {
        return;
    };
    for p in bins.paths() {
        let k = key(None, &p);
        t.slot(&k, &p);
    }
}

/// One more file's rows loaded before the command runs (the sampler shim).
pub fn preload_file(t: &mut Tables, p: &Path) {
    let k = key(None, p);
    t.slot(&k, p);
}

/// ebrec's own vDSO image ([`crate::elf::own_vdso_image`]), the same kernel's as every
/// process's.
fn own_vdso() -> Option<Elf> {
    Elf::from_bytes("[vdso]", crate::elf::own_vdso_image()?).ok()
}
