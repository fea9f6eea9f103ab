//! What the node is made of (upstream gets this from cadvisor's MachineInfo): CPUs, memory, root
//! filesystem size, and the identity fields of `nodeInfo`. Read once at start; plain file reads.

use std::net::IpAddr;
use std::path::Path;

/// Machine facts for the Node object.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MachineInfo {
    pub cpus: u32,
    pub memory_bytes: u64,
    /// Size of the filesystem holding the kubelet root dir.
    pub ephemeral_storage_bytes: u64,
    pub machine_id: String,
    pub system_uuid: String,
    pub boot_id: String,
    pub kernel_version: String,
    pub os_image: String,
    pub architecture: String,
    /// Every hugepage size the kernel offers, with its pre-allocated pages (cAdvisor's
    /// `HugePages` from /sys/kernel/mm/hugepages).
    pub hugepages: Vec<HugePages>,
    /// `/proc/sys/kernel/pid_max`: the node's `pid` capacity (upstream `internalCapacity`).
    pub pid_max: u64,
}

/// One hugepage size and how many pages of it the kernel has reserved.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HugePages {
    pub page_size_bytes: u64,
    pub pages: u64,
}

/// The hugepage pools under a `/sys/kernel/mm/hugepages` style directory
/// (`hugepages-2048kB/nr_hugepages`), sorted by size.
pub fn read_hugepages(dir: &Path) -> Vec<HugePages> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<HugePages> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let kb: u64 = name
                .strip_prefix("hugepages-")?
                .strip_suffix("kB")?
                .parse()
                .ok()?;
            let pages = std::fs::read_to_string(e.path().join("nr_hugepages"))
                .ok()
                .and_then(|t| t.trim().parse().ok())
                .unwrap_or(0);
            Some(HugePages {
                page_size_bytes: kb * 1024,
                pages,
            })
        })
        .collect();
    out.sort_by_key(|h| h.page_size_bytes);
    out
}

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// PRETTY_NAME of os-release, as upstream's `OSImage`.
pub fn parse_os_release(text: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_else(|| "Linux".into())
}

/// Go's GOARCH names, which the `kubernetes.io/arch` label and nodeInfo use.
pub fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

impl MachineInfo {
    pub fn read(root_dir: &Path) -> MachineInfo {
        let cpus = std::fs::read_to_string("/proc/cpuinfo")
            .map(|s| s.lines().filter(|l| l.starts_with("processor")).count() as u32)
            .unwrap_or(0)
            .max(1);
        // The cAdvisor machine info and the summary read the same figure there.
        let memory_bytes = crate::stats::node::memory_capacity().unwrap_or(0);
        let ephemeral_storage_bytes = nix::sys::statvfs::statvfs(root_dir)
            .map(|s| s.blocks() * s.fragment_size())
            .unwrap_or(0);
        let machine_id = match read_trim("/etc/machine-id") {
            s if s.is_empty() => read_trim("/var/lib/dbus/machine-id"),
            s => s,
        };
        MachineInfo {
            cpus,
            memory_bytes,
            ephemeral_storage_bytes,
            machine_id,
            system_uuid: read_trim("/sys/class/dmi/id/product_uuid"),
            boot_id: read_trim("/proc/sys/kernel/random/boot_id"),
            kernel_version: nix::sys::utsname::uname()
                .map(|u| u.release().to_string_lossy().into_owned())
                .unwrap_or_default(),
            os_image: parse_os_release(
                &std::fs::read_to_string("/etc/os-release").unwrap_or_default(),
            ),
            architecture: go_arch().into(),
            hugepages: read_hugepages(Path::new("/sys/kernel/mm/hugepages")),
            pid_max: read_trim("/proc/sys/kernel/pid_max")
                .parse()
                .unwrap_or(32768),
        }
    }
}

/// The node's IP when `--node-ip` is not given (upstream: the host's default-route address):
/// the IPv4 address of the interface holding the default route, else the first global address.
pub fn detect_node_ip() -> Option<IpAddr> {
    let default_iface = std::fs::read_to_string("/proc/net/route")
        .ok()
        .and_then(|t| {
            t.lines().skip(1).find_map(|l| {
                let f: Vec<_> = l.split_whitespace().collect();
                (f.len() > 2 && f[1] == "00000000").then(|| f[0].to_string())
            })
        });
    let addrs: Vec<(String, IpAddr)> = nix::ifaddrs::getifaddrs()
        .ok()?
        .filter_map(|a| {
            let ip = a.address?.as_sockaddr_in().map(|s| IpAddr::V4(s.ip()))?;
            Some((a.interface_name, ip))
        })
        .filter(|(_, ip)| !ip.is_loopback())
        .collect();
    if let Some(iface) = default_iface {
        if let Some((_, ip)) = addrs.iter().find(|(n, _)| *n == iface) {
            return Some(*ip);
        }
    }
    addrs.first().map(|(_, ip)| *ip)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsers() {
        assert_eq!(
            parse_os_release("NAME=x\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n"),
            "Debian GNU/Linux 12 (bookworm)"
        );
        let m = MachineInfo::read(Path::new("/"));
        assert!(m.cpus >= 1 && m.memory_bytes > 0 && m.ephemeral_storage_bytes > 0);
        assert!(!m.kernel_version.is_empty());
        assert!(m.pid_max > 0);
    }

    #[test]
    fn hugepage_pools() {
        let d = tempfile::tempdir().unwrap();
        for (name, n) in [("hugepages-1048576kB", "0\n"), ("hugepages-2048kB", "8\n")] {
            std::fs::create_dir(d.path().join(name)).unwrap();
            std::fs::write(d.path().join(name).join("nr_hugepages"), n).unwrap();
        }
        std::fs::create_dir(d.path().join("unrelated")).unwrap();
        assert_eq!(
            read_hugepages(d.path()),
            vec![
                HugePages {
                    page_size_bytes: 2 << 20,
                    pages: 8
                },
                HugePages {
                    page_size_bytes: 1 << 30,
                    pages: 0
                },
            ]
        );
        assert!(read_hugepages(&d.path().join("missing")).is_empty());
    }
}
