//! The host's kernel tunables a kubelet sets at start (upstream `setupKernelTunables`:
//! kernel.panic=10, panic_on_oops=1, vm.overcommit_memory=1, ...). Tests that change them on
//! purpose save them first and put them back, as the shared host had them; hack/test.sh does the
//! same around the whole suite, whose kubelets set them.

use std::path::Path;

/// The tunables, relative to /proc/sys, with the values a kubelet sets (as rkubelet's
/// `cm::kernel_tunables::DESIRED`).
pub const KUBELET_VALUES: [(&str, &str); 6] = [
    ("vm/overcommit_memory", "1"),
    ("vm/panic_on_oom", "0"),
    ("kernel/panic", "10"),
    ("kernel/panic_on_oops", "1"),
    ("kernel/keys/root_maxkeys", "1000000"),
    ("kernel/keys/root_maxbytes", "25000000"),
];

pub fn read_tunables() -> Vec<(String, String)> {
    KUBELET_VALUES
        .iter()
        .filter_map(|(k, _)| {
            let v = std::fs::read_to_string(Path::new("/proc/sys").join(k)).ok()?;
            Some((k.to_string(), v.trim().to_string()))
        })
        .collect()
}

/// Writes `key=value` lines (keys relative to /proc/sys) for hack/clean-stale.sh, which restores
/// them when the test process died without restoring them itself.
pub fn save_tunables(path: &Path, tunables: &[(String, String)]) {
    let text: String = tunables.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
    std::fs::write(path, text).expect("write the saved host tunables");
}

pub fn write_tunable(key: &str, value: &str) {
    std::fs::write(Path::new("/proc/sys").join(key), value)
        .unwrap_or_else(|e| panic!("write /proc/sys/{key}: {e}"));
}

pub fn tunable(key: &str) -> String {
    std::fs::read_to_string(Path::new("/proc/sys").join(key))
        .unwrap_or_else(|e| panic!("read /proc/sys/{key}: {e}"))
        .trim()
        .to_string()
}

/// Puts the saved values back when dropped (a failed test included).
pub struct RestoreTunables(pub Vec<(String, String)>);

impl Drop for RestoreTunables {
    fn drop(&mut self) {
        for (k, v) in &self.0 {
            let _ = std::fs::write(Path::new("/proc/sys").join(k), v);
        }
    }
}
