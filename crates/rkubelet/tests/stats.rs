//! The Summary API (`/stats/summary`, upstream stats/v1alpha1) through a real kube-apiserver's
//! node proxy, as metrics-server reads it, against a real private containerd: node figures, a
//! pod's network counters moving with traffic, CPU with load, an emptyDir's and the pod's
//! ephemeral storage with a write, container logs; and a summary with N pods (how long one takes
//! is measured by bench/summary.sh).

mod common;

use std::time::{Duration, Instant};

use common::*;
use rkubelet_cri::api;
use serde_json::Value;

fn summary(cp: &ControlPlane, node: &str) -> Value {
    let raw = cp.kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{node}/proxy/stats/summary"),
    ]);
    serde_json::from_str(&raw).unwrap_or_else(|e| panic!("{e}: {raw}"))
}

fn pod_of<'a>(s: &'a Value, name: &str) -> Option<&'a Value> {
    s["pods"]
        .as_array()?
        .iter()
        .find(|p| p["podRef"]["name"] == name)
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Upstream's FsStats fields, all present for a whole filesystem.
fn assert_full_fs(what: &str, fs: &Value, used_nonzero: bool) {
    for k in [
        "availableBytes",
        "capacityBytes",
        "usedBytes",
        "inodesFree",
        "inodes",
        "inodesUsed",
    ] {
        assert!(fs[k].is_u64(), "{what}.{k}: {fs}");
    }
    assert!(fs["time"].is_string(), "{what}: {fs}");
    assert!(u(&fs["capacityBytes"]) > 0, "{what}: {fs}");
    assert!(!used_nonzero || u(&fs["usedBytes"]) > 0, "{what}: {fs}");
    assert!(
        u(&fs["capacityBytes"]) >= u(&fs["availableBytes"]),
        "{what}: {fs}"
    );
}

const POD: &str = "stats-web";

fn manifest(node: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {POD}
  namespace: default
spec:
  nodeName: {node}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  volumes:
  - name: scratch
    emptyDir: {{}}
  containers:
  - name: web
    image: {IMAGE}
    command: ["sh", "-c", "echo serving; echo in-rootfs > /layer-file; httpd -f -p 8080 -h /tmp"]
    volumeMounts:
    - {{name: scratch, mountPath: /scratch}}
  - name: side
    image: {IMAGE}
    command: ["sh", "-c", "for i in 1 2 3 4 5; do echo side line $i; done; {SLEEPER}"]
"#
    )
}

