//! Flame graph SVGs with inferno: of folded stacks, and differential ones of a diff.
use super::diff::DiffReport;
use super::folded::Folded;
use super::kind::{EventKind, Measure};

/// [`flamegraph_by`] with `by` a measure's name (the kind's default if it names none).
pub fn flamegraph(
    lines: &[String],
    kind: EventKind,
    by: &str,
    title: Option<&str>,
    out: impl std::io::Write,
) -> std::io::Result<()> {
    flamegraph_by(lines, kind, kind.measure_or_default(by), title, out)
}

impl Folded {
    /// The flame graph of these folded stacks ([`flamegraph_by`]).
    pub fn flamegraph(&self, title: Option<&str>, out: impl std::io::Write) -> std::io::Result<()> {
        flamegraph_by(&self.lines, self.kind, self.by, title, out)
    }
}

/// Writes a flame graph SVG of folded `lines` with inferno: the palette, title and unit
/// match the kind (memory palette for bytes, blue for off-CPU time, hot for CPU).
pub fn flamegraph_by(
    lines: &[String],
    kind: EventKind,
    by: Measure,
    title: Option<&str>,
    out: impl std::io::Write,
) -> std::io::Result<()> {
    use inferno::flamegraph::{color::BasicPalette, Options, Palette};
    let mut o = Options::default();
    o.title = title.map(String::from).unwrap_or_else(|| match (kind, by) {
        (EventKind::Alloc, Measure::Count) => "Allocations (calls)".into(),
        (EventKind::Alloc, _) => "Allocated bytes".into(),
        (EventKind::MemGrowth, _) => "Memory growth".into(),
        (EventKind::Lock, Measure::Hold) => "Lock hold time".into(),
        (EventKind::Lock, _) => "Lock wait time".into(),
        (EventKind::Func, _) => "Function latency".into(),
        (EventKind::Cpu, _) => "CPU samples".into(),
        (EventKind::OffCpu, _) => "Off-CPU time".into(),
        (EventKind::Syscall, Measure::Count) => "Slow system calls (calls)".into(),
        (EventKind::Syscall, _) => "Slow system call time".into(),
        (EventKind::Bio, Measure::Bytes) => "Block I/O bytes".into(),
        (EventKind::Bio, Measure::Count) => "Block I/O requests".into(),
        (EventKind::Bio, _) => "Block I/O time".into(),
        (EventKind::Runq, _) => "Run-queue wait".into(),
        (EventKind::Tcp, _) => "TCP connects and accepts".into(),
        (EventKind::Usdt, _) => "USDT probe hits".into(),
    });
    o.count_name = by.unit().to_string();
    o.colors = Palette::Basic(match kind {
        EventKind::Alloc | EventKind::MemGrowth => BasicPalette::Mem,
        EventKind::OffCpu
        | EventKind::Lock
        | EventKind::Syscall
        | EventKind::Bio
        | EventKind::Runq
        | EventKind::Tcp => BasicPalette::Io,
        _ => BasicPalette::Hot,
    });
    if lines.is_empty() {
        return Err(std::io::Error::other(format!(
            "no {} events to draw",
            kind.name()
        )));
    }
    inferno::flamegraph::from_lines(&mut o, lines.iter().map(String::as_str), out)
        .map_err(std::io::Error::other)
}

/// A differential flame graph (inferno): widths from the after trace, red where a stack
/// grew, blue where it shrank. With `negate`, widths from the before trace (the inputs
/// swapped and the differentials negated, so red still means grew), to see what shrank or
/// disappeared.
pub fn diff_flamegraph(
    d: &DiffReport,
    kind: EventKind,
    title: Option<&str>,
    negate: bool,
    out: impl std::io::Write,
) -> std::io::Result<()> {
    use inferno::flamegraph::Options;
    if d.folded.is_empty() {
        return Err(std::io::Error::other(format!(
            "no {} events to draw in either trace",
            kind.name()
        )));
    }
    let (first, second) = if negate {
        (d.folded_after(), d.folded_before())
    } else {
        (d.folded_before(), d.folded_after())
    };
    let mut two = Vec::new();
    inferno::differential::from_readers(
        inferno::differential::Options::default(),
        first.join("\n").as_bytes(),
        second.join("\n").as_bytes(),
        &mut two,
    )?;
    let mut o = Options::default();
    o.title = title.map(String::from).unwrap_or_else(|| {
        format!(
            "Differential flame graph: {} by {} ({})",
            kind.name(),
            d.by,
            if negate {
                "widths before, red grew, blue shrank"
            } else {
                "widths after, red grew, blue shrank"
            }
        )
    });
    o.count_name = d.by.unit().to_string();
    o.negate_differentials = negate;
    inferno::flamegraph::from_reader(&mut o, two.as_slice(), out).map_err(std::io::Error::other)
}
