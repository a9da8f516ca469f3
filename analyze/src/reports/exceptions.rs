//! `ebsym top --kind exception`: the C++ exceptions a recording with `ebrec --exceptions`
//! caught (libstdc++'s `libstdcxx:throw` and `libstdcxx:rethrow` USDT probes, with their
//! stacks), per type and stack: how many, how many a second, and who threw them.
//!
//! The type is the `std::type_info` object the runtime passed (argument 1), named by the
//! symbolizer from the binary's symbols (`DataSymbol` records: `typeinfo for
//! std::out_of_range` is `std::out_of_range`); an address it could not name (a stripped
//! program without its debug file) says so, with the address. Exceptions used for control
//! flow are a classic hidden cost of C++ services: the summary line names the most thrown
//! type, where from and its rate.
use super::text::{empty_note, losses_text};
use super::threads::fold_digits;
use crate::interned::Frame;
use crate::model::{Event, Filter, Loaded, Losses, Sink, Trace};
use serde::Serialize;
use std::collections::HashMap;
use std::fmt::Write;

/// The report.
#[derive(Debug, Serialize)]
pub struct ExceptionReport {
    pub kind: String,
    /// Exceptions thrown (throw and rethrow), and how many a second over the events' span.
    pub total: u64,
    pub per_second: f64,
    pub throws: u64,
    pub rethrows: u64,
    /// Seconds from the recording's start to the last event (the rates' denominator).
    pub seconds: f64,
    pub rows: Vec<ExceptionRow>,
    pub losses: Losses,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Exceptions of one type thrown (or rethrown) from one stack.
#[derive(Debug, Clone, Serialize)]
pub struct ExceptionRow {
    /// `throw` or `rethrow`.
    pub event: &'static str,
    /// The exception's type (`std::out_of_range`), or what is known of it.
    #[serde(rename = "type")]
    pub type_name: String,
    /// Whether the symbolizer named the type.
    pub type_known: bool,
    pub count: u64,
    pub per_second: f64,
    /// The first frame past the C++ runtime's own (`__cxa_throw`, `std::__throw_*`): the
    /// code that threw.
    pub thrower: Option<String>,
    /// The thread group (names' digits folded as `ebsym threads` does).
    pub thread: String,
    pub frames: Vec<Frame>,
}

/// Counts hits of the exception probes by (probe, generation, type_info, stack, tid).
#[derive(Default)]
struct Hits {
    by: HashMap<(u64, u32, u64, u64, u32), u64>,
}

impl Sink for Hits {
    fn event(&mut self, ev: &Event<'_>) {
        if let Event::Usdt(e) = ev {
            let tinfo = e.args.get(1).copied().unwrap_or(0);
            *self
                .by
                .entry((e.probe, e.generation, tinfo, e.stack, e.tid))
                .or_default() += 1;
        }
    }
}

/// Whether a frame is the C++ runtime's throwing machinery, not the code that threw.
fn runtime_frame(function: &str) -> bool {
    function.starts_with("__cxa_")
        || function.starts_with("std::__throw_")
        || function.starts_with("__gnu_cxx::__throw_")
        || function.starts_with("_Unwind_")
}

/// `ebsym top --kind exception` of an open trace: the `n` rows with the most exceptions.
pub fn exceptions_from(trace: impl Trace, filter: &Filter, n: usize) -> ExceptionReport {
    let mut hits = Hits::default();
    let mut l = Loaded::from_trace(trace, filter, &mut hits);
    // The exception probes, and which is the rethrow.
    let mut probes: HashMap<u64, &'static str> = HashMap::new();
    for p in l.usdt_probes.values() {
        let s = |id: u64| l.tables.string(id).into_owned();
        if s(p.provider) == "libstdcxx" {
            match s(p.name).as_str() {
                "throw" => probes.insert(p.id, "throw"),
                "rethrow" => probes.insert(p.id, "rethrow"),
                _ => None,
            };
        }
    }
    // From the recording's start (else the first event) to the last event.
    let start = match l.header.start_time_ns {
        0 => l.first_event_ns.unwrap_or(0),
        t => t,
    };
    let seconds = match l.last_event_ns {
        Some(b) if b > start => (b - start) as f64 / 1e9,
        _ => 0.0,
    }
    .max(1e-3);
    // Rows by (event, type name, stack, thread group).
    let mut rows: HashMap<(&'static str, String, bool, u64, String), u64> = HashMap::new();
    let (mut throws, mut rethrows) = (0, 0);
    for (&(probe, generation, tinfo, stack, tid), &count) in &hits.by {
        let Some(&event) = probes.get(&probe) else {
            continue;
        };
        if event == "throw" {
            throws += count;
        } else {
            rethrows += count;
        }
        let (type_name, known) = match l.data_symbols.get(&(generation, tinfo)) {
            Some(&(name, _)) => {
                let n = l.tables.string(name).into_owned();
                (n.strip_prefix("typeinfo for ").unwrap_or(&n).to_string(), true)
            }
            None if tinfo == 0 => ("unknown type (none passed)".to_string(), false),
            None => (
                format!("unknown type (type_info at {tinfo:#x}: no symbol names it; symbolize with the binary or its debug file)"),
                false,
            ),
        };
        let thread = fold_digits(&l.thread_name(generation, tid));
        *rows
            .entry((event, type_name, known, stack, thread))
            .or_default() += count;
    }
    let mut rows: Vec<ExceptionRow> = rows
        .into_iter()
        .map(|((event, type_name, type_known, stack, thread), count)| {
            let frames = if stack != 0 {
                l.frames(stack)
            } else {
                Vec::new()
            };
            let thrower = frames
                .iter()
                .find(|f| !runtime_frame(&f.function) && !f.module.contains("libstdc++"))
                .map(Frame::display);
            ExceptionRow {
                event,
                type_name,
                type_known,
                count,
                per_second: count as f64 / seconds,
                thrower,
                thread,
                frames,
            }
        })
        .collect();
    rows.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then_with(|| a.type_name.cmp(&b.type_name))
            .then_with(|| a.thrower.cmp(&b.thrower))
    });
    rows.truncate(n);
    let note = if probes.is_empty() {
        Some("no C++ exceptions recorded: record with ebrec record --exceptions (libstdc++'s throw and rethrow probes)".to_string())
    } else {
        rows.is_empty()
            .then(|| empty_note("exception", filter, &l.losses))
    };
    let total = throws + rethrows;
    ExceptionReport {
        kind: "exception".into(),
        total,
        per_second: total as f64 / seconds,
        throws,
        rethrows,
        seconds,
        rows,
        losses: l.losses.clone(),
        note,
    }
}

