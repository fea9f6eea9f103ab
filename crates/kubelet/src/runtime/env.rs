//! A container's environment (upstream `kubelet_pods.go` `makeEnvironmentVariables`,
//! `podFieldSelectorRuntimeValue`, `fieldpath.ExtractFieldPathAsString` and
//! `resource.ExtractContainerResourceValue`), and `$(VAR)` expansion of command and args
//! (`kubecontainer.ExpandContainerCommandAndArgs`).
//!
//! Pure: everything the node knows (pod IPs, host IPs, allocatable, the referenced ConfigMaps and
//! Secrets) comes in [`EnvContext`].

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Container, ObjectFieldSelector, Pod, ResourceFieldSelector};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::expansion::{self, Lookup};
use crate::objects::{ObjectKind, Objects};
use crate::podutil;
use crate::resources::parse_milli;
use crate::types::ConfigError;

/// What the node contributes to a container's environment.
#[derive(Debug, Clone, Copy)]
pub struct EnvContext<'a> {
    /// The pod's IPs, primary first (the node's for host-network pods, as upstream's status).
    pub pod_ips: &'a [String],
    /// The node's IPs for `status.hostIP(s)`; empty when unknown.
    pub host_ips: &'a [String],
    /// Node allocatable, the limit `resourceFieldRef` reports for a container without one.
    pub allocatable: &'a BTreeMap<String, Quantity>,
    /// The ConfigMaps and Secrets the container's env references, fetched by the sync.
    pub objects: &'a Objects,
    /// The service variables (upstream `getServiceEnvVarMap`, see [`crate::services`]): usable
    /// in `$(VAR)` references and added after the container's own, which win on a clash.
    pub services: &'a BTreeMap<String, String>,
}

/// One environment variable, in the order the container declares it.
pub type EnvVar = (String, String);

/// The container's environment (upstream `makeEnvironmentVariables`): `envFrom` sources first,
/// then `env` in declaration order, each literal value expanded against the variables declared
/// before it (envFrom's included) and the service variables; a later definition of a name replaces
/// an earlier one. The service variables not defined by the container come last, in name order.
pub fn make_environment_variables(
    pod: &Pod,
    c: &Container,
    cx: &EnvContext<'_>,
) -> Result<Vec<EnvVar>, ConfigError> {
    make_env(pod, c, cx).map(|e| e.vars)
}

/// A container's environment and the warnings upstream records as events while making it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Env {
    pub vars: Vec<EnvVar>,
    /// `InvalidEnvironmentVariableNames` event messages: envFrom keys that were skipped.
    pub invalid_names: Vec<String>,
}

// The sync names the event reason through this module.
pub use crate::types::event_reasons::INVALID_ENVIRONMENT_VARIABLE_NAMES;

