//! Formatting of times for reports.

/// The UTC (year, month, day, hour, minute, second) of `secs` since the Unix epoch.
fn civil(secs: u64) -> (i64, i64, i64, u64, u64, u64) {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d, rem / 3600, (rem / 60) % 60, rem % 60)
}

/// `ns` since the Unix epoch as an RFC 3339 UTC timestamp with milliseconds.
pub fn rfc3339(ns: u64) -> String {
    let (y, m, d, hh, mm, ss) = civil(ns / 1_000_000_000);
    let ms = (ns / 1_000_000) % 1000;
    format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}.{ms:03}Z")
}

/// `ns` since the Unix epoch as `YYYYMMDDTHHMMSSZ` (ISO 8601 basic: sorts as it reads, fits
/// in a file name).
pub fn compact_utc(ns: u64) -> String {
    let (y, m, d, hh, mm, ss) = civil(ns / 1_000_000_000);
    format!("{y:04}{m:02}{d:02}T{hh:02}{mm:02}{ss:02}Z")
}

/// A duration in ns for people: "1.234 s", "12.3 ms", "850 µs", "42 ns".
pub fn duration(ns: u64) -> String {
    match ns {
        n if n >= 1_000_000_000 => format!("{:.3} s", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{:.1} ms", n as f64 / 1e6),
        n if n >= 1_000 => format!("{:.1} µs", n as f64 / 1e3),
        n => format!("{n} ns"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc3339_known_dates() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            super::rfc3339(1_700_000_000_123_000_000),
            "2023-11-14T22:13:20.123Z"
        );
        assert_eq!(
            super::rfc3339(951_782_400_000_000_000),
            "2000-02-29T00:00:00.000Z"
        );
        assert_eq!(
            super::compact_utc(1_700_000_000_123_000_000),
            "20231114T221320Z"
        );
    }
}
