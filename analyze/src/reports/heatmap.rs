//! Latency heat maps: time on x (linear), latency on y (log2 rows), the number of events
//! of each cell as its colour, rendered as a standalone SVG.
//!
//! A heat map shows what a percentile hides: two modes of latency, a slow tail that comes
//! and goes, a shift after a deploy. Its input is [`HeatPoint`]s, so exact events (one
//! latency at one time) and kernel log2 histograms (counts of `[2^b, 2^(b+1))` over an
//! interval) draw the same way; [`build`] bins them into a [`Heatmap`] and [`render_svg`]
//! draws it. Both are pure: the same input gives the same bytes.
//!
//! Rows are powers of two because that is what kernel histograms give, and because latency
//! spans decades: one row per doubling keeps 50 ns and 2 s on one readable axis.
use std::fmt::Write as _;

/// One cell of input: `count` events at time `time_ns` (boottime ns) whose latency falls in
/// `[lo_ns, hi_ns)`. Exact events give `lo_ns == hi_ns ==` the latency; kernel histograms give
/// log2 buckets `[2^b, 2^(b+1))` over an interval, passed as the interval's end time with
/// `span_ns` the interval's length (0 for exact events).
///
/// Only `lo_ns` picks the row (a bucket of several rows goes to the row of `lo_ns`; kernel
/// buckets are exactly one row), so `hi_ns` is for the caller's own bookkeeping.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeatPoint {
    pub time_ns: u64,
    pub span_ns: u64,
    pub lo_ns: u64,
    pub hi_ns: u64,
    pub count: u64,
}

/// What to draw and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeatmapOptions {
    /// The SVG's title (escaped for XML when drawn).
    pub title: String,
    /// Time columns, at most (0 counts as 1). Fewer only for ranges under about `columns²`
    /// ns, where whole-ns columns cannot cut the range evenly (see [`Heatmap::columns`]).
    pub columns: usize,
    /// The time range `[start_ns, end_ns]`, boottime ns. If `end_ns <= start_ns`, the range
    /// of the data: from the earliest start of a point's span to its latest time.
    pub start_ns: u64,
    pub end_ns: u64,
    /// What a count counts, plural ("events", "lock waits"): in tooltips, the legend and the
    /// message of an empty map.
    pub unit_label: String,
}

impl Default for HeatmapOptions {
    fn default() -> Self {
        HeatmapOptions {
            title: "Latency heat map".into(),
            columns: 100,
            start_ns: 0,
            end_ns: 0,
            unit_label: "events".into(),
        }
    }
}

/// Counts binned by time column and log2 latency row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heatmap {
    /// Columns of `col_ns` from `start_ns`: as many as cover the range, at most the asked
    /// [`HeatmapOptions::columns`] (so the last one ends less than a column after the range).
    pub columns: usize,
    /// The lower bound of each row: row `r` covers `[2^(min_exp + r), 2^(min_exp + r + 1))`
    /// ns; row 0 also holds latency 0. Only the smallest to the largest non-empty row; empty
    /// when there are no events.
    pub rows: Vec<u64>,
    pub min_exp: u32,
    /// `cells[column][row]`: counts.
    pub cells: Vec<Vec<u64>>,
    /// Width of a column, ns (at least 1).
    pub col_ns: u64,
    /// Start of column 0, boottime ns.
    pub start_ns: u64,
    /// The sum of the cells: the counts of the points within the range (all of them when the
    /// range is the data's), saturating at `u64::MAX`.
    pub total: u64,
}

/// The log2 row of a latency: `e` for `[2^e, 2^(e+1))`, `None` for 0 (drawn in the lowest
/// row, whatever it is, rather than stretching the axis down to 1 ns).
fn exponent(ns: u64) -> Option<u32> {
    ns.checked_ilog2()
}