/// [`make_environment_variables`] with the skipped envFrom keys reported.
pub fn make_env(pod: &Pod, c: &Container, cx: &EnvContext<'_>) -> Result<Env, ConfigError> {
    let ns = podutil::namespace(pod);
    let mut order: Vec<String> = Vec::new();
    let mut values: HashMap<String, String> = HashMap::new();
    let mut invalid_names = Vec::new();
    fn set(order: &mut Vec<String>, values: &mut HashMap<String, String>, k: String, v: String) {
        if values.insert(k.clone(), v).is_none() {
            order.push(k);
        }
    }
    for from in c.env_from.iter().flatten() {
        let prefix = from.prefix.as_deref().unwrap_or("");
        let (kind, name, optional) = if let Some(r) = &from.config_map_ref {
            (ObjectKind::ConfigMap, &r.name, r.optional == Some(true))
        } else if let Some(r) = &from.secret_ref {
            (ObjectKind::Secret, &r.name, r.optional == Some(true))
        } else {
            continue;
        };
        let obj = match cx.objects.get(kind, name) {
            Ok(o) => o,
            Err(e) if e.is_not_found() && optional => continue,
            Err(e) => return Err(ConfigError(e.to_string())),
        };
        let mut invalid = Vec::new();
        for (k, v) in &obj.data {
            let k = format!("{prefix}{k}");
            if !is_env_var_name(&k) {
                invalid.push(k);
                continue;
            }
            set(
                &mut order,
                &mut values,
                k,
                String::from_utf8_lossy(v).into_owned(),
            );
        }
        if !invalid.is_empty() {
            invalid.sort();
            let what = match kind {
                ObjectKind::ConfigMap => "configMap",
                ObjectKind::Secret => "secret",
            };
            invalid_names.push(format!(
                "Keys [{}] from the EnvFrom {what} {ns}/{name} were skipped since they are considered invalid environment variable names.",
                invalid.join(", ")
            ));
        }
    }
    for e in c.env.iter().flatten() {
        let literal = e.value.as_deref().unwrap_or("");
        let value = if !literal.is_empty() {
            let ctx: [&dyn Lookup; 2] = [&values, cx.services];
            expansion::expand(literal, expansion::mapping_for(&ctx))
        } else if let Some(from) = &e.value_from {
            if let Some(f) = &from.field_ref {
                pod_field_value(f, pod, cx).map_err(ConfigError)?
            } else if let Some(r) = &from.resource_field_ref {
                let (defaulted_pod, defaulted_c) = default_limits(pod, c, cx.allocatable);
                container_resource_value(r, &defaulted_pod, &defaulted_c).map_err(ConfigError)?
            } else {
                let (kind, name, key, optional) = if let Some(r) = &from.config_map_key_ref {
                    (
                        ObjectKind::ConfigMap,
                        &r.name,
                        &r.key,
                        r.optional == Some(true),
                    )
                } else if let Some(r) = &from.secret_key_ref {
                    (
                        ObjectKind::Secret,
                        &r.name,
                        &r.key,
                        r.optional == Some(true),
                    )
                } else {
                    return Err(ConfigError(format!(
                        "env {:?}: valueFrom sets no source this node knows",
                        e.name
                    )));
                };
                let obj = match cx.objects.get(kind, name) {
                    Ok(o) => o,
                    // Upstream skips the variable altogether.
                    Err(err) if err.is_not_found() && optional => continue,
                    Err(err) => return Err(ConfigError(err.to_string())),
                };
                match obj.data.get(key) {
                    Some(v) => String::from_utf8_lossy(v).into_owned(),
                    None if optional => continue,
                    None => {
                        let what = match kind {
                            ObjectKind::ConfigMap => "ConfigMap",
                            ObjectKind::Secret => "Secret",
                        };
                        return Err(ConfigError(format!(
                            "couldn't find key {key} in {what} {ns}/{name}"
                        )));
                    }
                }
            }
        } else {
            String::new()
        };
        set(&mut order, &mut values, e.name.clone(), value);
    }
    let mut vars: Vec<EnvVar> = order
        .into_iter()
        .map(|k| {
            let v = values.remove(&k).unwrap_or_default();
            (k, v)
        })
        .collect();
    // Upstream appends the service variables the container does not define itself.
    let own: std::collections::HashSet<String> = vars.iter().map(|(k, _)| k.clone()).collect();
    vars.extend(
        cx.services
            .iter()
            .filter(|(k, _)| !own.contains(*k))
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    Ok(Env {
        vars,
        invalid_names,
    })
}

/// Upstream `validation.IsEnvVarName`: `[-._a-zA-Z][-._a-zA-Z0-9]*`. (The relaxed validation of
/// newer releases, any printable ASCII but `=`, is not applied: the strict rule is what every
/// release accepts.)
pub fn is_env_var_name(s: &str) -> bool {
    let ok = |c: char| c.is_ascii_alphanumeric() || "-._".contains(c);
    !s.is_empty() && !s.starts_with(|c: char| c.is_ascii_digit()) && s.chars().all(ok)
}

/// Command and args with `$(VAR)` expanded against the final environment (upstream
/// `ExpandContainerCommandAndArgs`). Empty stays empty, so the image's ENTRYPOINT/CMD apply.
pub fn expand_command_and_args(c: &Container, envs: &[EnvVar]) -> (Vec<String>, Vec<String>) {
    let map: HashMap<String, String> = envs.iter().cloned().collect();
    let ctx: [&dyn Lookup; 1] = [&map];
    let mapping = expansion::mapping_for(&ctx);
    let expand_all = |v: &Option<Vec<String>>| -> Vec<String> {
        v.iter()
            .flatten()
            .map(|s| expansion::expand(s, &mapping))
            .collect()
    };
    (expand_all(&c.command), expand_all(&c.args))
}

/// `fieldRef` (upstream `podFieldSelectorRuntimeValue` after `ConvertDownwardAPIFieldLabel`).
pub fn pod_field_value(
    f: &ObjectFieldSelector,
    pod: &Pod,
    cx: &EnvContext<'_>,
) -> Result<String, String> {
    let version = f.api_version.as_deref().unwrap_or("v1");
    if version != "v1" && !version.is_empty() {
        return Err(format!("unsupported pod version: {version}"));
    }
    let path = f.field_path.as_str();
    let path = match split_subscript(path) {
        Some((p, _)) if p != "metadata.annotations" && p != "metadata.labels" => {
            return Err(format!("field label does not support subscript: {path}"))
        }
        Some(_) => path,
        None => match path {
            "spec.host" => "spec.nodeName",
            "metadata.annotations"
            | "metadata.labels"
            | "metadata.name"
            | "metadata.namespace"
            | "metadata.uid"
            | "spec.nodeName"
            | "spec.restartPolicy"
            | "spec.serviceAccountName"
            | "spec.schedulerName"
            | "status.phase"
            | "status.hostIP"
            | "status.hostIPs"
            | "status.podIP"
            | "status.podIPs" => path,
            _ => return Err(format!("field label not supported: {path}")),
        },
    };
    let spec = pod.spec.as_ref();
    let host_ips = || -> Result<&[String], String> {
        if cx.host_ips.is_empty() {
            Err("failed to get host IP: the node IP is not known (set --node-ip)".into())
        } else {
            Ok(cx.host_ips)
        }
    };
    match path {
        "spec.nodeName" => return Ok(spec.and_then(|s| s.node_name.clone()).unwrap_or_default()),
        "spec.serviceAccountName" => {
            return Ok(spec
                .and_then(|s| s.service_account_name.clone())
                .unwrap_or_default())
        }
        "status.hostIP" => return Ok(host_ips()?[0].clone()),
        "status.hostIPs" => return Ok(host_ips()?.join(",")),
        "status.podIP" => return Ok(cx.pod_ips.first().cloned().unwrap_or_default()),
        "status.podIPs" => return Ok(cx.pod_ips.join(",")),
        _ => {}
    }
    extract_field_path(pod, path)
}

/// `metadata.labels['k']` -> `("metadata.labels", "k")` (upstream `SplitMaybeSubscriptedPath`).
fn split_subscript(path: &str) -> Option<(&str, &str)> {
    let s = path.strip_suffix("']")?;
    let (p, sub) = s.split_once("['")?;
    (!p.is_empty()).then_some((p, sub))
}

/// Upstream `fieldpath.ExtractFieldPathAsString` for a pod's metadata (what downwardAPI volume
/// files show).
pub fn extract_field_path(pod: &Pod, path: &str) -> Result<String, String> {
    let m = &pod.metadata;
    let empty = BTreeMap::new();
    let labels = m.labels.as_ref().unwrap_or(&empty);
    let annotations = m.annotations.as_ref().unwrap_or(&empty);
    if let Some((p, sub)) = split_subscript(path) {
        let (map, key) = match p {
            "metadata.annotations" => (annotations, sub.to_lowercase()),
            "metadata.labels" => (labels, sub.to_string()),
            _ => return Err(format!("fieldPath {path:?} does not support subscript")),
        };
        if let Err(e) = qualified_name(&key) {
            return Err(format!("invalid key subscript in {path}: {e}"));
        }
        return Ok(map.get(sub).cloned().unwrap_or_default());
    }
    Ok(match path {
        "metadata.annotations" => format_map(annotations),
        "metadata.labels" => format_map(labels),
        "metadata.name" => m.name.clone().unwrap_or_default(),
        "metadata.namespace" => m.namespace.clone().unwrap_or_default(),
        "metadata.uid" => m.uid.clone().unwrap_or_default(),
        _ => return Err(format!("unsupported fieldPath: {path}")),
    })
}

/// Upstream `FormatMap`: `key="value"` lines in key order, values quoted as Go's `%q` does.
pub fn format_map(m: &BTreeMap<String, String>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k}={}", go_quote(v)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Go's `%q` for the printable text labels and annotations hold.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Upstream `validation.IsQualifiedName`: `[prefix/]name`, name 1-63 alphanumerics with `-_.`
/// inside, prefix a DNS subdomain.
fn qualified_name(v: &str) -> Result<(), String> {
    let (prefix, name) = match v.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, v),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if !name_ok {
        return Err(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
                .into(),
        );
    }
    if let Some(p) = prefix {
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if p.is_empty() || p.len() > 253 || !p.split('.').all(label_ok) {
            return Err("prefix part must be a lowercase RFC 1123 subdomain".into());
        }
    }
    Ok(())
}

