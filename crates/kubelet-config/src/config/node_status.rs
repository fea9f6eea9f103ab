//! The node status, Lease and image pull settings (upstream `nodeStatusUpdateFrequency`,
//! `nodeStatusReportFrequency`, `nodeLeaseDurationSeconds`, `nodeStatusMaxImages`,
//! `serializeImagePulls`, `maxParallelImagePulls`, `registryPullQPS`, `registryBurst`), with
//! upstream's v1beta1 defaulting (`pkg/kubelet/apis/config/v1beta1/defaults.go`) and
//! validation wording (`pkg/kubelet/apis/config/validation`).

use std::time::Duration;

use serde_json::Value;

use super::{format_duration, parse_duration, schema, Reader};

/// Upstream's defaults.
pub const DEFAULT_UPDATE_FREQUENCY: Duration = Duration::from_secs(10);
pub const DEFAULT_REPORT_FREQUENCY: Duration = Duration::from_secs(300);
pub const DEFAULT_LEASE_DURATION_SECONDS: i64 = 40;
pub const DEFAULT_MAX_IMAGES: i64 = 50;

/// How the node reports itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeStatusConfig {
    /// `nodeStatusUpdateFrequency` / `--node-status-update-frequency`: how often the status is
    /// computed (and posted when it changed).
    pub update_frequency: Duration,
    /// `nodeStatusReportFrequency`: an unchanged status is still posted this often.
    pub report_frequency: Duration,
    /// `nodeLeaseDurationSeconds`: the Lease's `leaseDurationSeconds`; renewed every quarter
    /// of it.
    pub lease_duration_seconds: i32,
    /// `nodeStatusMaxImages` / `--node-status-max-images`: at most this many images in
    /// `status.images`; -1 for no cap.
    pub max_images: i64,
}

impl Default for NodeStatusConfig {
    fn default() -> Self {
        NodeStatusConfig {
            update_frequency: DEFAULT_UPDATE_FREQUENCY,
            report_frequency: DEFAULT_REPORT_FREQUENCY,
            lease_duration_seconds: DEFAULT_LEASE_DURATION_SECONDS as i32,
            max_images: DEFAULT_MAX_IMAGES,
        }
    }
}

impl NodeStatusConfig {
    /// Upstream `nodeLeaseRenewIntervalFraction` (0.25) of the Lease duration.
    pub fn lease_renew_interval(&self) -> Duration {
        Duration::from_secs(u64::try_from(self.lease_duration_seconds).unwrap_or(0)) / 4
    }
}

/// How images are pulled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImagePullConfig {
    /// `serializeImagePulls` / `--serialize-image-pulls`: one pull at a time.
    pub serialize: bool,
    /// `maxParallelImagePulls`: with `serialize` off, at most this many pulls at once; None
    /// for no bound.
    pub max_parallel: Option<u32>,
    /// `registryPullQPS` / `--registry-qps`: pulls a second (token bucket); 0 for no limit.
    pub qps: u32,
    /// `registryBurst` / `--registry-burst`: the bucket's size.
    pub burst: u32,
}

impl Default for ImagePullConfig {
    fn default() -> Self {
        ImagePullConfig {
            serialize: true,
            max_parallel: None,
            qps: 5,
            burst: 10,
        }
    }
}

fn duration_at(tree: &Value, path: &str) -> Option<Duration> {
    schema::get_path(tree, path)
        .and_then(Value::as_str)
        .and_then(|s| parse_duration(s).ok())
}

/// Upstream's v1beta1 defaulting of these fields on the merged file and drop-in layers, before
/// the flags are applied (so `/configz` shows the result); `explicit` says whether a file or
/// drop-in set a field. Flags are not defaulted, as upstream: `--node-status-update-frequency=4s`
/// without a file leaves the report frequency at 5m, where `nodeStatusUpdateFrequency: 4s` in the
/// file makes it 4s too.
/// - a zero `nodeStatusUpdateFrequency` is 10s; a zero or unset `nodeStatusReportFrequency` is
///   `nodeStatusUpdateFrequency` when that was set (backward compatibility), else 5m;
/// - a zero `nodeLeaseDurationSeconds` is 40;
/// - an unset `serializeImagePulls` is false when `maxParallelImagePulls` is 2 or more, else
///   true.
pub(super) fn apply_defaults(tree: &mut Value, explicit: impl Fn(&str) -> bool) {
    let update = duration_at(tree, "nodeStatusUpdateFrequency");
    let update_set = explicit("nodeStatusUpdateFrequency") && update.is_some_and(|d| !d.is_zero());
    if update.is_some_and(|d| d.is_zero()) {
        schema::set_path(
            tree,
            "nodeStatusUpdateFrequency",
            format_duration(DEFAULT_UPDATE_FREQUENCY).into(),
        );
    }
    let report = duration_at(tree, "nodeStatusReportFrequency");
    if !explicit("nodeStatusReportFrequency") || report.is_some_and(|d| d.is_zero()) {
        let d = match update {
            Some(u) if update_set => u,
            _ => DEFAULT_REPORT_FREQUENCY,
        };
        schema::set_path(tree, "nodeStatusReportFrequency", format_duration(d).into());
    }
    if schema::get_path(tree, "nodeLeaseDurationSeconds").and_then(Value::as_i64) == Some(0) {
        schema::set_path(
            tree,
            "nodeLeaseDurationSeconds",
            DEFAULT_LEASE_DURATION_SECONDS.into(),
        );
    }
    if !explicit("serializeImagePulls") {
        let parallel = schema::get_path(tree, "maxParallelImagePulls").and_then(Value::as_i64);
        let serialize = parallel.is_none_or(|n| n < 2);
        schema::set_path(tree, "serializeImagePulls", serialize.into());
    }
}