#[tokio::test]
async fn summary_through_the_apiserver_moves_with_load() {
    let cp = ControlPlane::up("stat1");
    let mut env = Env::new(231);
    env.join(&cp, &[]);
    let node = env.node.clone();
    cp.kubectl_stdin(&["apply", "-f", "-"], Some(&manifest(&node)));
    let pod = wait_until(Duration::from_secs(60), "api pod running", || {
        let p = env
            .pods()
            .into_iter()
            .find(|p| p.metadata.name.as_deref() == Some(POD))?;
        let st = p.status.as_ref()?;
        let ready = st.container_statuses.as_ref()?.iter().all(|c| c.ready);
        (st.phase.as_deref() == Some("Running") && ready).then_some(p)
    });

    // --- Node.
    let s = summary(&cp, &node);
    let n = &s["node"];
    assert_eq!(n["nodeName"], node.as_str());
    assert!(n["startTime"].is_string(), "{n}");
    assert!(u(&n["cpu"]["usageCoreNanoSeconds"]) > 0, "{n}");
    assert!(u(&n["memory"]["workingSetBytes"]) > 0, "{n}");
    assert!(u(&n["memory"]["availableBytes"]) > 0, "{n}");
    assert_full_fs("node.fs", &n["fs"], true);
    // containerd measures its snapshots every 10 s: the image fs's usage may still be 0 here.
    assert_full_fs("node.runtime.imageFs", &n["runtime"]["imageFs"], false);
    let net = &n["network"];
    assert!(net["name"].is_string(), "{net}");
    assert!(u(&net["rxBytes"]) > 0 && u(&net["txBytes"]) > 0, "{net}");
    assert!(
        net["interfaces"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["name"] != "lo"),
        "{net}"
    );
    assert!(u(&n["rlimit"]["maxpid"]) > 0, "{n}");
    assert!(u(&n["rlimit"]["curproc"]) > 10, "{n}");

    // --- The pod and its containers.
    let p = pod_of(&s, POD).unwrap_or_else(|| panic!("no {POD} in {s}"));
    assert_eq!(p["podRef"]["namespace"], "default");
    assert_eq!(p["podRef"]["uid"], uid(&pod).as_str());
    assert!(p["startTime"].is_string(), "{p}");
    assert!(u(&p["memory"]["workingSetBytes"]) > 0, "{p}");
    // pause, httpd, the side container's shell and its sleep.
    assert!(u(&p["process_stats"]["process_count"]) >= 3, "{p}");
    assert_eq!(p["network"]["name"], "eth0", "{p}");
    let names: Vec<&str> = p["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{p}");
    assert!(names.contains(&"web") && names.contains(&"side"), "{p}");
    let container = |p: &Value, name: &str| -> Value {
        p["containers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
            .unwrap()
    };
    let web = container(p, "web");
    assert!(web["startTime"].is_string(), "{web}");
    assert!(u(&web["memory"]["workingSetBytes"]) > 0, "{web}");
    assert!(u(&web["rootfs"]["capacityBytes"]) > 0, "{web}");
    assert!(web["rootfs"]["usedBytes"].is_u64(), "{web}");
    assert!(u(&web["logs"]["capacityBytes"]) > 0, "{web}");
    let vol = p["volume"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "scratch")
        .cloned()
        .unwrap_or_else(|| panic!("no scratch volume in {p}"));
    assert!(vol.get("pvcRef").is_none(), "{vol}");
    assert!(u(&vol["capacityBytes"]) > 0, "{vol}");
    let vol_before = u(&vol["usedBytes"]);
    let eph_before = u(&p["ephemeral-storage"]["usedBytes"]);
    assert!(eph_before >= vol_before, "{p}");

    // What metrics-server before 0.6 asks: CPU and memory only.
    let raw = cp.kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{node}/proxy/stats/summary?only_cpu_and_memory=true"),
    ]);
    let only: Value = serde_json::from_str(&raw).unwrap();
    assert!(u(&only["node"]["cpu"]["usageCoreNanoSeconds"]) > 0, "{raw}");
    assert!(only["node"].get("fs").is_none(), "{raw}");
    let op = pod_of(&only, POD).unwrap_or_else(|| panic!("{raw}"));
    assert!(u(&op["memory"]["workingSetBytes"]) > 0, "{op}");
    assert!(
        op.get("volume").is_none() && op.get("network").is_none(),
        "{op}"
    );

    // Logs: both containers wrote lines (measured within the cache period).
    wait_until(Duration::from_secs(25), "container logs usage", || {
        let s = summary(&cp, &node);
        let p = pod_of(&s, POD)?;
        let (w, sd) = (container(p, "web"), container(p, "side"));
        (u(&w["logs"]["usedBytes"]) > 0 && u(&sd["logs"]["usedBytes"]) > 0).then_some(())
    });

    // --- Network: traffic from the pod over its eth0 to the node's read-only port.
    let rx_tx = |s: &Value| {
        let n = &pod_of(s, POD).unwrap()["network"];
        (u(&n["rxBytes"]), u(&n["txBytes"]))
    };
    let (rx0, tx0) = rx_tx(&summary(&cp, &node));
    let fetch = format!(
        "gw=$(route -n | awk '$1==\"0.0.0.0\"{{print $2}}'); \
         for i in 1 2 3; do printf 'GET /pods HTTP/1.0\\r\\n\\r\\n' | nc -w 2 $gw {} | wc -c; done; echo gw=$gw",
        env.ro_port
    );
    let (code, out) = exec_in(&env, &pod, "side", &["sh", "-c", &fetch]).await;
    assert_eq!(code, 0, "{out}");
    let (rx1, tx1) = rx_tx(&summary(&cp, &node));
    assert!(
        rx1 > rx0 + 1000 && tx1 > tx0,
        "pod network should move: rx {rx0} -> {rx1}, tx {tx0} -> {tx1} ({out})"
    );

    // --- CPU: a fixed amount of work in the web container. Its CPU time does not depend on
    // how loaded the machine is (its wall time does): about 0.45 CPU-s on this machine's cores;
    // the bound is a third of that. (Few enough iterations to stay inside exec_in's 5 s timeout
    // on a busy machine.)
    let cpu_of =
        |s: &Value| u(&container(pod_of(s, POD).unwrap(), "web")["cpu"]["usageCoreNanoSeconds"]);
    let pod_cpu = |s: &Value| u(&pod_of(s, POD).unwrap()["cpu"]["usageCoreNanoSeconds"]);
    let s0 = summary(&cp, &node);
    let (c0, p0) = (cpu_of(&s0), pod_cpu(&s0));
    let (_, out) = exec_in(
        &env,
        &pod,
        "web",
        &[
            "sh",
            "-c",
            "i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done; echo $i",
        ],
    )
    .await;
    let s1 = summary(&cp, &node);
    let (c1, p1) = (cpu_of(&s1), pod_cpu(&s1));
    assert_eq!(out.trim(), "400000");
    assert!(
        c1 > c0 + 150_000_000,
        "400000 shell loop iterations should show: {c0} -> {c1}"
    );
    assert!(p1 >= c1 && p1 > p0, "{p0} -> {p1}");

    // --- Storage: 5 MB into the emptyDir shows in the volume and the pod's ephemeral storage
    // once the cache period (10 s) has passed.
    let (code, out) = exec_in(
        &env,
        &pod,
        "web",
        &[
            "sh",
            "-c",
            "dd if=/dev/urandom of=/scratch/blob bs=1M count=5 && sync",
        ],
    )
    .await;
    assert_eq!(code, 0, "{out}");
    let five = 5 << 20;
    let started = Instant::now();
    let (vol_after, eph_after) = wait_until(Duration::from_secs(30), "emptyDir usage", || {
        let s = summary(&cp, &node);
        let p = pod_of(&s, POD)?;
        let v = p["volume"]
            .as_array()?
            .iter()
            .find(|v| v["name"] == "scratch")?;
        let used = u(&v["usedBytes"]);
        (used >= vol_before + five).then(|| (used, u(&p["ephemeral-storage"]["usedBytes"])))
    });
    println!(
        "emptyDir {vol_before} -> {vol_after} bytes, ephemeral-storage {eph_before} -> {eph_after}, seen after {:?}",
        started.elapsed()
    );
    assert!(
        eph_after >= eph_before + five,
        "{eph_before} -> {eph_after}"
    );
    assert!(eph_after >= vol_after, "{eph_after} < {vol_after}");

    // The writable layer has the file written at start.
    let layer = wait_until(Duration::from_secs(20), "writable layer usage", || {
        let s = summary(&cp, &node);
        let w = container(pod_of(&s, POD)?, "web");
        let used = u(&w["rootfs"]["usedBytes"]);
        (used > 0).then_some(used)
    });
    println!("web writable layer: {layer} bytes");
    let image_fs = u(&summary(&cp, &node)["node"]["runtime"]["imageFs"]["usedBytes"]);
    assert!(image_fs > 0, "containerd's image fs usage after its sync");

    // The same figures in /metrics/resource, as metrics-server 0.6+ scrapes them.
    let raw = cp.kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{node}/proxy/metrics/resource"),
    ]);
    let scrape = prometheus_parse::Scrape::parse(raw.lines().map(|l| Ok(l.to_string())))
        .expect("Prometheus text format");
    let value = |name: &str, pod: Option<&str>| -> f64 {
        scrape
            .samples
            .iter()
            .find(|m| m.metric == name && pod.is_none_or(|p| m.labels.get("pod") == Some(p)))
            .map(|m| match m.value {
                prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Gauge(v) => v,
                _ => f64::NAN,
            })
            .unwrap_or_else(|| panic!("no {name} {pod:?} in\n{raw}"))
    };
    assert!(value("pod_cpu_usage_seconds_total", Some(POD)) >= c1 as f64 / 1e9);
    assert!(value("pod_memory_working_set_bytes", Some(POD)) > 0.0);
    assert!(value("node_cpu_usage_seconds_total", None) > 0.0);
    assert_eq!(value("resource_scrape_error", None), 0.0);
    assert_eq!(value("scrape_error", None), 0.0);

    cp.kubectl(&["delete", "pod", POD, "--wait=false"]);
    wait_until(Duration::from_secs(30), "pod gone from the summary", || {
        pod_of(&summary(&cp, &node), POD).is_none().then_some(())
    });
}

