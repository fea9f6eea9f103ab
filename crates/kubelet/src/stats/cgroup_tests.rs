use super::*;
use cgroups::fake::FakeManager;
use cgroups::{Driver, ResourceConfig};

#[test]
fn cpu_rates() {
    let s: i64 = 1_000_000_000;
    let su = s as u64;
    for (t0, c0, t1, c1, want) in [
        (0, 0, s, su / 2, Some(500_000_000)),
        (s, 10, 3 * s, 10 + 4 * su, Some(2_000_000_000)),
        (s, 5, s, 10, None),
        (2 * s, 5, s, 10, None),
        (0, 10, s, 5, None),
    ] {
        assert_eq!(cpu_rate(t0, c0, t1, c1), want, "{t0} {c0} {t1} {c1}");
    }
}

#[test]
fn container_ids_of_cgroup_dirs() {
    for (dir, want) in [
        ("0123abcd", "0123abcd"),
        ("cri-containerd-0123abcd.scope", "0123abcd"),
        ("crio-77.scope", "77"),
    ] {
        assert_eq!(container_id_of(dir), want);
    }
}

#[test]
fn cgroup_of_a_process() {
    let unified = "12:pids:/a\n11:memory:/k.slice\n10:cpu,cpuacct:/k.slice\n0::/unified\n";
    let systemd = "9:name=systemd:/sd\n4:memory:/k\n1:cpu:/k\n0::/\n";
    let split = "4:memory:/process_api/x\n3:cpu:/\n0::/\n";
    for (text, version, want) in [
        (unified, Version::V1, Some("/k.slice")),
        (unified, Version::V2, Some("/unified")),
        // Upstream returns the systemd hierarchy's path when cpu and memory agree.
        (systemd, Version::V1, Some("/sd")),
        // cpu and memory in different cgroups: not usable for accounting.
        (split, Version::V1, None),
        ("0::/\n", Version::V2, Some("/")),
        ("3:cpu:/x\n", Version::V1, None),
    ] {
        assert_eq!(cgroup_of(text, version).as_deref(), want, "{text:?}");
    }
}

fn usage(cpu: u64, ws: u64) -> Usage {
    Usage {
        cpu_usage_ns: cpu,
        memory_working_set_bytes: ws,
        ..Usage::default()
    }
}

fn stats(fake: &Arc<FakeManager>, pods: bool) -> CgroupStats {
    CgroupStats::new(Setup {
        mgr: fake.clone(),
        pods: pods.then(|| PodCgroupNames::new("/rk", Driver::Cgroupfs)),
        runtime_cgroups: String::new(),
        runtime_endpoint: String::new(),
    })
}

#[test]
fn one_pass_over_the_pod_cgroups() {
    let fake = Arc::new(FakeManager::new(Version::V1, Driver::Cgroupfs));
    let add = |path: &str, u: Usage| {
        let n = CgroupName::from_cgroupfs(path);
        fake.insert(n.clone(), ResourceConfig::default());
        fake.set_usage(&n, u);
    };
    add("/rk", usage(1, 1));
    add("/rk/kubepods", usage(100, 1000));
    add("/rk/kubepods/burstable", usage(40, 400));
    add("/rk/kubepods/besteffort", usage(10, 100));
    add("/rk/kubepods/pod-g", usage(50, 500));
    add("/rk/kubepods/pod-g/cid1", usage(45, 450));
    add("/rk/kubepods/burstable/pod-b", usage(40, 400));
    add("/rk/kubepods/burstable/pod-b/sbx", usage(1, 10));
    add("/rk/kubepods/burstable/pod-b/cid2", usage(39, 390));
    // Not a pod: skipped.
    add("/rk/kubepods/burstable/other", usage(0, 0));

    let s = stats(&fake, true);
    let tree = s.pod_tree(true);
    assert_eq!(tree.kubepods.as_ref().unwrap().id, "/rk/kubepods");
    assert_eq!(
        tree.kubepods
            .as_ref()
            .unwrap()
            .usage
            .memory_working_set_bytes,
        1000
    );
    let tiers: Vec<&str> = tree.tiers.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(tiers, ["/rk/kubepods/burstable", "/rk/kubepods/besteffort"]);
    let mut pods: Vec<(&str, &str, u64)> = tree
        .pods
        .iter()
        .map(|(uid, s)| (uid.as_str(), s.id.as_str(), s.usage.cpu_usage_ns))
        .collect();
    pods.sort();
    assert_eq!(
        pods,
        [
            ("-b", "/rk/kubepods/burstable/pod-b", 40),
            ("-g", "/rk/kubepods/pod-g", 50)
        ]
    );
    let mut cs: Vec<(&str, &str, u64)> = tree
        .containers
        .iter()
        .map(|c| {
            (
                c.pod_uid.as_str(),
                c.container_id.as_str(),
                c.sample.usage.memory_working_set_bytes,
            )
        })
        .collect();
    cs.sort();
    assert_eq!(
        cs,
        [("-b", "cid2", 390), ("-b", "sbx", 10), ("-g", "cid1", 450)]
    );
    // Without containers asked for, none are read.
    assert!(s.pod_tree(false).containers.is_empty());
    // The `pods` system container is kubepods.
    let sys = s.system_containers(&tree);
    let pods_sys = sys.iter().find(|c| c.name == "pods").unwrap();
    assert_eq!(pods_sys.sample.id, "/rk/kubepods");

    // Without pod cgroups there is nothing to read.
    let none = stats(&fake, false).pod_tree(true);
    assert!(none.kubepods.is_none() && none.pods.is_empty());
}

#[test]
fn rates_against_a_reading_a_second_old() {
    let fake = Arc::new(FakeManager::new(Version::V1, Driver::Cgroupfs));
    let s = stats(&fake, true);
    let sec = 1_000_000_000;
    assert_eq!(s.rate("/x", 10 * sec, 0), None);
    // Too close: nothing yet.
    assert_eq!(s.rate("/x", 10 * sec + 1000, 5), None);
    assert_eq!(s.rate("/x", 12 * sec, sec as u64), Some(500_000_000));
    // Too close: the last rate again.
    assert_eq!(
        s.rate("/x", 12 * sec + 5, 7 * sec as u64),
        Some(500_000_000)
    );
    // A pod that is gone loses its state; others are kept.
    s.rate("/rk/kubepods/pod-a", 0, 0);
    s.prune("/rk/kubepods", &[]);
    let rates = s.inner.rates.lock().unwrap();
    assert!(rates.contains_key("/x") && !rates.contains_key("/rk/kubepods/pod-a"));
}