/// Bins `points`: x linear time in `opts.columns` columns over the range, y one row per
/// power of two of `lo_ns`.
///
/// A point with a span spreads its count over the columns its span `[time_ns - span_ns,
/// time_ns)` covers, in proportion to the overlap: a column gets `floor(count·x1/span) -
/// floor(count·x0/span)` for its overlap `[x0, x1)` from the span's start, so the shares are
/// integers, within 1 of the exact ones, and add up to `count` exactly. Parts of a span
/// outside the range are dropped. An exact point counts if `start <= time_ns <= end`; one at
/// the very end goes into the last column, so the data's own range holds its latest event.
pub fn build(points: &[HeatPoint], opts: &HeatmapOptions) -> Heatmap {
    let live = || points.iter().filter(|p| p.count > 0);
    let (start, end) = if opts.end_ns > opts.start_ns {
        (opts.start_ns, opts.end_ns)
    } else {
        let start = live()
            .map(|p| p.time_ns.saturating_sub(p.span_ns))
            .min()
            .unwrap_or(0);
        let end = live().map(|p| p.time_ns).max().unwrap_or(0);
        (start, end)
    };
    let range = end - start;
    let asked = opts.columns.max(1) as u64;
    let col_ns = range.div_ceil(asked).max(1);
    let columns = range.div_ceil(col_ns).max(1) as usize;

    // By exponent (64 rows, allocated when first used), then latency 0, by column.
    let mut by_exp: Vec<Vec<u64>> = vec![Vec::new(); 64];
    let mut zeros: Vec<u64> = Vec::new();
    let mut add = |exp: Option<u32>, col: usize, n: u64| {
        if n == 0 {
            return;
        }
        let row = match exp {
            Some(e) => &mut by_exp[e as usize],
            None => &mut zeros,
        };
        if row.is_empty() {
            row.resize(columns, 0);
        }
        row[col] = row[col].saturating_add(n);
    };
    for p in live() {
        let exp = exponent(p.lo_ns);
        if p.span_ns == 0 {
            if (start..=end).contains(&p.time_ns) {
                let col = ((p.time_ns - start) / col_ns).min(columns as u64 - 1);
                add(exp, col as usize, p.count);
            }
            continue;
        }
        let a = p.time_ns.saturating_sub(p.span_ns);
        let span = p.time_ns - a;
        let (from, to) = (a.max(start), p.time_ns.min(end));
        if from >= to {
            continue;
        }
        // The events of the span up to `x` (from the span's start), rounded down.
        let upto = |x: u64| (u128::from(p.count) * u128::from(x - a) / u128::from(span)) as u64;
        let first = (from - start) / col_ns;
        let last = ((to - 1 - start) / col_ns).min(columns as u64 - 1);
        for col in first..=last {
            let cs = start + col * col_ns;
            let x0 = cs.max(from);
            let x1 = cs.saturating_add(col_ns).min(to);
            add(exp, col as usize, upto(x1) - upto(x0));
        }
    }

    let used: Vec<u32> = (0..64u32)
        .filter(|&e| by_exp[e as usize].iter().any(|&c| c > 0))
        .collect();
    let (min_exp, max_exp) = match (used.first(), used.last()) {
        (Some(&lo), Some(&hi)) => (lo, hi),
        _ if zeros.is_empty() => {
            return Heatmap {
                columns,
                rows: Vec::new(),
                min_exp: 0,
                cells: vec![Vec::new(); columns],
                col_ns,
                start_ns: start,
                total: 0,
            }
        }
        _ => (0, 0),
    };
    let rows: Vec<u64> = (min_exp..=max_exp).map(|e| 1u64 << e).collect();
    let mut cells = vec![vec![0u64; rows.len()]; columns];
    for (r, e) in (min_exp..=max_exp).enumerate() {
        for (col, &n) in by_exp[e as usize].iter().enumerate() {
            cells[col][r] = n;
        }
    }
    for (col, &n) in zeros.iter().enumerate() {
        cells[col][0] = cells[col][0].saturating_add(n);
    }
    let total = cells
        .iter()
        .flatten()
        .fold(0u64, |t, &n| t.saturating_add(n));
    Heatmap {
        columns,
        rows,
        min_exp,
        cells,
        col_ns,
        start_ns: start,
        total,
    }
}

