//! The topology manager (upstream `pkg/kubelet/cm/topologymanager`): hint providers (the CPU
//! manager, the device manager) say on which NUMA nodes they could satisfy a container (or a
//! whole pod, with scope `pod`); the policy merges the hints into one affinity the providers
//! then allocate against, and `restricted` / `single-numa-node` reject a pod whose best merged
//! hint is not preferred with `TopologyAffinityError`.
//!
//! Pure: [`Policy::merge`] and [`generate_hints`]; the SyncLoop's admission asks the providers
//! and stores nothing here (the affinity goes straight into the allocation).

mod bitmask;
pub mod numa;

pub use bitmask::BitMask;
pub use numa::{NumaInfo, PolicyOptions};

use std::collections::BTreeMap;

/// Upstream `TopologyHint`: `numa_affinity` None means "no preference".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopologyHint {
    pub numa_affinity: Option<BitMask>,
    pub preferred: bool,
}

/// One provider's hints per resource: a missing map or resource is no preference, `Some(vec![])`
/// is "cannot be satisfied" (upstream's nil vs empty slice).
pub type ProviderHints = BTreeMap<String, Option<Vec<TopologyHint>>>;

/// `topologyManagerPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Policy {
    #[default]
    None,
    BestEffort,
    Restricted,
    SingleNumaNode,
}

/// `topologyManagerScope`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scope {
    #[default]
    Container,
    Pod,
}

/// Upstream's admission failure: reason `TopologyAffinityError`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Resources cannot be allocated with Topology locality")]
pub struct TopologyAffinityError;

impl TopologyAffinityError {
    pub const REASON: &'static str = "TopologyAffinityError";
}

impl std::str::FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Policy::None),
            "best-effort" => Ok(Policy::BestEffort),
            "restricted" => Ok(Policy::Restricted),
            "single-numa-node" => Ok(Policy::SingleNumaNode),
            other => Err(format!("unknown policy: \"{other}\"")),
        }
    }
}

impl std::str::FromStr for Scope {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "container" => Ok(Scope::Container),
            "pod" => Ok(Scope::Pod),
            other => Err(format!("unknown scope: \"{other}\"")),
        }
    }
}

/// Upstream `filterProvidersHints`: one list per resource, no preference as `{nil, true}` and
/// "no possible affinity" as `{nil, false}`.
fn filter_providers_hints(providers: &[ProviderHints]) -> Vec<Vec<TopologyHint>> {
    let mut out = Vec::new();
    for hints in providers {
        if hints.is_empty() {
            out.push(vec![TopologyHint {
                numa_affinity: None,
                preferred: true,
            }]);
            continue;
        }
        for h in hints.values() {
            match h {
                None => out.push(vec![TopologyHint {
                    numa_affinity: None,
                    preferred: true,
                }]),
                Some(v) if v.is_empty() => out.push(vec![TopologyHint {
                    numa_affinity: None,
                    preferred: false,
                }]),
                Some(v) => out.push(v.clone()),
            }
        }
    }
    out
}

/// Upstream `mergePermutation`.
fn merge_permutation(default: BitMask, permutation: &[TopologyHint]) -> TopologyHint {
    let mut preferred = true;
    let mut merged = default;
    for h in permutation {
        merged = merged.and(h.numa_affinity.unwrap_or(default));
        preferred &= h.preferred;
    }
    TopologyHint {
        numa_affinity: Some(merged),
        preferred,
    }
}

