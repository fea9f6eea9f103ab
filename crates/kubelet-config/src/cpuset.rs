//! A set of logical CPU IDs in the Linux list format (`0-3,5`), as upstream's `cpuset.CPUSet`
//! (`pkg/kubelet/cm/cpuset`): `reservedSystemCPUs`, the CPU manager's checkpoint, `cpuset.cpus`
//! and CRI's `cpuset_cpus` all speak it. Here, in the leaf crate, because the configuration
//! parses `reservedSystemCPUs` with it.
//!
//! Hand-written: the `cpuset`-like crates on crates.io either pull in libc affinity calls or
//! print a different list format; upstream's parser and printer are ten lines each.

use std::collections::BTreeSet;
use std::fmt;

/// Upstream `cpuset.Parse`'s failures.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("strconv.Atoi: parsing {0:?}: invalid syntax")]
    Number(String),
    #[error("invalid range {0:?} (start > end)")]
    Range(String),
}

/// An ordered set of CPU IDs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct CpuSet(BTreeSet<usize>);

impl CpuSet {
    pub fn new() -> Self {
        CpuSet::default()
    }

    /// Upstream `cpuset.Parse`: comma-separated IDs and inclusive `a-b` ranges; "" is empty.
    pub fn parse(s: &str) -> Result<CpuSet, ParseError> {
        let mut out = BTreeSet::new();
        if s.is_empty() {
            return Ok(CpuSet(out));
        }
        let num = |t: &str| {
            t.parse::<usize>()
                .map_err(|_| ParseError::Number(t.to_string()))
        };
        for part in s.split(',') {
            match part.split_once('-') {
                None => {
                    out.insert(num(part)?);
                }
                Some((a, b)) => {
                    let (a, b) = (num(a)?, num(b)?);
                    if a > b {
                        return Err(ParseError::Range(part.to_string()));
                    }
                    out.extend(a..=b);
                }
            }
        }
        Ok(CpuSet(out))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn contains(&self, cpu: usize) -> bool {
        self.0.contains(&cpu)
    }

    pub fn insert(&mut self, cpu: usize) {
        self.0.insert(cpu);
    }

    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().copied()
    }

    pub fn union(&self, o: &CpuSet) -> CpuSet {
        CpuSet(self.0.union(&o.0).copied().collect())
    }

    pub fn intersection(&self, o: &CpuSet) -> CpuSet {
        CpuSet(self.0.intersection(&o.0).copied().collect())
    }

    pub fn difference(&self, o: &CpuSet) -> CpuSet {
        CpuSet(self.0.difference(&o.0).copied().collect())
    }

    pub fn is_subset(&self, o: &CpuSet) -> bool {
        self.0.is_subset(&o.0)
    }

    /// Upstream `ToSlice`: ascending.
    pub fn to_vec(&self) -> Vec<usize> {
        self.0.iter().copied().collect()
    }
}

impl FromIterator<usize> for CpuSet {
    fn from_iter<T: IntoIterator<Item = usize>>(iter: T) -> Self {
        CpuSet(iter.into_iter().collect())
    }
}

/// Upstream `CPUSet.String`: ascending, consecutive runs of two or more as `a-b`.
impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut it = self.0.iter().copied().peekable();
        while let Some(start) = it.next() {
            let mut end = start;
            while it.peek() == Some(&(end + 1)) {
                end += 1;
                it.next();
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Upstream `TestCPUSetString` and `TestParse`.
    #[test]
    fn prints_and_parses_like_upstream() {
        for (ids, text) in [
            (vec![], ""),
            (vec![5], "5"),
            (vec![1, 2, 3, 4, 5], "1-5"),
            (vec![1, 2, 3, 5, 6, 8], "1-3,5-6,8"),
            (vec![0, 2, 4], "0,2,4"),
        ] {
            let s: CpuSet = ids.iter().copied().collect();
            assert_eq!(s.to_string(), text);
            assert_eq!(CpuSet::parse(text).unwrap(), s);
        }
        assert_eq!(CpuSet::parse("3-3,1").unwrap().to_vec(), vec![1, 3]);
        assert_eq!(CpuSet::parse("5-6,1-3,8").unwrap().to_string(), "1-3,5-6,8");
        for bad in [
            "nonnumeric",
            "non-numeric",
            "no,numbers",
            "0-a",
            "a-0",
            ",",
            "-1",
            "3-1",
            "0,",
        ] {
            assert!(CpuSet::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn set_operations() {
        let a = CpuSet::parse("0-3").unwrap();
        let b = CpuSet::parse("2-5").unwrap();
        assert_eq!(a.union(&b).to_string(), "0-5");
        assert_eq!(a.intersection(&b).to_string(), "2-3");
        assert_eq!(a.difference(&b).to_string(), "0-1");
        assert!(CpuSet::parse("1,2").unwrap().is_subset(&a));
    }
}
