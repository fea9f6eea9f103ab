//! The host sysctls a kubelet's node relies on (upstream `setupKernelTunables` in
//! `pkg/kubelet/cm/container_manager_linux.go`, run by `setupNode` before the QoS cgroups).
//!
//! Why the kubelet cares: pods' memory limits are enforced by the cgroup OOM killer, which needs
//! `vm.panic_on_oom=0` (kill a process, do not panic the node) and `vm.overcommit_memory=1` (a
//! pod's allocation fails on its cgroup limit, not on the kernel's guess about the node);
//! `kernel.panic=10` and `kernel.panic_on_oops=1` reboot a broken node instead of leaving it half
//! alive; the key quotas let every container's session keyring exist.
//!
//! With `protectKernelDefaults` the kubelet changes nothing and refuses to start when a value
//! differs (hardened hosts, the CIS benchmark's setting); without it, it writes what differs.
//! The values are read from and written to a `/proc/sys` directory given by the caller, so
//! in-process tests run this against a directory of their own, never the host's.

use std::path::{Path, PathBuf};

use tracing::info;

/// Upstream's desired state (`utilsysctl` names and values), in a fixed order: upstream walks a
/// Go map, so its order varies from start to start; a fixed one makes the error text stable.
pub const DESIRED: [(&str, i64); 6] = [
    ("vm/overcommit_memory", 1),
    ("vm/panic_on_oom", 0),
    ("kernel/panic", 10),
    ("kernel/panic_on_oops", 1),
    ("kernel/keys/root_maxkeys", 1_000_000),
    ("kernel/keys/root_maxbytes", 25_000_000),
];

/// Upstream `KernelTunableBehavior` (its `warn` is used by nothing and is left out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behavior {
    /// Write the desired value where it differs (`protectKernelDefaults: false`).
    Modify,
    /// Change nothing; a differing value is an error (`protectKernelDefaults: true`).
    Error,
}

impl Behavior {
    pub fn from_protect(protect_kernel_defaults: bool) -> Behavior {
        if protect_kernel_defaults {
            Behavior::Error
        } else {
            Behavior::Modify
        }
    }
}

/// One tunable that could not be read, written or accepted; the texts are upstream's.
#[derive(Debug, thiserror::Error)]
pub enum TunableError {
    #[error("invalid kernel flag: {flag}, expected value: {expected}, actual value: {actual}")]
    Invalid {
        flag: &'static str,
        expected: i64,
        actual: i64,
    },
    #[error("open {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("strconv.Atoi: parsing {text:?} from {}: invalid syntax", path.display())]
    Parse { path: PathBuf, text: String },
    #[error("write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Every tunable that failed, shown as upstream's `utilerrors.NewAggregate` shows a list: one
/// error alone, several as `[a, b]`.
#[derive(Debug, thiserror::Error)]
pub struct TunablesError(pub Vec<TunableError>);

impl std::fmt::Display for TunablesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let texts: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        match texts.as_slice() {
            [one] => f.write_str(one),
            many => write!(f, "[{}]", many.join(", ")),
        }
    }
}

/// A value the kubelet wrote: the flag and the value it had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Updated {
    pub flag: &'static str,
    pub was: i64,
}

