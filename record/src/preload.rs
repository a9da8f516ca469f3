//! `--alloc-sampler preload`: the allocation sampler that runs inside the target
//! (bpf/preload.c, built and embedded by ebtrace-bpf). ebrec writes it to a private
//! temporary directory, removed when ebrec exits, and starts the command with it first in
//! LD_PRELOAD and the period in its environment; `probes::Probes::attach_sampler` puts the
//! uprobes on its probe sites.
use anyhow::{bail, Context, Result};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// The shim, compiled by build.rs.
use ebtrace_bpf::PRELOAD_SHIM as SHIM;

/// The default `--sample-bytes`: tcmalloc's default sampling period, 512 KiB.
pub const DEFAULT_PERIOD: u64 = 512 << 10;

/// The shim written out; the file and its directory go when this is dropped.
#[derive(Debug)]
pub struct Shim {
    dir: PathBuf,
    pub path: PathBuf,
}

impl Shim {
    /// Writes the shim into a fresh directory under $TMPDIR (else /tmp). The directory and
    /// file are readable by all (0755), so that a child that drops its privileges before an
    /// exec still loads it; the name is random, and the file is ebrec's own code, no secret.
    pub fn write() -> Result<Shim> {
        let base = std::env::var_os("TMPDIR")
            .map(PathBuf::from)
            .filter(|d| d.is_absolute() && !d.as_os_str().as_bytes().contains(&b' '))
            .unwrap_or_else(|| PathBuf::from("/tmp"));
        let mut template = base
            .join("ebrec-preload.XXXXXX")
            .into_os_string()
            .into_vec();
        template.push(0);
        // SAFETY: template is a NUL-terminated buffer mkdtemp rewrites in place.
        let r = unsafe { libc::mkdtemp(template.as_mut_ptr().cast()) };
        if r.is_null() {
            bail!(
                "cannot create a directory for the sampler shim in {}: {}",
                base.display(),
                std::io::Error::last_os_error()
            );
        }
        template.pop();
        let dir = PathBuf::from(OsString::from_vec(template));
        let path = dir.join("libebtrace-preload.so");
        let shim = Shim {
            dir: dir.clone(),
            path: path.clone(),
        };
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(&path, SHIM)
            .with_context(|| format!("writing the sampler shim {}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
        Ok(shim)
    }
}

impl Drop for Shim {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The descriptor number a launched command finds `targets::Launched::release_with`'s
/// descriptor at (the preload shim's channel, `EBTRACE_CHAN_FD`, or its view of the
/// sampler's ring buffer, `EBTRACE_RING_FD`).
pub const RELEASED_FD: i32 = 1017;

/// What the preload shim is told through the launched command's environment
/// (`child_env`).
#[derive(Debug, Clone, Copy)]
pub struct PreloadEnv<'a> {
    /// The shim written out (`Shim::path`), put first in LD_PRELOAD.
    pub shim: &'a Path,
    /// The sampling period: mean bytes allocated between two samples
    /// (`EBTRACE_SAMPLE_BYTES`).
    pub period: u64,
    /// --alloc's threshold: smaller samples are dropped (`EBTRACE_MIN_BYTES`).
    pub min: u64,
    /// --no-free: frees are not reported (`EBTRACE_NO_FREE`).
    pub no_free: bool,
    /// The sampler's ring buffer's size in bytes: the shim waits while it is half full
    /// (without a channel).
    pub ring_bytes: u32,
    /// The channel's size (`Chan::size`) when the shim writes into one, else None.
    pub chan_bytes: Option<u64>,
    /// The most frames the shim walks per stack (with a channel).
    pub stack_depth: u32,
}

/// The environment the command gets on top of ebrec's: the shim first in LD_PRELOAD (the
/// entries already there kept after it), the period, --alloc's threshold and --no-free.
/// An LD_PRELOAD entry that is itself an allocator is refused: the shim forwards to glibc's
/// malloc, so it would replace that allocator, not sample it.
pub fn child_env(e: &PreloadEnv<'_>) -> Result<Vec<(OsString, OsString)>> {
    let PreloadEnv {
        shim,
        period,
        min,
        no_free,
        ring_bytes,
        chan_bytes,
        stack_depth,
    } = *e;
    let mut preload = shim.as_os_str().to_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD") {
        for entry in old
            .as_bytes()
            .split(|&b| b == b':' || b == b' ')
            .filter(|e| !e.is_empty())
        {
            let p = Path::new(OsStr::from_bytes(entry));
            let allocator = ebtrace_elf::Symbols::read(p)
                .ok()
                .is_some_and(|s| s.function("malloc").is_some());
            if allocator {
                bail!(
                    "LD_PRELOAD has an allocator ({}): --alloc-sampler preload forwards to glibc's \
                     malloc and would replace it; use --alloc-sampler uprobe --alloc-lib {}",
                    p.display(),
                    p.display()
                );
            }
        }
        if !old.is_empty() {
            preload.push(":");
            preload.push(&old);
        }
    }
    let mut env = vec![(OsString::from("LD_PRELOAD"), preload)];
    let mut set = |k: &str, v: String| env.push((OsString::from(k), OsString::from(v)));
    set("EBTRACE_SAMPLE_BYTES", period.to_string());
    set("EBTRACE_MIN_BYTES", min.to_string());
    if no_free {
        set("EBTRACE_NO_FREE", "1".into());
    }
    if let Some(bytes) = chan_bytes {
        // The channel (`Chan`), handed over at release (targets::Launched::release_with):
        // the shim walks the stacks itself and writes the events there.
        set("EBTRACE_CHAN_FD", RELEASED_FD.to_string());
        set("EBTRACE_CHAN_BYTES", bytes.to_string());
        set("EBTRACE_STACK_DEPTH", stack_depth.to_string());
    } else {
        // Else the sampler's ring buffer: the shim reads its producer and consumer
        // positions and waits while it is half full.
        set("EBTRACE_RING_FD", RELEASED_FD.to_string());
        set("EBTRACE_RING_BYTES", ring_bytes.to_string());
    }
    Ok(env)
}

/// The shim's channel (bpf/preload.c, "the channel"): shared memory the shim writes its
/// allocation and free events into, each with the stack it walked itself, as the BPF
/// programs would write them into their ring. With it, no BPF program and no probe runs
/// for the allocator. A 4 KiB header, then `size` bytes of records
/// (an 8-byte header whose first word is the length, then the event, 8-aligned; a length
/// of `SKIP` sends the reader back to the start). ebrec is the one reader.
#[derive(Debug)]
pub struct Chan {
    fd: std::os::fd::OwnedFd,
    map: *mut u8,
    size: u64,
    /// Times the records did not parse (see `drain`).
    corrupt: std::cell::Cell<u64>,
}

const CHAN_DATA: usize = 4096;
const SKIP: u32 = u32::MAX;
// The header's fields (bpf/preload.c, struct chan_header).
const PROD: usize = 0;
const CONS: usize = 64;
const ACTIVE: usize = 132;
const HITS: usize = 136;
const LOST: usize = 152;

impl Chan {
    /// A channel of `size` data bytes (a power of two of at least 4 KiB).
    pub fn new(size: u64) -> Result<Chan> {
        use std::os::fd::{AsFd, AsRawFd, FromRawFd};
        if size < 4096 || !size.is_power_of_two() {
            bail!("the shim's channel must be a power of two of at least 4096 bytes, not {size}");
        }
        // SAFETY: a NUL-terminated name; the descriptor is checked before use.
        let raw =
            unsafe { libc::memfd_create(c"ebtrace-preload-chan".as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            bail!("memfd_create: {}", std::io::Error::last_os_error());
        }
        // SAFETY: raw is a fresh descriptor we own.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) };
        let len = CHAN_DATA + size as usize;
        // SAFETY: fd is a valid memfd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            bail!(
                "sizing the shim's channel: {}",
                std::io::Error::last_os_error()
            );
        }
        // unmapped in Drop
        let map = crate::procfs::map_shared(fd.as_fd(), len)
            .map_err(|e| anyhow::anyhow!("mapping the shim's channel: {e}"))?;
        Ok(Chan {
            fd,
            map,
            size,
            corrupt: std::cell::Cell::new(0),
        })
    }

    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    fn word(&self, off: usize) -> &std::sync::atomic::AtomicU64 {
        // SAFETY: off is one of the header's 8-aligned fields, inside the mapping that
        // lives as long as self; the shim accesses them atomically too.
        unsafe { &*(self.map.add(off) as *const std::sync::atomic::AtomicU64) }
    }

