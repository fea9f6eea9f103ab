//! rkubelet as a node of a real control plane (etcd + kube-apiserver 1.20 with Node,RBAC and
//! NodeRestriction), using only its node credentials, against a real private containerd.

mod common;

use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::Signal;
use serde_json::Value;

fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

#[tokio::test]
async fn node_registers_ready_and_renews_its_lease() {
    let cp = ControlPlane::up("node");
    let mut env = Env::new(121);
    env.join(&cp, &["--node-labels=rkubelet.test/role=worker"]);
    let node = wait_json("node Ready", Duration::from_secs(30), || {
        let n = cp.get_json(&["node", &env.node])?;
        (condition(&n, "Ready")?["status"] == "True").then_some(n)
    });
    let ready = condition(&node, "Ready").unwrap();
    assert_eq!(ready["reason"], "KubeletReady");
    for (kind, reason) in [
        ("MemoryPressure", "KubeletHasSufficientMemory"),
        ("DiskPressure", "KubeletHasNoDiskPressure"),
        ("PIDPressure", "KubeletHasSufficientPID"),
    ] {
        let c = condition(&node, kind).unwrap();
        assert_eq!(
            (c["status"].as_str(), c["reason"].as_str()),
            (Some("False"), Some(reason))
        );
    }
    let labels = &node["metadata"]["labels"];
    assert_eq!(labels["kubernetes.io/hostname"], env.node.as_str());
    assert_eq!(labels["kubernetes.io/os"], "linux");
    assert_eq!(labels["rkubelet.test/role"], "worker");
    assert_eq!(node["status"]["capacity"]["pods"], "110");
    assert!(
        node["status"]["capacity"]["cpu"]
            .as_str()
            .unwrap()
            .parse::<u32>()
            .unwrap()
            >= 1
    );
    let info = &node["status"]["nodeInfo"];
    assert!(
        info["containerRuntimeVersion"]
            .as_str()
            .unwrap()
            .starts_with("containerd://"),
        "{info}"
    );
    assert!(!info["bootID"].as_str().unwrap().is_empty());
    let addrs = node["status"]["addresses"].as_array().unwrap();
    assert!(
        addrs
            .iter()
            .any(|a| a["type"] == "InternalIP" && a["address"] == "127.0.0.1"),
        "{addrs:?}"
    );

    let lease = wait_json("lease", Duration::from_secs(20), || {
        cp.get_json(&["lease", "-n", "kube-node-lease", &env.node])
    });
    assert_eq!(lease["spec"]["holderIdentity"], env.node.as_str());
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 40);
    let owner = &lease["metadata"]["ownerReferences"][0];
    assert_eq!(
        (owner["kind"].as_str(), owner["name"].as_str()),
        (Some("Node"), Some(env.node.as_str()))
    );
    assert_eq!(owner["uid"], node["metadata"]["uid"]);
    let first = lease["spec"]["renewTime"].as_str().unwrap().to_string();
    wait_json("lease renewed", Duration::from_secs(20), || {
        let l = cp.get_json(&["lease", "-n", "kube-node-lease", &env.node])?;
        (l["spec"]["renewTime"].as_str()? != first).then_some(l)
    });

    // rkubelet holds only node credentials, and NodeRestriction is on: the node cannot create a
    // pod that is not a mirror pod.
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(cp.node_kubeconfig(&env.node))
        .args(["create", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin
                .take()
                .unwrap()
                .write_all(api_pod("sneaky", &env.node, "true", 1, "").as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("can only create mirror pods"), "{err}");

    // A restart re-registers the same Node object (same UID), never a second one.
    env.stop_kubelet(Signal::SIGKILL);
    env.join(&cp, &["--node-labels=rkubelet.test/role=worker"]);
    // The restarted kubelet says so once its registration attempt met the existing Node (its
    // own log: the first run created the Node).
    wait_until(Duration::from_secs(20), "re-registration", || {
        env.last_kubelet_log()
            .contains("node already registered")
            .then_some(())
    });
    let again = cp.get_json(&["node", &env.node]).unwrap();
    assert_eq!(again["metadata"]["uid"], node["metadata"]["uid"]);
    assert_eq!(
        cp.get_json(&["nodes"]).unwrap()["items"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn api_pods_run_report_status_and_are_deleted_gracefully() {
    let cp = ControlPlane::up("pods");
    let mut env = Env::new(122);
    env.join(&cp, &["--node-labels=rkubelet.test/role=worker"]);
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&api_pod("app", &env.node, SLEEPER, 120, "")),
    );
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&api_pod("crasher", &env.node, "sleep 1; exit 3", 1, "")),
    );
    // A pod whose object outlives its deletion (a finalizer, as the Job controller's).
    let kept = api_pod("kept", &env.node, SLEEPER, 30, "").replace(
        "  name: kept\n",
        "  name: kept\n  finalizers: [rkubelet.test/keep]\n",
    );
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&kept));
    // A shell as PID 1 with no handler ignores SIGTERM: only the grace period ends it.
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&api_pod(
            "stubborn",
            &env.node,
            "while true; do sleep 1; done",
            300,
            "",
        )),
    );

    let pod = wait_json("app Running in the API", Duration::from_secs(30), || {
        let p = cp.get_json(&["pod", "app"])?;
        (p["status"]["phase"] == "Running" && condition(&p, "Ready")?["status"] == "True")
            .then_some(p)
    });
    let st = &pod["status"];
    assert_eq!(st["hostIP"], "127.0.0.1");
    assert!(
        st["podIP"]
            .as_str()
            .unwrap()
            .starts_with(&format!("10.88.{}.", env.index)),
        "{st}"
    );
    assert_eq!(st["qosClass"], "BestEffort");
    assert!(st["startTime"].is_string());
    let cs = &st["containerStatuses"][0];
    assert!(cs["state"]["running"].is_object(), "{cs}");
    assert!(cs["containerID"]
        .as_str()
        .unwrap()
        .starts_with("containerd://"));
    for c in [
        "Initialized",
        "ContainersReady",
        "PodReadyToStartContainers",
    ] {
        assert_eq!(condition(&pod, c).unwrap()["status"], "True", "{c}");
    }
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_string();
    assert_eq!(env.containers_of(&uid).await.len(), 1);

    // A crashing container: terminated state and restarts show in the API.
    let crasher = wait_json("crasher restarted", Duration::from_secs(40), || {
        let p = cp.get_json(&["pod", "crasher"])?;
        let cs = &p["status"]["containerStatuses"][0];
        (cs["restartCount"].as_i64()? >= 1 && cs["lastState"]["terminated"]["exitCode"] == 3)
            .then_some(p)
    });
    assert_eq!(crasher["status"]["phase"], "Running");
    // Its repeated events are counted on one object, as upstream's correlator does: the second
    // "Started" patches the first, by the name and resourceVersion the API server answered the
    // create with (the recorder reads only those fields of the answer).
    let started = wait_json("crasher's Started counted", Duration::from_secs(20), || {
        let ev = cp.get_json(&[
            "events",
            "--field-selector",
            "involvedObject.name=crasher,reason=Started",
        ])?;
        let items = ev["items"].as_array()?;
        let total: i64 = items.iter().filter_map(|e| e["count"].as_i64()).sum();
        (total >= 2).then(|| ev.clone())
    });
    let items = started["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "repeats patch one event: {items:#?}");
    assert!(items[0]["count"].as_i64() >= Some(2), "{items:#?}");
    assert_eq!(items[0]["message"], "Started container main");

    // A kubelet restart adopts the containers and creates no duplicates.
    let before = env.container_ids(&uid).await;
    env.stop_kubelet(Signal::SIGKILL);
    env.join(&cp, &["--node-labels=rkubelet.test/role=worker"]);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let after = env.container_ids(&uid).await;
    assert_eq!(before, after);
    assert_eq!(
        cp.get_json(&["pods"]).unwrap()["items"]
            .as_array()
            .unwrap()
            .len(),
        4
    );

    // kubectl delete: the container stops on SIGTERM and the object goes away once it has,
    // not at the end of the 120 s grace period. It takes a second or two (bench/api-pods.sh
    // measures it); the bound is half the grace period so a loaded machine does not trip it.
    cp.kubectl(&["delete", "pod", "app", "--wait=false"]);
    wait_until(Duration::from_secs(60), "pod object deleted", || {
        cp.get_json(&["pod", "app"]).is_none().then_some(())
    });
    // The object is gone only once the containers stopped; removal follows at once.
    let begin = Instant::now();
    env.wait_runtime_empty(
        &uid,
        begin,
        Duration::from_secs(30),
        "containers left after delete",
    )
    .await;
    assert!(env.kubelet_log().contains("deleted from the API server"));

    // A force delete while a pod is in a long graceful stop ends it with the shorter grace
    // period (upstream's pod worker restarts the stop with it), not after the 300 s.
    let stubborn = wait_json("stubborn Running", Duration::from_secs(30), || {
        let p = cp.get_json(&["pod", "stubborn"])?;
        (p["status"]["phase"] == "Running").then_some(p)
    });
    let uid = stubborn["metadata"]["uid"].as_str().unwrap().to_string();
    cp.kubectl(&["delete", "pod", "stubborn", "--wait=false"]);
    wait_until(Duration::from_secs(30), "stubborn stopping", || {
        env.kubelet_log()
            .lines()
            .any(|l| l.contains("pod deleted in the API") && l.contains("stubborn"))
            .then_some(())
    });
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        env.containers_of(&uid).await.len(),
        1,
        "still in its grace period"
    );
    assert!(cp.get_json(&["pod", "stubborn"]).is_some());
    let forced = Instant::now();
    cp.kubectl(&[
        "delete",
        "pod",
        "stubborn",
        "--grace-period=0",
        "--force",
        "--wait=false",
    ]);
    // 2 s of grace (upstream's minimum for a stop) and the removal.
    let what = "stubborn still there after its force delete";
    env.wait_runtime_empty(&uid, forced, Duration::from_secs(30), what)
        .await;
    assert!(env.kubelet_log().contains("grace period shortened"));

    // A deleted pod whose object stays (a finalizer): the node writes its final status before
    // its DELETE, so whoever holds the finalizer sees the container terminated (upstream's
    // status manager patches, then deletes), and the pod is not started again.
    let kept = wait_json("kept Running", Duration::from_secs(30), || {
        let p = cp.get_json(&["pod", "kept"])?;
        (p["status"]["phase"] == "Running").then_some(p)
    });
    let uid = kept["metadata"]["uid"].as_str().unwrap().to_string();
    let deleted = Instant::now();
    cp.kubectl(&["delete", "pod", "kept", "--wait=false"]);
    let what = "kept's containers left after its delete";
    env.wait_runtime_empty(&uid, deleted, Duration::from_secs(30), what)
        .await;
    let kept = wait_json("kept's final status", Duration::from_secs(30), || {
        let p = cp.get_json(&["pod", "kept"])?;
        (p["metadata"]["deletionGracePeriodSeconds"] == 0).then_some(p)
    });
    let cs = &kept["status"]["containerStatuses"][0];
    assert_eq!(cs["state"]["terminated"]["exitCode"], 0, "{kept}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        env.containers_of(&uid).await.is_empty(),
        "a finished pod is not started again"
    );
    cp.kubectl(&[
        "patch",
        "pod",
        "kept",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ]);
    wait_until(Duration::from_secs(30), "kept gone", || {
        cp.get_json(&["pod", "kept"]).is_none().then_some(())
    });
}

