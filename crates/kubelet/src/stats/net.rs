//! Network interface counters from a `/proc/<pid>/net/dev` (the node's, or a pod sandbox's
//! network namespace through its pid), as cAdvisor reads them for upstream's Summary API.

use std::path::Path;

/// One interface's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub rx_bytes: u64,
    pub rx_errors: u64,
    pub tx_bytes: u64,
    pub tx_errors: u64,
}

/// cAdvisor's `ignoredDevicePrefixes`: loopback and the host ends of containers' links are not
/// the node's traffic.
const IGNORED_PREFIXES: [&str; 4] = ["lo", "veth", "docker", "nerdctl"];

/// Upstream's `defaultNetworkInterfaceName`.
pub const DEFAULT_INTERFACE: &str = "eth0";

/// Parses the text of `/proc/net/dev`: two header lines, then `name: 16 counters`, of which
/// receive bytes and errors are the 1st and 3rd, transmit bytes and errors the 9th and 11th.
/// Malformed lines are skipped; ignored devices (loopback, veths) are left out.
pub fn parse_net_dev(text: &str) -> Vec<Interface> {
    text.lines()
        .skip(2)
        .filter_map(|line| {
            let (name, counters) = line.split_once(':')?;
            let name = name.trim();
            if name.is_empty() || IGNORED_PREFIXES.iter().any(|p| name.starts_with(p)) {
                return None;
            }
            let v: Vec<u64> = counters
                .split_whitespace()
                .map(str::parse)
                .collect::<Result<_, _>>()
                .ok()?;
            (v.len() >= 11).then(|| Interface {
                name: name.to_string(),
                rx_bytes: v[0],
                rx_errors: v[2],
                tx_bytes: v[8],
                tx_errors: v[10],
            })
        })
        .collect()
}

/// The interface of the default IPv4 route in `/proc/net/route`'s text (destination 00000000).
pub fn default_route_interface(route: &str) -> Option<String> {
    route.lines().skip(1).find_map(|l| {
        let mut f = l.split_whitespace();
        let name = f.next()?;
        (f.next()? == "00000000").then(|| name.to_string())
    })
}

/// Which interface is the headline one: `eth0` as upstream, else (a node whose NIC has another
/// name) the one carrying the default route, else the first.
pub fn pick_default<'a>(
    ifaces: &'a [Interface],
    route_iface: Option<&str>,
) -> Option<&'a Interface> {
    ifaces
        .iter()
        .find(|i| i.name == DEFAULT_INTERFACE)
        .or_else(|| route_iface.and_then(|r| ifaces.iter().find(|i| i.name == r)))
        .or_else(|| ifaces.first())
}

/// The interfaces seen by the network namespace of `proc_dir` (`/proc/self`, `/proc/<pid>`),
/// with the default one's name.
pub fn read(proc_dir: &Path) -> std::io::Result<(Vec<Interface>, Option<String>)> {
    let ifaces = parse_net_dev(&std::fs::read_to_string(proc_dir.join("net/dev"))?);
    let route = std::fs::read_to_string(proc_dir.join("net/route")).unwrap_or_default();
    let default =
        pick_default(&ifaces, default_route_interface(&route).as_deref()).map(|i| i.name.clone());
    Ok((ifaces, default))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEV: &str = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 635157550 1946409    0    0    0     0          0         0 635157550 1946409    0    0    0     0       0          0
  ens3: 386969168   11950    7    0    0     0          0         0   638872    6791    3    0    0     0       0          0
vethab12: 10 1 0 0 0 0 0 0 20 2 0 0 0 0 0 0
  eth1:1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16
  bad: 1 2 x
";

    #[test]
    fn parses_proc_net_dev_without_loopback_and_veths() {
        let i = parse_net_dev(DEV);
        assert_eq!(
            i,
            vec![
                Interface {
                    name: "ens3".into(),
                    rx_bytes: 386969168,
                    rx_errors: 7,
                    tx_bytes: 638872,
                    tx_errors: 3
                },
                Interface {
                    name: "eth1".into(),
                    rx_bytes: 1,
                    rx_errors: 3,
                    tx_bytes: 9,
                    tx_errors: 11
                },
            ]
        );
    }

    #[test]
    fn default_interface_is_eth0_else_the_default_routes() {
        let route = "Iface\tDestination\tGateway\tFlags\n\
                     eth1\t0000A8C0\t00000000\t0001\n\
                     ens3\t00000000\t0102A8C0\t0003\n";
        assert_eq!(default_route_interface(route).as_deref(), Some("ens3"));
        let i = parse_net_dev(DEV);
        assert_eq!(pick_default(&i, Some("ens3")).unwrap().name, "ens3");
        assert_eq!(pick_default(&i, None).unwrap().name, "ens3");
        let mut with_eth0 = i.clone();
        with_eth0.push(Interface {
            name: "eth0".into(),
            ..Default::default()
        });
        assert_eq!(pick_default(&with_eth0, Some("ens3")).unwrap().name, "eth0");
        assert!(pick_default(&[], None).is_none());
    }

    #[test]
    fn this_node_has_an_interface() {
        let (ifaces, default) = read(Path::new("/proc/self")).unwrap();
        assert!(!ifaces.is_empty());
        assert!(default.is_some());
    }
}
