//! Pod identity (upstream `kubecontainer.GetPodFullName`, `format.Pod`, `kubetypes.IsStaticPod`):
//! the names, UID and keys every manager uses to tell pods apart.

use k8s_openapi::api::core::v1::Pod;

use super::annotations::CONFIG_SOURCE_ANNOTATION;

/// `name_namespace`, the key upstream uses to keep two pods of one name from running at once.
pub fn full_name(pod: &Pod) -> String {
    format!("{}_{}", name(pod), namespace(pod))
}

pub fn name(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or("")
}

pub fn namespace(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

pub fn uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or("")
}

/// `ns/name` for logs, as upstream's `klog.KObj`.
pub fn describe(pod: &Pod) -> String {
    format!("{}/{}", namespace(pod), name(pod))
}

pub fn is_static(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CONFIG_SOURCE_ANNOTATION))
        .is_some_and(|s| s != "api")
}