fn static_web(tag: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: default
  labels: {{app: web, tag: "{tag}"}}
spec:
  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", {SLEEPER:?}]
"#
    )
}

fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj["metadata"]["annotations"][key].as_str()
}

#[tokio::test]
async fn static_pods_have_mirror_pods_that_come_back() {
    let cp = ControlPlane::up("mirror");
    let mut env = Env::new(123);
    env.write_manifest("web.yaml", &static_web("one"));
    // A burst of static pods that come and go together: the node writes each mirror once.
    const BURST: usize = 8;
    for i in 0..BURST {
        let text = static_web("burst").replace("name: web\n", &format!("name: burst-{i}\n"));
        env.write_manifest(&format!("burst-{i}.yaml"), &text);
    }
    env.join(&cp, &["--node-labels=rkubelet.test/role=worker"]);
    let name = format!("web-{}", env.node);
    let burst_mirrors = |phase: &str| -> usize {
        cp.get_json(&["pods", "-l", "tag=burst"])
            .and_then(|l| l["items"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter(|p| p["status"]["phase"] == phase)
            .count()
    };
    wait_until(Duration::from_secs(60), "burst mirrors Running", || {
        (burst_mirrors("Running") == BURST).then_some(())
    });
    for i in 0..BURST {
        env.remove_manifest(&format!("burst-{i}.yaml"));
    }
    wait_until(Duration::from_secs(60), "burst mirrors removed", || {
        cp.get_json(&["pods", "-l", "tag=burst"])
            .is_some_and(|l| l["items"].as_array().is_some_and(|a| a.is_empty()))
            .then_some(())
    });

    // The mirror pod shows the static pod, with its hash, owned by the Node, and its status.
    let mirror = wait_json("mirror pod Running", Duration::from_secs(40), || {
        let p = cp.get_json(&["pod", &name])?;
        (p["status"]["phase"] == "Running" && condition(&p, "Ready")?["status"] == "True")
            .then_some(p)
    });
    let hash = annotation(&mirror, "kubernetes.io/config.hash").unwrap();
    assert_eq!(
        annotation(&mirror, "kubernetes.io/config.mirror"),
        Some(hash)
    );
    assert_eq!(
        annotation(&mirror, "kubernetes.io/config.source"),
        Some("file")
    );
    let owner = &mirror["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "Node");
    assert_eq!(owner["controller"], true);
    assert!(mirror["status"]["podIP"].as_str().is_some(), "{mirror}");
    let static_uid = env.wait_running("web").metadata.uid.unwrap();
    let containers = env.container_ids(&static_uid).await;
    assert_eq!(containers.len(), 1);

    // Deleting the mirror pod in the API re-creates it and leaves the static pod alone.
    let first_uid = mirror["metadata"]["uid"].as_str().unwrap().to_string();
    cp.kubectl(&["delete", "pod", &name, "--wait=false"]);
    let again = wait_json("mirror pod re-created", Duration::from_secs(30), || {
        let p = cp.get_json(&["pod", &name])?;
        (p["metadata"]["uid"].as_str()? != first_uid
            && p["metadata"]["deletionTimestamp"].is_null()
            && p["status"]["phase"] == "Running")
            .then_some(p)
    });
    assert_eq!(
        annotation(&again, "kubernetes.io/config.mirror"),
        Some(hash)
    );
    let now = env.container_ids(&static_uid).await;
    assert_eq!(
        containers, now,
        "deleting the mirror must not touch the static pod"
    );

    // Changing the manifest replaces the mirror with one of the new hash.
    env.write_manifest("web.yaml", &static_web("two"));
    let replaced = wait_json("mirror pod replaced", Duration::from_secs(40), || {
        let p = cp.get_json(&["pod", &name])?;
        (p["metadata"]["labels"]["tag"] == "two" && p["status"]["phase"] == "Running").then_some(p)
    });
    assert_ne!(
        annotation(&replaced, "kubernetes.io/config.mirror"),
        Some(hash)
    );

    // Removing the manifest removes the mirror pod.
    env.remove_manifest("web.yaml");
    wait_until(Duration::from_secs(40), "mirror pod removed", || {
        cp.get_json(&["pod", &name]).is_none().then_some(())
    });

    // No mirror was created twice (409) or deleted twice (404): the node is the only client
    // creating pods here, and the test's own delete above found its pod.
    let metrics = cp.kubectl(&["get", "--raw", "/metrics"]);
    let repeats: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{") && l.contains("resource=\"pods\""))
        .filter(|l| l.contains("subresource=\"\""))
        .filter(|l| {
            (l.contains("verb=\"POST\"") && l.contains("code=\"409\""))
                || (l.contains("verb=\"DELETE\"") && l.contains("code=\"404\""))
        })
        .collect();
    assert!(repeats.is_empty(), "mirror pods written twice: {repeats:?}");
}

#[tokio::test]
async fn apiserver_outage_keeps_pods_running_and_rkubelet_recovers() {
    let cp = ControlPlane::up("outage");
    let mut env = Env::new(124);
    env.join(&cp, &["--node-labels=rkubelet.test/role=worker"]);
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&api_pod("steady", &env.node, SLEEPER, 2, "")),
    );
    // Finishes while the apiserver is away: its final status is a pending update.
    let finisher = api_pod("finisher", &env.node, "sleep 25", 2, "")
        .replace("spec:\n", "spec:\n  restartPolicy: Never\n");
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&finisher));
    let steady = wait_json("pods Running", Duration::from_secs(30), || {
        let f = cp.get_json(&["pod", "finisher"])?;
        let p = cp.get_json(&["pod", "steady"])?;
        (p["status"]["phase"] == "Running" && f["status"]["phase"] == "Running").then_some(p)
    });
    let uid = steady["metadata"]["uid"].as_str().unwrap().to_string();
    let before = env.container_ids(&uid).await;
    let lease_before = wait_json("lease", Duration::from_secs(20), || {
        cp.get_json(&["lease", "-n", "kube-node-lease", &env.node])
    })["spec"]["renewTime"]
        .as_str()
        .unwrap()
        .to_string();

    cp.stop_apiserver();
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(env.kubelet_alive(), "rkubelet died without its apiserver");
    let during = env.container_ids(&uid).await;
    assert_eq!(
        before, during,
        "pods must keep running while the apiserver is away"
    );
    cp.start_apiserver();

    wait_json(
        "lease renewed after the outage",
        Duration::from_secs(30),
        || {
            let l = cp.get_json(&["lease", "-n", "kube-node-lease", &env.node])?;
            (l["spec"]["renewTime"].as_str()? > lease_before.as_str()).then_some(l)
        },
    );
    let f = wait_json("pending status lands", Duration::from_secs(30), || {
        let f = cp.get_json(&["pod", "finisher"])?;
        (f["status"]["phase"] == "Succeeded").then_some(f)
    });
    assert_eq!(
        f["status"]["containerStatuses"][0]["state"]["terminated"]["reason"],
        "Completed"
    );
    wait_json("node Ready", Duration::from_secs(30), || {
        let n = cp.get_json(&["node", &env.node])?;
        (condition(&n, "Ready")?["status"] == "True").then_some(n)
    });
    let after = env.container_ids(&uid).await;
    assert_eq!(before, after);
}