    /// Whether a process of the command writes into the channel (its in-process unwinder
    /// runs there); else the shim calls the probe sites.
    pub fn active(&self) -> bool {
        use std::sync::atomic::{AtomicU32, Ordering};
        // SAFETY: as `word`, a 4-aligned u32 field.
        let a = unsafe { &*(self.map.add(ACTIVE) as *const AtomicU32) };
        a.load(Ordering::Relaxed) != 0
    }

    /// Times the channel's records did not parse (overwritten by the command).
    pub fn corrupt(&self) -> u64 {
        self.corrupt.get()
    }

    /// (allocations, frees) the shim reported, and those it lost.
    pub fn counts(&self) -> ([u64; 2], [u64; 2]) {
        use std::sync::atomic::Ordering::Relaxed;
        (
            [
                self.word(HITS).load(Relaxed),
                self.word(HITS + 8).load(Relaxed),
            ],
            [
                self.word(LOST).load(Relaxed),
                self.word(LOST + 8).load(Relaxed),
            ],
        )
    }

    /// Moves the records written so far to `out` (each as a u32 length and the event, as
    /// the ring buffers' callbacks leave them) and frees their room. Returns the bytes read.
    pub fn drain(&self, out: &mut Vec<u8>) -> usize {
        use std::sync::atomic::Ordering;
        let prod = self.word(PROD).load(Ordering::Acquire);
        let mut cons = self.word(CONS).load(Ordering::Relaxed);
        let start = cons;
        let mask = self.size - 1;
        // SAFETY: the data area follows the header in the mapping.
        let data =
            unsafe { std::slice::from_raw_parts(self.map.add(CHAN_DATA), self.size as usize) };
        // The command maps the channel writable: a program that scribbles over it (a wild
        // pointer) must not make ebrec loop or read out of bounds. What does not parse is
        // skipped up to `prod` and counted.
        if prod.wrapping_sub(cons) > self.size {
            self.corrupt.set(self.corrupt.get() + 1);
            cons = prod;
        }
        while cons < prod {
            let pos = (cons & mask) as usize;
            if self.size as usize - pos < 8 {
                cons += self.size - pos as u64;
                continue;
            }
            let len = u32::from_ne_bytes(data[pos..pos + 4].try_into().unwrap());
            if len == SKIP {
                cons += self.size - pos as u64;
                continue;
            }
            if u64::from(len) + 8 > self.size - pos as u64 {
                self.corrupt.set(self.corrupt.get() + 1);
                cons = prod;
                break;
            }
            let end = (pos + 8 + len as usize).min(data.len());
            out.extend_from_slice(&len.to_ne_bytes());
            out.extend_from_slice(&data[(pos + 8).min(end)..end]);
            cons += 8 + u64::from(len).next_multiple_of(8);
        }
        self.word(CONS).store(cons, Ordering::Release);
        (cons - start) as usize
    }
}

