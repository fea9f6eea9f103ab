//! Pod identity (upstream `kubecontainer.GetPodFullName`, `format.Pod`, `kubetypes.IsStaticPod`):
//! the names, UID and keys every manager uses to tell pods apart.

use k8s_openapi::api::core::v1::Pod;

use super::annotations::CONFIG_SOURCE_ANNOTATION;

/// `name_namespace`, the key upstream uses to keep two pods of one name from running at once.
pub fn full_name(pod: &Pod) -> String {
    format!("{}_{}", name(pod), namespace(pod))
}

/// `metadata.name`; empty when unset (only a malformed manifest has none).
pub fn name(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or("")
}

/// `metadata.namespace`, `default` when unset as the API server would default it.
pub fn namespace(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

/// `metadata.uid`: the key of every per-pod table (static pods get a hash of their manifest).
pub fn uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or("")
}

/// `ns/name` for logs, as upstream's `klog.KObj`.
pub fn describe(pod: &Pod) -> String {
    format!("{}/{}", namespace(pod), name(pod))
}

/// A pod from a file or URL rather than the API server (upstream `IsStaticPod`: its config
/// source annotation is anything but `api`).
pub fn is_static(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CONFIG_SOURCE_ANNOTATION))
        .is_some_and(|s| s != "api")
}

/// Upstream `SystemCriticalPriority`: pods at or above it are critical.
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// Upstream `kubelettypes.IsCriticalPod`: static pods (their mirror pods are API objects this
/// kubelet does not run) and pods of system-critical priority. Eviction spares them, and
/// admission under node pressure lets them in.
pub fn is_critical(pod: &Pod) -> bool {
    is_static(pod)
        || pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0) >= SYSTEM_CRITICAL_PRIORITY
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(name: &str, ns: Option<&str>, source: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: ns.map(Into::into),
                uid: Some("u1".into()),
                annotations: source
                    .map(|s| [(CONFIG_SOURCE_ANNOTATION.to_string(), s.to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn identity() {
        let p = pod("web", Some("prod"), Some("file"));
        assert_eq!(
            (full_name(&p), describe(&p), uid(&p)),
            ("web_prod".into(), "prod/web".into(), "u1")
        );
        assert_eq!(namespace(&pod("web", None, None)), "default");
        assert!(is_static(&p));
        assert!(!is_static(&pod("web", None, Some("api"))));
        assert!(!is_static(&pod("web", None, None)));
        assert_eq!(name(&Pod::default()), "");
    }
}