/// The events a field selector finds for one involved object, as `(type, reason, message)`.
fn events_for(cp: &ControlPlane, kind: &str, name: &str) -> Vec<(String, String, String)> {
    let sel = format!("involvedObject.kind={kind},involvedObject.name={name}");
    let ev = cp
        .get_json(&["events", "-A", "--field-selector", &sel])
        .unwrap_or_default();
    ev["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|e| {
                    let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
                    (s("type"), s("reason"), s("message"))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn has_reason(evs: &[(String, String, String)], reason: &str) -> bool {
    evs.iter().any(|(_, r, _)| r == reason)
}

#[tokio::test]
async fn pods_that_do_not_fit_are_rejected_and_events_are_recorded() {
    let cp = ControlPlane::up("admit");
    let mut env = Env::new(125);
    env.join(&cp, &["--node-labels=rkubelet.test/role=worker"]);
    wait_json("node Ready", Duration::from_secs(30), || {
        let n = cp.get_json(&["node", &env.node])?;
        (condition(&n, "Ready")?["status"] == "True").then_some(n)
    });

    // Node events: the kubelet start and the conditions it set.
    let node_events = wait_until(Duration::from_secs(20), "node events", || {
        let evs = events_for(&cp, "Node", &env.node);
        (has_reason(&evs, "Starting") && has_reason(&evs, "NodeReady")).then_some(evs)
    });
    assert!(
        node_events
            .iter()
            .any(|(t, r, m)| t == "Normal" && r == "Starting" && m == "Starting kubelet."),
        "{node_events:?}"
    );
    assert!(has_reason(&node_events, "NodeHasSufficientMemory"));
    assert!(has_reason(&node_events, "RegisteredNode"));

    // A pod asking for more memory than the node has is rejected, as upstream does it: phase
    // Failed, reason OutOfmemory, a Warning event, and no sandbox.
    let hog = api_pod("hog", &env.node, SLEEPER, 1, "").replace(
        "    command:",
        "    resources:\n      requests:\n        memory: 1Pi\n    command:",
    );
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&hog));
    let hog = wait_json("hog rejected", Duration::from_secs(20), || {
        let p = cp.get_json(&["pod", "hog"])?;
        (p["status"]["phase"] == "Failed").then_some(p)
    });
    assert_eq!(hog["status"]["reason"], "OutOfmemory", "{}", hog["status"]);
    let msg = hog["status"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("Pod was rejected: Node didn't have enough resource: memory"),
        "{msg}"
    );
    let hog_uid = hog["metadata"]["uid"].as_str().unwrap().to_string();
    assert!(env.sandboxes_of(&hog_uid).await.is_empty());
    let evs = wait_until(Duration::from_secs(20), "OutOfmemory event", || {
        let evs = events_for(&cp, "Pod", "hog");
        has_reason(&evs, "OutOfmemory").then_some(evs)
    });
    assert!(evs.iter().any(|(t, _, _)| t == "Warning"), "{evs:?}");

    // A node selector this node does not satisfy.
    let picky = api_pod("picky", &env.node, SLEEPER, 1, "").replace(
        "spec:\n",
        "spec:\n  nodeSelector:\n    rkubelet.test/role: gpu\n",
    );
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&picky));
    let picky = wait_json("picky rejected", Duration::from_secs(20), || {
        let p = cp.get_json(&["pod", "picky"])?;
        (p["status"]["phase"] == "Failed").then_some(p)
    });
    assert_eq!(picky["status"]["reason"], "NodeAffinity");

    // One that fits runs, and its life shows as events on the pod and its container.
    let fits = api_pod("fits", &env.node, SLEEPER, 2, "").replace(
        "    command:",
        "    resources:\n      requests:\n        memory: 16Mi\n        cpu: 10m\n    command:",
    );
    cp.kubectl_stdin(&["create", "-f", "-"], Some(&fits));
    wait_json("fits Running", Duration::from_secs(30), || {
        let p = cp.get_json(&["pod", "fits"])?;
        (p["status"]["phase"] == "Running").then_some(p)
    });
    let evs = wait_until(Duration::from_secs(20), "container events", || {
        let evs = events_for(&cp, "Pod", "fits");
        ["Pulled", "Created", "Started"]
            .iter()
            .all(|r| has_reason(&evs, r))
            .then_some(evs)
    });
    assert!(
        evs.iter().any(|(_, r, m)| r == "Pulled"
            && m.contains("already present on machine")
            && m.contains(IMAGE)),
        "{evs:?}"
    );
    assert!(
        evs.iter()
            .any(|(_, r, m)| r == "Started" && m == "Started container main"),
        "{evs:?}"
    );
    let ev = cp
        .get_json(&[
            "events",
            "--field-selector",
            "involvedObject.name=fits,reason=Started",
        ])
        .unwrap();
    let ev = &ev["items"][0];
    assert_eq!(ev["involvedObject"]["fieldPath"], "spec.containers{main}");
    assert_eq!(ev["source"]["component"], "kubelet");
    assert_eq!(ev["source"]["host"], env.node.as_str());

    cp.kubectl(&["delete", "pod", "fits", "--wait=false"]);
    let evs = wait_until(Duration::from_secs(20), "Killing event", || {
        let evs = events_for(&cp, "Pod", "fits");
        has_reason(&evs, "Killing").then_some(evs)
    });
    assert!(
        evs.iter()
            .any(|(_, r, m)| r == "Killing" && m == "Stopping container main"),
        "{evs:?}"
    );

    // Rejected pods hold no resources: a second pod that fits is admitted too.
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&api_pod("after", &env.node, SLEEPER, 1, "")),
    );
    wait_json("after Running", Duration::from_secs(30), || {
        let p = cp.get_json(&["pod", "after"])?;
        (p["status"]["phase"] == "Running").then_some(p)
    });
}