/// Reads the fields (each one removed from the reader); see [`validate`] for the checks.
pub(super) fn read(r: &mut Reader, status: &mut NodeStatusConfig, pulls: &mut ImagePullConfig) {
    r.duration("nodeStatusUpdateFrequency", &mut status.update_frequency);
    r.duration("nodeStatusReportFrequency", &mut status.report_frequency);
    if let Some(n) = r.int("nodeLeaseDurationSeconds") {
        // Out of range values are refused by `validate`.
        status.lease_duration_seconds = i32::try_from(n).unwrap_or(i32::MIN);
    }
    if let Some(n) = r.int("nodeStatusMaxImages") {
        status.max_images = n;
    }
    if let Some(b) = r.bool("serializeImagePulls") {
        pulls.serialize = b;
    }
    if let Some(n) = r.int("maxParallelImagePulls") {
        match u32::try_from(n) {
            Ok(v) if v >= 1 => pulls.max_parallel = Some(v),
            _ => r.errors.push(format!(
                "invalid configuration: maxParallelImagePulls {n} must be a positive number"
            )),
        }
    }
    // Negative values are refused by `validate_tree` in upstream's words.
    for (key, out) in [
        ("registryPullQPS", &mut pulls.qps),
        ("registryBurst", &mut pulls.burst),
    ] {
        if let Some(v) = r.int(key).and_then(|n| u32::try_from(n).ok()) {
            *out = v;
        }
    }
}

