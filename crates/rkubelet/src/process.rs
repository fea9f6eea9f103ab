//! The kubelet process's own settings, applied once at start as upstream's `cmd/kubelet/app`
//! does: `oomScoreAdj` (`ApplyOOMScoreAdj(0, s.OOMScoreAdj)` in `run`) and `maxOpenFiles`
//! (`rlimit.SetNumFiles` in `RunKubelet`: soft and hard `RLIMIT_NOFILE` both set to it).
//!
//! Neither stops the kubelet when refused, as upstream: both only log. Lowering
//! `oom_score_adj` below its current value, or raising the hard file limit, needs
//! `CAP_SYS_RESOURCE`, which a node's kubelet has and a restricted container (this project's
//! CI VM) does not; the line says which value was refused and why.

use nix::sys::resource::{setrlimit, Resource};
use tracing::{error, warn};

/// Applies `oomScoreAdj` and `maxOpenFiles` to this process (children such as credential
/// provider plugins inherit both, as upstream's do).
pub fn apply(oom_score_adj: i32, max_open_files: u64) {
    if let Err(e) = std::fs::write("/proc/self/oom_score_adj", oom_score_adj.to_string()) {
        warn!(err = %e, oom_score_adj, "Failed to ApplyOOMScoreAdj");
    }
    if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, max_open_files, max_open_files) {
        error!(err = %e, max_open_files, "Failed to set rlimit on max file handles");
    }
}
