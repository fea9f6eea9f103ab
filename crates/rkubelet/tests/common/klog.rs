//! Reading rkubelet's default log format (klog's header, `logging.format: text`) in tests.

use std::time::SystemTime;

/// The parts of `I1123 23:25:36.401349    3077 manager.rs:123] "message" key="value"`.
#[derive(Debug, Clone, PartialEq)]
pub struct Header<'a> {
    pub severity: char,
    pub month: i8,
    pub day: i8,
    /// `23:25:36.401349`
    pub time: &'a str,
    pub pid: u32,
    /// `manager.rs:123`
    pub source: &'a str,
    /// What follows `] `: the quoted message and the key/value pairs.
    pub rest: &'a str,
}

/// Parses a line's klog header, as the fluentd / promtail klog parsers do
/// (`^([IWEF])(\d{4}) (\d\d:\d\d:\d\d\.\d{6})\s+(\d+) ([^ \]]+:\d+)\] (.*)$`); None if the
/// line is not one.
pub fn header(line: &str) -> Option<Header<'_>> {
    let severity = line.chars().next().filter(|c| "IWEF".contains(*c))?;
    let b = line.as_bytes();
    let digits = |r: std::ops::Range<usize>| {
        b.get(r.clone())
            .filter(|s| s.iter().all(u8::is_ascii_digit))
            .and_then(|_| line[r].parse::<i8>().ok())
    };
    let month = digits(1..3)?;
    let day = digits(3..5)?;
    let time = line.get(6..21)?;
    let t = time.as_bytes();
    let shape_ok = b.get(5) == Some(&b' ')
        && t.iter().enumerate().all(|(i, c)| match i {
            2 | 5 => *c == b':',
            8 => *c == b'.',
            _ => c.is_ascii_digit(),
        });
    if !shape_ok || !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let after = line.get(21..)?;
    let trimmed = after.trim_start_matches(' ');
    if trimmed.len() == after.len() {
        return None;
    }
    let (pid, after) = trimmed.split_once(' ')?;
    let pid = pid.parse().ok()?;
    let (source, rest) = after.split_once("] ")?;
    let (file, line_no) = source.rsplit_once(':')?;
    if file.is_empty() || file.contains(' ') || line_no.parse::<u32>().is_err() {
        return None;
    }
    Some(Header {
        severity,
        month,
        day,
        time,
        pid,
        source,
        rest,
    })
}

/// The wall-clock time of a klog line: the header's local time in this year.
pub fn time_of(line: &str) -> Option<SystemTime> {
    let h = header(line)?;
    let tz = jiff::tz::TimeZone::system();
    let year = jiff::Zoned::now().year();
    let (hms, micros) = h.time.split_once('.')?;
    let mut parts = hms.split(':').map(|p| p.parse::<i8>().ok());
    let (hh, mm, ss) = (parts.next()??, parts.next()??, parts.next()??);
    let micros: i32 = micros.parse().ok()?;
    let dt = jiff::civil::date(year, h.month, h.day).at(hh, mm, ss, micros * 1000);
    let ts = tz.to_timestamp(dt).ok()?;
    Some(SystemTime::UNIX_EPOCH + std::time::Duration::from_micros(ts.as_microsecond() as u64))
}

/// How `text` appears inside a quoted klog message or value (Go's `strconv.Quote` without
/// the outer quotes), for matching log lines that quote names.
pub fn escaped(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
        .replace('\t', "\\t")
}
