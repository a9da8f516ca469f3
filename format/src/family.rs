//! The one registry of event families.
//!
//! A family is numbered once, in `proto/trace.proto`'s `EventFamily`. Everything else is
//! derived from that enum:
//! - the BPF side's `FAM_*` constants (and the event header's `type`, which carries the
//!   family) come from `families.h`, which `proto/build.rs` generates from the same enum;
//! - Rust code uses [`EventFamily`] and indexes every per-family table with [`PerFamily`];
//! - names, command-line flags and report kinds are in [`FAMILIES`], one row per family.
//!
//! Adding a family: a value in `EventFamily`, a row here (the tests below fail until the row
//! exists), then the BPF program, its decoder in ebrec and its report (see ARCHITECTURE.md).
use crate::proto::EventFamily;
use std::ops::{Index, IndexMut};

/// One family and its names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FamilyInfo {
    pub id: EventFamily,
    /// The family's one name: ebrec's summary lines, `ebsym … --kind NAME`, the JSON of
    /// `ebsym info` and of the reports, ARCHITECTURE.md.
    pub name: &'static str,
    /// What its events are, in a few words, for people: `ebsym … --kind`'s help.
    pub about: &'static str,
    /// The `ebrec record` flag that turns it on, if a flag does.
    pub flag: Option<&'static str>,
    /// Whether it has a report kind of its own (`ebsym top --kind NAME`, flame graphs,
    /// pprof): families of events with stacks.
    pub report: bool,
    /// Other spellings accepted where a name is parsed (kept for old command lines).
    pub aliases: &'static [&'static str],
}

impl FamilyInfo {
    /// The number of the family, as in the trace and the BPF header.
    pub const fn number(&self) -> usize {
        self.id as usize
    }

    /// The proto enum value's name, lowercased, without its prefix
    /// (`EVENT_FAMILY_MEM_GROWTH` → "mem_growth"). It differs from [`FamilyInfo::name`] for
    /// two families (mem_growth, stack_copy). It was the spelling of `ebsym info --json` and
    /// of the reports' loss keys before their JSON had a `schema_version` (1 and later use
    /// [`FamilyInfo::name`]); [`by_name`] still accepts it, as an alias.
    pub fn wire_name(&self) -> String {
        let full = self.id.as_str_name();
        full.strip_prefix("EVENT_FAMILY_")
            .unwrap_or(full)
            .to_ascii_lowercase()
    }
}

/// Every family, in the order of their numbers.
pub const FAMILIES: &[FamilyInfo] = &[
    FamilyInfo {
        id: EventFamily::Alloc,
        name: "alloc",
        about: "heap allocations (malloc, new) with their stacks",
        flag: Some("--alloc"),
        report: true,
        aliases: &[],
    },
    FamilyInfo {
        id: EventFamily::Free,
        name: "free",
        about: "frees of the recorded allocations",
        flag: None,
        report: false,
        aliases: &[],
    },
    FamilyInfo {
        id: EventFamily::Lock,
        name: "lock",
        about: "contended lock waits (and holds), with the releasing thread's stack",
        flag: Some("--lock"),
        report: true,
        aliases: &["locks"],
    },
    FamilyInfo {
        id: EventFamily::Func,
        name: "func",
        about: "calls of probed functions and their latency",
        flag: Some("--func"),
        report: true,
        aliases: &["latency"],
    },
    FamilyInfo {
        id: EventFamily::Cpu,
        name: "cpu",
        about: "on-CPU stack samples",
        flag: Some("--cpu"),
        report: true,
        aliases: &[],
    },
    FamilyInfo {
        id: EventFamily::Offcpu,
        name: "offcpu",
        about: "time blocked off the CPU, with the waker's stack",
        flag: Some("--offcpu"),
        report: true,
        aliases: &[],
    },
    FamilyInfo {
        id: EventFamily::MemGrowth,
        name: "memgrowth",
        about: "growth of memory by brk, mmap and first touches of new pages",
        flag: Some("--memgrowth"),
        report: true,
        aliases: &["mem", "mem_growth"],
    },
    FamilyInfo {
        id: EventFamily::Process,
        name: "process",
        about: "process starts, execs and exits",
        flag: None,
        report: false,
        aliases: &[],
    },
    FamilyInfo {
        id: EventFamily::StackCopy,
        name: "stackcopy",
        about: "raw copies of the user stack, unwound offline",
        flag: Some("--stack-mode dwarf"),
        report: false,
        aliases: &["stack_copy"],
    },
    FamilyInfo {
        id: EventFamily::Syscall,
        name: "syscall",
        about: "slow system calls, and every call's latency in kernel histograms",
        flag: Some("--syscalls"),
        report: true,
        aliases: &["syscalls"],
    },
    FamilyInfo {
        id: EventFamily::Bio,
        name: "bio",
        about: "block I/O requests: latency and bytes per device and op",
        flag: Some("--bio"),
        report: true,
        aliases: &[],
    },
    FamilyInfo {
        id: EventFamily::Runq,
        name: "runq",
        about: "run-queue waits: time runnable but not running",
        flag: Some("--runq"),
        report: true,
        aliases: &[],
    },
    FamilyInfo {
        id: EventFamily::Tcp,
        name: "tcp",
        about: "TCP connections: connects, accepts, retransmits, resets",
        flag: Some("--tcp"),
        report: true,
        aliases: &[],
    },
    FamilyInfo {
        id: EventFamily::Usdt,
        name: "usdt",
        about: "hits of USDT probes with their numeric arguments, and start/done latency",
        flag: Some("--usdt"),
        report: true,
        aliases: &[],
    },
];

