//! Defaults the configuration shares with the managers that use them, so that a kubelet built
//! without a config file and the managers' own fallbacks cannot disagree. Values are upstream's
//! v1beta1 defaults (`pkg/kubelet/apis/config/v1beta1/defaults.go`) unless noted.

use std::time::Duration;

/// `containerLogMaxSize`: 10Mi.
pub const CONTAINER_LOG_MAX_SIZE: u64 = 10 * 1024 * 1024;
/// `containerLogMaxFiles`: 5, the live file included.
pub const CONTAINER_LOG_MAX_FILES: usize = 5;
/// `containerLogMonitorInterval`: 10s.
pub const CONTAINER_LOG_MONITOR_INTERVAL: Duration = Duration::from_secs(10);
/// Where the `<pod>_<ns>_<container>-<id>.log` symlinks go; upstream hardcodes it
/// (`kuberuntime.ContainerLogsDir`), rkubelet's `--container-logs-dir` can move it.
pub const CONTAINER_LOGS_DIR: &str = "/var/log/containers";