/// `s` escaped for XML text and attribute values.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// The unit of a latency for people: the largest of ns, us, ms and s that is at most `ns`.
fn unit(ns: u64) -> (u64, &'static str) {
    match ns {
        n if n >= 1_000_000_000 => (1_000_000_000, "s"),
        n if n >= 1_000_000 => (1_000_000, "ms"),
        n if n >= 1_000 => (1_000, "us"),
        _ => (1, "ns"),
    }
}

/// A row bound for the y axis: "1us", "4ms", "1s". Truncated to whole units, so the powers of
/// two read 1, 2, 4, … 524, 1 of the next unit (2^22 ns, 4.19 ms, is "4ms").
fn latency_label(ns: u64) -> String {
    let (d, u) = unit(ns);
    format!("{}{u}", ns / d)
}

/// A row's range for a tooltip: "4-8 ms", or "512 ns-1 us" across units.
fn latency_range(lo: u64, hi: u64) -> String {
    let ((dl, ul), (dh, uh)) = (unit(lo), unit(hi));
    if ul == uh {
        format!("{}-{} {ul}", lo / dl, hi / dh)
    } else {
        format!("{} {ul}-{} {uh}", lo / dl, hi / dh)
    }
}

/// `ns` in seconds with `decimals` decimals.
fn seconds(ns: u64, decimals: usize) -> String {
    format!("{:.*}", decimals, ns as f64 / 1e9)
}

/// Decimals that show multiples of `step_ns` exactly in seconds, at least `min`.
fn decimals_for(step_ns: u64, min: usize) -> usize {
    // Trailing zeros of the decimal digits (`u64::is_multiple_of` is newer than the
    // workspace's Rust 1.85, and clippy flags `% 10 == 0`).
    let zeros = step_ns
        .to_string()
        .bytes()
        .rev()
        .take_while(|&b| b == b'0')
        .count();
    9usize.saturating_sub(zeros).max(min)
}

/// The first 1-2-5 step, in ns, that cuts `range_ns` in at most `ticks` parts.
fn nice_step(range_ns: u64, ticks: u64) -> u64 {
    let want = range_ns.div_ceil(ticks).max(1);
    let mut p = 1u64;
    loop {
        for m in [1, 2, 5] {
            let s = p.saturating_mul(m);
            if s >= want {
                return s;
            }
        }
        p = p.saturating_mul(10);
    }
}

/// The colour of a cell of `n` events when the fullest has `max`: light yellow (1 event) to
/// dark red (`max`) on a log scale, so that a cell of 3 events still shows next to one of
/// 3000. Never white: white is an empty cell.
fn colour(n: u64, max: u64) -> String {
    const STOPS: [(f64, f64, f64); 3] = [
        (255.0, 237.0, 160.0),
        (253.0, 141.0, 60.0),
        (128.0, 0.0, 38.0),
    ];
    let t = if max <= 1 {
        1.0
    } else {
        (n.max(1) as f64).ln() / (max as f64).ln()
    };
    let (seg, f) = if t < 0.5 {
        (0, t * 2.0)
    } else {
        (1, (t - 0.5) * 2.0)
    };
    let (a, b) = (STOPS[seg], STOPS[seg + 1]);
    let mix = |x: f64, y: f64| (x + (y - x) * f).round() as u8;
    format!(
        "#{:02x}{:02x}{:02x}",
        mix(a.0, b.0),
        mix(a.1, b.1),
        mix(a.2, b.2)
    )
}

