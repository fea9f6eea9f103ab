//! Sysctl names and `allowedUnsafeSysctls` patterns (upstream `pkg/kubelet/sysctl` and
//! `validation.IsValidSysctlPattern`): which kernel namespace a name belongs to and whether a
//! pattern is well formed.
//!
//! The configuration validates `allowedUnsafeSysctls` with these at load time; the kubelet's
//! `sysctl` module builds the admission allowlist from the same pieces, so both agree on what a
//! valid entry is.

/// The kernel namespace a sysctl belongs to; host-namespace pods may not set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Namespace {
    Ipc,
    Net,
}

impl Namespace {
    pub fn as_str(self) -> &'static str {
        match self {
            Namespace::Ipc => "ipc",
            Namespace::Net => "net",
        }
    }
}

/// Upstream `NamespacedBy`.
pub fn namespaced_by(name: &str) -> Option<Namespace> {
    if name == "kernel.sem" {
        return Some(Namespace::Ipc);
    }
    [
        ("kernel.shm", Namespace::Ipc),
        ("kernel.msg", Namespace::Ipc),
        ("fs.mqueue.", Namespace::Ipc),
        ("net.", Namespace::Net),
    ]
    .iter()
    .find(|(p, _)| name.starts_with(p))
    .map(|(_, ns)| *ns)
}

/// Upstream `convertSysctlVariableToDotsSeparator`: `net/ipv4/x` is `net.ipv4.x`; a name whose
/// first separator is `/` has its `.` and `/` swapped.
pub fn normalize_name(name: &str) -> String {
    match name.find(['.', '/']) {
        Some(i) if name.as_bytes()[i] == b'/' => name
            .chars()
            .map(|c| match c {
                '.' => '/',
                '/' => '.',
                c => c,
            })
            .collect(),
        _ => name.to_string(),
    }
}

/// Upstream `IsValidSysctlPattern`: at most 253 characters, `[a-z0-9]([-_a-z0-9]*[a-z0-9])?`
/// segments separated by `.` or `/`, optionally ending in `*`.
pub fn valid_pattern(s: &str) -> bool {
    if s.len() > 253 || s.is_empty() {
        return false;
    }
    let (body, star) = match s.strip_suffix('*') {
        Some(b) => (b, true),
        None => (s, false),
    };
    let segment_ok = |seg: &str| {
        !seg.is_empty()
            && seg
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
            && seg.starts_with(|c: char| c.is_ascii_alphanumeric())
            && seg.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    if body.is_empty() {
        return star;
    }
    let mut segs: Vec<&str> = body.split(['.', '/']).collect();
    // `net.*`: the last segment is empty before the star.
    if star && segs.last() == Some(&"") {
        segs.pop();
    }
    !segs.is_empty() && segs.into_iter().all(segment_ok)
}

/// Why an `allowedUnsafeSysctls` entry is refused at start-up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllowlistError {
    #[error("sysctl {0:?} must have at most 253 characters and match regex ([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?")]
    Invalid(String),
    #[error("the sysctls {0:?} are not known to be namespaced")]
    NotNamespaced(String),
}

/// One valid `allowedUnsafeSysctls` entry: a dotted name, or a prefix when it ended in `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    /// The normalized name, or the prefix without its `*`.
    pub name: String,
    pub prefix: bool,
    pub namespace: Namespace,
}

/// Checks and classifies one entry as upstream `NewAllowlist` does for each pattern.
pub fn parse_pattern(s: &str) -> Result<Pattern, AllowlistError> {
    if !valid_pattern(s) {
        return Err(AllowlistError::Invalid(s.to_string()));
    }
    let s = normalize_name(s);
    let (name, prefix) = match s.strip_suffix('*') {
        Some(p) => (p.to_string(), true),
        None => (s.clone(), false),
    };
    let namespace = namespaced_by(&name).ok_or(AllowlistError::NotNamespaced(s))?;
    Ok(Pattern {
        name,
        prefix,
        namespace,
    })
}

/// The first invalid entry of `allowedUnsafeSysctls`, if any.
pub fn validate_patterns(patterns: &[String]) -> Result<(), AllowlistError> {
    patterns
        .iter()
        .try_for_each(|p| parse_pattern(p).map(|_| ()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_are_classified() {
        let p = parse_pattern("net/ipv4/tcp_syncookies").unwrap();
        assert_eq!(
            p,
            Pattern {
                name: "net.ipv4.tcp_syncookies".into(),
                prefix: false,
                namespace: Namespace::Net
            }
        );
        let p = parse_pattern("kernel.msg*").unwrap();
        assert_eq!(
            (p.name.as_str(), p.prefix, p.namespace),
            ("kernel.msg", true, Namespace::Ipc)
        );
        assert_eq!(namespaced_by("kernel.sem"), Some(Namespace::Ipc));
        assert_eq!(
            validate_patterns(&["net.*".into(), "vm.*".into()]),
            Err(AllowlistError::NotNamespaced("vm.*".into()))
        );
        assert!(matches!(
            validate_patterns(&["Net.Core".into()]),
            Err(AllowlistError::Invalid(_))
        ));
        assert!(!valid_pattern(""));
        assert!(valid_pattern("*"));
    }
}
