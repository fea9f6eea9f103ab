//! The topology manager's view of the NUMA nodes (upstream `topologymanager/numa_info.go`):
//! their IDs and distances (`/sys/devices/system/node/node<N>/distance`), which the policy
//! option `prefer-closest-numa-nodes` uses to choose between equally wide hints, and the
//! `max-allowable-numa-nodes` limit.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{BitMask, Policy};

/// Upstream `defaultMaxAllowableNUMANodes`: beyond this many nodes the hint merge (every
/// combination of nodes) gets too expensive, so a policy other than `none` refuses to start.
pub const DEFAULT_MAX_ALLOWABLE_NUMA_NODES: usize = 8;

/// Errors discovering the NUMA topology or checking it against the options; each stops the
/// kubelet, as upstream's `NewManager`.
#[derive(Debug, thiserror::Error)]
pub enum NumaError {
    /// Upstream `cannot discover NUMA topology: ...`.
    #[error("cannot discover NUMA topology: {path}: {message}")]
    Distances { path: PathBuf, message: String },
    /// Upstream's limit check in `NewManager`.
    #[error("unsupported on machines with more than {0} NUMA Nodes")]
    TooManyNodes(usize),
}

/// Upstream `NUMAInfo`: node IDs and `distances[from][to]`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NumaInfo {
    pub nodes: Vec<usize>,
    pub distances: BTreeMap<usize, Vec<u64>>,
}

/// Upstream `splitDistances`: the space-separated distances of one node's `distance` file.
pub fn split_distances(raw: &str) -> Result<Vec<u64>, String> {
    raw.split_whitespace()
        .map(|d| {
            d.parse::<u64>()
                .map_err(|e| format!("cannot convert {d:?} to uint64: {e}"))
        })
        .collect()
}

impl NumaInfo {
    /// Upstream `NewNUMAInfo` over `<sys>/devices/system/node/node<N>/distance`.
    pub fn discover(sys: &Path, nodes: &[usize]) -> Result<NumaInfo, NumaError> {
        let mut distances = BTreeMap::new();
        for n in nodes {
            let path = sys.join(format!("devices/system/node/node{n}/distance"));
            let fail = |message: String| NumaError::Distances {
                path: path.clone(),
                message,
            };
            let raw = std::fs::read_to_string(&path).map_err(|e| fail(e.to_string()))?;
            distances.insert(*n, split_distances(&raw).map_err(fail)?);
        }
        Ok(NumaInfo {
            nodes: nodes.to_vec(),
            distances,
        })
    }

    fn distance(&self, from: usize, to: usize) -> u64 {
        self.distances
            .get(&from)
            .and_then(|row| row.get(to))
            .copied()
            .unwrap_or(0)
    }

    /// Upstream `NUMADistances.CalculateAverageFor`: the mean over every ordered pair of the
    /// mask's nodes (a node with itself included).
    pub fn average_distance(&self, mask: BitMask) -> f64 {
        let bits = mask.bits();
        if bits.is_empty() {
            return 0.0;
        }
        let sum: u64 = bits
            .iter()
            .flat_map(|a| bits.iter().map(move |b| (*a, *b)))
            .map(|(a, b)| self.distance(a, b))
            .sum();
        sum as f64 / (bits.len() * bits.len()) as f64
    }

    /// Upstream `Narrowest`.
    pub fn narrowest(m1: BitMask, m2: BitMask) -> BitMask {
        if m2.is_narrower_than(m1) {
            m2
        } else {
            m1
        }
    }

    /// Upstream `Closest`: the narrower mask; between equally wide ones the shorter average
    /// distance, then the one with more lower-numbered nodes.
    pub fn closest(&self, m1: BitMask, m2: BitMask) -> BitMask {
        if m1.count() != m2.count() {
            return Self::narrowest(m1, m2);
        }
        let (d1, d2) = (self.average_distance(m1), self.average_distance(m2));
        if d1 == d2 {
            return if m1.0 < m2.0 { m1 } else { m2 };
        }
        if d1 < d2 {
            m1
        } else {
            m2
        }
    }
}

/// The parsed `topologyManagerPolicyOptions` (validated with the configuration).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PolicyOptions {
    pub prefer_closest_numa: bool,
    pub max_allowable_numa_nodes: usize,
}

impl Default for PolicyOptions {
    fn default() -> Self {
        PolicyOptions {
            prefer_closest_numa: false,
            max_allowable_numa_nodes: DEFAULT_MAX_ALLOWABLE_NUMA_NODES,
        }
    }
}

/// Upstream `NewManager`'s limit: a policy other than `none` on more NUMA nodes than allowed
/// refuses to start.
pub fn check_node_count(
    policy: Policy,
    nodes: &[usize],
    opts: &PolicyOptions,
) -> Result<(), NumaError> {
    if policy != Policy::None && nodes.len() > opts.max_allowable_numa_nodes {
        return Err(NumaError::TooManyNodes(opts.max_allowable_numa_nodes));
    }
    Ok(())
}

#[cfg(test)]
#[path = "numa_tests.rs"]
mod tests;
