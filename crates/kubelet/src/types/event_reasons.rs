//! Event reasons, as upstream `pkg/kubelet/events/event.go` names them (plus the few upstream
//! records as literals elsewhere, noted where they are).

// ---------------------------------------------------------------------------------------------
// Reasons (upstream `pkg/kubelet/events/event.go`; names are the upstream identifiers).
// ---------------------------------------------------------------------------------------------

// Container event reasons.
pub const CREATED_CONTAINER: &str = "Created";
pub const STARTED_CONTAINER: &str = "Started";
pub const FAILED_TO_CREATE_CONTAINER: &str = "Failed";
pub const FAILED_TO_START_CONTAINER: &str = "Failed";
pub const KILLING_CONTAINER: &str = "Killing";
pub const PREEMPT_CONTAINER: &str = "Preempting";
pub const BACK_OFF_START_CONTAINER: &str = "BackOff";
pub const EXCEEDED_GRACE_PERIOD: &str = "ExceededGracePeriod";

// Pod event reasons.
pub const FAILED_TO_KILL_POD: &str = "FailedKillPod";
pub const FAILED_TO_CREATE_POD_CONTAINER: &str = "FailedCreatePodContainer";
pub const FAILED_TO_MAKE_POD_DATA_DIRECTORIES: &str = "Failed";
pub const NETWORK_NOT_READY: &str = "NetworkNotReady";

// Image event reasons.
pub const PULLING_IMAGE: &str = "Pulling";
pub const PULLED_IMAGE: &str = "Pulled";
pub const FAILED_TO_PULL_IMAGE: &str = "Failed";
pub const FAILED_TO_INSPECT_IMAGE: &str = "InspectFailed";
pub const ERR_IMAGE_NEVER_PULL_POLICY: &str = "ErrImageNeverPull";
pub const BACK_OFF_PULL_IMAGE: &str = "BackOff";

// Kubelet (node and pod sandbox) event reasons.
pub const NODE_READY: &str = "NodeReady";
pub const NODE_NOT_READY: &str = "NodeNotReady";
pub const NODE_SCHEDULABLE: &str = "NodeSchedulable";
pub const NODE_NOT_SCHEDULABLE: &str = "NodeNotSchedulable";
/// Upstream message: "Starting kubelet.".
pub const STARTING_KUBELET: &str = "Starting";
/// Upstream records this from the node lifecycle controller; the kubelet records it on first
/// registration, so that a cluster without that controller still shows when the node joined.
pub const REGISTERED_NODE: &str = "RegisteredNode";
pub const KUBELET_SETUP_FAILED: &str = "KubeletSetupFailed";
pub const FAILED_MOUNT_VOLUME: &str = "FailedMount";
/// Warning; upstream message: "Node <node> has been rebooted, boot id: <id>".
pub const NODE_REBOOTED: &str = "Rebooted";
pub const CONTAINER_GC_FAILED: &str = "ContainerGCFailed";
pub const IMAGE_GC_FAILED: &str = "ImageGCFailed";
pub const FAILED_NODE_ALLOCATABLE_ENFORCEMENT: &str = "FailedNodeAllocatableEnforcement";
pub const SUCCESSFUL_NODE_ALLOCATABLE_ENFORCEMENT: &str = "NodeAllocatableEnforced";
pub const SANDBOX_CHANGED: &str = "SandboxChanged";
pub const FAILED_CREATE_POD_SANDBOX: &str = "FailedCreatePodSandBox";
pub const FAILED_STATUS_POD_SANDBOX: &str = "FailedPodSandBoxStatus";

// Node condition transitions. These are not in `events/event.go`: upstream
// `pkg/kubelet/nodestatus/setters.go` records them as literals, as Normal events with the message
// "Node <node> status is now: <reason>". ("RegisteredNode" is not a kubelet event: the
// node-lifecycle controller in kube-controller-manager emits it, so it is not exported here.)
pub const NODE_HAS_SUFFICIENT_MEMORY: &str = "NodeHasSufficientMemory";
pub const NODE_HAS_INSUFFICIENT_MEMORY: &str = "NodeHasInsufficientMemory";
pub const NODE_HAS_NO_DISK_PRESSURE: &str = "NodeHasNoDiskPressure";
pub const NODE_HAS_DISK_PRESSURE: &str = "NodeHasDiskPressure";
pub const NODE_HAS_SUFFICIENT_PID: &str = "NodeHasSufficientPID";
pub const NODE_HAS_INSUFFICIENT_PID: &str = "NodeHasInsufficientPID";

// Image manager event reasons.
pub const INVALID_DISK_CAPACITY: &str = "InvalidDiskCapacity";
pub const FREE_DISK_SPACE_FAILED: &str = "FreeDiskSpaceFailed";
/// A process outside any container was OOM-killed (upstream `pkg/kubelet/oom`).
pub const SYSTEM_OOM: &str = "SystemOOM";

// Probe event reasons.
pub const CONTAINER_UNHEALTHY: &str = "Unhealthy";
pub const CONTAINER_PROBE_WARNING: &str = "ProbeWarning";

// Pod worker event reasons.
pub const FAILED_SYNC: &str = "FailedSync";

// Config event reasons.
pub const FAILED_VALIDATION: &str = "FailedValidation";

// Lifecycle hook event reasons.
pub const FAILED_POST_START_HOOK: &str = "FailedPostStartHook";
pub const FAILED_PRE_STOP_HOOK: &str = "FailedPreStopHook";

// Container runtime event reasons recorded as literals upstream (`kuberuntime`).
/// envFrom keys that are not valid variable names were skipped.
pub const INVALID_ENVIRONMENT_VARIABLE_NAMES: &str = "InvalidEnvironmentVariableNames";

// Eviction manager event reasons (upstream `eviction.Reason` and `EvictionThresholdMet`).
pub const EVICTED: &str = "Evicted";
pub const EVICTION_THRESHOLD_MET: &str = "EvictionThresholdMet";
