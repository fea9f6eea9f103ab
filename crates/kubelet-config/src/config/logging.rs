//! `logging` (component-base's `LoggingConfiguration`, k8s.io/component-base/logs/api/v1): the
//! format, verbosity, per-file verbosity and the split-stream options. The binary turns these
//! into its log subscriber; this module only reads and checks them.

use serde_json::Value;

use super::{parse_quantity_bytes, Reader};

/// `logging.format`: `text` (klog's header) or `json` (component-base/logs/json's zap lines).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// One `logging.vmodule` entry / `--vmodule` item: files whose name matches `pattern` log at
/// `verbosity`. klog's rule: a pattern without `/` matches the file's base name without its
/// extension, one with `/` the whole path; `*` and `?` are globs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VModule {
    pub pattern: String,
    pub verbosity: u32,
}

/// `logging.options.{text,json}`: info messages to stdout (buffered up to `info_buffer_size`
/// bytes, flushed every `flushFrequency`), errors to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamOptions {
    pub split_stream: bool,
    pub info_buffer_size: u64,
}

/// The whole `logging` section, defaults as upstream's `SetRecommendedLoggingConfiguration`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggingConfig {
    pub format: LogFormat,
    /// `logging.verbosity` / `-v`: klog's V level.
    pub verbosity: u32,
    pub vmodule: Vec<VModule>,
    /// `logging.flushFrequency`: how often buffered info output is flushed.
    pub flush_frequency: std::time::Duration,
    pub text: StreamOptions,
    pub json: StreamOptions,
}

impl Default for LoggingConfig {
    fn default() -> Self {
        LoggingConfig {
            format: LogFormat::Text,
            verbosity: 0,
            vmodule: Vec::new(),
            flush_frequency: std::time::Duration::from_secs(5),
            text: StreamOptions::default(),
            json: StreamOptions::default(),
        }
    }
}

impl LoggingConfig {
    /// The split-stream options of the chosen format.
    pub fn stream(&self) -> StreamOptions {
        match self.format {
            LogFormat::Text => self.text,
            LogFormat::Json => self.json,
        }
    }
}

/// Parses `--vmodule`'s `pattern=N,pattern2=M` (klog's `moduleSpec.Set`). An empty string is
/// no entries. Errors name the bad item.
pub fn parse_vmodule(s: &str) -> Result<Vec<VModule>, String> {
    let mut out = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (pattern, level) = item
            .split_once('=')
            .ok_or_else(|| format!("{item:?}: expected pattern=N"))?;
        let pattern = pattern.trim();
        if pattern.is_empty() {
            return Err(format!("{item:?}: empty pattern"));
        }
        let verbosity = level
            .trim()
            .parse()
            .map_err(|_| format!("{item:?}: {level:?} is not a verbosity level (0 or more)"))?;
        out.push(VModule {
            pattern: pattern.to_string(),
            verbosity,
        });
    }
    Ok(out)
}

/// Reads `logging` from the file's tree (or the flags that set its fields).
pub(super) fn read(r: &mut Reader, out: &mut LoggingConfig, warnings: &mut [String]) {
    let Some(mut l) = r.section("logging") else {
        return;
    };
    if let Some(v) = l.int("verbosity") {
        match u32::try_from(v) {
            Ok(v) => out.verbosity = v,
            Err(_) => l.errors.push(format!("verbosity: must be >= 0, got {v}")),
        }
    }
    // validate_tree rejects any other value, naming --logging-format.
    if let Some(f) = l.string("format") {
        out.format = if f == "json" {
            LogFormat::Json
        } else {
            LogFormat::Text
        };
    }
    l.duration("flushFrequency", &mut out.flush_frequency);
    if let Some(v) = l.take("vmodule") {
        match vmodule_list(&v) {
            Ok(list) => out.vmodule = list,
            Err(e) => l.errors.push(format!("vmodule: {e}")),
        }
    }
    if let Some(mut o) = l.section("options") {
        for (name, opts) in [("text", &mut out.text), ("json", &mut out.json)] {
            if let Some(mut s) = o.section(name) {
                if let Some(b) = s.bool("splitStream") {
                    opts.split_stream = b;
                }
                if let Some(v) = s.take("infoBufferSize") {
                    match buffer_size(&v) {
                        Ok(n) => opts.info_buffer_size = n,
                        Err(e) => s.errors.push(format!("infoBufferSize: {e}")),
                    }
                }
                o.errors.extend(s.finish(name, warnings));
            }
        }
        l.errors.extend(o.finish("options", warnings));
    }
    r.errors.extend(l.finish("logging", warnings));
}

/// `[{filePattern: x, verbosity: 4}]` (upstream `VModuleConfiguration`).
fn vmodule_list(v: &Value) -> Result<Vec<VModule>, String> {
    let Value::Array(items) = v else {
        return Err(format!(
            "must be a list of {{filePattern, verbosity}}, got {v}"
        ));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let pattern = item
                .get("filePattern")
                .and_then(Value::as_str)
                .filter(|p| !p.is_empty())
                .ok_or_else(|| format!("[{i}].filePattern: must be a non-empty string"))?;
            let verbosity = item
                .get("verbosity")
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| format!("[{i}].verbosity: must be an integer >= 0"))?;
            Ok(VModule {
                pattern: pattern.to_string(),
                verbosity,
            })
        })
        .collect()
}

/// A `QuantityValue`: a number or a quantity string (`"1Mi"`); upstream caps it at 2 GiB.
fn buffer_size(v: &Value) -> Result<u64, String> {
    let n = match v {
        Value::Number(n) => n
            .as_u64()
            .ok_or_else(|| format!("{n} must be a byte count >= 0"))?,
        Value::String(s) => parse_quantity_bytes(s)?,
        other => return Err(format!("must be a quantity, got {other}")),
    };
    Ok(n.min(2 * 1024 * 1024 * 1024))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vmodule_flag_values() {
        let v = |p: &str, n| VModule {
            pattern: p.into(),
            verbosity: n,
        };
        for (input, want) in [
            ("", Ok(vec![])),
            ("pod_workers=4", Ok(vec![v("pod_workers", 4)])),
            (
                "pod_*=5, kubelet/src/eviction/*=3",
                Ok(vec![v("pod_*", 5), v("kubelet/src/eviction/*", 3)]),
            ),
            ("pod_workers", Err(())),
            ("=4", Err(())),
            ("x=-1", Err(())),
            ("x=high", Err(())),
        ] {
            assert_eq!(parse_vmodule(input).map_err(|_| ()), want, "{input}");
        }
    }

    #[test]
    fn vmodule_config_list() {
        let ok: Value = serde_json::json!([{"filePattern": "prober", "verbosity": 5}]);
        assert_eq!(
            vmodule_list(&ok),
            Ok(vec![VModule {
                pattern: "prober".into(),
                verbosity: 5
            }])
        );
        for bad in [
            serde_json::json!("prober=5"),
            serde_json::json!([{"verbosity": 5}]),
            serde_json::json!([{"filePattern": "x", "verbosity": -1}]),
        ] {
            assert!(vmodule_list(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn buffer_sizes() {
        assert_eq!(buffer_size(&serde_json::json!("1Mi")), Ok(1 << 20));
        assert_eq!(buffer_size(&serde_json::json!(4096)), Ok(4096));
        assert_eq!(buffer_size(&serde_json::json!("3Gi")), Ok(2 << 30));
        assert!(buffer_size(&serde_json::json!("lots")).is_err());
        assert!(buffer_size(&serde_json::json!(-1)).is_err());
    }
}
