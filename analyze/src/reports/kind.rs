//! What a report is about ([`EventKind`]) and what it measures ([`Measure`], `--by`).
use ebtrace_format::family;
use ebtrace_format::proto::EventFamily;
use serde::Serialize;

/// Event kinds a report can be about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventKind {
    Alloc,
    Lock,
    Func,
    Cpu,
    OffCpu,
    MemGrowth,
    Syscall,
    Bio,
    Runq,
    Tcp,
    Usdt,
}

impl EventKind {
    /// Every kind, in the order reports list them.
    pub const ALL: [EventKind; 11] = [
        EventKind::Alloc,
        EventKind::Lock,
        EventKind::Func,
        EventKind::Cpu,
        EventKind::OffCpu,
        EventKind::MemGrowth,
        EventKind::Syscall,
        EventKind::Bio,
        EventKind::Runq,
        EventKind::Tcp,
        EventKind::Usdt,
    ];

    /// The kinds whose events have a latency (what `ebsym heatmap` draws), and whose kernel
    /// histograms `ebsym latency --kind` reads for the three system families.
    pub fn has_latency(self) -> bool {
        matches!(
            self,
            EventKind::Lock
                | EventKind::Func
                | EventKind::OffCpu
                | EventKind::Syscall
                | EventKind::Bio
                | EventKind::Runq
        )
    }

    /// The event family of the registry (`ebtrace_format::family`) this kind reports on.
    pub fn family(self) -> EventFamily {
        match self {
            EventKind::Alloc => EventFamily::Alloc,
            EventKind::Lock => EventFamily::Lock,
            EventKind::Func => EventFamily::Func,
            EventKind::Cpu => EventFamily::Cpu,
            EventKind::OffCpu => EventFamily::Offcpu,
            EventKind::MemGrowth => EventFamily::MemGrowth,
            EventKind::Syscall => EventFamily::Syscall,
            EventKind::Bio => EventFamily::Bio,
            EventKind::Runq => EventFamily::Runq,
            EventKind::Tcp => EventFamily::Tcp,
            EventKind::Usdt => EventFamily::Usdt,
        }
    }

    /// The kind that reports on `family`, if one does.
    pub fn of_family(family: EventFamily) -> Option<Self> {
        EventKind::ALL.into_iter().find(|k| k.family() == family)
    }

    /// The kind of the family named `s` (its registry name or an alias: `mem`, `locks`,
    /// `latency`).
    pub fn parse(s: &str) -> Option<Self> {
        EventKind::of_family(family::by_name(s)?.id)
    }

    /// The family's one name in the registry.
    pub fn name(self) -> &'static str {
        family::family(self.family()).name
    }

    /// What `--by` may be for this kind, the first being the default.
    pub fn valid_measures(self) -> &'static [Measure] {
        use Measure::*;
        match self {
            EventKind::Alloc | EventKind::MemGrowth => &[Bytes, Count],
            EventKind::Lock => &[Wait, Hold, Count],
            EventKind::Func => &[Latency, Count],
            EventKind::Cpu => &[Samples],
            EventKind::OffCpu => &[Time, Count],
            EventKind::Syscall => &[Latency, Count],
            EventKind::Bio => &[Latency, Bytes, Count],
            EventKind::Runq => &[Time, Count],
            EventKind::Tcp | EventKind::Usdt => &[Count],
        }
    }

    /// The measure a report of this kind sorts by when `--by` is not given.
    pub fn default_measure(self) -> Measure {
        self.valid_measures()[0]
    }

    /// `by` as a measure of this kind: None if it is not a measure or not one of
    /// [`EventKind::valid_measures`].
    pub fn parse_measure(self, by: &str) -> Option<Measure> {
        Measure::parse(by).filter(|m| self.valid_measures().contains(m))
    }

    /// The names of [`EventKind::valid_measures`], the first being the default (for
    /// callers that still pass `--by` as a string).
    pub fn measures(self) -> &'static [&'static str] {
        match self {
            EventKind::Alloc | EventKind::MemGrowth => &["bytes", "count"],
            EventKind::Lock => &["wait", "hold", "count"],
            EventKind::Func => &["latency", "count"],
            EventKind::Cpu => &["samples"],
            EventKind::OffCpu => &["time", "count"],
            EventKind::Syscall => &["latency", "count"],
            EventKind::Bio => &["latency", "bytes", "count"],
            EventKind::Runq => &["time", "count"],
            EventKind::Usdt => &["count"],
            EventKind::Tcp => &["count"],
        }
    }

    /// Unit of the measure named `by`, for flame graphs ([`Measure::unit`]; a name that
    /// is no measure is nanoseconds).
    pub fn unit(self, by: &str) -> &'static str {
        Measure::parse(by).map_or("ns", Measure::unit)
    }

    /// `by` as a measure, or the default of this kind if it is none (what the string
    /// taking functions did with a name they did not know).
    pub(crate) fn measure_or_default(self, by: &str) -> Measure {
        Measure::parse(by).unwrap_or(self.default_measure())
    }
}