/// A rate as people say it: `12.3k/s`, `450/s`, `0.5/s`.
pub fn rate_text(per_second: f64) -> String {
    if per_second >= 10_000.0 {
        format!("{:.0}k/s", per_second / 1000.0)
    } else if per_second >= 1000.0 {
        format!("{:.1}k/s", per_second / 1000.0)
    } else if per_second >= 10.0 {
        format!("{per_second:.0}/s")
    } else {
        format!("{per_second:.1}/s")
    }
}

impl ExceptionReport {
    /// The summary's line: "most thrown: std::out_of_range from Foo::bar, 12k/s (40% of
    /// 30k/s)"; None without exceptions.
    pub fn finding(&self) -> Option<String> {
        // The most thrown type (throws; rethrows of the same object are not new
        // exceptions), over all its stacks, and where its most frequent throw came from.
        let throws: Vec<&ExceptionRow> = self.rows.iter().filter(|r| r.event == "throw").collect();
        let rows = if throws.is_empty() {
            self.rows.iter().collect()
        } else {
            throws
        };
        let mut by_type: HashMap<&str, u64> = HashMap::new();
        for r in &rows {
            *by_type.entry(r.type_name.as_str()).or_default() += r.count;
        }
        let (ty, count) = by_type
            .into_iter()
            .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(a.0)))?;
        let from = rows
            .iter()
            .find(|r| r.type_name == ty)
            .and_then(|r| r.thrower.as_deref())
            .map(|t| format!(" from {t}"))
            .unwrap_or_default();
        let all: u64 = rows.iter().map(|r| r.count).sum();
        Some(format!(
            "most thrown: {ty}{from}, {} ({:.0}% of {all} {})",
            rate_text(count as f64 / self.seconds),
            100.0 * count as f64 / all.max(1) as f64,
            if self.throws > 0 {
                "throws"
            } else {
                "rethrows"
            },
        ))
    }

    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "exceptions: {} ({} over {:.3} s): {} thrown, {} rethrown",
            self.total,
            rate_text(self.per_second),
            self.seconds,
            self.throws,
            self.rethrows
        );
        if let Some(f) = self.finding() {
            let _ = writeln!(s, "{f}");
        }
        for (i, r) in self.rows.iter().enumerate() {
            let _ = writeln!(
                s,
                "\n#{} count {} ({})  {} {}  thread {}",
                i + 1,
                r.count,
                rate_text(r.per_second),
                r.event,
                r.type_name,
                r.thread
            );
            for f in &r.frames {
                let _ = writeln!(s, "    {}", f.display());
            }
        }
        if let Some(n) = &self.note {
            let _ = writeln!(s, "\n{n}");
        }
        s.push_str(&losses_text(&self.losses));
        s
    }
}