/// The counts the legend shows: up to 8 steps from 1 to `max`, evenly spaced on the colour
/// scale's log, without repeats.
fn legend_counts(max: u64) -> Vec<u64> {
    const STEPS: u32 = 8;
    let mut v: Vec<u64> = (0..STEPS)
        .map(|k| {
            (max as f64)
                .powf(f64::from(k) / f64::from(STEPS - 1))
                .round() as u64
        })
        .map(|n| n.clamp(1, max))
        .collect();
    v.dedup();
    v
}

const FONT: &str = r#"font-family="Verdana, sans-serif" font-size="12""#;
const LEFT: u64 = 80;
const TOP: u64 = 56;
const BOTTOM: u64 = 56;
const LEGEND: u64 = 170;
const LEGEND_BOX: u64 = 18;

/// The SVG document of `h`: the title, cells coloured by count on a log scale with a
/// `<title>` tooltip each ("t=1.20-1.30 s, 4-8 ms: 17 events", seconds from the start),
/// the time axis in seconds from the start, the latency axis at each row's lower bound, and
/// a legend of the colour scale. Empty cells are not drawn. Without events, a document that
/// says so ("no events").
pub fn render_svg(h: &Heatmap, opts: &HeatmapOptions) -> String {
    let what = escape(&opts.unit_label);
    let title = escape(&opts.title);
    let mut s = String::new();
    let header = |s: &mut String, w: u64, ht: u64| {
        let _ = writeln!(
            s,
            r#"<?xml version="1.0" encoding="UTF-8" standalone="no"?>"#
        );
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{ht}" viewBox="0 0 {w} {ht}" {FONT}>"#
        );
        let _ = writeln!(
            s,
            r#"<text class="title" x="{}" y="24" text-anchor="middle" font-size="17">{title}</text>"#,
            w / 2
        );
    };
    if h.rows.is_empty() {
        header(&mut s, 600, 120);
        let _ = writeln!(
            s,
            r#"<text class="empty" x="300" y="70" text-anchor="middle">no {what}</text>"#
        );
        s.push_str("</svg>\n");
        return s;
    }

    let p = Plot::of(h);
    let legend = legend_counts(h.cells.iter().flatten().copied().max().unwrap_or(1));
    let legend_h = 24 + legend.len() as u64 * LEGEND_BOX;
    let width = LEFT + p.plot_w + LEGEND;
    let height = TOP + p.plot_h.max(legend_h) + BOTTOM;
    header(&mut s, width, height);
    let _ = writeln!(
        s,
        r##"<text class="subtitle" x="{}" y="42" text-anchor="middle" fill="#555">{} {what}, columns of {} s</text>"##,
        width / 2,
        h.total,
        seconds(p.col_ns, decimals_for(p.col_ns, 0))
    );

    let max = legend.last().copied().unwrap_or(1);
    cells_svg(&mut s, h, &p, max);
    axes_svg(&mut s, h, &p);
    legend_svg(&mut s, &p, &legend, max, &what);
    s.push_str("</svg>\n");
    s
}

/// Where the map is drawn, in whole pixels, so that cells tile without gaps or overlaps:
/// at least one per column, rows from 12 to 40 px tall.
#[derive(Debug, Clone, Copy)]
struct Plot {
    /// Columns and their width in ns: from the cells, not `h.columns`, and a column at
    /// least 1 ns wide, so that a hand-made map that disagrees with itself draws wrong
    /// rather than panics.
    cols: u64,
    col_ns: u64,
    plot_w: u64,
    nrows: u64,
    row_h: u64,
    plot_h: u64,
    /// The plot's bottom edge.
    bottom: u64,
}

impl Plot {
    fn of(h: &Heatmap) -> Plot {
        let cols = (h.cells.len() as u64).max(1);
        let plot_w = cols.max(1000);
        let nrows = h.rows.len() as u64;
        let row_h = (400 / nrows).clamp(12, 40);
        let plot_h = nrows * row_h;
        Plot {
            cols,
            col_ns: h.col_ns.max(1),
            plot_w,
            nrows,
            row_h,
            plot_h,
            bottom: TOP + plot_h,
        }
    }

