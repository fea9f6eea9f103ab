//! Device plugins and the pod-resources API (issue 19) against a real kube-apiserver 1.20 and
//! containerd, with upstream's own `test/images/sample-device-plugin` (built from the same
//! Debian source as the apiserver, hack/control-plane.sh sample-device-plugin-bin) and a device
//! plugin written here for what the sample cannot do (envs, annotations, PreStartContainer, a
//! failing Allocate).
//!
//! The sample plugin registers on upstream's fixed `/var/lib/kubelet/device-plugins/kubelet.sock`;
//! it runs in a private mount namespace where that directory is this rkubelet's
//! `<root-dir>/device-plugins`, so nothing of the host's /var/lib is touched. It makes its fake
//! devices as /tmp/Dev-1 and /tmp/Dev-2 on the host (removed at the end).

mod common;
mod device_plugin;

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use device_plugin::{channel, device, TestPlugin};
use kubelet::podresources::v1 as pr;
use tonic::transport::Channel;

const SAMPLE: &str = "example.com/resource";
const ENV_RES: &str = "test.rkubelet.io/env";
const BROKEN_RES: &str = "test.rkubelet.io/broken";

/// Upstream's sample plugin in its own mount namespace; killed on drop.
struct SamplePlugin {
    child: Child,
}

impl SamplePlugin {
    fn start(env: &Env) -> SamplePlugin {
        let out = Command::new(repo_root().join("hack/control-plane.sh"))
            .arg("sample-device-plugin-bin")
            .output()
            .expect("hack/control-plane.sh sample-device-plugin-bin");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let bin = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let dir = env.root.join("device-plugins");
        let script = format!(
            "mount -t tmpfs tmpfs /var/lib && mkdir -p /var/lib/kubelet/device-plugins && \
             mount --bind {dir:?} /var/lib/kubelet/device-plugins && exec {bin:?} --v=4"
        );
        let log = std::fs::File::create(env.dir.join("sample-plugin.log")).unwrap();
        let child = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .env("PLUGIN_SOCK_DIR", "/var/lib/kubelet/device-plugins")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .expect("unshare");
        SamplePlugin { child }
    }

    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for SamplePlugin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Removes the sample plugin's fake device files.
struct DevFiles;

impl Drop for DevFiles {
    fn drop(&mut self) {
        for d in ["/tmp/Dev-1", "/tmp/Dev-2"] {
            let _ = std::fs::remove_file(d);
        }
    }
}

async fn pod_resources(
    env: &Env,
) -> pr::pod_resources_lister_client::PodResourcesListerClient<Channel> {
    pr::pod_resources_lister_client::PodResourcesListerClient::new(
        channel(env.root.join("pod-resources/kubelet.sock")).await,
    )
}

/// `(capacity, allocatable)` of `resource` on the Node, as strings.
fn node_resource(cp: &ControlPlane, node: &str, resource: &str) -> (String, String) {
    let n = cp.get_json(&["node", node]).unwrap_or_default();
    let get = |f: &str| n["status"][f][resource].as_str().unwrap_or("").to_string();
    (get("capacity"), get("allocatable"))
}

fn wait_node_resource(cp: &ControlPlane, node: &str, resource: &str, want: (&str, &str)) {
    wait_until(
        Duration::from_secs(60),
        &format!("{resource} {want:?} on the Node"),
        || {
            let got = node_resource(cp, node, resource);
            (got.0 == want.0 && got.1 == want.1).then_some(())
        },
    );
}

fn device_pod(name: &str, node: &str, resource: &str) -> String {
    api_pod(
        name,
        node,
        SLEEPER,
        2,
        &format!("    resources:\n      limits: {{{resource:?}: 1}}\n"),
    )
}

/// Waits for the pod to be rejected; returns `(reason, message)`.
fn wait_rejected(cp: &ControlPlane, name: &str) -> (String, String) {
    wait_until(Duration::from_secs(60), &format!("{name} rejected"), || {
        let p = cp.get_json(&["pod", name])?;
        (p["status"]["phase"] == "Failed").then(|| {
            (
                p["status"]["reason"].as_str().unwrap_or("").to_string(),
                p["status"]["message"].as_str().unwrap_or("").to_string(),
            )
        })
    })
}

/// For bench/ figures (printed, never asserted): per pod, the kubelet's time from `pod added`
/// to `allocated devices` (admission with the device plugin's Allocate) and to its container's
/// `started container`.
fn print_start_timeline(log: &str, pods: &[&str]) {
    let at = |needle: &str, pod: &str| {
        log.lines()
            .find(|l| l.contains(needle) && (l.contains(pod) || l.contains("pod_uid")))
            .and_then(klog::time_of)
    };
    for pod in pods {
        let quoted = format!("pod=\"{pod}\"");
        let Some(added) = at("] \"pod added\"", &quoted) else {
            continue;
        };
        let since = |t: Option<std::time::SystemTime>| t.and_then(|t| t.duration_since(added).ok());
        let allocated = if pod.ends_with("dev-a") {
            since(at("] \"allocated devices\"", ""))
        } else {
            None
        };
        let started = since(at("] \"started container\"", &quoted));
        eprintln!("timeline {pod}: admitted+allocated after {allocated:?}, container started after {started:?}");
    }
}

fn pod_object(cp: &ControlPlane, name: &str) -> k8s_openapi::api::core::v1::Pod {
    serde_json::from_value(cp.get_json(&["pod", name]).expect("pod")).expect("a Pod")
}

/// pod name -> device IDs of `resource` in the pod-resources `List`.
async fn listed(env: &Env, resource: &str) -> BTreeMap<String, Vec<String>> {
    let mut client = pod_resources(env).await;
    let list = client
        .list(pr::ListPodResourcesRequest {})
        .await
        .expect("List")
        .into_inner();
    list.pod_resources
        .into_iter()
        .filter_map(|p| {
            let ids: Vec<String> = p
                .containers
                .iter()
                .flat_map(|c| &c.devices)
                .filter(|d| d.resource_name == resource)
                .flat_map(|d| d.device_ids.clone())
                .collect();
            (!ids.is_empty()).then_some((p.name, ids))
        })
        .collect()
}

// Multi-threaded: the test's own plugins must answer while the test thread blocks in waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_plugins_allocate_checkpoint_and_pod_resources() {
    let _files = DevFiles;
    let cp = ControlPlane::up("devices");
    let mut env = Env::new(157);
    env.extra_config = "nodeStatusUpdateFrequency: 1s\n".into();
    env.join(&cp, &[]);
    let node = env.node.clone();
    let plugins_dir = env.root.join("device-plugins");

