//! Pod annotations the kubelet reads and writes (upstream `pkg/kubelet/types/pod_update.go`).

/// The static pod's hash; its mirror pod carries it as [`MIRROR_ANNOTATION`].
pub const CONFIG_HASH_ANNOTATION: &str = "kubernetes.io/config.hash";
/// Where a pod came from: `file`, `http` or `api` (upstream `ConfigSourceAnnotationKey`).
pub const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";
/// When the kubelet first saw the pod (upstream `ConfigFirstSeenAnnotationKey`).
pub const CONFIG_SEEN_ANNOTATION: &str = "kubernetes.io/config.seen";
/// Marks a mirror pod; the value is its static pod's hash (upstream `ConfigMirrorAnnotationKey`).
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// The per-container annotation AppArmor profiles were set with before the field existed
/// (upstream `v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix`; still honoured for static
/// pods, which never had it converted).
pub const APPARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";