/// What a report sums, sorts and draws by (`--by`). Which apply to a kind:
/// [`EventKind::valid_measures`]. Serializes as its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Measure {
    /// alloc and memgrowth: bytes.
    Bytes,
    /// Events (calls, contentions, blocks).
    Count,
    /// lock: time waiting for the lock.
    Wait,
    /// lock: time holding it (uprobe mode).
    Hold,
    /// func: time in the function.
    Latency,
    /// cpu: samples.
    Samples,
    /// offcpu: time off the CPU.
    Time,
}

impl Measure {
    /// Every measure.
    pub const ALL: [Measure; 7] = [
        Measure::Bytes,
        Measure::Count,
        Measure::Wait,
        Measure::Hold,
        Measure::Latency,
        Measure::Samples,
        Measure::Time,
    ];

    /// The measure a `--by` value names.
    pub fn parse(s: &str) -> Option<Self> {
        Measure::ALL.into_iter().find(|m| m.name() == s)
    }

    /// The `--by` value (and the JSON `by` field).
    pub fn name(self) -> &'static str {
        match self {
            Measure::Bytes => "bytes",
            Measure::Count => "count",
            Measure::Wait => "wait",
            Measure::Hold => "hold",
            Measure::Latency => "latency",
            Measure::Samples => "samples",
            Measure::Time => "time",
        }
    }

    /// Unit of the measure, for flame graphs.
    pub fn unit(self) -> &'static str {
        match self {
            Measure::Bytes => "bytes",
            Measure::Count => "calls",
            Measure::Samples => "samples",
            Measure::Wait | Measure::Hold | Measure::Latency | Measure::Time => "ns",
        }
    }

    /// Of a stack's `count` events, with `total` (bytes, wait or duration ns, samples) and
    /// lock `hold` ns (bio: bytes): the value this measures for `kind`.
    pub(crate) fn pick(self, kind: EventKind, count: u64, total: u64, hold: u64) -> u64 {
        match (kind, self) {
            (EventKind::Cpu, _) | (EventKind::Tcp, _) | (_, Measure::Count) => count,
            (EventKind::Lock, Measure::Hold) | (EventKind::Bio, Measure::Bytes) => hold,
            _ => total,
        }
    }
}

impl std::fmt::Display for Measure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `Err` stays the message as a `String`: parsing fails one way only (a name that is no
/// measure), so there is no kind to decide on, and whoever parses (clap's `value_parser`,
/// `str::parse`) only prints it.
impl std::str::FromStr for Measure {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Measure::parse(s).ok_or_else(|| format!("unknown measure {s}"))
    }
}

impl Serialize for Measure {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_and_their_names_agree() {
        for kind in EventKind::ALL {
            let names: Vec<&str> = kind.valid_measures().iter().map(|m| m.name()).collect();
            assert_eq!(names, kind.measures(), "{kind:?}");
            for m in kind.valid_measures() {
                assert_eq!(kind.parse_measure(m.name()), Some(*m));
                assert_eq!(kind.unit(m.name()), m.unit());
            }
        }
        for m in Measure::ALL {
            assert_eq!(Measure::parse(m.name()), Some(m));
        }
        assert_eq!(EventKind::Cpu.parse_measure("count"), None);
        assert_eq!(Measure::parse("nope"), None);
    }
}

#[cfg(test)]
mod registry_tests {
    use super::*;

    #[test]
    fn a_kind_for_every_family_with_reports_and_only_those() {
        for f in family::FAMILIES {
            let kind = EventKind::ALL.into_iter().find(|k| k.family() == f.id);
            assert_eq!(kind.is_some(), f.report, "{}", f.name);
            if let Some(k) = kind {
                assert_eq!(k.name(), f.name);
                assert_eq!(EventKind::parse(f.name), Some(k));
            }
        }
        for (alias, k) in [
            ("mem", EventKind::MemGrowth),
            ("locks", EventKind::Lock),
            ("latency", EventKind::Func),
        ] {
            assert_eq!(EventKind::parse(alias), Some(k));
        }
        assert_eq!(EventKind::parse("free"), None);
        assert_eq!(EventKind::parse("nonsense"), None);
    }
}