/// Upstream `ValidateKubeletConfiguration`'s checks on these fields, in its words.
pub(super) fn validate(
    status: &NodeStatusConfig,
    pulls: &ImagePullConfig,
    errors: &mut Vec<String>,
) {
    if status.max_images < -1 {
        errors.push(format!(
            "invalid configuration: nodeStatusMaxImages (--node-status-max-images) {} must be -1 or greater",
            status.max_images
        ));
    }
    if status.lease_duration_seconds <= 0 {
        errors.push(format!(
            "invalid configuration: nodeLeaseDurationSeconds {} must be greater than 0",
            status.lease_duration_seconds
        ));
    }
    if pulls.serialize && pulls.max_parallel.is_some_and(|n| n > 1) {
        errors.push(
            "invalid configuration: maxParallelImagePulls cannot be larger than 1 unless \
             SerializeImagePulls (--serialize-image-pulls) is set to false"
                .into(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaulted(file: &[(&str, Value)]) -> Value {
        let mut tree = schema::defaults_tree();
        for (p, v) in file {
            schema::set_path(&mut tree, p, v.clone());
        }
        apply_defaults(&mut tree, |p| file.iter().any(|(f, _)| *f == p));
        tree
    }

    #[test]
    fn upstream_defaulting() {
        type Case<'a> = (&'a str, Vec<(&'a str, Value)>, &'a str, &'a str, i64, bool);
        let cases: Vec<Case> = vec![
            ("nothing set", vec![], "10s", "5m0s", 40, true),
            (
                "report follows an explicit update frequency",
                vec![("nodeStatusUpdateFrequency", "4s".into())],
                "4s",
                "4s",
                40,
                true,
            ),
            (
                "both set",
                vec![
                    ("nodeStatusUpdateFrequency", "4s".into()),
                    ("nodeStatusReportFrequency", "1m0s".into()),
                ],
                "4s",
                "1m0s",
                40,
                true,
            ),
            (
                "zeros are unset",
                vec![
                    ("nodeStatusUpdateFrequency", "0s".into()),
                    ("nodeStatusReportFrequency", "0s".into()),
                    ("nodeLeaseDurationSeconds", 0.into()),
                ],
                "10s",
                "5m0s",
                40,
                true,
            ),
            (
                "parallel pulls turn serialization off",
                vec![("maxParallelImagePulls", 3.into())],
                "10s",
                "5m0s",
                40,
                false,
            ),
            (
                "one parallel pull keeps it on",
                vec![("maxParallelImagePulls", 1.into())],
                "10s",
                "5m0s",
                40,
                true,
            ),
            (
                "explicit serialization wins",
                vec![
                    ("maxParallelImagePulls", 3.into()),
                    ("serializeImagePulls", true.into()),
                ],
                "10s",
                "5m0s",
                40,
                true,
            ),
        ];
        for (name, file, update, report, lease, serialize) in cases {
            let t = defaulted(&file);
            let got = (
                schema::get_path(&t, "nodeStatusUpdateFrequency").cloned(),
                schema::get_path(&t, "nodeStatusReportFrequency").cloned(),
                schema::get_path(&t, "nodeLeaseDurationSeconds").and_then(Value::as_i64),
                schema::get_path(&t, "serializeImagePulls").and_then(Value::as_bool),
            );
            assert_eq!(
                got,
                (
                    Some(update.into()),
                    Some(report.into()),
                    Some(lease),
                    Some(serialize)
                ),
                "{name}"
            );
        }
    }

    #[test]
    fn validation_in_upstream_words() {
        let ok = (NodeStatusConfig::default(), ImagePullConfig::default());
        let cases: Vec<(&str, NodeStatusConfig, ImagePullConfig, Option<&str>)> = vec![
            ("defaults", ok.0, ok.1, None),
            (
                "no image cap",
                NodeStatusConfig {
                    max_images: -1,
                    ..ok.0
                },
                ok.1,
                None,
            ),
            (
                "cap below -1",
                NodeStatusConfig {
                    max_images: -2,
                    ..ok.0
                },
                ok.1,
                Some("nodeStatusMaxImages (--node-status-max-images) -2 must be -1 or greater"),
            ),
            (
                "negative lease",
                NodeStatusConfig {
                    lease_duration_seconds: -1,
                    ..ok.0
                },
                ok.1,
                Some("nodeLeaseDurationSeconds -1 must be greater than 0"),
            ),
            (
                "parallel while serialized",
                ok.0,
                ImagePullConfig {
                    max_parallel: Some(2),
                    ..ok.1
                },
                Some("maxParallelImagePulls cannot be larger than 1 unless SerializeImagePulls"),
            ),
            (
                "parallel unserialized",
                ok.0,
                ImagePullConfig {
                    serialize: false,
                    max_parallel: Some(2),
                    ..ok.1
                },
                None,
            ),
        ];
        for (name, st, pulls, want) in cases {
            let mut errors = Vec::new();
            validate(&st, &pulls, &mut errors);
            match want {
                None => assert!(errors.is_empty(), "{name}: {errors:?}"),
                Some(w) => assert!(
                    errors.len() == 1 && errors[0].contains(w),
                    "{name}: {errors:?}"
                ),
            }
        }
    }

    /// Through the whole loader: file, flags, typed config, errors.
    #[test]
    fn loaded_from_file_and_flags() {
        let head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
        let l = super::super::parse(&format!(
            "{head}nodeStatusUpdateFrequency: 3s\nnodeLeaseDurationSeconds: 12\n\
             nodeStatusMaxImages: -1\nmaxParallelImagePulls: 4\nregistryPullQPS: 0\n\
             registryBurst: 3\npodHousekeepingPeriod: 5s\n"
        ))
        .unwrap();
        let c = &l.config;
        assert_eq!(
            (c.node_status, c.image_pulls, c.pod_housekeeping_period),
            (
                NodeStatusConfig {
                    update_frequency: Duration::from_secs(3),
                    report_frequency: Duration::from_secs(3),
                    lease_duration_seconds: 12,
                    max_images: -1,
                },
                ImagePullConfig {
                    serialize: false,
                    max_parallel: Some(4),
                    qps: 0,
                    burst: 3,
                },
                Duration::from_secs(5)
            )
        );
        assert!(l.warnings.is_empty(), "{:?}", l.warnings);
        // Upstream defaults the file, not the flags (v1beta1 SetDefaults runs on the decoded file;
        // the flags are applied afterwards): the report frequency keeps its 5m default.
        let l = super::super::load(&super::super::Sources {
            flags: vec![("nodeStatusUpdateFrequency".into(), "7s".into())],
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            (
                l.config.node_status.update_frequency,
                l.config.node_status.report_frequency
            ),
            (Duration::from_secs(7), Duration::from_secs(300))
        );
        for (body, want) in [
            (
                "maxParallelImagePulls: 0\n",
                "maxParallelImagePulls 0 must be a positive number",
            ),
            (
                "serializeImagePulls: true\nmaxParallelImagePulls: 2\n",
                "maxParallelImagePulls cannot be larger than 1",
            ),
            ("nodeStatusMaxImages: -5\n", "must be -1 or greater"),
            (
                "registryPullQPS: -1\n",
                "registryPullQPS (--registry-qps): -1 must not be a negative number",
            ),
            (
                "podHousekeepingPeriod: 0s\n",
                "podHousekeepingPeriod: must be greater than 0",
            ),
        ] {
            let err = super::super::parse(&format!("{head}{body}"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{body}: {err}");
        }
    }

    #[test]
    fn lease_renews_at_a_quarter() {
        let c = NodeStatusConfig {
            lease_duration_seconds: 12,
            ..Default::default()
        };
        assert_eq!(c.lease_renew_interval(), Duration::from_secs(3));
        assert_eq!(
            NodeStatusConfig::default().lease_renew_interval(),
            Duration::from_secs(10)
        );
    }
}
