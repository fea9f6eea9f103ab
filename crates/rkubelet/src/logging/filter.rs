//! `-v` and `--vmodule` over tracing levels.
//!
//! Upstream gates each message by a klog V level (`klog.V(4).InfoS`); rkubelet's code logs with
//! tracing levels. The mapping (also the `v` of a JSON line), following klog's conventions
//! (V(0) always on, V(2) the usual production default, V(4) debug, V(5) trace, V(6..9) the
//! client's HTTP details):
//!
//! | tracing level | rkubelet's own crates | dependencies (hyper, h2, tonic, kube, rustls, ...) |
//! |---------------|-----------------------|-----------------------------------------------------|
//! | ERROR, WARN, INFO | V(0)              | V(0)                                                |
//! | DEBUG         | V(4)                  | V(8)                                                |
//! | TRACE         | V(5)                  | V(9)                                                |
//!
//! klog's V(2) ("useful steady-state information") has no tracing level: an INFO event of our
//! own crates whose target ends in `::v2` (`info!(target: v2!(), ...)`, the module's path plus
//! `::v2`) is V(2).
//!
//! An event is printed when its V is at most the verbosity of its file: the first `--vmodule`
//! pattern that matches the file, else `-v` (klog's rule). The decision depends only on the
//! callsite's static metadata, so tracing caches it per callsite and a disabled event costs
//! one atomic load.

use kubelet::config::logging::VModule;
use tracing::level_filters::LevelFilter;
use tracing::subscriber::Interest;
use tracing::{Level, Metadata};
use tracing_subscriber::layer::{Context, Filter};

/// The crates built from this workspace (targets are module paths).
const OWN_CRATES: [&str; 5] = [
    "kubelet",
    "rkubelet",
    "rkubelet_cri",
    "cgroups",
    "kubelet_config",
];

fn is_own(target: &str) -> bool {
    let krate = target.split("::").next().unwrap_or(target);
    OWN_CRATES.contains(&krate)
}

/// The klog V level of an event (see the module docs).
pub fn v_of(level: &Level, target: &str) -> u32 {
    let own = is_own(target);
    match *level {
        Level::INFO if own && target.ends_with("::v2") => 2,
        Level::ERROR | Level::WARN | Level::INFO => 0,
        Level::DEBUG if own => 4,
        Level::DEBUG => 8,
        _ if own => 5,
        _ => 9,
    }
}

/// The module name klog's vmodule would see: the file's stem, or for a `mod.rs` the directory
/// that names the module (`pod_workers/mod.rs` is `pod_workers`).
fn module_name(path: &str) -> &str {
    let no_ext = path.strip_suffix(".rs").unwrap_or(path);
    let mut parts = no_ext.rsplit('/');
    let stem = parts.next().unwrap_or(no_ext);
    match stem {
        "mod" => parts.next().unwrap_or(stem),
        _ => stem,
    }
}

/// klog's glob (`filepath.Match` with `*` and `?`; `*` does not cross `/`).
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    match (pattern.split_first(), text.split_first()) {
        (None, None) => true,
        (Some((b'*', rest)), _) => {
            glob(rest, text)
                || matches!(text.split_first(), Some((c, t)) if *c != b'/' && glob(pattern, t))
        }
        (Some((b'?', rest)), Some((c, t))) => *c != b'/' && glob(rest, t),
        (Some((p, rest)), Some((c, t))) => p == c && glob(rest, t),
        _ => false,
    }
}

/// Whether a `--vmodule` pattern names this source file. Without `/`: the module name (see
/// [`module_name`]). With `/`: klog matches the whole path; Rust paths are relative to the
/// workspace (`crates/kubelet/src/eviction/manager.rs`) or absolute for dependencies, so the
/// pattern is matched against the path's last components, as many as the pattern has
/// (`eviction/*` matches every file of `crates/kubelet/src/eviction/`); `.rs` is optional.
pub fn matches(pattern: &str, file: &str) -> bool {
    if !pattern.contains('/') {
        return glob(pattern.as_bytes(), module_name(file).as_bytes());
    }
    let path = file.strip_suffix(".rs").unwrap_or(file);
    let pattern = pattern.strip_suffix(".rs").unwrap_or(pattern);
    let n = pattern.split('/').count();
    let comps: Vec<&str> = path.split('/').collect();
    if comps.len() < n {
        return false;
    }
    let tail = comps[comps.len() - n..].join("/");
    glob(pattern.as_bytes(), tail.as_bytes())
}

