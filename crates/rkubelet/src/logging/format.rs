//! One log line per event, in klog's text format or component-base's JSON format.
//!
//! Text (klog's `printS`, as `klog.InfoS` prints it):
//! `I1123 23:25:36.401349    3077 manager.rs:123] "message" err="..." key="value" n=3`
//! - severity letter (I for INFO/DEBUG/TRACE, W, E), month and day, local time with
//!   microseconds, the process id right-aligned in 7 columns, the source file and line;
//! - the message always quoted (Go's `strconv.Quote`), then an `error` field as `err=`, then
//!   the event's fields and its spans' fields (`pod=`, `uid=` of a pod worker), in order;
//! - strings are quoted, numbers and booleans are not, as klog's `KVListFormat`.
//!   One difference: klog prints a value with line breaks as an indented block over several
//!   lines; rkubelet escapes them (`\n`) so that one event is always one line and line-based
//!   shippers never split it.
//!
//! JSON (component-base/logs/json, zap + zapr): `{"ts":1606775542123.456,"caller":
//! "eviction/manager.rs:123","msg":"...","v":0,"err":"...",...}` with `ts` in milliseconds
//! since the epoch (upstream's `epochMillisTimeEncoder`), `caller` zap's short form
//! (directory/file:line), `v` the message's V level (absent on errors, as zapr's `Error`),
//! `err` the error.

use std::fmt::Write as _;

use tracing::field::{Field, Visit};
use tracing::Level;

/// A field's value, typed enough to print it as klog and zap do.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    /// Printed quoted (text) or as a JSON string.
    Str(String),
    /// An integer, float or bool: printed bare in both formats.
    Bare(String),
}

/// What a visitor collects from an event or span.
#[derive(Debug, Default)]
pub struct Fields {
    pub message: String,
    /// Whether `message` was set: tracing records the format string's `message` first, so a
    /// later field also named `message` (an event's or a condition's text) is kept as a field.
    pub has_message: bool,
    pub err: Option<String>,
    pub kvs: Vec<(&'static str, Val)>,
    /// From records bridged from the `log` crate.
    pub log_file: Option<String>,
    pub log_line: Option<u64>,
}

/// Undoes Rust's `Debug` escaping of a string (`"a \"b\"\n"`), or None if `s` is not one.
fn unescape_debug(s: &str) -> Option<String> {
    let inner = s.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return None,
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                'r' => out.push('\r'),
                't' => out.push('\t'),
                '0' => out.push('\0'),
                c @ ('\\' | '"' | '\'') => out.push(c),
                'u' => {
                    let rest = chars.as_str().strip_prefix('{')?;
                    let end = rest.find('}')?;
                    let n = u32::from_str_radix(&rest[..end], 16).ok()?;
                    out.push(char::from_u32(n)?);
                    chars = rest[end + 1..].chars();
                }
                _ => return None,
            },
            c => out.push(c),
        }
    }
    Some(out)
}

/// A `Debug`/`Display` rendering as a value: numbers and booleans bare, a Rust-quoted string
/// unquoted back to its text, anything else (paths, durations, names) a string.
fn classify(s: String) -> Val {
    if s == "true" || s == "false" || s.parse::<i128>().is_ok() {
        return Val::Bare(s);
    }
    if let Ok(f) = s.parse::<f64>() {
        if f.is_finite() && !s.starts_with('+') && !s.ends_with('.') {
            return Val::Bare(s);
        }
    }
    match unescape_debug(&s) {
        Some(text) => Val::Str(text),
        None => Val::Str(s),
    }
}

fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let _ = write!(s, ": {cause}");
        source = cause.source();
    }
    s
}

impl Fields {
    fn put(&mut self, field: &Field, val: Val) {
        match (field.name(), val) {
            ("message", Val::Str(s) | Val::Bare(s)) if !self.has_message => {
                self.message = s;
                self.has_message = true;
            }
            ("error" | "err", Val::Str(s) | Val::Bare(s)) => self.err = Some(s),
            ("log.file", Val::Str(s)) => self.log_file = Some(s),
            ("log.target" | "log.module_path" | "log.file" | "log.line", _) => {}
            (name, val) => self.kvs.push((name, val)),
        }
    }

    /// Adds a span's fields after the event's, skipping keys already present.
    pub fn extend_from(&mut self, span: &Fields) {
        for (k, v) in &span.kvs {
            if !self.kvs.iter().any(|(have, _)| have == k) {
                self.kvs.push((k, v.clone()));
            }
        }
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let s = format!("{value:?}");
        if field.name() == "message" && !self.has_message {
            // `info!("text {x}")`: format_args' Debug is its text.
            self.message = s;
            self.has_message = true;
        } else {
            self.put(field, classify(s));
        }
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Val::Str(value.to_string()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Val::Bare(value.to_string()));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "log.line" {
            self.log_line = Some(value);
        } else {
            self.put(field, Val::Bare(value.to_string()));
        }
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Val::Bare(value.to_string()));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        let v = if value.is_finite() {
            Val::Bare(value.to_string())
        } else {
            Val::Str(value.to_string())
        };
        self.put(field, v);
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, Val::Str(error_chain(value)));
    }
}