impl Drop for Chan {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, of that length.
        unsafe { libc::munmap(self.map.cast(), CHAN_DATA + self.size as usize) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes a record's length at `pos` of the data area, and `fill` as its bytes (at
    /// most to the end of the area).
    fn put(c: &Chan, pos: usize, len: u32, fill: u8) {
        let n = (len as usize).min(c.size as usize - pos - 8);
        // SAFETY: inside the mapping; the test is the only writer.
        unsafe {
            let d = c.map.add(CHAN_DATA + pos);
            std::ptr::copy_nonoverlapping(len.to_ne_bytes().as_ptr(), d, 4);
            std::ptr::write_bytes(d.add(8), fill, n);
        }
    }

    /// Records come out as the rings' callbacks leave them (a u32 length, the bytes), a
    /// skip marker sends the reader to the start, and a channel the command wrote over
    /// (a length past the end, a producer position from nowhere) is skipped and counted,
    /// never read out of bounds.
    #[test]
    fn drain_reads_records_skips_and_survives_garbage() {
        let c = Chan::new(4096).unwrap();
        put(&c, 0, 16, 0xaa);
        put(&c, 24, 8, 0xbb);
        // a skip marker at 4088: the next record starts at 0 again
        // SAFETY: inside the mapping.
        unsafe {
            std::ptr::copy_nonoverlapping(SKIP.to_ne_bytes().as_ptr(), c.map.add(CHAN_DATA + 40), 4)
        };
        c.word(PROD)
            .store(40 + (4096 - 40), std::sync::atomic::Ordering::Release);
        let mut out = Vec::new();
        assert_eq!(c.drain(&mut out), 4096);
        let mut want = 16u32.to_ne_bytes().to_vec();
        want.extend([0xaa; 16]);
        want.extend(8u32.to_ne_bytes());
        want.extend([0xbb; 8]);
        assert_eq!(out, want);
        assert_eq!(c.corrupt(), 0);

        // a length past the end of the area
        put(&c, 0, 100_000, 0);
        c.word(PROD)
            .store(4096 + 64, std::sync::atomic::Ordering::Release);
        out.clear();
        c.drain(&mut out);
        assert!(out.is_empty());
        assert_eq!(c.corrupt(), 1);
        // a producer position far ahead of the reader
        c.word(PROD)
            .store(u64::MAX / 2, std::sync::atomic::Ordering::Release);
        c.drain(&mut out);
        assert!(out.is_empty());
        assert_eq!(c.corrupt(), 2);
        assert_eq!(
            c.word(CONS).load(std::sync::atomic::Ordering::Relaxed),
            u64::MAX / 2
        );
    }
}