/// The per-callsite filter for `-v` / `--vmodule`.
#[derive(Debug, Clone)]
pub struct VFilter {
    pub verbosity: u32,
    pub vmodule: Vec<VModule>,
}

impl VFilter {
    /// The verbosity in force for a source file.
    fn verbosity_for(&self, file: Option<&str>) -> u32 {
        file.and_then(|f| self.vmodule.iter().find(|m| matches(&m.pattern, f)))
            .map_or(self.verbosity, |m| m.verbosity)
    }

    pub fn enabled_for(&self, meta: &Metadata<'_>) -> bool {
        v_of(meta.level(), meta.target()) <= self.verbosity_for(meta.file())
    }
}

impl<S> Filter<S> for VFilter {
    fn enabled(&self, meta: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        self.enabled_for(meta)
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        // Records bridged from the `log` crate share one callsite per level; their real
        // target arrives with each record.
        if meta.file().is_none() || meta.target() == "log" {
            return Interest::sometimes();
        }
        if self.enabled_for(meta) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        let max = self
            .vmodule
            .iter()
            .map(|m| m.verbosity)
            .chain([self.verbosity])
            .max()
            .unwrap_or(0);
        Some(match max {
            0..=3 => LevelFilter::INFO,
            4 => LevelFilter::DEBUG,
            _ => LevelFilter::TRACE,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v_levels() {
        for (level, target, want) in [
            (Level::ERROR, "kubelet::eviction", 0),
            (Level::WARN, "h2::proto", 0),
            (Level::INFO, "rkubelet", 0),
            (Level::INFO, "kubelet::timeline::v2", 2),
            (Level::WARN, "kubelet::timeline::v2", 0),
            (Level::INFO, "hyper::v2", 0),
            (Level::DEBUG, "kubelet::pod_workers", 4),
            (Level::DEBUG, "rkubelet_cri::grpc", 4),
            (Level::TRACE, "cgroups::v1", 5),
            (Level::DEBUG, "hyper_util::client", 8),
            (Level::TRACE, "h2::codec", 9),
            (Level::DEBUG, "kubelets", 8),
        ] {
            assert_eq!(v_of(&level, target), want, "{level} {target}");
        }
    }

    #[test]
    fn patterns() {
        for (pattern, file, want) in [
            ("manager", "crates/kubelet/src/eviction/manager.rs", true),
            ("pod_workers", "crates/kubelet/src/pod_workers/mod.rs", true),
            ("pod_*", "crates/kubelet/src/pod_workers/mod.rs", true),
            ("pod_?orkers", "crates/kubelet/src/pod_workers/mod.rs", true),
            ("mod", "crates/kubelet/src/pod_workers/mod.rs", false),
            ("main", "src/main.rs", true),
            ("src", "src/main.rs", false),
            ("*", "crates/kubelet/src/x.rs", true),
            ("manage", "crates/kubelet/src/eviction/manager.rs", false),
            ("eviction/*", "crates/kubelet/src/eviction/manager.rs", true),
            ("eviction/*", "crates/kubelet/src/eviction.rs", false),
            ("src/eviction", "crates/kubelet/src/eviction.rs", true),
            ("src/eviction.rs", "crates/kubelet/src/eviction.rs", true),
            ("kubelet/*", "crates/kubelet/src/eviction/manager.rs", false),
            (
                "kubelet/*/*/*",
                "crates/kubelet/src/eviction/manager.rs",
                true,
            ),
            ("a/b/c/d/e/f/g", "b/c.rs", false),
        ] {
            assert_eq!(matches(pattern, file), want, "{pattern} vs {file}");
        }
    }

    #[test]
    fn first_matching_vmodule_wins_else_v() {
        let f = VFilter {
            verbosity: 2,
            vmodule: vec![
                VModule {
                    pattern: "prober".into(),
                    verbosity: 5,
                },
                VModule {
                    pattern: "prob*".into(),
                    verbosity: 0,
                },
            ],
        };
        assert_eq!(f.verbosity_for(Some("crates/kubelet/src/prober.rs")), 5);
        assert_eq!(f.verbosity_for(Some("crates/kubelet/src/probes.rs")), 0);
        assert_eq!(f.verbosity_for(Some("crates/kubelet/src/other.rs")), 2);
        assert_eq!(f.verbosity_for(None), 2);
        assert_eq!(
            Filter::<tracing_subscriber::Registry>::max_level_hint(&f),
            Some(LevelFilter::TRACE)
        );
    }
}
