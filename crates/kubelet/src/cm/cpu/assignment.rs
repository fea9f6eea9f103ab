//! Upstream `cpumanager/cpu_assignment.go`: `takeByTopology`, a topology-aware best fit that
//! takes whole sockets, then whole cores, then single threads (preferring threads on sockets
//! the result already uses and on the fullest cores). Pure.
//!
//! Upstream 1.20's sort comparators chain `||` without ties; the orders here are the ones its
//! comments describe (and later upstream releases fixed them to), as strict lexicographic keys.

use super::topology::{CpuDetails, CpuTopology, Details};
use super::CpuSet;

/// Upstream's error text, which becomes part of the admission message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "not enough cpus available to satisfy request: requested={requested}, available={available}"
)]
pub struct NotEnoughCpus {
    pub requested: usize,
    pub available: usize,
}

struct Accumulator<'a> {
    topo: &'a CpuTopology,
    details: CpuDetails,
    needed: usize,
    result: CpuSet,
}

impl<'a> Accumulator<'a> {
    fn take(&mut self, cpus: &CpuSet) {
        self.result = self.result.union(cpus);
        self.details = self
            .details
            .keep_only(&self.details.cpus().difference(&self.result));
        self.needed = self.needed.saturating_sub(cpus.len());
    }

    fn is_socket_free(&self, socket: usize) -> bool {
        self.details.cpus_in_sockets(&[socket]).len() == self.topo.cpus_per_socket()
    }

    fn is_core_free(&self, core: usize) -> bool {
        self.details.cpus_in_cores(&[core]).len() == self.topo.cpus_per_core()
    }

    /// Free sockets, ascending.
    fn free_sockets(&self) -> Vec<usize> {
        self.details
            .sockets()
            .iter()
            .filter(|s| self.is_socket_free(*s))
            .collect()
    }