/// Upstream `iterateAllProviderTopologyHints` + `mergeFilteredHints`: every combination of one
/// hint per resource; preferred beats not preferred, then the narrower mask wins. With
/// `closest` (option `prefer-closest-numa-nodes`), between two preferred masks the closer one
/// wins (upstream `HintMerger`'s `NUMAInfo.Closest`).
fn merge_filtered_hints(
    numa_nodes: &[usize],
    filtered: &[Vec<TopologyHint>],
    closest: Option<&NumaInfo>,
) -> TopologyHint {
    let default = BitMask::from_nodes(numa_nodes);
    let mut best = TopologyHint {
        numa_affinity: Some(default),
        preferred: false,
    };
    let mut idx = vec![0usize; filtered.len()];
    if filtered.iter().any(|l| l.is_empty()) {
        return best;
    }
    let mut perm = Vec::with_capacity(filtered.len());
    loop {
        perm.clear();
        perm.extend(filtered.iter().zip(&idx).map(|(l, i)| l[*i]));
        let merged = merge_permutation(default, &perm);
        let mask = merged.numa_affinity.unwrap_or(default);
        let best_mask = best.numa_affinity.unwrap_or(default);
        // Preferred beats not preferred; between equals the narrower (or closer) mask wins.
        let wins = match closest.filter(|_| merged.preferred && best.preferred) {
            Some(info) => mask != best_mask && info.closest(best_mask, mask) == mask,
            None => mask.is_narrower_than(best_mask),
        };
        let better =
            (merged.preferred && !best.preferred) || (merged.preferred == best.preferred && wins);
        if mask.count() != 0 && better {
            best = merged;
        }
        // Next combination, last list fastest (upstream's recursion order).
        let mut k = filtered.len();
        loop {
            if k == 0 {
                return best;
            }
            k -= 1;
            idx[k] += 1;
            if idx[k] < filtered[k].len() {
                break;
            }
            idx[k] = 0;
        }
    }
}

/// Upstream `filterSingleNumaHints`: only no-preference or single-node preferred hints.
fn filter_single_numa_hints(all: Vec<Vec<TopologyHint>>) -> Vec<Vec<TopologyHint>> {
    all.into_iter()
        .map(|l| {
            l.into_iter()
                .filter(|h| h.preferred && h.numa_affinity.is_none_or(|m| m.count() == 1))
                .collect()
        })
        .collect()
}

impl Policy {
    /// Upstream `Policy.Merge`: the best hint and whether the pod may be admitted with it.
    pub fn merge(&self, numa_nodes: &[usize], providers: &[ProviderHints]) -> (TopologyHint, bool) {
        self.merge_with(numa_nodes, providers, None)
    }

    /// [`Policy::merge`] with `prefer-closest-numa-nodes`' distances (ignored by
    /// `single-numa-node`, whose hints are one node wide, as upstream).
    pub fn merge_with(
        &self,
        numa_nodes: &[usize],
        providers: &[ProviderHints],
        closest: Option<&NumaInfo>,
    ) -> (TopologyHint, bool) {
        match self {
            Policy::None => (
                TopologyHint {
                    numa_affinity: None,
                    preferred: false,
                },
                true,
            ),
            Policy::BestEffort | Policy::Restricted => {
                let best =
                    merge_filtered_hints(numa_nodes, &filter_providers_hints(providers), closest);
                let admit = *self == Policy::BestEffort || best.preferred;
                (best, admit)
            }
            Policy::SingleNumaNode => {
                let filtered = filter_single_numa_hints(filter_providers_hints(providers));
                let mut best = merge_filtered_hints(numa_nodes, &filtered, None);
                if best.numa_affinity == Some(BitMask::from_nodes(numa_nodes)) {
                    best.numa_affinity = None;
                }
                (best, best.preferred)
            }
        }
    }
}

/// Upstream's hint generation shared by the CPU and device managers
/// (`generateCPUTopologyHints`, `generateDeviceTopologyHints`): for every combination of NUMA
/// nodes (fewest nodes first) whose `available` count reaches `request`, a hint, preferred when
/// it has as few nodes as any combination whose `total` could ever hold the request.
/// `available` says None for a mask that cannot serve at all (upstream's `continue` when
/// something the container must reuse lies outside it), whatever the request, 0 included.
pub fn generate_hints(
    numa_nodes: &[usize],
    request: usize,
    available: impl Fn(BitMask) -> Option<usize>,
    total: impl Fn(BitMask) -> usize,
) -> Vec<TopologyHint> {
    let mut min_size = numa_nodes.len();
    let mut hints = Vec::new();
    for mask in BitMask::iterate(numa_nodes) {
        if total(mask) >= request && mask.count() < min_size {
            min_size = mask.count();
        }
        if available(mask).is_some_and(|n| n >= request) {
            hints.push(TopologyHint {
                numa_affinity: Some(mask),
                preferred: false,
            });
        }
    }
    for h in &mut hints {
        h.preferred = h.numa_affinity.is_some_and(|m| m.count() == min_size);
    }
    hints
}

#[cfg(test)]
mod tests;