/// Upstream re-admits every pod after a restart; pods whose containers already run hold their
/// resources and must not be rejected for them, even when the node shrank (here: maxPods).
#[tokio::test]
async fn restart_keeps_running_pods_that_no_longer_fit() {
    let cp = ControlPlane::up("readmit");
    let mut env = Env::new(126);
    let kc = cp.node_kubeconfig(&env.node);
    let kc = format!("--kubeconfig={}", kc.display());
    env.start_kubelet_with(&[&kc, "--node-ip=127.0.0.1", "--max-pods=2"]);
    for name in ["first", "second"] {
        cp.kubectl_stdin(
            &["create", "-f", "-"],
            Some(&api_pod(name, &env.node, SLEEPER, 1, "")),
        );
    }
    let mut ids = Vec::new();
    for name in ["first", "second"] {
        let p = wait_json("pod Running", Duration::from_secs(30), || {
            let p = cp.get_json(&["pod", name])?;
            (p["status"]["phase"] == "Running").then_some(p)
        });
        ids.push(p["status"]["containerStatuses"][0]["containerID"].clone());
    }

    env.stop_kubelet(Signal::SIGKILL);
    env.start_kubelet_with(&[&kc, "--node-ip=127.0.0.1", "--max-pods=1"]);
    // A new pod proves admission ran after the restart: the node is full.
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&api_pod("third", &env.node, SLEEPER, 1, "")),
    );
    let third = wait_json("third rejected", Duration::from_secs(30), || {
        let p = cp.get_json(&["pod", "third"])?;
        (p["status"]["phase"] == "Failed").then_some(p)
    });
    assert_eq!(third["status"]["reason"], "OutOfpods");
    for (name, id) in ["first", "second"].iter().zip(&ids) {
        let p = cp.get_json(&["pod", name]).unwrap();
        assert_eq!(p["status"]["phase"], "Running", "{name}: {}", p["status"]);
        assert_eq!(
            &p["status"]["containerStatuses"][0]["containerID"], id,
            "{name} was restarted"
        );
    }
    let log = env.kubelet_log();
    for name in ["first", "second"] {
        let pod = format!("pod=\"default/{name}\"");
        assert!(
            !log.lines()
                .any(|l| l.contains("] \"pod rejected\"") && l.contains(&pod)),
            "{}",
            tail(&log, 30)
        );
    }
}

