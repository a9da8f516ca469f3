//! A memory limit on ebrec's own cgroup (v2 `memory.max`, v1 `memory.limit_in_bytes`, the
//! tightest of its cgroup and their ancestors): the recording's largest allocations (the
//! ring buffers, the unwind rows, the allocator's live blocks, the lock holders) are sized
//! to fit under it before anything is loaded, instead of a map that cannot be created
//! (ENOMEM) or an OOM kill later. What no longer fits in the smaller maps is lost, counted,
//! as it is when the defaults are full. One line says what was made smaller and why.
use std::path::{Path, PathBuf};

const MIB: u64 = 1 << 20;
/// The tables' sizes in bpf/alloc.bpf.c (`live`) and bpf/lock.bpf.c (`held`).
pub(crate) const LIVE_BLOCKS: u32 = 1 << 20;
pub(crate) const HELD_LOCKS: u32 = 1 << 16;

/// The tightest memory limit over ebrec's cgroup and its ancestors, and what that cgroup
/// already uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Limit {
    pub bytes: u64,
    pub used: u64,
    /// The cgroup whose limit it is.
    pub cgroup: String,
}

/// The sizes a recording wants (the defaults, or the flags'), and which of them it uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sizes {
    /// Each ring buffer, bytes, and how many the families load.
    pub ringbuf: u32,
    pub rings: u32,
    /// The unwind rows' memory (0: not used).
    pub cfi: u64,
    /// The allocator's live-block table, entries (0: --alloc off).
    pub live: u32,
    /// The lock holders' table, entries (0: --lock off).
    pub held: u32,
}

/// Bytes of kernel memory per entry of the tables (key, value and the hash map's element
/// header; measured from the maps' memlock on 6.18: 96 MiB for 1 Mi live blocks, 72 MiB
/// for 64 Ki held locks).
const LIVE_ENTRY: u64 = 96;
const HELD_ENTRY: u64 = 1152;
/// What ebrec holds whatever the sizes (its process: the loaded objects, the maps user space
/// touches, the writer), and what each loaded object with a ring buffer adds beside it (its
/// fixed maps: the unwinder's per-thread memo, the scratch buffers). Measured as the memory
/// cgroup's peak (`memory.max_usage_in_bytes`) on 6.18 with the least sizes: `--cpu` 47 MiB,
/// `--cpu --offcpu --lock --alloc` (three objects) 115 MiB, rounded up.
const BASE: u64 = 32 * MIB;
const PER_OBJECT: u64 = 20 * MIB;
/// The least of each: below these a recording loses more than it keeps.
const MIN_RING: u32 = 256 << 10;
const MIN_CFI: u64 = 8 * MIB;
const MIN_LIVE: u32 = 1 << 16;
const MIN_HELD: u32 = 4096;

impl Sizes {
    /// The memory these sizes need, bytes.
    pub fn need(&self) -> u64 {
        BASE + (self.ringbuf as u64 + PER_OBJECT) * self.rings as u64
            + self.cfi
            + self.live as u64 * LIVE_ENTRY
            + self.held as u64 * HELD_ENTRY
    }
}

/// Sizes that fit in seven eighths of what the limit leaves (the rest for what a recording
/// touches as it goes: the trace's chunks, the side band, the symbol tables),
/// halving the largest part first down to the least of each; and the line that says so.
/// `wants` unchanged and no line when there is no limit or it fits.
pub(crate) fn fit(
    limit: Option<&Limit>,
    wants: Sizes,
    ring_fixed: bool,
) -> (Sizes, Option<String>) {
    let Some(l) = limit else {
        return (wants, None);
    };
    let room = l.bytes.saturating_sub(l.used) / 8 * 7;
    let mut s = wants;
    while s.need() > room {
        // The part that frees most when halved, among those above their least.
        let ring = (!ring_fixed && s.ringbuf / 2 >= MIN_RING)
            .then_some(s.ringbuf as u64 / 2 * s.rings as u64);
        let cfi = (s.cfi / 2 >= MIN_CFI).then_some(s.cfi / 2);
        let live = (s.live / 2 >= MIN_LIVE).then_some(s.live as u64 / 2 * LIVE_ENTRY);
        let held = (s.held / 2 >= MIN_HELD).then_some(s.held as u64 / 2 * HELD_ENTRY);
        let best = [ring, cfi, live, held]
            .into_iter()
            .enumerate()
            .filter_map(|(i, v)| Some((v?, i)))
            .max();
        match best {
            Some((_, 0)) => s.ringbuf /= 2,
            Some((_, 1)) => s.cfi /= 2,
            Some((_, 2)) => s.live /= 2,
            Some((_, 3)) => s.held /= 2,
            _ => break,
        }
    }
    if s == wants {
        return (s, None);
    }
    let mut parts = Vec::new();
    let mib = |b: u64| format!("{} MiB", (b as f64 / MIB as f64 * 100.0).round() / 100.0);
    if s.ringbuf != wants.ringbuf {
        parts.push(format!(
            "ring buffers {} instead of {}",
            mib(s.ringbuf as u64),
            mib(wants.ringbuf as u64)
        ));
    }
    if s.cfi != wants.cfi {
        parts.push(format!(
            "unwind rows {} instead of {}",
            mib(s.cfi),
            mib(wants.cfi)
        ));
    }
    if s.live != wants.live {
        parts.push(format!("{} live blocks instead of {}", s.live, wants.live));
    }
    if s.held != wants.held {
        parts.push(format!("{} held locks instead of {}", s.held, wants.held));
    }
    let short = if s.need() > room {
        format!(
            "; even so it needs about {}, more than the {} it may take: the kernel may refuse a map or kill ebrec",
            mib(s.need()),
            mib(room)
        )
    } else {
        String::new()
    };
    let line = format!(
        "memory limit {} on cgroup {} ({} in use): {}; what does not fit in them is lost, counted{short}",
        mib(l.bytes),
        l.cgroup,
        mib(l.used),
        parts.join(", ")
    );
    (s, Some(line))
}

