//! The device manager's checkpoint, `<root-dir>/device-plugins/kubelet_internal_checkpoint`, in
//! upstream's format (`pkg/kubelet/cm/devicemanager/checkpoint`): JSON of
//! `{"Data":{"PodDeviceEntries":[...],"RegisteredDevices":{...}},"Checksum":N}`, `AllocResp` the
//! protobuf of the plugin's `ContainerAllocateResponse` (base64, as Go encodes `[]byte`).
//!
//! The checksum is upstream's `checksum.New(data)`: FNV-32a over go-spew's `%#v` printing of the
//! Go `checkpointData` value (`hashutil.DeepHashObject`, keys sorted, methods off). Go tells a
//! nil slice or map (`<nil>`, JSON `null`) from an empty one (`[]`, `map[]`), so the fields that
//! can be either are `Option`s here and round-trip as read.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

/// The checkpoint's file name (upstream `kubeletDeviceManagerCheckpoint`).
pub const FILE_NAME: &str = "kubelet_internal_checkpoint";

/// Errors reading a checkpoint; the manager then starts empty, as upstream continues after a
/// failed read.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("checkpoint is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// Upstream `ErrCorruptCheckpoint`.
    #[error("checkpoint is corrupted: checksum {stored} does not match the data's {computed}")]
    Corrupt { stored: u64, computed: u64 },
}

/// Upstream `PodDevicesEntry`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct PodDevicesEntry {
    #[serde(rename = "PodUID")]
    pub pod_uid: String,
    pub container_name: String,
    pub resource_name: String,
    /// Upstream `DevicesPerNUMA`: NUMA node -> device IDs (node 0 for devices without topology).
    #[serde(rename = "DeviceIDs")]
    pub device_ids: Option<BTreeMap<i64, Vec<String>>>,
    #[serde(with = "base64_bytes")]
    pub alloc_resp: Option<Vec<u8>>,
}

/// Upstream `checkpointData`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Data {
    pub pod_device_entries: Option<Vec<PodDevicesEntry>>,
    pub registered_devices: Option<BTreeMap<String, Vec<String>>>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct File {
    data: Data,
    checksum: u64,
}

/// The file's bytes for `data`, with upstream's checksum.
pub fn encode(data: &Data) -> Vec<u8> {
    let file = File {
        data: data.clone(),
        checksum: checksum(data),
    };
    // Plain maps, strings and numbers: serializing cannot fail.
    serde_json::to_vec(&file).unwrap_or_default()
}

/// Parses a checkpoint and verifies its checksum (upstream `GetCheckpoint` + `VerifyChecksum`).
pub fn decode(bytes: &[u8]) -> Result<Data, CheckpointError> {
    let file: File = serde_json::from_slice(bytes)?;
    let computed = checksum(&file.data);
    if computed != file.checksum {
        return Err(CheckpointError::Corrupt {
            stored: file.checksum,
            computed,
        });
    }
    Ok(file.data)
}

/// Upstream `checksum.New`: FNV-32a of the spew printing, widened to uint64.
pub fn checksum(data: &Data) -> u64 {
    u64::from(fnv32a(spew(data).as_bytes()))
}

fn fnv32a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

/// go-spew's `%#v` of the Go value (`ConfigState{Indent: " ", SortKeys: true, DisableMethods:
/// true, SpewKeys: true}`): the outer value and struct fields carry their Go type in
/// parentheses, slice elements and map keys and values do not; strings print raw.
fn spew(d: &Data) -> String {
    let mut s =
        String::from("(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)");
    match &d.pod_device_entries {
        None => s.push_str("<nil>"),
        Some(entries) => {
            s.push('[');
            for (i, e) in entries.iter().enumerate() {
                if i > 0 {
                    s.push(' ');
                }
                let _ = write!(
                    s,
                    "{{PodUID:(string){} ContainerName:(string){} ResourceName:(string){} DeviceIDs:(checkpoint.DevicesPerNUMA)",
                    e.pod_uid, e.container_name, e.resource_name
                );
                match &e.device_ids {
                    None => s.push_str("<nil>"),
                    Some(m) => {
                        s.push_str("map[");
                        for (j, (numa, ids)) in m.iter().enumerate() {
                            if j > 0 {
                                s.push(' ');
                            }
                            let _ = write!(s, "{numa}:");
                            spew_strings(&mut s, ids);
                        }
                        s.push(']');
                    }
                }
                s.push_str(" AllocResp:([]uint8)");
                match &e.alloc_resp {
                    None => s.push_str("<nil>"),
                    Some(b) => {
                        s.push('[');
                        for (j, byte) in b.iter().enumerate() {
                            if j > 0 {
                                s.push(' ');
                            }
                            let _ = write!(s, "{byte}");
                        }
                        s.push(']');
                    }
                }
                s.push('}');
            }
            s.push(']');
        }
    }
    s.push_str(" RegisteredDevices:(map[string][]string)");
    match &d.registered_devices {
        None => s.push_str("<nil>"),
        Some(m) => {
            s.push_str("map[");
            for (i, (name, ids)) in m.iter().enumerate() {
                if i > 0 {
                    s.push(' ');
                }
                let _ = write!(s, "{name}:");
                spew_strings(&mut s, ids);
            }
            s.push(']');
        }
    }
    s.push('}');
    s
}

fn spew_strings(s: &mut String, ids: &[String]) {
    s.push('[');
    s.push_str(&ids.join(" "));
    s.push(']');
}

/// Go's `[]byte` in JSON: base64 with padding, `null` for nil.
mod base64_bytes {
    use super::*;

    pub fn serialize<S: serde::Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            None => s.serialize_none(),
            Some(b) => s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(b)),
        }
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Vec<u8>>, D::Error> {
        let v: Option<String> = Option::deserialize(d)?;
        v.map(|s| {
            base64::engine::general_purpose::STANDARD
                .decode(s)
                .map_err(serde::de::Error::custom)
        })
        .transpose()
    }
}

#[cfg(test)]
#[path = "checkpoint_tests.rs"]
mod tests;
