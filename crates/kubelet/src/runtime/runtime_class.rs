//! RuntimeClass handlers (upstream `pkg/kubelet/runtimeclass.Manager.LookupRuntimeHandler`): a
//! pod's `runtimeClassName` names a `node.k8s.io/v1` RuntimeClass whose `handler` is what the
//! runtime is asked for in RunPodSandbox (`runtime_handler`).
//!
//! Upstream reads the RuntimeClass from an informer's lister; here it is read with the kubelet's
//! client when a sandbox is created (rare: once per pod start or sandbox replacement), so no
//! watch of all RuntimeClasses is kept open for it. A missing RuntimeClass gives the lister's
//! NotFound text (`runtimeclass.node.k8s.io "x" not found`), any other failure upstream's
//! `failed to lookup RuntimeClass x: ...`. Without a client (standalone) there is no manager
//! upstream either, and every pod gets the runtime's default handler.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::node::v1::RuntimeClass;
use rkubelet_cri::api;

/// Why a pod's runtime handler could not be found; the text is upstream's.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeClassError {
    #[error("runtimeclass.node.k8s.io {0:?} not found")]
    NotFound(String),
    #[error("failed to lookup RuntimeClass {name}: {source}")]
    Lookup {
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// Looks up RuntimeClass handlers with the kubelet's client (None: standalone).
#[derive(Clone)]
pub struct RuntimeClasses {
    client: Option<kube::Client>,
}

impl RuntimeClasses {
    pub fn new(client: Option<kube::Client>) -> Self {
        RuntimeClasses { client }
    }

    /// The CRI runtime handler for `pod`: empty for no (or an empty) `runtimeClassName`, as the
    /// default RuntimeClass always resolves to the runtime's default handler.
    pub async fn handler(&self, pod: &Pod) -> Result<String, RuntimeClassError> {
        let Some(name) = class_name(pod) else {
            return Ok(String::new());
        };
        let Some(client) = &self.client else {
            return Ok(String::new());
        };
        let api: kube::Api<RuntimeClass> = kube::Api::all(client.clone());
        match api.get_opt(name).await {
            Ok(Some(rc)) => Ok(rc.handler),
            Ok(None) => Err(RuntimeClassError::NotFound(name.to_string())),
            Err(source) => Err(RuntimeClassError::Lookup {
                name: name.to_string(),
                source,
            }),
        }
    }
}

/// Whether the pod's `hostUsers` can be honoured with `handler`, given the runtime handlers the
/// runtime reports in its CRI `Status` (upstream `UsernsManager.GetOrCreateUserNamespaceMappings`
/// with the `UserNamespacesSupport` gate on, as by default since 1.33, and
/// `Kubelet.HandlerSupportsUserNamespaces`; the texts are upstream's). A pod asking for its own
/// user namespace never silently runs in the host's: a runtime that does not report the handler
/// (containerd 1.6 reports none) or reports it without `user_namespaces` fails the sandbox.
/// rkubelet does not allocate user namespace ID mappings yet, so even a supporting runtime gets
/// an error saying so rather than a pod in the host user namespace.
pub fn check_host_users(
    host_users: Option<bool>,
    handler: &str,
    handlers: &[api::RuntimeHandler],
) -> Result<(), String> {
    if host_users != Some(false) {
        return Ok(());
    }
    match handlers.iter().find(|h| h.name == handler) {
        None => Err(format!("the handler {handler:?} is not known")),
        Some(h) if !h.features.as_ref().is_some_and(|f| f.user_namespaces) => Err(format!(
            "RuntimeClass handler {handler:?} does not support user namespaces"
        )),
        Some(_) => Err(
            "hostUsers: false needs user namespace ID mappings, which rkubelet does not allocate yet"
                .into(),
        ),
    }
}

/// The pod's `runtimeClassName` unless unset or empty.
pub fn class_name(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.runtime_class_name.as_deref())
        .filter(|n| !n.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(class: Option<&str>) -> Pod {
        Pod {
            spec: Some(k8s_openapi::api::core::v1::PodSpec {
                runtime_class_name: class.map(String::from),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    type Case<'a> = (
        Option<bool>,
        &'a str,
        &'a [api::RuntimeHandler],
        Result<(), &'a str>,
    );

    #[test]
    fn host_users_table() {
        let h = |name: &str, userns: Option<bool>| api::RuntimeHandler {
            name: name.into(),
            features: userns.map(|u| api::RuntimeHandlerFeatures {
                user_namespaces: u,
                ..Default::default()
            }),
        };
        let none: &[api::RuntimeHandler] = &[];
        let no_userns = [h("", Some(false)), h("runc", None)];
        let userns = [h("", Some(true))];
        let cases: &[Case] = &[
            (None, "", none, Ok(())),
            (Some(true), "", none, Ok(())),
            (Some(false), "", none, Err(r#"the handler "" is not known"#)),
            (
                Some(false),
                "kata",
                &no_userns,
                Err(r#"the handler "kata" is not known"#),
            ),
            (
                Some(false),
                "",
                &no_userns,
                Err(r#"RuntimeClass handler "" does not support user namespaces"#),
            ),
            (
                Some(false),
                "runc",
                &no_userns,
                Err(r#"RuntimeClass handler "runc" does not support user namespaces"#),
            ),
        ];
        for (host_users, handler, handlers, want) in cases {
            let got = check_host_users(*host_users, handler, handlers);
            assert_eq!(
                got.as_ref().map_err(String::as_str),
                want.as_ref().map_err(|e| *e),
                "{host_users:?} {handler:?}"
            );
        }
        assert!(check_host_users(Some(false), "", &userns)
            .unwrap_err()
            .contains("does not allocate"));
    }

    #[tokio::test]
    async fn default_class_and_standalone_give_the_default_handler() {
        let standalone = RuntimeClasses::new(None);
        for class in [None, Some(""), Some("gvisor")] {
            assert_eq!(
                standalone.handler(&pod(class)).await.unwrap(),
                "",
                "{class:?}"
            );
        }
        assert_eq!(class_name(&pod(Some(""))), None);
        assert_eq!(class_name(&pod(Some("kata"))), Some("kata"));
        assert_eq!(
            RuntimeClassError::NotFound("x".into()).to_string(),
            r#"runtimeclass.node.k8s.io "x" not found"#
        );
    }
}
