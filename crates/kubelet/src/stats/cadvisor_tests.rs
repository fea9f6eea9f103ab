use super::*;
use crate::stats::cgroup::ContainerSample;
use cgroups::Usage;

#[test]
fn mount_source_is_the_longest_mount_above() {
    let mi = "22 1 8:1 / / rw,relatime - ext4 /dev/vda1 rw\n\
              30 22 0:5 / /var/lib rw - xfs /dev/vdb rw\n\
              31 22 0:6 / /var/lib/kubelet/pods/x rw - tmpfs tmpfs rw\n";
    for (path, want) in [
        ("/var/lib/kubelet", Some("/dev/vdb")),
        ("/home", Some("/dev/vda1")),
        ("/var/lib/kubelet/pods/x/y", Some("tmpfs")),
    ] {
        assert_eq!(mount_source(mi, Path::new(path)).as_deref(), want, "{path}");
    }
    assert_eq!(mount_source("garbage", Path::new("/")), None);
}

fn sample(id: &str, cpu_s: u64, ws: u64, quota: Option<u64>, limit: Option<u64>) -> Sample {
    Sample {
        id: id.into(),
        at_ns: 1_700_000_000_123_000_000,
        usage: Usage {
            cpu_usage_ns: cpu_s * 1_000_000_000,
            cpu_periods: 10,
            cpu_throttled_periods: 4,
            cpu_throttled_ns: 500_000_000,
            cpu_quota_us: quota,
            memory_working_set_bytes: ws,
            memory_usage_bytes: ws + 1,
            memory_rss_bytes: 7,
            memory_limit_bytes: limit,
            ..Usage::default()
        },
        nano_cores: None,
    }
}