#[tokio::test]
async fn ephemeral_containers_join_the_target_and_never_restart() {
    // Ephemeral containers are alpha in kube-apiserver 1.20 (hack/control-plane.sh enables the
    // gate). What `kubectl debug --target` sends to a pre-1.22 server, sent as is: kubectl 1.32's
    // own fallback to that API fails in its client scheme ("no kind EphemeralContainers").
    let cp = ControlPlane::up("debug");
    let mut env = Env::new(127);
    env.join(&cp, &["--node-labels=rkubelet.test/role=worker"]);
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&api_pod("app", &env.node, SLEEPER, 2, "")),
    );
    wait_json("app Running", Duration::from_secs(30), || {
        let p = cp.get_json(&["pod", "app"])?;
        (p["status"]["phase"] == "Running").then_some(p)
    });
    let ephemeral = serde_json::json!({
        "apiVersion": "v1",
        "kind": "EphemeralContainers",
        "metadata": {"name": "app", "namespace": "default"},
        "ephemeralContainers": [{
            "name": "debugger",
            "image": IMAGE,
            "imagePullPolicy": "IfNotPresent",
            "terminationMessagePolicy": "File",
            "targetContainerName": "main",
            "command": ["sh", "-c", "ps; exit 3"],
        }],
    });
    cp.kubectl_stdin(
        &[
            "replace",
            "--raw",
            "/api/v1/namespaces/default/pods/app/ephemeralcontainers",
            "-f",
            "-",
        ],
        Some(&ephemeral.to_string()),
    );
    let pod = wait_json("debugger ran", Duration::from_secs(30), || {
        let p = cp.get_json(&["pod", "app"])?;
        let st = &p["status"]["ephemeralContainerStatuses"][0];
        st["state"]["terminated"].is_object().then_some(p)
    });
    let st = &pod["status"]["ephemeralContainerStatuses"][0];
    assert_eq!(st["name"], "debugger");
    assert_eq!(st["state"]["terminated"]["exitCode"], 3, "{st}");
    assert_eq!(st["ready"], false);
    // It shared the target's PID namespace: `ps` saw the app's shell loop.
    let uid = pod["metadata"]["uid"].as_str().unwrap();
    // containerd may finish copying its output to the log just after it reports the exit.
    let log_path = env.logs.join(format!("default_app_{uid}/debugger/0.log"));
    wait_until(
        Duration::from_secs(10),
        "'while true' in the debugger's log",
        || {
            let log = std::fs::read_to_string(&log_path).ok()?;
            log.contains("while true").then_some(())
        },
    );
    // Never restarted, whatever its exit; the app was not touched by the spec change.
    std::thread::sleep(Duration::from_secs(4));
    let debuggers = env
        .containers_of(uid)
        .await
        .into_iter()
        .filter(|c| c.metadata.as_ref().is_some_and(|m| m.name == "debugger"))
        .count();
    assert_eq!(debuggers, 1);
    let pod = cp.get_json(&["pod", "app"]).unwrap();
    assert_eq!(
        pod["status"]["ephemeralContainerStatuses"][0]["restartCount"],
        0
    );
    assert_eq!(pod["status"]["containerStatuses"][0]["restartCount"], 0);
    assert_eq!(pod["status"]["phase"], "Running");
}

