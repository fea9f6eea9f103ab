//! The CRI log format and how log options select and shape its lines (upstream
//! `kuberuntime/logs/logs.go`: `parseCRILog`, `NewLogOptions`, `logWriter`). Pure.
//!
//! A CRI log line is `<RFC3339Nano time> <stdout|stderr> <tag> <message>\n`, where the tag is `F`
//! for a full line or `P` for a partial one: the runtime splits long lines into several `P`
//! records ended by an `F` record. Docker's JSON format, which upstream also reads, is left out:
//! only dockershim wrote it.

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// Which stream a log line came from (upstream `runtimeapi.LogStreamType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// One parsed CRI log line (upstream `logMessage`); borrows the raw line.
#[derive(Debug, Clone, PartialEq)]
pub struct LogMessage<'a> {
    pub timestamp: Timestamp,
    /// The time as the runtime wrote it: the output keeps its UTC offset, as upstream's Go
    /// `time.Time` does.
    pub time_text: &'a str,
    pub stream: Stream,
    /// True for a `P` record: its message has no newline and continues in the next record.
    pub partial: bool,
    /// The message, with its newline for full lines and without for partial ones.
    pub log: &'a [u8],
}

/// Why a line is not a CRI log line (upstream's parse errors, same wording).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("timestamp is not found")]
    NoTimestamp,
    #[error("unexpected timestamp format: {0:?}")]
    BadTimestamp(String),
    #[error("stream type is not found")]
    NoStream,
    #[error("unexpected stream type {0:?}")]
    BadStream(String),
    #[error("log tag is not found")]
    NoTag,
}

fn split_space(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let i = b.iter().position(|c| *c == b' ')?;
    Some((&b[..i], &b[i + 1..]))
}

/// Parses one line in CRI format (upstream `parseCRILog`). Tags are `:`-separated for forward
/// compatibility; only the first one (`P` or `F`) means anything today.
pub fn parse_cri_line(line: &[u8]) -> Result<LogMessage<'_>, ParseError> {
    let (ts, rest) = split_space(line).ok_or(ParseError::NoTimestamp)?;
    let bad_ts = || ParseError::BadTimestamp(String::from_utf8_lossy(ts).into_owned());
    let time_text = std::str::from_utf8(ts).map_err(|_| bad_ts())?;
    let timestamp: Timestamp = time_text.parse().map_err(|_| bad_ts())?;
    let (stream, rest) = split_space(rest).ok_or(ParseError::NoStream)?;
    let stream = match stream {
        b"stdout" => Stream::Stdout,
        b"stderr" => Stream::Stderr,
        other => {
            return Err(ParseError::BadStream(
                String::from_utf8_lossy(other).into_owned(),
            ))
        }
    };
    let (tags, mut log) = split_space(rest).ok_or(ParseError::NoTag)?;
    let partial = tags.split(|c| *c == b':').next() == Some(b"P");
    if partial {
        log = log.strip_suffix(b"\n").unwrap_or(log);
    }
    Ok(LogMessage {
        timestamp,
        time_text,
        stream,
        partial,
        log,
    })
}

/// Upstream `RFC3339NanoFixed` (`2006-01-02T15:04:05.000000000Z07:00`): always nine fractional
/// digits, the offset as written. Runtimes write `RFC3339Nano`, which drops trailing zeros.
pub fn fixed_time(msg: &LogMessage) -> String {
    let t = msg.time_text;
    // `YYYY-MM-DDTHH:MM:SS` is 19 bytes; what follows is an optional fraction, then the offset.
    if t.len() > 19 && t.is_char_boundary(19) && t.as_bytes()[10] == b'T' {
        let (head, rest) = t.split_at(19);
        let (frac, offset) = match rest.strip_prefix('.') {
            Some(r) => {
                let digits = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
                (&r[..digits], &r[digits..])
            }
            None => ("", rest),
        };
        if !offset.is_empty() {
            let mut frac = frac.to_string();
            frac.truncate(9);
            return format!("{head}.{frac:0<9}{offset}");
        }
    }
    // Anything else the parser accepted: render in UTC.
    format!(
        "{}.{:09}Z",
        msg.timestamp.strftime("%Y-%m-%dT%H:%M:%S"),
        msg.timestamp.subsec_nanosecond()
    )
}

/// The query of `kubectl logs` / `/containerLogs` (upstream `v1.PodLogOptions`), as given.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodLogOptions {
    pub follow: bool,
    /// Read the previous (last terminated) instance of the container.
    pub previous: bool,
    pub since_seconds: Option<i64>,
    pub since_time: Option<Timestamp>,
    pub timestamps: bool,
    pub tail_lines: Option<i64>,
    pub limit_bytes: Option<i64>,
}

/// What the reader does (upstream `LogOptions`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogOptions {
    /// Start this many lines before the end; None reads the whole file (upstream -1).
    pub tail: Option<u64>,
    /// Stop after writing this many bytes; None for no limit (upstream -1).
    pub limit_bytes: Option<u64>,
    /// Skip lines written before this time.
    pub since: Option<Timestamp>,
    /// Keep reading new lines until the container stops.
    pub follow: bool,
    /// Prefix each line with its time in `RFC3339NanoFixed`.
    pub timestamps: bool,
}

impl LogOptions {
    /// Upstream `NewLogOptions`: `sinceSeconds` counts back from `now`, and the later of it and
    /// `sinceTime` wins. Negative values (rejected by API validation) mean "not set".
    pub fn from_pod_options(o: &PodLogOptions, now: Timestamp) -> LogOptions {
        let mut since = o
            .since_seconds
            .and_then(|s| now.checked_sub(SignedDuration::from_secs(s)).ok());
        if let Some(t) = o.since_time {
            if since.is_none_or(|s| t > s) {
                since = Some(t);
            }
        }
        LogOptions {
            tail: o.tail_lines.and_then(|n| u64::try_from(n).ok()),
            limit_bytes: o.limit_bytes.and_then(|n| u64::try_from(n).ok()),
            since,
            follow: o.follow,
            timestamps: o.timestamps,
        }
    }
}

/// What to do with one message (upstream `logWriter.write`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Render {
    /// Older than `since`: nothing to write.
    Skip,
    /// Write these bytes; `done` when the byte limit is reached with them.
    Write { bytes: Vec<u8>, done: bool },
}

/// Applies `since`, `timestamps` and `limitBytes` across messages (upstream `logWriter`).
#[derive(Debug, Clone)]
pub struct LogWriter {
    since: Option<Timestamp>,
    timestamps: bool,
    remain: u64,
}

impl LogWriter {
    pub fn new(opts: &LogOptions) -> LogWriter {
        LogWriter {
            since: opts.since,
            timestamps: opts.timestamps,
            remain: opts.limit_bytes.unwrap_or(u64::MAX),
        }
    }

    /// The bytes to write for `msg`. Upstream prefixes every record with its time, partial ones
    /// included, and cuts the last line at the byte limit.
    pub fn render(&mut self, msg: &LogMessage) -> Render {
        if self.since.is_some_and(|s| msg.timestamp < s) {
            return Render::Skip;
        }
        let mut line = Vec::with_capacity(msg.log.len() + 36);
        if self.timestamps {
            line.extend_from_slice(fixed_time(msg).as_bytes());
            line.push(b' ');
        }
        line.extend_from_slice(msg.log);
        let cut = usize::try_from(self.remain).unwrap_or(usize::MAX);
        line.truncate(cut);
        self.remain -= line.len() as u64;
        Render::Write {
            bytes: line,
            done: self.remain == 0,
        }
    }
}
