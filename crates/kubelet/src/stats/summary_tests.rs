use super::*;
use crate::stats::ephemeral::VolumeUsage;
use crate::stats::sandbox::PodNetwork;

#[test]
fn summary_in_upstream_json_shape() {
    let c = |name: &str, cpu: u64, mem: u64, started: i64| ContainerUsage {
        id: format!("id-{name}"),
        name: name.into(),
        pod: "web".into(),
        namespace: "default".into(),
        pod_uid: "u1".into(),
        timestamp_ns: 1_700_000_000_000_000_000,
        cpu_core_nanoseconds: Some(cpu),
        cpu_nano_cores: Some(cpu / 10),
        memory_working_set_bytes: Some(mem),
        memory_usage_bytes: Some(mem * 2),
        memory_rss_bytes: Some(mem / 2),
        memory_page_faults: Some(3),
        writable_layer_bytes: Some(4096),
        writable_layer_inodes: Some(2),
        started_ns: started,
        ..Default::default()
    };
    let node = NodeUsage {
        timestamp_ns: 1_700_000_000_000_000_000,
        cpu_core_nanoseconds: 9,
        memory_working_set_bytes: 7,
        memory_capacity_bytes: Some(100),
    };
    let pod = PodKey {
        namespace: "default".into(),
        name: "web".into(),
        uid: "u1".into(),
    };
    let eth0 = Interface {
        name: "eth0".into(),
        rx_bytes: 11,
        rx_errors: 0,
        tx_bytes: 22,
        tx_errors: 1,
    };
    let sandboxes = [SandboxUsage {
        id: "sb".into(),
        pod: pod.clone(),
        created_ns: 1_600_000_000_000_000_000,
        network: Some(PodNetwork {
            timestamp_ns: 1_700_000_000_000_000_000,
            interfaces: vec![eth0.clone()],
            default: Some("eth0".into()),
        }),
        process_count: Some(4),
    }];
    let disk = FsInfo {
        capacity_bytes: 1000,
        available_bytes: 600,
        free_bytes: 700,
        inodes: 50,
        inodes_free: 40,
    };
    let du = |bytes, inodes| DiskUsage { bytes, inodes };
    let eph = PodEphemeral {
        volumes: vec![VolumeUsage {
            name: "scratch".into(),
            plugin: "kubernetes.io~empty-dir".into(),
            usage: du(300, 3),
            fs: Some(disk),
            ephemeral: true,
            measured: std::time::SystemTime::now(),
        }],
        logs: [("a".to_string(), du(50, 2))].into(),
        total: du(9000, 9),
        logs_fs: Some(disk),
        ..Default::default()
    };
    let ephemeral = [(pod, eph)].into();
    let containers = [
        c("a", 100, 10, 1_600_000_002_000_000_000),
        c("b", 50, 5, 1_600_000_001_000_000_000),
    ];
    let s = build(&Inputs {
        node_name: "n1",
        now_ns: 1_700_000_000_000_000_000,
        node: Some(&node),
        boot_ns: Some(1_500_000_000_000_000_000),
        node_fs: Some(disk),
        node_network: network_stats(&[eth0], Some("eth0"), 1_700_000_000_000_000_000),
        image_fs: Some((du(200, 20), Some(disk))),
        rlimit: None,
        containers: &containers,
        sandboxes: &sandboxes,
        ephemeral: &ephemeral,
        pod_cgroups: &HashMap::new(),
        system_containers: &[],
    });
    let v = serde_json::to_value(&s).unwrap();
    let n = &v["node"];
    assert_eq!(n["nodeName"], "n1");
    assert_eq!(n["startTime"], "2017-07-14T02:40:00Z");
    assert_eq!(n["cpu"]["usageCoreNanoSeconds"], 9);
    assert_eq!(n["memory"]["workingSetBytes"], 7);
    assert_eq!(n["memory"]["availableBytes"], 93);
    assert_eq!(n["network"]["name"], "eth0");
    assert_eq!(n["network"]["rxBytes"], 11);
    assert_eq!(n["network"]["interfaces"][0]["txErrors"], 1);
    assert_eq!(n["fs"]["usedBytes"], 300);
    assert_eq!(n["fs"]["inodesUsed"], 10);
    assert_eq!(n["runtime"]["imageFs"]["usedBytes"], 200);
    assert_eq!(n["runtime"]["imageFs"]["capacityBytes"], 1000);
    let pod = &v["pods"][0];
    assert_eq!(pod["podRef"]["uid"], "u1");
    // The pod started with its sandbox.
    assert_eq!(pod["startTime"], "2020-09-13T12:26:40Z");
    assert_eq!(pod["cpu"]["usageCoreNanoSeconds"], 150);
    assert_eq!(pod["cpu"]["usageNanoCores"], 15);
    assert_eq!(pod["memory"]["workingSetBytes"], 15);
    assert_eq!(pod["memory"]["usageBytes"], 30);
    assert_eq!(pod["memory"]["pageFaults"], 6);
    assert_eq!(pod["network"]["txBytes"], 22);
    assert_eq!(pod["process_stats"]["process_count"], 4);
    assert_eq!(pod["volume"][0]["name"], "scratch");
    assert_eq!(pod["volume"][0]["usedBytes"], 300);
    assert_eq!(pod["volume"][0]["capacityBytes"], 1000);
    assert!(pod["volume"][0].get("pvcRef").is_none());
    assert_eq!(pod["ephemeral-storage"]["usedBytes"], 9000);
    assert_eq!(pod["ephemeral-storage"]["inodesUsed"], 9);
    assert_eq!(pod["ephemeral-storage"]["availableBytes"], 600);
    let a = &pod["containers"][0];
    assert_eq!(a["name"], "a");
    assert_eq!(pod["containers"][1]["name"], "b");
    assert_eq!(a["rootfs"]["usedBytes"], 4096);
    assert_eq!(a["rootfs"]["inodesUsed"], 2);
    assert_eq!(a["rootfs"]["capacityBytes"], 1000);
    assert_eq!(a["logs"]["usedBytes"], 50);
    assert!(pod["containers"][1].get("logs").is_none());
    assert_eq!(a["cpu"]["time"], "2023-11-14T22:13:20Z");
    assert_eq!(a["memory"]["rssBytes"], 5);

    let mut only = s.clone();
    cpu_and_memory_only(&mut only);
    let v = serde_json::to_value(&only).unwrap();
    for k in ["network", "fs", "runtime", "rlimit"] {
        assert!(v["node"].get(k).is_none(), "node.{k}: {v}");
    }
    assert_eq!(v["node"]["cpu"]["usageCoreNanoSeconds"], 9);
    let pod = &v["pods"][0];
    for k in ["network", "volume", "ephemeral-storage", "process_stats"] {
        assert!(pod.get(k).is_none(), "pod.{k}: {pod}");
    }
    assert_eq!(pod["memory"]["workingSetBytes"], 15);
    assert!(pod["containers"][0].get("rootfs").is_none());
    assert!(pod["containers"][0].get("logs").is_none());
    assert_eq!(pod["containers"][0]["cpu"]["usageCoreNanoSeconds"], 100);
}