    /// Free cores by the number of free cores on their socket (fewest first, to keep big holes
    /// whole), then socket, then core ID.
    fn free_cores(&self) -> Vec<usize> {
        let mut sockets: Vec<(usize, usize)> = self
            .details
            .sockets()
            .iter()
            .map(|s| {
                let free = self
                    .details
                    .cores_in_sockets(&[s])
                    .iter()
                    .filter(|c| self.is_core_free(*c))
                    .count();
                (free, s)
            })
            .collect();
        sockets.sort();
        sockets
            .into_iter()
            .flat_map(|(_, s)| {
                self.details
                    .cores_in_sockets(&[s])
                    .iter()
                    .filter(|c| self.is_core_free(*c))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Free CPUs by core: cores on sockets the result already uses most first, then on sockets
    /// with the fewest free CPUs, then with the fewest free CPUs on the core, socket and core
    /// ID; each core's CPUs ascending.
    fn free_cpus(&self) -> Vec<usize> {
        let all = &self.topo.details;
        let mut cores: Vec<(std::cmp::Reverse<usize>, usize, usize, usize, usize)> = self
            .details
            .cores()
            .iter()
            .map(|core| {
                let first = all.cpus_in_cores(&[core]).iter().next().unwrap_or(0);
                let socket = all.get(&first).map(|i| i.socket).unwrap_or(0);
                let colo = all
                    .cpus_in_sockets(&[socket])
                    .intersection(&self.result)
                    .len();
                let socket_free = self.details.cpus_in_sockets(&[socket]).len();
                let core_free = self.details.cpus_in_cores(&[core]).len();
                (
                    std::cmp::Reverse(colo),
                    socket_free,
                    core_free,
                    socket,
                    core,
                )
            })
            .collect();
        cores.sort();
        cores
            .into_iter()
            .flat_map(|k| self.details.cpus_in_cores(&[k.4]).to_vec())
            .collect()
    }
}

/// Upstream `takeByTopology`: `n` CPUs out of `available`.
pub fn take_by_topology(
    topo: &CpuTopology,
    available: &CpuSet,
    n: usize,
) -> Result<CpuSet, NotEnoughCpus> {
    let mut acc = Accumulator {
        topo,
        details: topo.details.keep_only(available),
        needed: n,
        result: CpuSet::new(),
    };
    if acc.needed == 0 {
        return Ok(acc.result);
    }
    if acc.needed > acc.details.len() {
        return Err(NotEnoughCpus {
            requested: n,
            available: acc.details.len(),
        });
    }
    // 1. Whole sockets, while at least a socket's worth is needed.
    let per_socket = topo.cpus_per_socket();
    if per_socket > 0 && acc.needed >= per_socket {
        for s in acc.free_sockets() {
            let cpus = acc.details.cpus_in_sockets(&[s]);
            acc.take(&cpus);
            if acc.needed == 0 {
                return Ok(acc.result);
            }
            if acc.needed < per_socket {
                break;
            }
        }
    }
    // 2. Whole cores, while at least a core's worth is needed.
    let per_core = topo.cpus_per_core();
    if per_core > 0 && acc.needed >= per_core {
        for c in acc.free_cores() {
            let cpus = acc.details.cpus_in_cores(&[c]);
            acc.take(&cpus);
            if acc.needed == 0 {
                return Ok(acc.result);
            }
            if acc.needed < per_core {
                break;
            }
        }
    }
    // 3. Single threads.
    for c in acc.free_cpus() {
        if acc.needed >= 1 {
            acc.take(&std::iter::once(c).collect());
        }
        if acc.needed == 0 {
            return Ok(acc.result);
        }
    }
    Err(NotEnoughCpus {
        requested: n,
        available: available.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::super::topology::fixtures::*;
    use super::*;

    fn set(ids: &[usize]) -> CpuSet {
        ids.iter().copied().collect()
    }

    /// Upstream `TestTakeByTopology`.
    #[test]
    fn upstream_take_by_topology_table() {
        let cases: Vec<(&str, CpuTopology, CpuSet, usize, Option<&str>)> = vec![
            (
                "take more cpus than are available from single socket with HT",
                single_socket_ht(),
                set(&[0, 2, 4, 6]),
                5,
                None,
            ),
            (
                "take zero cpus from single socket with HT",
                single_socket_ht(),
                set(&[0, 1, 2, 3, 4, 5, 6, 7]),
                0,
                Some(""),
            ),
            (
                "take one cpu from single socket with HT",
                single_socket_ht(),
                set(&[0, 1, 2, 3, 4, 5, 6, 7]),
                1,
                Some("0"),
            ),
            (
                "take one cpu from single socket with HT, some cpus are taken",
                single_socket_ht(),
                set(&[1, 3, 5, 6, 7]),
                1,
                Some("6"),
            ),
            (
                "take two cpus from single socket with HT",
                single_socket_ht(),
                set(&[0, 1, 2, 3, 4, 5, 6, 7]),
                2,
                Some("0,4"),
            ),
            (
                "take all cpus from single socket with HT",
                single_socket_ht(),
                set(&[0, 1, 2, 3, 4, 5, 6, 7]),
                8,
                Some("0-7"),
            ),
            (
                "take two cpus from single socket with HT, only one core totally free",
                single_socket_ht(),
                set(&[0, 1, 2, 3, 6]),
                2,
                Some("2,6"),
            ),
            (
                "take one cpu from dual socket with HT - core from Socket 0",
                dual_socket_ht(),
                set(&[1, 2, 3, 4, 5, 7, 8, 9, 10, 11]),
                1,
                Some("2"),
            ),
            (
                "take a socket of cpus from dual socket with HT",
                dual_socket_ht(),
                set(&[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]),
                6,
                Some("0,2,4,6,8,10"),
            ),
            (
                "without SMT, cores on the socket with fewest free cores go first",
                dual_socket_no_ht(),
                set(&[1, 2, 3, 5]),
                3,
                Some("1-2,5"),
            ),
        ];
        for (what, topo, avail, n, want) in cases {
            let got = take_by_topology(&topo, &avail, n);
            match want {
                None => {
                    let e = got.unwrap_err();
                    assert_eq!(
                        e.to_string(),
                        format!("not enough cpus available to satisfy request: requested={n}, available={}", avail.len()),
                        "{what}"
                    );
                }
                Some(w) => assert_eq!(got.unwrap().to_string(), w, "{what}"),
            }
        }
    }

    /// Upstream `TestCPUAccumulatorFreeCores`/`FreeCPUs` orders on the dual-socket HT box.
    #[test]
    fn free_orders() {
        let topo = dual_socket_ht();
        let acc = |avail: &[usize]| Accumulator {
            topo: &topo,
            details: topo.details.keep_only(&set(avail)),
            needed: 0,
            result: CpuSet::new(),
        };
        assert_eq!(
            acc(&(0..12).collect::<Vec<_>>()).free_cores(),
            vec![0, 2, 4, 1, 3, 5]
        );
        // Socket 1 has fewer free cores: its cores come first.
        assert_eq!(
            acc(&[0, 2, 3, 4, 5, 6, 8, 9, 10, 11]).free_cores(),
            vec![3, 5, 0, 2, 4]
        );
        assert_eq!(
            acc(&[1, 2, 3, 4, 5, 7, 8, 9, 10, 11]).free_cpus(),
            vec![2, 8, 4, 10, 1, 7, 3, 9, 5, 11]
        );
        assert!(acc(&[]).free_cpus().is_empty());
    }
}