/// One more than the largest family number: the length of every per-family table, and of
/// the BPF counters' family dimension (`FAM_COUNT` in the generated `families.h`).
pub const COUNT: usize = 15;

/// The row of `id`.
pub fn family(id: EventFamily) -> &'static FamilyInfo {
    FAMILIES
        .iter()
        .find(|f| f.id == id)
        .expect("every EventFamily has a row in FAMILIES (checked by a test)")
}

/// The row of a family number read from a trace or the kernel, if it is one.
pub fn by_number(n: i32) -> Option<&'static FamilyInfo> {
    EventFamily::try_from(n)
        .ok()
        .filter(|f| *f != EventFamily::Unspecified)
        .map(family)
}

/// The family named `s` (its name or an alias).
pub fn by_name(s: &str) -> Option<&'static FamilyInfo> {
    FAMILIES
        .iter()
        .find(|f| f.name == s || f.aliases.contains(&s))
}

/// A value per family, indexed by [`EventFamily`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerFamily<T>(pub [T; COUNT]);

impl<T: Default + Copy> Default for PerFamily<T> {
    fn default() -> Self {
        PerFamily([T::default(); COUNT])
    }
}

impl<T> Index<EventFamily> for PerFamily<T> {
    type Output = T;
    fn index(&self, f: EventFamily) -> &T {
        &self.0[f as usize]
    }
}

impl<T> IndexMut<EventFamily> for PerFamily<T> {
    fn index_mut(&mut self, f: EventFamily) -> &mut T {
        &mut self.0[f as usize]
    }
}

impl<T> PerFamily<T> {
    /// Every family of [`FAMILIES`] with its value, in number order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static FamilyInfo, &T)> {
        FAMILIES.iter().map(move |f| (f, &self.0[f.number()]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_proto_family_has_one_row_in_number_order() {
        let mut n = 0;
        for v in 1..=i32::from(u8::MAX) {
            if let Ok(id) = EventFamily::try_from(v) {
                assert_eq!(family(id).id, id);
                assert!((v as usize) < COUNT, "COUNT must exceed {v}");
                n += 1;
            }
        }
        assert_eq!(
            n,
            FAMILIES.len(),
            "a row per EventFamily value, and no more"
        );
        assert!(FAMILIES.windows(2).all(|w| w[0].number() < w[1].number()));
        assert_eq!(
            COUNT,
            FAMILIES.iter().map(|f| f.number()).max().unwrap() + 1
        );
    }

    #[test]
    fn names_are_unique_and_parse_back() {
        for f in FAMILIES {
            assert_eq!(by_name(f.name), Some(f));
            assert!(!f.about.is_empty(), "{} has no about", f.name);
            assert_eq!(by_name(&f.wire_name()), Some(f), "{}", f.wire_name());
            for a in f.aliases {
                assert_eq!(by_name(a), Some(f));
            }
        }
        assert_eq!(family(EventFamily::MemGrowth).wire_name(), "mem_growth");
        assert_eq!(by_number(7).map(|f| f.name), Some("memgrowth"));
        assert_eq!(by_number(0), None);
        assert_eq!(by_number(99), None);
    }

    #[test]
    fn per_family_indexes_by_family() {
        let mut kept = PerFamily::<u64>::default();
        kept[EventFamily::Cpu] += 3;
        assert_eq!(kept.0[5], 3);
        assert_eq!(
            kept.iter()
                .find(|(f, _)| f.id == EventFamily::Cpu)
                .map(|x| *x.1),
            Some(3)
        );
    }
}