#[test]
fn a_container_without_a_sandbox_still_makes_a_pod() {
    let c = ContainerUsage {
        name: "x".into(),
        pod: "p".into(),
        namespace: "ns".into(),
        pod_uid: "u".into(),
        started_ns: 1_600_000_000_000_000_000,
        ..Default::default()
    };
    let s = build(&Inputs {
        node_name: "n",
        now_ns: 0,
        node: None,
        boot_ns: None,
        node_fs: None,
        node_network: None,
        image_fs: None,
        rlimit: None,
        containers: &[c],
        sandboxes: &[],
        ephemeral: &BTreeMap::new(),
        pod_cgroups: &HashMap::new(),
        system_containers: &[],
    });
    let v = serde_json::to_value(&s).unwrap();
    assert_eq!(v["pods"][0]["startTime"], "2020-09-13T12:26:40Z");
    assert!(v["node"]["startTime"].is_null());
    assert!(v["pods"][0].get("ephemeral-storage").is_none());
}

#[test]
fn pod_figures_from_the_pod_cgroup_and_system_containers() {
    let c = ContainerUsage {
        name: "x".into(),
        pod: "p".into(),
        namespace: "ns".into(),
        pod_uid: "u".into(),
        cpu_core_nanoseconds: Some(10),
        memory_working_set_bytes: Some(100),
        ..Default::default()
    };
    let sample = |id: &str, cpu, ws, limit| Sample {
        id: id.into(),
        at_ns: 1_700_000_000_000_000_000,
        usage: cgroups::Usage {
            cpu_usage_ns: cpu,
            memory_working_set_bytes: ws,
            memory_usage_bytes: ws + 5,
            memory_rss_bytes: 7,
            memory_limit_bytes: limit,
            ..Default::default()
        },
        nano_cores: Some(3),
    };
    let pod_cgroups = [(
        "u".to_string(),
        sample("/kubepods/podu", 25, 150, Some(1000)),
    )]
    .into();
    let system = [SystemSample {
        name: "pods",
        start_ns: Some(1_600_000_000_000_000_000),
        sample: sample("/kubepods", 99, 999, None),
    }];
    let s = build(&Inputs {
        node_name: "n",
        now_ns: 0,
        node: None,
        boot_ns: None,
        node_fs: None,
        node_network: None,
        image_fs: None,
        rlimit: None,
        containers: &[c],
        sandboxes: &[],
        ephemeral: &BTreeMap::new(),
        pod_cgroups: &pod_cgroups,
        system_containers: &system,
    });
    let v = serde_json::to_value(&s).unwrap();
    let pod = &v["pods"][0];
    // The pod cgroup's figures (the pause process and the pod's overhead are in it).
    assert_eq!(pod["cpu"]["usageCoreNanoSeconds"], 25);
    assert_eq!(pod["cpu"]["usageNanoCores"], 3);
    assert_eq!(pod["memory"]["workingSetBytes"], 150);
    assert_eq!(pod["memory"]["usageBytes"], 155);
    assert_eq!(pod["memory"]["rssBytes"], 7);
    assert_eq!(pod["memory"]["availableBytes"], 850);
    // Containers keep their own.
    assert_eq!(pod["containers"][0]["memory"]["workingSetBytes"], 100);
    let sys = &v["node"]["systemContainers"][0];
    assert_eq!(sys["name"], "pods");
    assert_eq!(sys["startTime"], "2020-09-13T12:26:40Z");
    assert_eq!(sys["memory"]["workingSetBytes"], 999);
    assert!(sys["memory"].get("availableBytes").is_none(), "{sys}");
    assert!(sys.get("rootfs").is_none() && sys.get("logs").is_none());
}