    /// The left edge of column `col`.
    fn x_of(&self, col: u64) -> u64 {
        LEFT + col * self.plot_w / self.cols
    }
}

/// The cells with events, coloured by count up to `max`, each with its tooltip.
fn cells_svg(s: &mut String, h: &Heatmap, p: &Plot, max: u64) {
    let Plot {
        col_ns,
        row_h,
        bottom,
        ..
    } = *p;
    let tdec = decimals_for(col_ns, 2);
    for (c, column) in h.cells.iter().enumerate() {
        let c = c as u64;
        let (x0, x1) = (p.x_of(c), p.x_of(c + 1));
        let t0 = c.saturating_mul(col_ns);
        let t = format!(
            "{}-{}",
            seconds(t0, tdec),
            seconds(t0.saturating_add(col_ns), tdec)
        );
        for (r, (&n, &lo)) in column.iter().zip(&h.rows).enumerate() {
            if n == 0 {
                continue;
            }
            let y = bottom - (r as u64 + 1) * row_h;
            let _ = writeln!(
                s,
                r#"<rect class="cell" x="{x0}" y="{y}" width="{}" height="{row_h}" fill="{}"><title>t={t} s, {}: {n} {}</title></rect>"#,
                x1 - x0,
                colour(n, max),
                latency_range(lo, lo.saturating_mul(2)),
                if n == 1 { "event" } else { "events" },
            );
        }
    }
}

/// The axes: the frame, latency labels, time ticks, the axes' titles.
fn axes_svg(s: &mut String, h: &Heatmap, p: &Plot) {
    let Plot {
        cols,
        col_ns,
        plot_w,
        nrows,
        row_h,
        plot_h,
        bottom,
    } = *p;
    // Axes: the frame, latency labels at each row's lower bound (and the top's upper one),
    // time ticks at a 1-2-5 step in seconds from the start.
    let _ = writeln!(
        s,
        r##"<path class="frame" d="M{LEFT} {TOP}V{bottom}H{}V{TOP}Z" fill="none" stroke="#888"/>"##,
        LEFT + plot_w
    );
    for r in 0..=nrows {
        // The top row of 2^63 ends at 2^64, drawn as u64::MAX.
        let bound = 1u64.checked_shl(h.min_exp + r as u32).unwrap_or(u64::MAX);
        let y = bottom - r * row_h;
        let _ = writeln!(
            s,
            r#"<text class="ylabel" x="{}" y="{}" text-anchor="end">{}</text>"#,
            LEFT - 6,
            y + 4,
            latency_label(bound)
        );
    }
    let span_ns = cols.saturating_mul(col_ns);
    let step = nice_step(span_ns, 10);
    let xdec = decimals_for(step, 0);
    let mut t = 0u64;
    while t <= span_ns {
        let x = LEFT + (u128::from(t) * u128::from(plot_w) / u128::from(span_ns)) as u64;
        let _ = writeln!(
            s,
            r##"<line x1="{x}" y1="{bottom}" x2="{x}" y2="{}" stroke="#888"/><text class="xlabel" x="{x}" y="{}" text-anchor="middle">{}</text>"##,
            bottom + 5,
            bottom + 18,
            seconds(t, xdec)
        );
        t = match t.checked_add(step) {
            Some(next) => next,
            None => break,
        };
    }
    let _ = writeln!(
        s,
        r#"<text class="axis" x="{}" y="{}" text-anchor="middle">time from start (s)</text>"#,
        LEFT + plot_w / 2,
        bottom + 38
    );
    let _ = writeln!(
        s,
        r#"<text class="axis" transform="translate(18 {}) rotate(-90)" text-anchor="middle">latency (log2)</text>"#,
        TOP + plot_h / 2
    );
}