/// Upstream `defaultPodLimitsForDownwardAPI` + `MergeContainerResourceLimits`: a cpu, memory or
/// ephemeral-storage limit that is unset (or zero) reads as the node's allocatable.
fn default_limits(
    pod: &Pod,
    c: &Container,
    allocatable: &BTreeMap<String, Quantity>,
) -> (Pod, Container) {
    let merge = |c: &mut Container| {
        let limits = c
            .resources
            .get_or_insert_with(Default::default)
            .limits
            .get_or_insert_with(Default::default);
        for name in ["cpu", "memory", "ephemeral-storage"] {
            let unset = limits
                .get(name)
                .is_none_or(|q| parse_milli(&q.0).unwrap_or(0) == 0);
            if unset {
                if let Some(q) = allocatable.get(name) {
                    limits.insert(name.to_string(), q.clone());
                }
            }
        }
    };
    let mut p = pod.clone();
    if let Some(spec) = p.spec.as_mut() {
        spec.containers.iter_mut().for_each(merge);
    }
    let mut c = c.clone();
    merge(&mut c);
    (p, c)
}

/// Upstream `ExtractResourceValueByContainerNameAndNodeAllocatable`, for downwardAPI volume
/// files: the named container's (regular first, then init containers) value, with unset limits
/// read as node allocatable.
pub fn resource_value_by_container_name(
    fs: &ResourceFieldSelector,
    pod: &Pod,
    container_name: &str,
    allocatable: &BTreeMap<String, Quantity>,
) -> Result<String, String> {
    let spec = pod.spec.as_ref();
    let found = spec
        .map(|s| s.containers.iter())
        .into_iter()
        .flatten()
        .chain(
            spec.and_then(|s| s.init_containers.as_ref())
                .into_iter()
                .flatten(),
        )
        .find(|x| x.name == container_name)
        .ok_or_else(|| format!("container {container_name} not found"))?;
    let (_, c) = default_limits(pod, found, allocatable);
    extract_container_resource_value(fs, &c)
}

