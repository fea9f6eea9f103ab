//! `<root-dir>/cpu_manager_state` in upstream's format (`cpumanager/state/checkpoint.go`,
//! `CPUManagerCheckpointV2`): `{"policyName":..,"defaultCpuSet":..,"entries":{pod:{container:
//! cpuset}},"checksum":N}`, `entries` left out when empty (`omitempty`).
//!
//! The checksum is upstream's `checksum.New(cp)`: FNV-32a over go-spew's `%#v` printing of the
//! `*state.CPUManagerCheckpoint` with the checksum zeroed (keys sorted, methods off). A v1 file
//! (entries keyed by container ID) is recognised and refused, as rkubelet has no container map
//! to migrate it with (upstream 1.12-era state).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// Upstream `cpuManagerStateFileName`.
pub const FILE_NAME: &str = "cpu_manager_state";

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("checkpoint is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// Upstream `ErrCorruptCheckpoint`.
    #[error("checkpoint is corrupted")]
    Corrupt,
}

/// Upstream `CPUManagerCheckpoint` (v2).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    #[serde(rename = "policyName")]
    pub policy_name: String,
    #[serde(rename = "defaultCpuSet")]
    pub default_cpu_set: String,
    /// pod UID -> container name -> cpuset.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub entries: BTreeMap<String, BTreeMap<String, String>>,
}

#[derive(Serialize, Deserialize)]
struct File {
    #[serde(flatten)]
    cp: Checkpoint,
    checksum: u64,
}

/// The file's bytes with upstream's checksum (`MarshalCheckpoint`).
pub fn encode(cp: &Checkpoint) -> Vec<u8> {
    let f = File {
        cp: cp.clone(),
        checksum: checksum(cp),
    };
    serde_json::to_vec(&f).unwrap_or_default()
}

/// Parses and verifies (`VerifyChecksum`: a zero checksum is accepted, as upstream does for the
/// old file backend).
pub fn decode(bytes: &[u8]) -> Result<Checkpoint, CheckpointError> {
    let f: File = serde_json::from_slice(bytes)?;
    if f.checksum != 0 && f.checksum != checksum(&f.cp) {
        return Err(CheckpointError::Corrupt);
    }
    Ok(f.cp)
}

/// Upstream `checksum.New`: FNV-32a of the spew printing, widened to uint64.
pub fn checksum(cp: &Checkpoint) -> u64 {
    let h = spew(cp).bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    u64::from(h)
}

/// go-spew's `%#v` of the pointer: the struct and field types in parentheses, map keys and
/// values bare, strings raw. Go's decoder leaves a missing `entries` as the empty map
/// `newCPUManagerCheckpointV2` made, so it never prints as `<nil>`.
fn spew(cp: &Checkpoint) -> String {
    let mut s = format!(
        "(*state.CPUManagerCheckpoint){{PolicyName:(string){} DefaultCPUSet:(string){} Entries:(map[string]map[string]string)map[",
        cp.policy_name, cp.default_cpu_set
    );
    for (i, (pod, containers)) in cp.entries.iter().enumerate() {
        if i > 0 {
            s.push(' ');
        }
        let _ = write!(s, "{pod}:map[");
        for (j, (c, set)) in containers.iter().enumerate() {
            if j > 0 {
                s.push(' ');
            }
            let _ = write!(s, "{c}:{set}");
        }
        s.push(']');
    }
    s.push_str("] Checksum:(checksum.Checksum)0}");
    s
}

#[cfg(test)]
#[path = "checkpoint_tests.rs"]
mod tests;