/// `/stats/summary` with N pods and a host-network one: every pod listed, each pod's network
/// figures from its own network namespace, none for the host-network pod (whose processes are
/// still counted, from its pod cgroup). How long it takes is
/// a figure for bench/summary.sh, not a test.
#[tokio::test]
async fn summary_with_n_pods() {
    const N: usize = 8;
    let mut env = Env::new(232);
    env.start_kubelet();
    for i in 0..N {
        env.write_manifest(
            &format!("p{i}.yaml"),
            &simple_pod(&format!("p{i}"), "Always", SLEEPER),
        );
    }
    // A host-network pod: its traffic is the node's, so it gets no pod network figures.
    let host =
        simple_pod("hostnet", "Always", SLEEPER).replace("spec:\n", "spec:\n  hostNetwork: true\n");
    env.write_manifest("hostnet.yaml", &host);
    let mut pods = Vec::new();
    for i in 0..N {
        pods.push(env.wait_running(&format!("p{i}")));
    }
    env.wait_running("hostnet");
    let get = || -> Value {
        let (code, body) = http_get("127.0.0.1", env.ro_port, "/stats/summary").unwrap();
        assert_eq!(code, 200, "{body}");
        serde_json::from_str(&body).unwrap()
    };
    let s = get();
    assert_eq!(s["pods"].as_array().unwrap().len(), N + 1, "{s}");
    for p in s["pods"].as_array().unwrap() {
        if p["podRef"]["name"] == format!("hostnet-{}", env.node) {
            assert!(p.get("network").is_none(), "{p}");
            // Its processes are counted from its pod cgroup (the runtime's sandbox stats, as
            // upstream's process_stats), which a shared network namespace does not blur: the
            // pause process and the sleeper.
            assert!(u(&p["process_stats"]["process_count"]) >= 2, "{p}");
            continue;
        }
        assert_eq!(p["network"]["name"], "eth0", "{p}");
        assert!(p["network"]["rxBytes"].is_u64(), "{p}");
        assert!(u(&p["process_stats"]["process_count"]) >= 2, "{p}");
        assert!(p["ephemeral-storage"]["usedBytes"].is_u64(), "{p}");
    }
    // A pod that ran to completion keeps its stopped sandbox until the pod is deleted, as
    // upstream's. containerd fails ListPodSandboxStats without a filter on any sandbox that is
    // not ready, so without the empty filter every pod's figures came from /proc from here on,
    // and the host-network pod, whose processes /proc cannot tell from the node's, lost its
    // process count.
    env.write_manifest("done.yaml", &simple_pod("done", "Never", "exit 0"));
    let done = env.wait_pod("done", Duration::from_secs(30), "phase Succeeded", |p| {
        (p.status.as_ref()?.phase.as_deref() == Some("Succeeded")).then(|| p.clone())
    });
    // The kubelet stops the sandbox after it reports the phase.
    let done_uid = uid(&done);
    wait_async(
        Duration::from_secs(30),
        "the completed pod's sandbox kept, stopped",
        || async {
            let sbs = env.sandboxes_of(&done_uid).await;
            !sbs.is_empty()
                && sbs
                    .iter()
                    .all(|sb| sb.state == api::PodSandboxState::SandboxNotready as i32)
        },
    )
    .await;
    let s = get();
    let p = pod_of(&s, &format!("hostnet-{}", env.node)).unwrap();
    assert!(
        u(&p["process_stats"]["process_count"]) >= 2,
        "runtime's sandbox stats with a stopped sandbox on the node: {p}"
    );
    // Each pod's figures are its own eth0's counters (whether rkubelet got them from the
    // runtime's sandbox stats or from /proc): read inside the pod before and after a summary,
    // they bracket what the summary says. The node's counters, or a stale reading, would not.
    let counters = |out: &str| -> (u64, u64) {
        let v: Vec<u64> = out.split_whitespace().map(|x| x.parse().unwrap()).collect();
        assert_eq!(v.len(), 2, "{out}");
        (v[0], v[1])
    };
    let read =
        "cat /sys/class/net/eth0/statistics/rx_bytes /sys/class/net/eth0/statistics/tx_bytes";
    let mut before = Vec::new();
    for pod in &pods {
        let (code, out) = exec_in(&env, pod, "main", &["sh", "-c", read]).await;
        assert_eq!(code, 0, "{out}");
        before.push(counters(&out));
    }
    let s = get();
    for (pod, b) in pods.iter().zip(before) {
        let (code, out) = exec_in(&env, pod, "main", &["sh", "-c", read]).await;
        assert_eq!(code, 0, "{out}");
        let a = counters(&out);
        let p = pod_of(&s, pod.metadata.name.as_deref().unwrap()).unwrap();
        let got = (u(&p["network"]["rxBytes"]), u(&p["network"]["txBytes"]));
        assert!(
            b.0 <= got.0 && got.0 <= a.0 && b.1 <= got.1 && got.1 <= a.1,
            "{}: summary (rx, tx) {got:?}, in the pod before {b:?}, after {a:?}",
            uid(pod)
        );
    }
    // The same measures through the handle an eviction manager would use, asking the runtime
    // for the pod's writable layers itself.
    let p0 = &pods[0];
    let store = kubelet::stats::EphemeralStorage::new(
        env.root.clone(),
        env.logs.clone(),
        Duration::from_secs(10),
    );
    let key = kubelet::stats::PodKey {
        namespace: "default".into(),
        name: p0.metadata.name.clone().unwrap(),
        uid: uid(p0),
    };
    let e = store.pod_usage(&env.cri(), &key).await.unwrap();
    assert!(e.writable_layers.contains_key("main"), "{e:?}");
    assert!(e.logs.contains_key("main"), "{e:?}");
    assert!(
        e.pod_logs.inodes >= 3,
        "pod dir, container dir, log file: {e:?}"
    );
    assert!(e.etc_hosts.bytes > 0, "{e:?}");
    assert!(
        e.total.bytes >= e.pod_logs.bytes + e.etc_hosts.bytes,
        "{e:?}"
    );

    for i in 0..N {
        env.remove_manifest(&format!("p{i}.yaml"));
    }
    env.remove_manifest("hostnet.yaml");
    env.remove_manifest("done.yaml");
    wait_until(Duration::from_secs(60), "pods gone", || {
        env.pods().is_empty().then_some(())
    });
}