/// Go's `strconv.Quote`: `"` and `\` escaped, `\n` `\t` `\r` and the like by name, other
/// control characters (ESC included, so no terminal escape ever reaches the log) as `\xNN`
/// or `\u00NN`; printable Unicode kept.
pub fn go_quote(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            '\x0b' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// klog's severity letter.
pub fn severity(level: &Level) -> char {
    match *level {
        Level::ERROR => 'E',
        Level::WARN => 'W',
        _ => 'I',
    }
}

/// The event's wall-clock time, split for both formats.
#[derive(Debug, Clone, Copy)]
pub struct Stamp {
    pub month: i8,
    pub day: i8,
    pub hour: i8,
    pub minute: i8,
    pub second: i8,
    pub micros: i32,
    /// Milliseconds since the Unix epoch, with microseconds as the fraction (JSON `ts`).
    pub epoch_millis: f64,
}

impl Stamp {
    pub fn new(ts: jiff::Timestamp, tz: &jiff::tz::TimeZone) -> Stamp {
        let dt = tz.to_datetime(ts);
        Stamp {
            month: dt.month(),
            day: dt.day(),
            hour: dt.hour(),
            minute: dt.minute(),
            second: dt.second(),
            micros: dt.subsec_nanosecond() / 1000,
            epoch_millis: (ts.as_microsecond() as f64) / 1000.0,
        }
    }
}

/// Where an event came from, as the two formats print it.
pub struct Caller<'a> {
    pub file: &'a str,
    pub line: u64,
}

impl Caller<'_> {
    /// klog prints the file's base name; a `mod.rs` also gets its directory, which is what
    /// names the module.
    fn klog(&self, out: &mut String) {
        let mut parts = self.file.rsplit('/');
        let base = parts.next().unwrap_or(self.file);
        if base == "mod.rs" {
            if let Some(dir) = parts.next() {
                out.push_str(dir);
                out.push('/');
            }
        }
        out.push_str(base);
        let _ = write!(out, ":{}", self.line);
    }
    /// zap's `ShortCallerEncoder`: the last directory and the file.
    fn short(&self) -> String {
        let mut parts = self.file.rsplitn(3, '/');
        let base = parts.next().unwrap_or(self.file);
        match parts.next() {
            Some(dir) => format!("{dir}/{base}:{}", self.line),
            None => format!("{base}:{}", self.line),
        }
    }
}

/// A klog text line, newline included.
pub fn text_line(level: &Level, stamp: &Stamp, pid: u32, caller: &Caller, f: &Fields) -> String {
    let mut out = String::with_capacity(128 + f.message.len());
    let _ = write!(
        out,
        "{}{:02}{:02} {:02}:{:02}:{:02}.{:06} {:>7} ",
        severity(level),
        stamp.month,
        stamp.day,
        stamp.hour,
        stamp.minute,
        stamp.second,
        stamp.micros,
        pid
    );
    caller.klog(&mut out);
    out.push_str("] ");
    go_quote(&f.message, &mut out);
    if let Some(e) = &f.err {
        out.push_str(" err=");
        go_quote(e, &mut out);
    }
    for (k, v) in &f.kvs {
        out.push(' ');
        out.push_str(k);
        out.push('=');
        match v {
            Val::Str(s) => go_quote(s, &mut out),
            Val::Bare(s) => out.push_str(s),
        }
    }
    out.push('\n');
    out
}

/// A component-base JSON line, newline included; keys in zap's order (ts, caller, msg, then
/// zapr's v or err, then the fields), each key once.
pub fn json_line(level: &Level, v: u32, stamp: &Stamp, caller: &Caller, f: &Fields) -> String {
    fn key(out: &mut String, k: &str) {
        out.push(',');
        json_str(k, out);
        out.push(':');
    }
    let mut out = String::with_capacity(160 + f.message.len());
    let ts = serde_json::Number::from_f64(stamp.epoch_millis).map_or("0".into(), |n| n.to_string());
    let _ = write!(out, "{{\"ts\":{ts}");
    key(&mut out, "caller");
    json_str(&caller.short(), &mut out);
    key(&mut out, "msg");
    json_str(&f.message, &mut out);
    let mut seen: Vec<&str> = vec!["ts", "caller", "msg"];
    if *level != Level::ERROR {
        let _ = write!(out, ",\"v\":{v}");
        seen.push("v");
    }
    if let Some(e) = &f.err {
        key(&mut out, "err");
        json_str(e, &mut out);
        seen.push("err");
    }
    for (k, val) in &f.kvs {
        if seen.contains(k) {
            continue;
        }
        seen.push(k);
        key(&mut out, k);
        match val {
            Val::Bare(s)
                if serde_json::from_str::<serde_json::Value>(s)
                    .is_ok_and(|j| j.is_number() || j.is_boolean()) =>
            {
                out.push_str(s)
            }
            Val::Bare(s) | Val::Str(s) => json_str(s, &mut out),
        }
    }
    out.push_str("}\n");
    out
}

/// A JSON string literal (serde_json's escaping: control characters, ESC included, as \u00NN).
fn json_str(s: &str, out: &mut String) {
    match serde_json::to_string(s) {
        Ok(q) => out.push_str(&q),
        Err(_) => out.push_str("\"\""),
    }
}
