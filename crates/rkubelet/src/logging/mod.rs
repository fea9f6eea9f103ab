//! rkubelet's log output: what upstream's component-base/logs gives the kubelet (klog's text
//! header by default, `logging.format: json` for component-base/logs/json), driven by `-v`,
//! `--vmodule` and `logging.options.*.splitStream` / `infoBufferSize` / `flushFrequency`.
//!
//! Why a [`Layer`] of our own over tracing-subscriber's registry rather than its `fmt` layer
//! with a custom `FormatEvent`: both need the same field visitor and line writer, but the
//! layer keeps spans' fields typed (a `FormatFields` stores them pre-rendered as one string,
//! so the JSON format would have to re-parse them), and picks the stream per event for the
//! split-stream option without a `MakeWriter` per format. The registry still owns span
//! storage, and [`filter::VFilter`] is a per-layer filter so tracing caches the `-v` /
//! `--vmodule` decision per callsite. No crate on crates.io writes klog's format; the formats
//! are a few dozen lines (`format`). No colours are ever written (klog has none), so a log
//! file or a pipe never gets ANSI escapes.

pub mod filter;
pub mod format;

use std::io::{BufWriter, Stdout, Write};
use std::sync::{Arc, Mutex, OnceLock};

use kubelet::config::logging::{LogFormat, LoggingConfig};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

use format::{Caller, Fields, Stamp};

/// Where lines go: everything to stderr (upstream's default), or with `splitStream` errors
/// to stderr and the rest to stdout, buffered up to `infoBufferSize` when that is not 0.
enum Output {
    Stderr,
    Split { info: Info },
}

enum Info {
    Stdout,
    Buffered(Mutex<BufWriter<Stdout>>),
}

impl Output {
    fn write(&self, error: bool, line: &[u8]) {
        // A failed write has nowhere to be reported; the line is lost, as with klog.
        match self {
            Output::Split { info } if !error => match info {
                Info::Stdout => {
                    let _ = std::io::stdout().lock().write_all(line);
                }
                Info::Buffered(w) => {
                    if let Ok(mut w) = w.lock() {
                        let _ = w.write_all(line);
                    }
                }
            },
            _ => {
                let _ = std::io::stderr().lock().write_all(line);
            }
        }
    }

    fn flush(&self) {
        if let Output::Split {
            info: Info::Buffered(w),
        } = self
        {
            if let Ok(mut w) = w.lock() {
                let _ = w.flush();
            }
        }
    }
}

static OUTPUT: OnceLock<Arc<Output>> = OnceLock::new();

/// Writes out buffered info lines (`infoBufferSize`); call before exiting. Upstream's
/// `logs.FlushLogs`.
pub fn flush() {
    if let Some(o) = OUTPUT.get() {
        o.flush();
    }
}

/// A span's fields, kept typed for the events inside it.
struct SpanFields(Fields);

/// Formats and writes every event that passed the filter.
struct LogLayer {
    format: LogFormat,
    out: Arc<Output>,
    tz: jiff::tz::TimeZone,
    pid: u32,
}

impl<S> Layer<S> for LogLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            let mut f = Fields::default();
            attrs.record(&mut f);
            span.extensions_mut().insert(SpanFields(f));
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(SpanFields(f)) = span.extensions_mut().get_mut::<SpanFields>() {
                values.record(f);
            }
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let stamp = Stamp::new(jiff::Timestamp::now(), &self.tz);
        let mut f = Fields::default();
        event.record(&mut f);
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope {
                if let Some(SpanFields(sf)) = span.extensions().get::<SpanFields>() {
                    f.extend_from(sf);
                }
            }
        }
        let meta = event.metadata();
        let file = f.log_file.clone();
        let caller = Caller {
            file: file.as_deref().or(meta.file()).unwrap_or("unknown"),
            line: f.log_line.or(meta.line().map(u64::from)).unwrap_or(0),
        };
        let line = match self.format {
            LogFormat::Text => format::text_line(meta.level(), &stamp, self.pid, &caller, &f),
            LogFormat::Json => {
                let v = filter::v_of(meta.level(), meta.target());
                format::json_line(meta.level(), v, &stamp, &caller, &f)
            }
        };
        self.out
            .write(*meta.level() == Level::ERROR, line.as_bytes());
    }
}

/// Installs the global subscriber from the `logging` configuration. With a buffered info
/// stream, a thread flushes it every `flushFrequency`.
pub fn init(cfg: &LoggingConfig) -> anyhow::Result<()> {
    let opts = cfg.stream();
    let out = Arc::new(if !opts.split_stream {
        Output::Stderr
    } else if opts.info_buffer_size == 0 {
        Output::Split { info: Info::Stdout }
    } else {
        let size = usize::try_from(opts.info_buffer_size).unwrap_or(usize::MAX);
        Output::Split {
            info: Info::Buffered(Mutex::new(BufWriter::with_capacity(
                size,
                std::io::stdout(),
            ))),
        }
    });
    if matches!(
        &*out,
        Output::Split {
            info: Info::Buffered(_)
        }
    ) && !cfg.flush_frequency.is_zero()
    {
        let every = cfg.flush_frequency;
        let o = out.clone();
        std::thread::Builder::new()
            .name("log-flush".into())
            .spawn(move || loop {
                std::thread::sleep(every);
                o.flush();
            })?;
    }
    let _ = OUTPUT.set(out.clone());
    let layer = LogLayer {
        format: cfg.format,
        out,
        // The host's zone (TZ, /etc/localtime), as klog's local-time header; UTC if unknown.
        tz: jiff::tz::TimeZone::try_system().unwrap_or(jiff::tz::TimeZone::UTC),
        pid: std::process::id(),
    }
    .with_filter(filter::VFilter {
        verbosity: cfg.verbosity,
        vmodule: cfg.vmodule.clone(),
    });
    tracing_subscriber::registry()
        .with(layer)
        .try_init()
        .map_err(|e| anyhow::anyhow!("installing the log subscriber: {e}"))
}

#[cfg(test)]
mod tests;