/// The test harness's kubectl-free reads (`ControlPlane::get_json`) ask for what kubectl would.
#[test]
fn rest_paths_of_kubectl_get() {
    for (args, want) in [
        (
            &["pod", "web"][..],
            Some("/api/v1/namespaces/default/pods/web"),
        ),
        (&["pods"], Some("/api/v1/namespaces/default/pods")),
        (
            &["-n", "kube-system", "pod", "m"],
            Some("/api/v1/namespaces/kube-system/pods/m"),
        ),
        (
            &["pod", "x", "-n", "links"],
            Some("/api/v1/namespaces/links/pods/x"),
        ),
        (&["node", "n1"], Some("/api/v1/nodes/n1")),
        (
            &["lease", "-n", "kube-node-lease", "n1"],
            Some("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1"),
        ),
        (
            &["csinode", "n1"],
            Some("/apis/storage.k8s.io/v1/csinodes/n1"),
        ),
        (
            &[
                "events",
                "-A",
                "--field-selector",
                "involvedObject.kind=Pod,involvedObject.name=a",
            ],
            Some(
                "/api/v1/events?fieldSelector=involvedObject.kind%3DPod%2CinvolvedObject.name%3Da",
            ),
        ),
        (&["pods", "-l", "app=x"], None),
        (&["deployment", "d"], None),
        (&["node", "n1", "-n", "x"], None),
        (&["pod", "a", "b"], None),
    ] {
        assert_eq!(common::rest_path(args).as_deref(), want, "{args:?}");
    }
}