#[test]
fn series_in_cadvisor_shape() {
    let mut names = Names::default();
    names
        .pods
        .insert("u1".into(), ("web".into(), "default".into()));
    names
        .sandboxes
        .insert("sbx".into(), ("web".into(), "default".into()));
    names.containers.insert(
        "cid".into(),
        (
            "main".into(),
            "web".into(),
            "default".into(),
            "docker.io/library/busybox:latest".into(),
        ),
    );
    let pod_id = "/kubepods/burstable/podu1";
    let mut tree = PodTree {
        kubepods: Some(sample("/kubepods", 9, 900, None, Some(4096))),
        tiers: vec![sample("/kubepods/burstable", 8, 800, None, None)],
        ..PodTree::default()
    };
    tree.pods.insert(
        "u1".into(),
        sample(pod_id, 3, 300, Some(50_000), Some(1024)),
    );
    for (cid, cpu) in [("cid", 2), ("sbx", 1), ("stale", 1)] {
        tree.containers.push(ContainerSample {
            pod_uid: "u1".into(),
            container_id: cid.into(),
            sample: sample(&format!("{pod_id}/{cid}"), cpu, 100, None, None),
        });
    }
    let eth0 = Interface {
        name: "eth0".into(),
        rx_bytes: 11,
        rx_errors: 0,
        tx_bytes: 22,
        tx_errors: 1,
    };
    let read = Read {
        tree,
        root: Some(sample("/", 100, 5000, None, None)),
        root_network: vec![],
        pod_network: [("u1".to_string(), vec![eth0])].into(),
        root_fs: Some((
            "/dev/vda1".into(),
            crate::stats::fs::FsInfo {
                capacity_bytes: 1000,
                available_bytes: 600,
                free_bytes: 700,
                inodes: 1,
                inodes_free: 1,
            },
        )),
    };
    let m = Machine {
        boot_id: "b".into(),
        machine_id: "m".into(),
        system_uuid: "s".into(),
        cpu_cores: 2,
        memory_bytes: 8192,
    };
    let text = render(&names, &read, &m);
    let ts = " 1700000000123";
    let main = r#"container="main",id="/kubepods/burstable/podu1/cid",image="docker.io/library/busybox:latest",name="cid",namespace="default",pod="web""#;
    let pod = r#"container="",id="/kubepods/burstable/podu1",image="",name="",namespace="default",pod="web""#;
    for want in [
        "# HELP container_cpu_usage_seconds_total Cumulative cpu time consumed in seconds.\n# TYPE container_cpu_usage_seconds_total counter\n".to_string(),
        format!("container_cpu_usage_seconds_total{{container=\"main\",cpu=\"total\",id=\"/kubepods/burstable/podu1/cid\",image=\"docker.io/library/busybox:latest\",name=\"cid\",namespace=\"default\",pod=\"web\"}} 2{ts}\n"),
        format!("container_memory_working_set_bytes{{{main}}} 100{ts}\n"),
        format!("container_memory_working_set_bytes{{{pod}}} 300{ts}\n"),
        format!("container_memory_usage_bytes{{{pod}}} 301{ts}\n"),
        format!("container_memory_rss{{{main}}} 7{ts}\n"),
        // The root and kubepods, unnamed.
        format!("container_memory_working_set_bytes{{container=\"\",id=\"/\",image=\"\",name=\"\",namespace=\"\",pod=\"\"}} 5000{ts}\n"),
        format!("container_memory_working_set_bytes{{container=\"\",id=\"/kubepods\",image=\"\",name=\"\",namespace=\"\",pod=\"\"}} 900{ts}\n"),
        // The sandbox: no container name, its ID as name.
        format!("container_memory_working_set_bytes{{container=\"\",id=\"/kubepods/burstable/podu1/sbx\",image=\"\",name=\"sbx\",namespace=\"default\",pod=\"web\"}} 100{ts}\n"),
        // CFS series only under a quota.
        format!("container_cpu_cfs_throttled_periods_total{{{pod}}} 4{ts}\n"),
        format!("container_cpu_cfs_periods_total{{{pod}}} 10{ts}\n"),
        format!("container_cpu_cfs_throttled_seconds_total{{{pod}}} 0.5{ts}\n"),
        format!("container_network_receive_bytes_total{{container=\"\",id=\"/kubepods/burstable/podu1\",image=\"\",interface=\"eth0\",name=\"\",namespace=\"default\",pod=\"web\"}} 11{ts}\n"),
        format!("container_network_transmit_bytes_total{{container=\"\",id=\"/kubepods/burstable/podu1\",image=\"\",interface=\"eth0\",name=\"\",namespace=\"default\",pod=\"web\"}} 22{ts}\n"),
        format!("container_fs_usage_bytes{{container=\"\",device=\"/dev/vda1\",id=\"/\",image=\"\",name=\"\",namespace=\"\",pod=\"\"}} 300{ts}\n"),
        format!("container_spec_memory_limit_bytes{{{pod}}} 1024\n"),
        format!("container_spec_memory_limit_bytes{{{main}}} 0\n"),
        "machine_cpu_cores{boot_id=\"b\",machine_id=\"m\",system_uuid=\"s\"} 2\n".to_string(),
        "machine_memory_bytes{boot_id=\"b\",machine_id=\"m\",system_uuid=\"s\"} 8192\n".to_string(),
        "container_scrape_error 0\n".to_string(),
    ] {
        assert!(text.contains(&want), "missing {want:?} in\n{text}");
    }
    assert!(!text.contains("stale"), "{text}");
    assert!(
        !text.contains(&format!("container_cpu_cfs_periods_total{{{main}}}")),
        "no quota, no CFS series: {text}"
    );
    // Every family once, its series together.
    let helps = text.lines().filter(|l| l.starts_with("# HELP")).count();
    let types = text.lines().filter(|l| l.starts_with("# TYPE")).count();
    assert_eq!(helps, types);
    let mut seen = std::collections::HashSet::new();
    let mut last = "";
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let fam = l.split(['{', ' ']).next().unwrap();
        if fam != last {
            assert!(seen.insert(fam), "{fam} split in\n{text}");
            last = fam;
        }
    }
}

#[test]
fn label_values_are_escaped() {
    let mut s = String::new();
    escape_into(&mut s, "a\"b\\c\nd");
    assert_eq!(s, r#"a\"b\\c\nd"#);
}