    // Upstream's sample plugin registers; its two devices show on the Node.
    let sample = SamplePlugin::start(&env);
    wait_node_resource(&cp, &node, SAMPLE, ("2", "2"));

    // A pod asking for one gets a device and the plugin's mount of its fake device file.
    let t0 = Instant::now();
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&device_pod("dev-a", &node, SAMPLE)),
    );
    cp.wait_running("dev-a");
    let dev_pod_start = t0.elapsed();
    let t0 = Instant::now();
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&api_pod("plain", &node, SLEEPER, 2, "")),
    );
    cp.wait_running("plain");
    let plain_pod_start = t0.elapsed();
    eprintln!("start to running: device pod {dev_pod_start:?}, plain pod {plain_pod_start:?}");
    print_start_timeline(&env.kubelet_log(), &["default/dev-a", "default/plain"]);
    let a_dev = listed(&env, SAMPLE).await["dev-a"].clone();
    assert_eq!(a_dev.len(), 1, "{a_dev:?}");
    let pod_a = pod_object(&cp, "dev-a");
    let (code, out) = exec_in(&env, &pod_a, "main", &["ls", "/tmp"]).await;
    assert_eq!(code, 0, "{out}");
    assert!(
        out.lines().any(|l| l.trim() == a_dev[0]),
        "{} not mounted: {out}",
        a_dev[0]
    );

    // The second device goes to a second pod; a third pod is beyond capacity.
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&device_pod("dev-b", &node, SAMPLE)),
    );
    cp.wait_running("dev-b");
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&device_pod("dev-c", &node, SAMPLE)),
    );
    let (reason, message) = wait_rejected(&cp, "dev-c");
    assert_eq!(reason, "UnexpectedAdmissionError");
    assert_eq!(
        message,
        "Pod was rejected: Allocate failed due to requested number of devices unavailable for \
         example.com/resource. Requested: 1, Available: 0, which is unexpected"
    );

    // The pod-resources API: both assignments, distinct; both devices allocatable; Get.
    let by_pod = listed(&env, SAMPLE).await;
    let b_dev = by_pod["dev-b"].clone();
    assert_ne!(a_dev, b_dev);
    assert!(!by_pod.contains_key("dev-c"), "{by_pod:?}");
    let mut client = pod_resources(&env).await;
    let alloc = client
        .get_allocatable_resources(pr::AllocatableResourcesRequest {})
        .await
        .expect("GetAllocatableResources")
        .into_inner();
    let mut ids: Vec<String> = alloc
        .devices
        .iter()
        .filter(|d| d.resource_name == SAMPLE)
        .flat_map(|d| d.device_ids.clone())
        .collect();
    ids.sort();
    assert_eq!(ids, vec!["Dev-1", "Dev-2"]);
    let got = client
        .get(pr::GetPodResourcesRequest {
            pod_name: "dev-a".into(),
            pod_namespace: "default".into(),
        })
        .await
        .expect("Get")
        .into_inner()
        .pod_resources
        .expect("pod_resources");
    assert_eq!(got.containers[0].devices[0].device_ids, a_dev);
    let missing = client
        .get(pr::GetPodResourcesRequest {
            pod_name: "nope".into(),
            pod_namespace: "default".into(),
        })
        .await
        .expect_err("Get of a missing pod");
    assert_eq!(missing.message(), "pod nope in namespace default not found");

    // The checkpoint, in upstream's format, holds both assignments.
    let cpt: serde_json::Value = serde_json::from_slice(
        &std::fs::read(plugins_dir.join("kubelet_internal_checkpoint")).unwrap(),
    )
    .unwrap();
    let entries = cpt["Data"]["PodDeviceEntries"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(entries.len(), 2, "{cpt}");
    assert!(cpt["Checksum"].is_u64(), "{cpt}");

    // The plugin dies: its devices turn unhealthy, allocatable drops, capacity stays.
    sample.kill();
    wait_node_resource(&cp, &node, SAMPLE, ("2", "0"));

    // rkubelet restarts: the running pods keep their devices (from the checkpoint), the
    // restarted plugin registers again, and no device is handed out twice.
    env.stop_kubelet(nix::sys::signal::Signal::SIGTERM);
    env.join(&cp, &[]);
    let sample = SamplePlugin::start(&env);
    wait_node_resource(&cp, &node, SAMPLE, ("2", "2"));
    let by_pod = listed(&env, SAMPLE).await;
    assert_eq!(by_pod.get("dev-a"), Some(&a_dev), "{by_pod:?}");
    assert_eq!(by_pod.get("dev-b"), Some(&b_dev), "{by_pod:?}");
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&device_pod("dev-d", &node, SAMPLE)),
    );
    let (reason, _) = wait_rejected(&cp, "dev-d");
    assert_eq!(reason, "UnexpectedAdmissionError");
    // Freed by a deleted pod, a device goes to the next one.
    cp.kubectl(&["delete", "pod", "dev-b", "--wait=true", "--timeout=60s"]);
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&device_pod("dev-e", &node, SAMPLE)),
    );
    cp.wait_running("dev-e");
    assert_eq!(listed(&env, SAMPLE).await.get("dev-e"), Some(&b_dev));
    sample.kill();

    // A plugin of this test: envs and annotations from Allocate, PreStartContainer called.
    let plugin = TestPlugin {
        devices: vec![device("t-1", None)],
        pre_start_required: true,
        ..Default::default()
    };
    let pre_starts = plugin.pre_starts.clone();
    let serving = plugin.run(&plugins_dir, "test-env.sock", ENV_RES).await;
    wait_node_resource(&cp, &node, ENV_RES, ("1", "1"));
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&device_pod("dev-env", &node, ENV_RES)),
    );
    cp.wait_running("dev-env");
    let pod = pod_object(&cp, "dev-env");
    let (_, out) = exec_in(&env, &pod, "main", &["sh", "-c", "echo $TEST_DEVICES"]).await;
    assert_eq!(out.trim(), "t-1");
    assert_eq!(*pre_starts.lock().unwrap(), vec![vec!["t-1".to_string()]]);
    let created = env.containers_of(&uid(&pod)).await;
    let status = env
        .cri()
        .container_status(rkubelet_cri::api::ContainerStatusRequest {
            container_id: created[0].id.clone(),
            verbose: false,
        })
        .await
        .unwrap();
    let annotations = status.status.map(|s| s.annotations).unwrap_or_default();
    assert_eq!(
        annotations
            .get("test.rkubelet.io/devices")
            .map(String::as_str),
        Some("t-1")
    );
    serving.abort();

    // A plugin whose Allocate fails: the pod is rejected with the plugin's error.
    let broken = TestPlugin {
        devices: vec![device("t-1", None)],
        broken: true,
        ..Default::default()
    };
    let serving = broken
        .run(&plugins_dir, "test-broken.sock", BROKEN_RES)
        .await;
    wait_node_resource(&cp, &node, BROKEN_RES, ("1", "1"));
    cp.kubectl_stdin(
        &["create", "-f", "-"],
        Some(&device_pod("dev-broken", &node, BROKEN_RES)),
    );
    let (reason, message) = wait_rejected(&cp, "dev-broken");
    assert_eq!(reason, "UnexpectedAdmissionError");
    assert_eq!(
        message,
        "Pod was rejected: Allocate failed due to rpc error: code = Unknown desc = the device \
         caught fire, which is unexpected"
    );
    serving.abort();
}