/// Checks (and with [`Behavior::Modify`] sets) every tunable under `proc_sys`. Blocking file
/// I/O on a handful of small files: it runs once, at start-up. Every tunable is tried even
/// after one failed, so the error lists all of them, as upstream's.
pub fn setup(proc_sys: &Path, behavior: Behavior) -> Result<Vec<Updated>, TunablesError> {
    let mut updated = Vec::new();
    let mut errors = Vec::new();
    for (flag, expected) in DESIRED {
        let path = proc_sys.join(flag);
        let actual = match read(&path) {
            Ok(v) => v,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        if actual == expected {
            continue;
        }
        match behavior {
            Behavior::Error => errors.push(TunableError::Invalid {
                flag,
                expected,
                actual,
            }),
            Behavior::Modify => {
                info!(
                    flag,
                    expected_value = expected,
                    actual_value = actual,
                    "Updating kernel flag"
                );
                match std::fs::write(&path, expected.to_string()) {
                    Ok(()) => updated.push(Updated { flag, was: actual }),
                    Err(source) => errors.push(TunableError::Write { path, source }),
                }
            }
        }
    }
    if errors.is_empty() {
        Ok(updated)
    } else {
        Err(TunablesError(errors))
    }
}

/// Upstream `sysctl.GetSysctl`: the file's text, trimmed, as an integer.
fn read(path: &Path) -> Result<i64, TunableError> {
    let text = std::fs::read_to_string(path).map_err(|source| TunableError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let text = text.trim();
    text.parse().map_err(|_| TunableError::Parse {
        path: path.to_path_buf(),
        text: text.to_string(),
    })
}

/// Writes a `/proc/sys` of its own under `dir`, each tunable of [`DESIRED`] at the value given
/// in the same place (None: no file), for tests that must not touch the host's.
#[cfg(test)]
pub(crate) fn write_proc_sys(dir: &Path, values: &[Option<&str>; 6]) {
    for ((flag, _), value) in DESIRED.iter().zip(values) {
        let path = dir.join(flag);
        std::fs::create_dir_all(path.parent().expect("has a parent")).expect("mkdir");
        if let Some(v) = value {
            std::fs::write(&path, format!("{v}\n")).expect("write a tunable");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `/proc/sys` of its own with each tunable at the given value (None: the file is absent).
    fn proc_sys(values: &[Option<&str>; 6]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        write_proc_sys(dir.path(), values);
        dir
    }

    /// Upstream's values but for `changes` (index into [`DESIRED`], new text or None).
    fn proc_sys_but(changes: &[(usize, Option<&str>)]) -> tempfile::TempDir {
        let mut values = AS_WANTED;
        for (i, v) in changes {
            values[*i] = *v;
        }
        proc_sys(&values)
    }

    fn value(dir: &Path, flag: &str) -> String {
        std::fs::read_to_string(dir.join(flag))
            .expect("read")
            .trim()
            .to_string()
    }

    const AS_WANTED: [Option<&str>; 6] = [
        Some("1"),
        Some("0"),
        Some("10"),
        Some("1"),
        Some("1000000"),
        Some("25000000"),
    ];

    #[test]
    fn values_as_wanted_change_nothing_either_way() {
        for behavior in [Behavior::Modify, Behavior::Error] {
            let dir = proc_sys(&AS_WANTED);
            assert_eq!(setup(dir.path(), behavior).expect("ok"), vec![]);
        }
    }

    #[test]
    fn modify_writes_only_what_differs() {
        let dir = proc_sys_but(&[(0, Some("0")), (2, Some("0"))]);
        let updated = setup(dir.path(), Behavior::Modify).expect("ok");
        assert_eq!(
            updated,
            vec![
                Updated {
                    flag: "vm/overcommit_memory",
                    was: 0
                },
                Updated {
                    flag: "kernel/panic",
                    was: 0
                },
            ]
        );
        for (flag, want) in DESIRED {
            assert_eq!(value(dir.path(), flag), want.to_string(), "{flag}");
        }
    }

    /// protectKernelDefaults: nothing is written and every differing value is named, in
    /// upstream's words and its aggregate's `[a, b]` form.
    #[test]
    fn error_names_every_differing_value_and_writes_nothing() {
        let dir = proc_sys_but(&[(1, Some("1")), (4, Some("200000"))]);
        let err = setup(dir.path(), Behavior::Error).expect_err("refused");
        assert_eq!(
            err.to_string(),
            "[invalid kernel flag: vm/panic_on_oom, expected value: 0, actual value: 1, \
             invalid kernel flag: kernel/keys/root_maxkeys, expected value: 1000000, actual value: 200000]"
        );
        assert_eq!(value(dir.path(), "vm/panic_on_oom"), "1");
        assert_eq!(value(dir.path(), "kernel/keys/root_maxkeys"), "200000");

        let dir = proc_sys_but(&[(3, Some("0"))]);
        let err = setup(dir.path(), Behavior::Error).expect_err("refused");
        assert_eq!(
            err.to_string(),
            "invalid kernel flag: kernel/panic_on_oops, expected value: 1, actual value: 0"
        );
    }

    /// A tunable the kernel lacks or that holds no integer fails the start, naming the file; the
    /// others are still set.
    #[test]
    fn unreadable_values_are_errors_naming_the_file() {
        let dir = proc_sys_but(&[(0, Some("0")), (4, None), (5, Some("lots"))]);
        let err = setup(dir.path(), Behavior::Modify).expect_err("fails");
        let text = err.to_string();
        assert_eq!(err.0.len(), 2, "{text}");
        assert!(
            text.contains(&format!(
                "open {}: ",
                dir.path().join("kernel/keys/root_maxkeys").display()
            )),
            "{text}"
        );
        assert!(text.contains("parsing \"lots\""), "{text}");
        assert!(text.contains("kernel/keys/root_maxbytes"), "{text}");
        assert_eq!(value(dir.path(), "vm/overcommit_memory"), "1");
    }

    #[test]
    fn protect_kernel_defaults_picks_the_behavior() {
        assert_eq!(Behavior::from_protect(true), Behavior::Error);
        assert_eq!(Behavior::from_protect(false), Behavior::Modify);
    }
}
