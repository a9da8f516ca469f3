//! `--kind KIND`: a report kind ([`EventKind`]) as a clap value. The values, their aliases
//! and their help come from the family registry (`ebtrace_format::family::FAMILIES`, the
//! families with `report: true`) and from [`EventKind`]'s measures, so a family added there
//! is a value here. A word that is no kind is a one-line error listing the kinds.
//!
//! Every `--kind` names its parser, `value_parser = KindParser::…`: without it clap would
//! parse [`Kind`] as a plain `ValueEnum`, whose error spans four lines.
use clap::builder::{PossibleValue, TypedValueParser};
use clap::ValueEnum;
use ebtrace_analyze::reports::EventKind;
use ebtrace_format::family;
use std::ffi::OsStr;

/// A report kind given on the command line (a wrapper: clap's traits cannot be implemented
/// on analyze's type here, and analyze does not depend on clap).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind(pub EventKind);

/// [`EventKind::ALL`], wrapped.
const KINDS: [Kind; EventKind::ALL.len()] = {
    let mut kinds = [Kind(EventKind::Alloc); EventKind::ALL.len()];
    let mut i = 0;
    while i < kinds.len() {
        kinds[i] = Kind(EventKind::ALL[i]);
        i += 1;
    }
    kinds
};

impl ValueEnum for Kind {
    fn value_variants<'a>() -> &'a [Self] {
        &KINDS
    }

    /// The family's name, its aliases (accepted, not shown as values), and as help what its
    /// events are, its `--by` measures and its aliases.
    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(self.possible_value(true))
    }
}

impl Kind {
    /// [`ValueEnum::to_possible_value`], its help saying the `--by` measures if `by`.
    fn possible_value(self, by: bool) -> PossibleValue {
        let f = family::family(self.0.family());
        let mut help = f.about.to_string();
        if by {
            help.push_str(&format!("; --by {}", self.0.measures().join(", ")));
        }
        if !f.aliases.is_empty() {
            help.push_str(&format!(" (also: {})", f.aliases.join(", ")));
        }
        PossibleValue::new(f.name)
            .aliases(f.aliases.iter().copied())
            .help(help)
    }
}

/// The names of the kinds for which `applies` holds, "a, b or c".
pub fn names(applies: fn(EventKind) -> bool) -> String {
    let names: Vec<&str> = EventKind::ALL
        .into_iter()
        .filter(|k| applies(*k))
        .map(EventKind::name)
        .collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => names.join(""),
    }
}

/// Parses `--kind`: every kind (by name or alias) is accepted; help and the error list only
/// those `shown` holds for (a subcommand that reports on a few kinds says, once run, why
/// the others do not apply).
#[derive(Clone, Copy, Debug)]
pub struct KindParser {
    shown: fn(EventKind) -> bool,
    /// Whether the help of each kind lists its `--by` measures.
    by: bool,
}

impl KindParser {
    /// Every kind, for a subcommand with `--by`.
    pub fn with_by() -> Self {
        KindParser {
            shown: |_| true,
            by: true,
        }
    }

    /// Shows the kinds `shown` holds for, accepts them all; for a subcommand without `--by`.
    pub fn showing(shown: fn(EventKind) -> bool) -> Self {
        KindParser { shown, by: false }
    }
}

impl TypedValueParser for KindParser {
    type Value = Kind;

    fn parse_ref(
        &self,
        _cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<Kind, clap::Error> {
        value
            .to_str()
            .and_then(EventKind::parse)
            .map(Kind)
            .ok_or_else(|| {
                // One line, as ebsym's other errors (clap's own adds the possible values,
                // a tip and a usage line).
                let shown: Vec<&str> = EventKind::ALL
                    .into_iter()
                    .filter(|k| (self.shown)(*k))
                    .map(EventKind::name)
                    .collect();
                clap::Error::raw(
                    clap::error::ErrorKind::InvalidValue,
                    format!(
                        "unknown --kind {} ({})\n",
                        value.to_string_lossy(),
                        shown.join(", ")
                    ),
                )
            })
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(KINDS.iter().map(|k| {
            let v = k.possible_value(self.by);
            if (self.shown)(k.0) {
                v
            } else {
                v.hide(true)
            }
        })))
    }
}

/// `ebsym top --kind`: a report kind, or `exception` (C++ exceptions, `ebrec
/// --exceptions`: hits of two USDT probes reported by type, not a family of their own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopKind {
    Event(Kind),
    Exception,
}

#[cfg(test)]
impl TopKind {
    /// The event kind, for the tests and callers that only know kinds (`exception` is the
    /// USDT family's).
    pub fn event_kind(self) -> EventKind {
        match self {
            TopKind::Event(k) => k.0,
            TopKind::Exception => EventKind::Usdt,
        }
    }
}

/// [`KindParser`] with `exception` (and `exceptions`) beside the kinds.
#[derive(Clone, Copy, Debug)]
pub struct TopKindParser(pub KindParser);

impl TypedValueParser for TopKindParser {
    type Value = TopKind;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<TopKind, clap::Error> {
        if matches!(value.to_str(), Some("exception" | "exceptions")) {
            return Ok(TopKind::Exception);
        }
        self.0.parse_ref(cmd, arg, value).map(TopKind::Event)
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        let exception = PossibleValue::new("exception")
            .alias("exceptions")
            .help("C++ exceptions thrown and rethrown (ebrec record --exceptions), by type and stack, with their rate; --by count");
        Some(Box::new(
            self.0
                .possible_values()
                .into_iter()
                .flatten()
                .chain(std::iter::once(exception)),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_report_family_is_a_value_with_its_aliases() {
        let reported: Vec<_> = family::FAMILIES.iter().filter(|f| f.report).collect();
        assert_eq!(Kind::value_variants().len(), reported.len());
        for f in reported {
            let k = Kind::from_str(f.name, false).unwrap();
            assert_eq!(k.0.family(), f.id);
            for a in f.aliases {
                assert_eq!(Kind::from_str(a, false), Ok(k), "{a}");
            }
        }
        for (word, kind) in [
            ("mem", EventKind::MemGrowth),
            ("mem_growth", EventKind::MemGrowth),
            ("locks", EventKind::Lock),
            ("latency", EventKind::Func),
            ("syscalls", EventKind::Syscall),
        ] {
            assert_eq!(Kind::from_str(word, false), Ok(Kind(kind)));
        }
        assert!(Kind::from_str("free", false).is_err());
    }

    #[test]
    fn names_read_as_a_list() {
        assert_eq!(
            names(|k| matches!(k, EventKind::Func | EventKind::Bio | EventKind::Runq)),
            "func, bio or runq"
        );
        assert_eq!(names(|k| k == EventKind::Cpu), "cpu");
    }
}
