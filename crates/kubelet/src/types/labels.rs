//! The CRI label and annotation keys upstream puts on sandboxes and containers
//! (`kuberuntime/labels.go`), so crictl, other tools and a restarted kubelet recognise them. The
//! runtime's `labels` module builds the label maps from them; logs, stats and the server read them.

pub const POD_NAME: &str = "io.kubernetes.pod.name";
pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
pub const POD_UID: &str = "io.kubernetes.pod.uid";
pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";
pub const CONTAINER_HASH: &str = "io.kubernetes.container.hash";
pub const CONTAINER_RESTART_COUNT: &str = "io.kubernetes.container.restartCount";
pub const TERMINATION_MESSAGE_PATH: &str = "io.kubernetes.container.terminationMessagePath";
pub const TERMINATION_MESSAGE_POLICY: &str = "io.kubernetes.container.terminationMessagePolicy";
pub const POD_TERMINATION_GRACE_PERIOD: &str = "io.kubernetes.pod.terminationGracePeriod";
pub const CONTAINER_PORTS: &str = "io.kubernetes.container.ports";
/// Upstream marks which kind of container this is; we keep it to tell init containers apart after
/// a restart.
pub const CONTAINER_TYPE: &str = "io.kubernetes.container.type";

/// rkubelet's own marker, on every sandbox and container it creates (an annotation, beside
/// upstream's). A container without it was created by another kubelet (upstream's, before a
/// swap): its `io.kubernetes.container.hash` is upstream's FNV hash of Go's printing of the
/// container struct, which rkubelet cannot reproduce, so such a container is adopted instead of
/// compared by hash (see `runtime::adopt`); a sandbox without it may be a static pod's that
/// upstream named by its own UID (see `source::adopt`).
pub const CREATED_BY: &str = "rkubelet.io/created-by";
/// The value of [`CREATED_BY`].
pub const CREATED_BY_RKUBELET: &str = "rkubelet";