/// `resourceFieldRef` (upstream `containerResourceRuntimeValue`): the container's own, or the
/// named container's (regular first, then init containers).
pub fn container_resource_value(
    fs: &ResourceFieldSelector,
    pod: &Pod,
    c: &Container,
) -> Result<String, String> {
    match fs.container_name.as_deref().filter(|n| !n.is_empty()) {
        None => extract_container_resource_value(fs, c),
        Some(name) => {
            let spec = pod.spec.as_ref();
            let found = spec
                .map(|s| s.containers.iter())
                .into_iter()
                .flatten()
                .chain(
                    spec.and_then(|s| s.init_containers.as_ref())
                        .into_iter()
                        .flatten(),
                )
                .find(|x| x.name == name)
                .ok_or_else(|| format!("container {name} not found"))?;
            extract_container_resource_value(fs, found)
        }
    }
}

/// Upstream `ExtractContainerResourceValue`: the quantity divided by the divisor (default 1),
/// rounded up; cpu in millis, everything else in whole units.
fn extract_container_resource_value(
    fs: &ResourceFieldSelector,
    c: &Container,
) -> Result<String, String> {
    let divisor_milli = fs
        .divisor
        .as_ref()
        .and_then(|q| parse_milli(&q.0))
        .filter(|m| *m != 0)
        .unwrap_or(1000);
    let res = c.resources.as_ref();
    let get = |limits: bool, name: &str| -> i128 {
        res.and_then(|r| {
            if limits {
                r.limits.as_ref()
            } else {
                r.requests.as_ref()
            }
        })
        .and_then(|m| m.get(name))
        .and_then(|q| parse_milli(&q.0))
        .unwrap_or(0)
    };
    let (limits, name) = match fs.resource.split_once('.') {
        Some(("limits", n)) => (true, n),
        Some(("requests", n)) => (false, n),
        _ => return Err(format!("unsupported container resource : {}", fs.resource)),
    };
    let milli = get(limits, name);
    // `Value()` of a quantity rounds its milli value up to whole units.
    let value = |m: i128| -> i128 { (m + 999).div_euclid(1000) };
    let ceil = |a: i128, b: i128| -> i128 { (a as f64 / b as f64).ceil() as i64 as i128 };
    let out = match name {
        "cpu" => ceil(milli, divisor_milli),
        "memory" | "ephemeral-storage" => ceil(value(milli), value(divisor_milli)),
        n if n.starts_with("hugepages-") => ceil(value(milli), value(divisor_milli)),
        _ => return Err(format!("unsupported container resource : {}", fs.resource)),
    };
    Ok(out.to_string())
}

#[cfg(test)]
#[path = "env_tests.rs"]
mod tests;
