//! Go `time.Duration` strings, as upstream config files and flags spell durations.

use std::time::Duration;

/// Parses a Go `time.Duration` string ("1m0s", "20s", "1.5h", "300ms"), the format upstream config
/// files and flags use.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let orig = s;
    let s = s.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err("empty duration".into());
    }
    if s.starts_with('-') {
        return Err(format!("duration {orig:?} must not be negative"));
    }
    let s = s.strip_prefix('+').unwrap_or(s);
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("duration {orig:?} is missing a unit"))?;
        if num_end == 0 {
            return Err(format!("invalid duration {orig:?}"));
        }
        let n: f64 = rest[..num_end]
            .parse()
            .map_err(|_| format!("invalid duration {orig:?}"))?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            u => return Err(format!("unknown unit {u:?} in duration {orig:?}")),
        };
        total += n * scale;
        rest = &rest[unit_end..];
    }
    Ok(Duration::from_secs_f64(total))
}

/// Formats a duration as Go does (`1m0s`, `10s`, `1.5s`), for messages operators recognise.
pub fn format_duration(d: Duration) -> String {
    let total = d.as_secs();
    let frac = d.subsec_millis();
    let (h, m, s) = (total / 3600, (total % 3600) / 60, total % 60);
    let secs = if frac > 0 {
        format!("{s}.{:03}", frac).trim_end_matches('0').to_string()
    } else {
        s.to_string()
    };
    if h > 0 {
        format!("{h}h{m}m{secs}s")
    } else if m > 0 {
        format!("{m}m{secs}s")
    } else {
        format!("{secs}s")
    }
}