/// The legend of the colour scale (`legend`'s counts, up to `max`), right of the plot.
fn legend_svg(s: &mut String, p: &Plot, legend: &[u64], max: u64, what: &str) {
    let plot_w = p.plot_w;
    // The legend: one box per step of the colour scale, fullest at the top.
    let lx = LEFT + plot_w + 24;
    let _ = writeln!(
        s,
        r#"<text class="legend" x="{lx}" y="{}">{what} per cell</text>"#,
        TOP + 12
    );
    for (i, &n) in legend.iter().rev().enumerate() {
        let y = TOP + 22 + i as u64 * LEGEND_BOX;
        let _ = writeln!(
            s,
            r#"<rect class="legend" x="{lx}" y="{y}" width="{LEGEND_BOX}" height="{LEGEND_BOX}" fill="{}"/><text x="{}" y="{}">{n}</text>"#,
            colour(n, max),
            lx + LEGEND_BOX + 6,
            y + LEGEND_BOX - 4
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;

    fn exact(time_ns: u64, latency: u64, count: u64) -> HeatPoint {
        HeatPoint {
            time_ns,
            span_ns: 0,
            lo_ns: latency,
            hi_ns: latency,
            count,
        }
    }

    fn bucket(time_ns: u64, span_ns: u64, b: u32, count: u64) -> HeatPoint {
        HeatPoint {
            time_ns,
            span_ns,
            lo_ns: 1 << b,
            hi_ns: 1 << (b + 1),
            count,
        }
    }

    /// Options over `[0, 10 s]` in 100 columns of 100 ms.
    fn ten_seconds() -> HeatmapOptions {
        HeatmapOptions {
            start_ns: 0,
            end_ns: 10 * S,
            ..HeatmapOptions::default()
        }
    }

    fn sum(h: &Heatmap) -> u64 {
        h.cells.iter().flatten().sum()
    }

    #[test]
    fn spans_over_many_columns_keep_totals_exact() {
        // Counts that do not divide by the columns covered, spans that start and end inside
        // a column, one longer than the whole range, and counts near the u64 limit.
        let points = [
            bucket(10 * S, 10 * S, 20, 1_000_003),
            bucket(3 * S + 7, 2 * S + 13 * MS, 22, 97),
            bucket(5 * S, 50 * MS, 10, 7),
            bucket(9 * S, 9 * S - 1, 25, 1),
            bucket(8 * S, 8 * S, 30, u64::MAX / 4),
        ];
        let h = build(&points, &ten_seconds());
        let want: u64 = points.iter().map(|p| p.count).sum();
        assert_eq!(sum(&h), want);
        assert_eq!(h.total, want);
        assert_eq!((h.columns, h.col_ns), (100, 100 * MS));
        // The 10 s point spread over every column, each within 1 of an equal share.
        let r = (20 - h.min_exp) as usize;
        for c in &h.cells {
            assert!(c[r].abs_diff(10_000) <= 1, "{}", c[r]);
        }
        // A span from the data range: the range is the span, every column gets its share.
        let opts = HeatmapOptions {
            columns: 7,
            ..HeatmapOptions::default()
        };
        let h = build(&[bucket(5 * S, 1000, 3, 100)], &opts);
        assert_eq!((h.start_ns, h.col_ns, h.columns), (5 * S - 1000, 143, 7));
        assert_eq!(sum(&h), 100);
        assert!(h.cells.iter().all(|c| c[0] >= 13 && c[0] <= 15), "{h:?}");
        // Rebuilding gives the same cells: remainders go to the same columns.
        assert_eq!(
            build(&points, &ten_seconds()),
            build(&points, &ten_seconds())
        );
    }

    #[test]
    fn known_points_land_in_their_cells() {
        let points = [
            // 10 events of 5 ms at 1 s: [2^22, 2^23) ns = [4.19 ms, 8.39 ms), column 10.
            exact(S, 5 * MS, 10),
            // 3 of 1 µs at 9.95 s: [2^9, 2^10), the last column.
            exact(9 * S + 950 * MS, 1000, 3),
            // A kernel bucket [2^15, 2^16) over [2.0 s, 2.2 s): columns 20 and 21, 5 each.
            bucket(2 * S + 200 * MS, 200 * MS, 15, 10),
            // Latency 0 goes to the lowest row; a range over rows to the row of lo.
            exact(5 * S, 0, 2),
            HeatPoint {
                time_ns: 4 * S,
                span_ns: 0,
                lo_ns: 1 << 9,
                hi_ns: 1 << 20,
                count: 4,
            },
            // Outside the range: dropped; the range's end itself is in the last column.
            exact(11 * S, 5 * MS, 100),
            exact(10 * S, 5 * MS, 1),
            // No events: changes nothing, not even the rows.
            exact(S, 1 << 40, 0),
        ];
        let h = build(&points, &ten_seconds());
        assert_eq!(h.min_exp, 9);
        assert_eq!(h.rows.len(), 22 - 9 + 1);
        assert_eq!(h.rows[0], 512);
        assert_eq!(*h.rows.last().unwrap(), 1 << 22);
        let row = |e: u32| (e - h.min_exp) as usize;
        let mut want = vec![vec![0u64; h.rows.len()]; 100];
        want[10][row(22)] = 10;
        want[99][row(9)] = 3;
        want[20][row(15)] = 5;
        want[21][row(15)] = 5;
        want[50][row(9)] = 2;
        want[40][row(9)] = 4;
        want[99][row(22)] = 1;
        assert_eq!(h.cells, want);
        assert_eq!(h.total, 30);
        assert_eq!(h.start_ns, 0);
    }

    #[test]
    fn data_range_and_degenerate_input() {
        // From the data: the earliest start to the latest time, which is in the last column.
        let h = build(
            &[exact(2 * S, 100, 1), exact(3 * S, 100, 1)],
            &HeatmapOptions::default(),
        );
        assert_eq!((h.start_ns, h.col_ns, h.columns), (2 * S, 10 * MS, 100));
        assert_eq!((h.cells[0][0], h.cells[99][0]), (1, 1));
        // One instant, zero columns, only zero latencies: one cell, no panic.
        let opts = HeatmapOptions {
            columns: 0,
            ..HeatmapOptions::default()
        };
        let h = build(&[exact(7, 0, 3)], &opts);
        assert_eq!((h.columns, h.col_ns, h.min_exp), (1, 1, 0));
        assert_eq!(h.cells, vec![vec![3]]);
        // The top row's upper bound does not overflow.
        let h = build(&[exact(S, u64::MAX, 1)], &HeatmapOptions::default());
        assert_eq!((h.min_exp, h.rows.len()), (63, 1));
        assert!(render_svg(&h, &HeatmapOptions::default()).contains(">18446744073s<"));
        // Nothing: no rows, no total.
        let h = build(&[], &HeatmapOptions::default());
        assert_eq!((h.total, h.rows.len()), (0, 0));
    }

    #[test]
    fn labels_are_human() {
        assert_eq!(latency_label(1 << 10), "1us");
        assert_eq!(latency_label(1 << 22), "4ms");
        assert_eq!(latency_label(1 << 30), "1s");
        assert_eq!(latency_label(512), "512ns");
        assert_eq!(latency_range(1 << 22, 1 << 23), "4-8 ms");
        assert_eq!(latency_range(512, 1024), "512 ns-1 us");
        assert_eq!(seconds(1_200_000_000, decimals_for(100 * MS, 2)), "1.20");
        assert_eq!(nice_step(10 * S, 10), S);
        assert_eq!(nice_step(3 * S, 10), 500 * MS);
    }

    #[test]
    fn svg_is_well_formed_with_a_rect_per_cell() {
        let points = [
            exact(S + 250 * MS, 5 * MS, 17),
            exact(S + 260 * MS, 5 * MS, 1),
            exact(3 * S, 1000, 1),
            bucket(6 * S, S, 12, 1000),
        ];
        let opts = HeatmapOptions {
            title: "p99 <&> \"spikes\"".into(),
            ..ten_seconds()
        };
        let h = build(&points, &opts);
        let svg = render_svg(&h, &opts);
        let doc = roxmltree::Document::parse(&svg).unwrap_or_else(|e| panic!("{e}\n{svg}"));
        let root = doc.root_element();
        assert_eq!(root.tag_name().name(), "svg");
        let class = |n: &roxmltree::Node, c: &str| n.attribute("class") == Some(c);
        let title = root
            .descendants()
            .find(|n| class(n, "title"))
            .and_then(|n| n.text());
        assert_eq!(title, Some("p99 <&> \"spikes\""));
        assert!(svg.contains("p99 &lt;&amp;&gt; &quot;spikes&quot;"));

        let rects: Vec<_> = root
            .descendants()
            .filter(|n| n.has_tag_name("rect"))
            .collect();
        let cells = rects.iter().filter(|n| class(n, "cell")).count();
        let legend = rects.iter().filter(|n| class(n, "legend")).count();
        let non_empty = h.cells.iter().flatten().filter(|&&n| n > 0).count();
        assert_eq!(non_empty, 2 + 10);
        assert_eq!(cells, non_empty);
        assert_eq!(legend, legend_counts(100).len());
        assert_eq!(rects.len(), cells + legend);
        let tips: Vec<&str> = rects
            .iter()
            .filter_map(|n| n.children().find(|c| c.has_tag_name("title")))
            .filter_map(|n| n.text())
            .collect();
        assert!(
            tips.contains(&"t=1.20-1.30 s, 4-8 ms: 18 events"),
            "{tips:?}"
        );
        assert!(
            tips.contains(&"t=3.00-3.10 s, 512 ns-1 us: 1 event"),
            "{tips:?}"
        );
        assert!(
            tips.contains(&"t=5.00-5.10 s, 4-8 us: 100 events"),
            "{tips:?}"
        );
        // The fullest cell is the darkest, the emptiest non-empty cell is not white.
        let fill = |tip: &str| {
            rects
                .iter()
                .find(|n| n.children().any(|c| c.text() == Some(tip)))
                .and_then(|n| n.attribute("fill"))
        };
        assert_eq!(fill("t=5.00-5.10 s, 4-8 us: 100 events"), Some("#800026"));
        assert_eq!(fill("t=3.00-3.10 s, 512 ns-1 us: 1 event"), Some("#ffeda0"));
        for label in ["512ns", "1us", "4ms", "8ms", "0", "5", "10"] {
            assert!(svg.contains(&format!(">{label}</text>")), "{label}");
        }
        // Deterministic.
        assert_eq!(svg, render_svg(&build(&points, &opts), &opts));
    }

    #[test]
    fn empty_input_says_no_events() {
        let opts = HeatmapOptions {
            title: "<&>".into(),
            ..HeatmapOptions::default()
        };
        let svg = render_svg(&build(&[], &opts), &opts);
        let doc = roxmltree::Document::parse(&svg).unwrap_or_else(|e| panic!("{e}\n{svg}"));
        let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
        assert!(texts.contains(&"no events"), "{svg}");
        assert!(texts.contains(&"<&>"), "{svg}");
        assert_eq!(
            doc.descendants().filter(|n| n.has_tag_name("rect")).count(),
            0
        );
        // Points all outside the range are no events either.
        let h = build(&[exact(20 * S, 100, 5)], &ten_seconds());
        assert!(render_svg(&h, &opts).contains(">no events</text>"));
    }
}
