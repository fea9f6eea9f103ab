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

// The object vocabulary lives in `types::objects` so the watch cache below this module can use
// it; env and volumes keep naming it through here.
pub use crate::types::objects::{ObjectData, ObjectError, ObjectKind};

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
