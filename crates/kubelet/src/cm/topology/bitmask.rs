//! Upstream `topologymanager/bitmask`: a set of NUMA node IDs as a `uint64`.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct BitMask(pub u64);

impl BitMask {
    /// Upstream `NewBitMask` (IDs above 63 are dropped; upstream refuses them).
    pub fn from_nodes(nodes: &[usize]) -> BitMask {
        BitMask(
            nodes
                .iter()
                .filter(|n| **n < 64)
                .fold(0, |m, n| m | (1 << n)),
        )
    }

    pub fn count(&self) -> usize {
        self.0.count_ones() as usize
    }

    pub fn is_set(&self, node: usize) -> bool {
        node < 64 && self.0 & (1 << node) != 0
    }

    /// Upstream `GetBits`: the node IDs, ascending.
    pub fn bits(&self) -> Vec<usize> {
        (0..64).filter(|n| self.is_set(*n)).collect()
    }

    pub fn and(self, o: BitMask) -> BitMask {
        BitMask(self.0 & o.0)
    }

    /// Upstream `IsNarrowerThan`: fewer nodes, or as many and a lower value.
    pub fn is_narrower_than(&self, o: BitMask) -> bool {
        if self.count() == o.count() && self.0 < o.0 {
            return true;
        }
        self.count() < o.count()
    }

    /// Upstream `IterateBitMasks`: every non-empty combination of `nodes`, by size, then in
    /// the order the nodes are given.
    pub fn iterate(nodes: &[usize]) -> Vec<BitMask> {
        fn rec(nodes: &[usize], acc: &mut Vec<usize>, size: usize, out: &mut Vec<BitMask>) {
            if acc.len() == size {
                out.push(BitMask::from_nodes(acc));
                return;
            }
            for i in 0..nodes.len() {
                acc.push(nodes[i]);
                rec(&nodes[i + 1..], acc, size, out);
                acc.pop();
            }
        }
        let mut out = Vec::new();
        for size in 1..=nodes.len() {
            rec(nodes, &mut Vec::new(), size, &mut out);
        }
        out
    }
}

/// The node IDs, as upstream logs hints (`[0 1]`).
impl fmt::Display for BitMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bits: Vec<String> = self.bits().iter().map(|b| b.to_string()).collect();
        write!(f, "[{}]", bits.join(" "))
    }
}
