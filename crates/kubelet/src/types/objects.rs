//! The ConfigMaps and Secrets a pod references, as data (upstream `pkg/kubelet/configmap`,
//! `pkg/kubelet/secret`): which kind, the keys, and why one could not be had. Fetching them is
//! `objects`' and `object_cache`'s business.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};

/// Which kind of object a pod references.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ObjectKind {
    ConfigMap,
    Secret,
}

impl ObjectKind {
    /// How upstream's `makeEnvironmentVariables` names the kind (`couldn't get configMap ...`).
    fn camel(self) -> &'static str {
        match self {
            ObjectKind::ConfigMap => "configMap",
            ObjectKind::Secret => "secret",
        }
    }
    /// The group resource upstream's watch-based managers put in their NotFound errors
    /// (`corev1.Resource("configmap")`), hence singular and lower case.
    fn resource(self) -> &'static str {
        match self {
            ObjectKind::ConfigMap => "configmap",
            ObjectKind::Secret => "secret",
        }
    }
}

/// Why an object is not available. Only [`ObjectError::NotFound`] is forgiven by `optional`, as
/// upstream checks `errors.IsNotFound(err) && optional`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ObjectError {
    /// Standalone mode: no API server to read from (upstream's message, word for word).
    #[error("couldn't get {} {namespace}/{name}, no kubeClient defined", kind.camel())]
    NoClient {
        kind: ObjectKind,
        namespace: String,
        name: String,
    },
    #[error("{} {name:?} not found", kind.resource())]
    NotFound { kind: ObjectKind, name: String },
    #[error("couldn't get {} {namespace}/{name}: {message}", kind.camel())]
    Api {
        kind: ObjectKind,
        namespace: String,
        name: String,
        message: String,
    },
    /// A caller asked for an object the sync did not fetch: a bug, reported rather than a panic.
    #[error("{} {name:?} was not fetched for this pod", kind.resource())]
    NotFetched { kind: ObjectKind, name: String },
}

impl ObjectError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, ObjectError::NotFound { .. })
    }
}

/// The keys of a ConfigMap or Secret. Values are bytes: a Secret's always are, and a ConfigMap's
/// `binaryData` too.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ObjectData {
    /// ConfigMap `data` or Secret `data` (the API server folds `stringData` into it).
    pub data: BTreeMap<String, Vec<u8>>,
    /// ConfigMap `binaryData`; always empty for a Secret. Env ignores it, as upstream does.
    pub binary_data: BTreeMap<String, Vec<u8>>,
}

impl From<ConfigMap> for ObjectData {
    fn from(cm: ConfigMap) -> Self {
        ObjectData {
            data: cm
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.into_bytes()))
                .collect(),
            binary_data: cm
                .binary_data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect(),
        }
    }
}

impl From<Secret> for ObjectData {
    fn from(s: Secret) -> Self {
        ObjectData {
            data: s
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect(),
            binary_data: BTreeMap::new(),
        }
    }
}
