//! ConfigMaps and Secrets a pod references, read from the API server with the kubelet's own client
//! (upstream `pkg/kubelet/configmap` and `pkg/kubelet/secret` managers). The Node authorizer lets
//! a node read exactly the objects referenced by pods bound to it.
//!
//! With `configMapAndSecretChangeDetectionStrategy: Watch` (the default) reads come from the
//! [`ObjectCache`](crate::object_cache::ObjectCache), which keeps a watch per referenced object;
//! with `Cache` GETs are reused for a TTL; with `Get` every pod sync GETs what it references.
//!
//! Fetching is async and separate from using the objects: env resolution and volume payloads are
//! pure functions of an [`Objects`] snapshot, which the sync code fills first.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::{Api, Client};

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

/// What one sync fetched: each referenced object once, or why it could not be had.
#[derive(Debug, Clone, Default)]
pub struct Objects(pub BTreeMap<(ObjectKind, String), Result<ObjectData, ObjectError>>);

impl Objects {
    pub fn get(&self, kind: ObjectKind, name: &str) -> Result<&ObjectData, ObjectError> {
        match self.0.get(&(kind, name.to_string())) {
            Some(Ok(d)) => Ok(d),
            Some(Err(e)) => Err(e.clone()),
            None => Err(ObjectError::NotFetched {
                kind,
                name: name.to_string(),
            }),
        }
    }
}

/// The kubelet's access to ConfigMaps and Secrets; `None` in standalone mode. Cheap to clone.
#[derive(Clone, Default)]
pub struct ObjectSource {
    client: Option<Client>,
    /// The watch-based manager (strategy `Watch`); reads of objects it does not watch GET.
    cache: Option<crate::object_cache::ObjectCache>,
}

impl ObjectSource {
    pub fn new(client: Option<Client>) -> Self {
        ObjectSource {
            client,
            cache: None,
        }
    }

    pub fn with_cache(client: Client, cache: crate::object_cache::ObjectCache) -> Self {
        ObjectSource {
            client: Some(client),
            cache: Some(cache),
        }
    }

    /// One GET of `kind` `namespace/name`.
    pub async fn get(
        &self,
        kind: ObjectKind,
        namespace: &str,
        name: &str,
    ) -> Result<ObjectData, ObjectError> {
        let Some(client) = &self.client else {
            return Err(ObjectError::NoClient {
                kind,
                namespace: namespace.to_string(),
                name: name.to_string(),
            });
        };
        let res = match kind {
            ObjectKind::ConfigMap => Api::<ConfigMap>::namespaced(client.clone(), namespace)
                .get(name)
                .await
                .map(ObjectData::from),
            ObjectKind::Secret => Api::<Secret>::namespaced(client.clone(), namespace)
                .get(name)
                .await
                .map(ObjectData::from),
        };
        res.map_err(|e| match e {
            kube::Error::Api(s) if s.is_not_found() => ObjectError::NotFound {
                kind,
                name: name.to_string(),
            },
            e => ObjectError::Api {
                kind,
                namespace: namespace.to_string(),
                name: name.to_string(),
                message: e.to_string(),
            },
        })
    }

    /// Fetches every object in `refs` once (in the pod's namespace).
    pub async fn fetch(
        &self,
        pod: &Pod,
        refs: impl IntoIterator<Item = (ObjectKind, String)>,
    ) -> Objects {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        if let Some(cache) = &self.cache {
            // Idempotent: the pod's current references, whichever part of it is being synced.
            let keys = pod_refs(pod)
                .into_iter()
                .map(|(k, n)| (k, ns.to_string(), n))
                .collect();
            cache.register(crate::podutil::uid(pod), keys);
        }
        let mut out = Objects::default();
        for key in refs {
            if out.0.contains_key(&key) {
                continue;
            }
            let k = (key.0, ns.to_string(), key.1.clone());
            let got = match &self.cache {
                Some(c) if c.is_ttl() => match c.cached(&k).await {
                    Some(got) => got,
                    None => {
                        let got = self.get(key.0, ns, &key.1).await;
                        c.store(&k, got.clone());
                        got
                    }
                },
                Some(c) => match c.get(&k).await {
                    Some(got) => got,
                    None => self.get(key.0, ns, &key.1).await,
                },
                None => self.get(key.0, ns, &key.1).await,
            };
            out.0.insert(key, got);
        }
        out
    }
}

/// The objects a container's env and envFrom reference, in declaration order.
pub fn env_refs(c: &k8s_openapi::api::core::v1::Container) -> Vec<(ObjectKind, String)> {
    let mut refs = Vec::new();
    for f in c.env_from.iter().flatten() {
        if let Some(r) = &f.config_map_ref {
            refs.push((ObjectKind::ConfigMap, r.name.clone()));
        }
        if let Some(r) = &f.secret_ref {
            refs.push((ObjectKind::Secret, r.name.clone()));
        }
    }
    for e in c.env.iter().flatten() {
        let Some(from) = &e.value_from else { continue };
        if let Some(r) = &from.config_map_key_ref {
            refs.push((ObjectKind::ConfigMap, r.name.clone()));
        }
        if let Some(r) = &from.secret_key_ref {
            refs.push((ObjectKind::Secret, r.name.clone()));
        }
    }
    refs
}

/// Everything a pod references: its volumes and the env of all its containers.
pub fn pod_refs(pod: &Pod) -> std::collections::BTreeSet<(ObjectKind, String)> {
    let mut refs: std::collections::BTreeSet<_> = volume_refs(pod).into_iter().collect();
    let (init, regular) = (
        crate::podutil::init_containers(pod),
        crate::podutil::containers(pod),
    );
    for c in init.iter().chain(regular) {
        refs.extend(env_refs(c));
    }
    for e in crate::podutil::ephemeral_specs(pod) {
        refs.extend(env_refs(&crate::podutil::ephemeral_as_container(e)));
    }
    refs
}

/// The objects a pod's configMap and secret volumes and projected sources reference.
pub fn volume_refs(pod: &Pod) -> Vec<(ObjectKind, String)> {
    let mut refs = Vec::new();
    for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        if let Some(cm) = &v.config_map {
            refs.push((ObjectKind::ConfigMap, cm.name.clone()));
        }
        if let Some(s) = &v.secret {
            refs.push((
                ObjectKind::Secret,
                s.secret_name.clone().unwrap_or_default(),
            ));
        }
        for src in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(cm) = &src.config_map {
                refs.push((ObjectKind::ConfigMap, cm.name.clone()));
            }
            if let Some(s) = &src.secret {
                refs.push((ObjectKind::Secret, s.name.clone()));
            }
        }
    }
    refs
}