/// ebrec's own memory limit, if any.
pub(crate) fn own() -> Option<Limit> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    limit_of(&text, Path::new("/sys/fs/cgroup"))
}

/// The tightest limit for the process whose /proc/PID/cgroup is `text`, under the cgroup
/// file systems mounted at `root`.
pub(crate) fn limit_of(text: &str, root: &Path) -> Option<Limit> {
    let mut best: Option<Limit> = None;
    for line in text.lines() {
        let mut f = line.splitn(3, ':');
        let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
        let (base, max, cur) = if controllers.is_empty() {
            (root.to_path_buf(), "memory.max", "memory.current")
        } else if controllers.split(',').any(|c| c == "memory") {
            (
                root.join("memory"),
                "memory.limit_in_bytes",
                "memory.usage_in_bytes",
            )
        } else {
            continue;
        };
        let mut dir: PathBuf = base.join(path.trim_start_matches('/'));
        loop {
            if let Some(bytes) = read_limit(&dir.join(max)) {
                if best.as_ref().is_none_or(|b| bytes < b.bytes) {
                    let used = std::fs::read_to_string(dir.join(cur))
                        .ok()
                        .and_then(|s| s.trim().parse().ok())
                        .unwrap_or(0);
                    let rel = dir.strip_prefix(&base).unwrap_or(&dir);
                    best = Some(Limit {
                        bytes,
                        used,
                        cgroup: format!("/{}", rel.display()),
                    });
                }
            }
            if dir == base || !dir.pop() || !dir.starts_with(&base) {
                break;
            }
        }
    }
    best
}

/// A limit file's value: None for "max" (v2) or v1's "no limit" (a page-rounded i64::MAX).
fn read_limit(p: &Path) -> Option<u64> {
    let s = std::fs::read_to_string(p).ok()?;
    let v: u64 = s.trim().parse().ok()?;
    (v < 1 << 62).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wants() -> Sizes {
        Sizes {
            ringbuf: 8 << 20,
            rings: 3,
            cfi: 64 * MIB,
            live: 1 << 20,
            held: 1 << 16,
        }
    }

    #[test]
    fn no_limit_or_room_enough_changes_nothing() {
        assert_eq!(fit(None, wants(), false), (wants(), None));
        let big = Limit {
            bytes: 4 << 30,
            used: 0,
            cgroup: "/a".into(),
        };
        assert_eq!(fit(Some(&big), wants(), false), (wants(), None));
    }

    #[test]
    fn a_tight_limit_shrinks_the_largest_first_and_says_so() {
        let l = Limit {
            bytes: 256 * MIB,
            used: 16 * MIB,
            cgroup: "/x".into(),
        };
        let (s, line) = fit(Some(&l), wants(), false);
        assert!(s.need() <= 210 * MIB, "{s:?}");
        assert!(s.live < 1 << 20 && s.held < 1 << 16, "{s:?}");
        let line = line.unwrap();
        assert!(
            line.starts_with("memory limit 256 MiB on cgroup /x (16 MiB in use): "),
            "{line}"
        );
        assert!(line.contains("live blocks instead of 1048576"), "{line}");
        assert!(!line.contains("even so"), "{line}");
        // A ring size the user chose stays.
        let (s, _) = fit(Some(&l), wants(), true);
        assert_eq!(s.ringbuf, 8 << 20);
    }

    #[test]
    fn below_the_least_it_says_it_may_fail() {
        let l = Limit {
            bytes: 64 * MIB,
            used: 0,
            cgroup: "/y".into(),
        };
        let (s, line) = fit(Some(&l), wants(), false);
        assert_eq!(
            (s.ringbuf, s.cfi, s.live, s.held),
            (MIN_RING, MIN_CFI, MIN_LIVE, MIN_HELD)
        );
        assert!(line.unwrap().contains("even so it needs about"));
    }

    #[test]
    fn limits_read_from_v1_and_v2_files_take_the_tightest_ancestor() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        std::fs::create_dir_all(r.join("memory/a/b")).unwrap();
        std::fs::write(r.join("memory/a/memory.limit_in_bytes"), "268435456\n").unwrap();
        std::fs::write(r.join("memory/a/memory.usage_in_bytes"), "1048576\n").unwrap();
        std::fs::write(
            r.join("memory/a/b/memory.limit_in_bytes"),
            "9223372036854771712\n",
        )
        .unwrap();
        let l = limit_of("4:memory:/a/b\n0::/\n", r).unwrap();
        assert_eq!((l.bytes, l.used, l.cgroup.as_str()), (256 * MIB, MIB, "/a"));
        std::fs::create_dir_all(r.join("svc")).unwrap();
        std::fs::write(r.join("svc/memory.max"), "134217728\n").unwrap();
        std::fs::write(r.join("svc/memory.current"), "0\n").unwrap();
        std::fs::write(r.join("memory.max"), "max\n").unwrap();
        let l = limit_of("0::/svc\n", r).unwrap();
        assert_eq!((l.bytes, l.cgroup.as_str()), (128 * MIB, "/svc"));
        assert_eq!(limit_of("0::/\n", r), None);
    }
}
