//! Stats from the cgroups against a real private containerd and this host's cgroup tree (v1 on
//! the host, v2 in hack/vm.sh's guest): a pod's CPU and memory in `/stats/summary` are its pod
//! cgroup's, `systemContainers` are there, `/metrics/cadvisor` has cAdvisor's series and labels
//! for a running pod; and a real Prometheus (the Debian package's binary, its own config and
//! storage, loopback only) scrapes `/metrics`, `/metrics/cadvisor`, `/metrics/resource` and
//! `/metrics/probes` from the 10250 port with the apiserver's kubelet-client certificate and
//! answers queries over them. How long a scrape takes is measured by bench/cadvisor.sh.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use prometheus_parse::{Sample, Scrape, Value};
use serde_json::Value as Json;

fn get(env: &Env, path: &str) -> String {
    let (code, body) = http_get("127.0.0.1", env.ro_port, path).unwrap();
    assert_eq!(code, 200, "{path}: {body}");
    body
}

fn u(v: &Json) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn gauge(s: &Sample) -> f64 {
    match s.value {
        Value::Gauge(v) | Value::Counter(v) | Value::Untyped(v) => v,
        _ => panic!("not a number: {s:?}"),
    }
}

/// Two containers in one BestEffort static pod; `hog` holds ~6 MB in its shell.
const HOG: &str =
    "x=$(head -c 6000000 /dev/zero | tr '\\0' a); trap 'exit 0' TERM; while true; do sleep 1; done";

fn two_containers(name: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: hog
    image: {IMAGE}
    command: ["sh", "-c", {HOG:?}]
  - name: idle
    image: {IMAGE}
    command: ["sh", "-c", {SLEEPER:?}]
"#
    )
}

#[tokio::test]
async fn pod_stats_from_the_pod_cgroup_system_containers_and_cadvisor_series() {
    let mut env = Env::new(206);
    env.start_kubelet();
    env.write_manifest("two.yaml", &two_containers("two"));
    let name = format!("two-{}", env.node);
    let pod = env.wait_running("two");
    let uid = uid(&pod);
    let pod_cgroup = format!("{}/kubepods/besteffort/pod{uid}", env.cgroup_root());
    // The kubelet and the runtime in cgroups of their own, the same in every hierarchy
    // (upstream's `getContainer` takes a process's cgroup only where cpu and memory agree; the
    // test's processes are not so placed on this host). Removed with the Env's cgroup root.
    let kubelet_cg = format!("{}/kubelet", env.cgroup_root());
    let runtime_cg = format!("{}/runtime", env.cgroup_root());
    let containerd_pid: u32 = std::fs::read_to_string(env.dir.join("ctd/containerd.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    cgroupfs::move_into(&kubelet_cg, env.kubelet_pid().unwrap());
    cgroupfs::move_into(&runtime_cg, containerd_pid);

    // The hog's memory is in place once its working set passes 6 MB; the kubelet and the
    // runtime have used CPU and memory in their new cgroups. Memory waits too: on cgroup v2 a
    // moved process's pages stay charged where they were, so the new cgroup's memory.current
    // is 0 until the process faults in new pages (an idle containerd, in the v2 guest, once
    // not within the first read).
    let s: Json = wait_until(Duration::from_secs(60), "the hog's memory", || {
        let s: Json = serde_json::from_str(&get(&env, "/stats/summary")).unwrap();
        let p = s["pods"]
            .as_array()?
            .iter()
            .find(|p| p["podRef"]["uid"] == uid.as_str())?;
        let hog = p["containers"]
            .as_array()?
            .iter()
            .find(|c| c["name"] == "hog")?;
        let sys = s["node"]["systemContainers"].as_array()?;
        let busy = ["kubelet", "runtime"].iter().all(|n| {
            sys.iter().any(|c| {
                c["name"] == *n
                    && c["cpu"]["usageCoreNanoSeconds"].as_u64() > Some(0)
                    && c["memory"]["workingSetBytes"].as_u64() > Some(0)
            })
        });
        (busy && hog["memory"]["workingSetBytes"].as_u64()? > 6_000_000).then(|| s.clone())
    });
    let after_ws = cgroupfs::working_set(&pod_cgroup);
    let after_cpu = cgroupfs::cpu_usage_ns(&pod_cgroup);
    let p = s["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["podRef"]["uid"] == uid.as_str())
        .unwrap();
    let containers = p["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 2, "{p}");
    let sum = |k: &str, f: &str| -> u64 { containers.iter().map(|c| u(&c[k][f])).sum() };
    let (pod_ws, pod_cpu) = (
        u(&p["memory"]["workingSetBytes"]),
        u(&p["cpu"]["usageCoreNanoSeconds"]),
    );
    // The pod cgroup holds both containers and the sandbox: at least their sum (the runtime read
    // the containers before the kubelet read the pod cgroup; CPU only grows), and the pod
    // cgroup's own files, read just after, agree with it.
    assert!(pod_cpu >= sum("cpu", "usageCoreNanoSeconds"), "{p}");
    assert!(
        pod_cpu <= after_cpu,
        "{pod_cpu} > {after_cpu} read later: {p}"
    );
    let containers_ws = sum("memory", "workingSetBytes");
    assert!(
        pod_ws + 1_000_000 >= containers_ws,
        "pod {pod_ws} < containers {containers_ws}: {p}"
    );
    let diff = pod_ws.abs_diff(after_ws);
    assert!(
        diff < 2_000_000,
        "summary {pod_ws} vs the pod cgroup's files {after_ws}: {p}"
    );
    assert!(p["memory"]["usageBytes"].as_u64().unwrap() >= pod_ws, "{p}");
    assert!(p["memory"].get("availableBytes").is_none(), "no limit: {p}");

    // systemContainers: the kubelet's own cgroup, the runtime's (the process serving the CRI
    // socket) and kubepods.
    let sys = s["node"]["systemContainers"]
        .as_array()
        .unwrap_or_else(|| panic!("no systemContainers in {}", s["node"]));
    let by_name = |n: &str| {
        sys.iter()
            .find(|c| c["name"] == n)
            .unwrap_or_else(|| panic!("no {n} system container in {sys:?}"))
    };
    for (n, cg) in [("kubelet", &kubelet_cg), ("runtime", &runtime_cg)] {
        let c = by_name(n);
        assert!(c["startTime"].is_string(), "{c}");
        let cpu = u(&c["cpu"]["usageCoreNanoSeconds"]);
        assert!(cpu > 0 && cpu <= cgroupfs::cpu_usage_ns(cg), "{c}");
        assert!(u(&c["memory"]["workingSetBytes"]) > 0, "{c}");
        assert!(c.get("rootfs").is_none() && c.get("logs").is_none(), "{c}");
    }
    assert_eq!(sys.len(), 3, "kubelet, runtime, pods: {sys:?}");
    let pods_sys = by_name("pods");
    assert!(pods_sys["startTime"].is_string(), "{pods_sys}");
    assert!(
        u(&pods_sys["memory"]["workingSetBytes"]) + 1_000_000 >= pod_ws,
        "{pods_sys}"
    );
    // kubepods is limited to allocatable: its available memory is reported.
    assert!(pods_sys["memory"]["availableBytes"].is_u64(), "{pods_sys}");
    // The rate needs two readings a second apart.
    std::thread::sleep(Duration::from_millis(1100));
    let again: Json = serde_json::from_str(&get(&env, "/stats/summary")).unwrap();
    let p2 = again["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["podRef"]["uid"] == uid.as_str())
        .unwrap();
    assert!(p2["cpu"]["usageNanoCores"].is_u64(), "{p2}");

    // /metrics/resource: the pod's figure is the pod cgroup's too.
    let res = get(&env, "/metrics/resource");
    let res = Scrape::parse(res.lines().map(|l| Ok(l.to_string()))).unwrap();
    let pod_mem = res
        .samples
        .iter()
        .find(|m| m.metric == "pod_memory_working_set_bytes" && m.labels.get("pod") == Some(&name))
        .unwrap_or_else(|| panic!("no pod_memory_working_set_bytes for {name}"));
    let later = cgroupfs::working_set(&pod_cgroup) as f64;
    assert!(
        (gauge(pod_mem) - later).abs() < 2e6,
        "{pod_mem:?} vs {later}"
    );

    // /metrics/cadvisor: cAdvisor's series and labels.
    let text = get(&env, "/metrics/cadvisor");
    let sc = Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("text format");
    let find = |metric: &str, f: &dyn Fn(&Sample) -> bool| -> Vec<&Sample> {
        sc.samples
            .iter()
            .filter(|m| m.metric == metric && f(m))
            .collect()
    };
    let hog_id = container_status(&pod, "hog")
        .container_id
        .clone()
        .unwrap()
        .trim_start_matches("containerd://")
        .to_string();
    let hog = find("container_memory_working_set_bytes", &|m| {
        m.labels.get("pod") == Some(&name) && m.labels.get("container") == Some("hog")
    });
    assert_eq!(hog.len(), 1, "{text}");
    let l = &hog[0].labels;
    assert_eq!(l.get("namespace"), Some("default"));
    assert_eq!(l.get("name"), Some(hog_id.as_str()));
    assert_eq!(
        l.get("id"),
        Some(format!("{pod_cgroup}/{hog_id}").as_str()),
        "{l:?}"
    );
    assert!(
        l.get("image").is_some_and(|i| i.contains("busybox")),
        "{l:?}"
    );
    assert!(gauge(hog[0]) > 6e6, "{:?}", hog[0]);
    // The pod cgroup: container="", its pod's name; the sandbox's cgroup too.
    let pod_rows = find("container_memory_working_set_bytes", &|m| {
        m.labels.get("pod") == Some(&name) && m.labels.get("container") == Some("")
    });
    let ids: Vec<&str> = pod_rows.iter().filter_map(|m| m.labels.get("id")).collect();
    assert!(ids.contains(&pod_cgroup.as_str()), "{ids:?}");
    assert_eq!(pod_rows.len(), 2, "pod cgroup and sandbox: {ids:?}");
    for metric in [
        "container_cpu_usage_seconds_total",
        "container_memory_rss",
        "container_memory_usage_bytes",
        "container_spec_memory_limit_bytes",
    ] {
        let rows = find(metric, &|m| m.labels.get("id") == Some(pod_cgroup.as_str()));
        assert_eq!(rows.len(), 1, "{metric} of the pod cgroup in\n{text}");
    }
    let cpu = find("container_cpu_usage_seconds_total", &|m| {
        m.labels.get("container") == Some("hog")
    });
    assert_eq!(cpu[0].labels.get("cpu"), Some("total"));
    let rx = find("container_network_receive_bytes_total", &|m| {
        m.labels.get("id") == Some(pod_cgroup.as_str())
    });
    assert_eq!(rx.len(), 1, "eth0 only in the pod's namespace: {rx:?}");
    assert_eq!(rx[0].labels.get("interface"), Some("eth0"));
    // The root and kubepods, as cAdvisor exports them.
    for id in ["/".to_string(), format!("{}/kubepods", env.cgroup_root())] {
        let r = find("container_memory_working_set_bytes", &|m| {
            m.labels.get("id") == Some(id.as_str())
        });
        assert_eq!(r.len(), 1, "{id} in\n{text}");
        assert_eq!(r[0].labels.get("pod"), Some(""));
        assert!(gauge(r[0]) > 0.0);
    }
    let root_fs = find("container_fs_usage_bytes", &|m| {
        m.labels.get("id") == Some("/")
    });
    assert!(root_fs.len() == 1 && gauge(root_fs[0]) > 0.0, "{root_fs:?}");
    let cores = find("machine_cpu_cores", &|_| true);
    assert!(cores.len() == 1 && gauge(cores[0]) >= 1.0, "{cores:?}");
    let mem = find("machine_memory_bytes", &|_| true);
    assert!(mem.len() == 1 && gauge(mem[0]) > 1e8, "{mem:?}");
    for want in [
        "# TYPE container_memory_working_set_bytes gauge",
        "# TYPE container_cpu_usage_seconds_total counter",
        "# HELP container_memory_working_set_bytes Current working set in bytes.",
    ] {
        assert!(text.contains(want), "{want} in\n{text}");
    }
}

/// The Prometheus binary, killed and its directory removed on drop.
struct Prometheus {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Prometheus {
    fn start(dir: &Path, port: u16, kubelet: u16, cert: &Path, key: &Path) -> Prometheus {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir.join("data")).unwrap();
        // 1 s on a real machine. In the emulated guest (RK_TEST_PATIENCE) a debug kubelet's
        // /metrics/cadvisor can take longer than 1 s under load; a scrape that times out marks
        // its target down, and the test needs all four up at once.
        let every = patience(Duration::from_secs(1)).as_secs();
        let mut cfg = format!(
            "global:\n  scrape_interval: {every}s\n  scrape_timeout: {every}s\nscrape_configs:\n"
        );
        for (job, path) in [
            ("kubelet", "/metrics"),
            ("cadvisor", "/metrics/cadvisor"),
            ("resource", "/metrics/resource"),
            ("probes", "/metrics/probes"),
        ] {
            cfg += &format!(
                "- job_name: {job}\n  scheme: https\n  metrics_path: {path}\n  tls_config:\n    cert_file: {}\n    key_file: {}\n    insecure_skip_verify: true\n  static_configs:\n  - targets: ['127.0.0.1:{kubelet}']\n",
                cert.display(),
                key.display()
            );
        }
        let cfg_path = dir.join("prometheus.yml");
        std::fs::write(&cfg_path, cfg).unwrap();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", cfg_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .expect("run prometheus (hack/install-deps.sh installs it)");
        Prometheus {
            child,
            dir: dir.to_path_buf(),
            port,
        }
    }

    /// An instant query's result vector (empty while Prometheus is not up yet).
    fn query(&self, q: &str) -> Vec<Json> {
        let enc = query_escape(q);
        let Ok((200, body)) = http_get(
            "127.0.0.1",
            self.port,
            &format!("/api/v1/query?query={enc}"),
        ) else {
            return Vec::new();
        };
        let v: Json = serde_json::from_str(&body).unwrap_or_default();
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }
}

#[tokio::test]
async fn prometheus_scrapes_every_metrics_endpoint_over_tls() {
    let cp = ControlPlane::up("cadv");
    let mut env = Env::new(205);
    // The runtime's cgroup named: upstream's `--runtime-cgroups` (here the root, a superset of
    // kubepods, so the figures can be related).
    env.join(&cp, &["--runtime-cgroups=/"]);
    let node = env.node.clone();
    cp.kubectl_stdin(
        &["apply", "-f", "-"],
        Some(&api_pod(
            "prom-web",
            &node,
            SLEEPER,
            1,
            "    resources:\n      limits: {cpu: 200m, memory: 64Mi}\n    readinessProbe:\n      exec: {command: [\"true\"]}\n      periodSeconds: 1\n",
        )),
    );
    cp.wait_running("prom-web");
    let s: Json = serde_json::from_str(&get(&env, "/stats/summary")).unwrap();
    let sys = s["node"]["systemContainers"].as_array().unwrap();
    let ws = |n: &str| {
        let c = sys.iter().find(|c| c["name"] == n);
        c.map(|c| u(&c["memory"]["workingSetBytes"]))
            .unwrap_or_else(|| panic!("no {n} in {sys:?}"))
    };
    assert!(
        ws("runtime") > ws("pods"),
        "the root holds kubepods: {sys:?}"
    );
    let pki = cp.dir.join("pki");
    let prom = Prometheus::start(
        &env.dir.join("prometheus"),
        10_000 + 4 * u16::try_from(env.index).unwrap() + 3,
        env.port,
        &pki.join("apiserver-kubelet-client.crt"),
        &pki.join("apiserver-kubelet-client.key"),
    );
    // Every target scraped successfully.
    let up = wait_until(Duration::from_secs(60), "every target up", || {
        let r = prom.query("up");
        let ok = r.len() == 4 && r.iter().all(|s| s["value"][1] == "1");
        ok.then_some(r)
    });
    let jobs: Vec<&str> = up
        .iter()
        .filter_map(|s| s["metric"]["job"].as_str())
        .collect();
    for j in ["kubelet", "cadvisor", "resource", "probes"] {
        assert!(jobs.contains(&j), "{j} in {up:?}\n{}", prom.log());
    }
    // The pod's working set, through Prometheus.
    let ws = wait_until(Duration::from_secs(30), "the pod's working set", || {
        let r =
            prom.query(r#"container_memory_working_set_bytes{pod="prom-web",container="main"}"#);
        (!r.is_empty()).then_some(r)
    });
    let v: f64 = ws[0]["value"][1].as_str().unwrap().parse().unwrap();
    assert!(v > 0.0, "{ws:?}");
    assert_eq!(ws[0]["metric"]["namespace"], "default", "{ws:?}");
    // Guaranteed (limits only): the pod cgroup sits right under kubepods, with its limit.
    let pod_limit = prom.query(r#"container_spec_memory_limit_bytes{pod="prom-web",container=""}"#);
    let limits: Vec<f64> = pod_limit
        .iter()
        .filter_map(|s| s["value"][1].as_str()?.parse().ok())
        .collect();
    assert!(limits.contains(&(64.0 * 1024.0 * 1024.0)), "{pod_limit:?}");
    let throttled =
        prom.query(r#"container_cpu_cfs_throttled_periods_total{pod="prom-web",container="main"}"#);
    assert_eq!(throttled.len(), 1, "a CFS quota: {throttled:?}");
    // Each endpoint's own series arrived.
    for q in [
        r#"pod_memory_working_set_bytes{pod="prom-web"}"#,
        r#"prober_probe_total{pod="prom-web",probe_type="Readiness"}"#,
        "kubelet_running_pods",
    ] {
        let r = wait_until(Duration::from_secs(30), q, || {
            let r = prom.query(q);
            (!r.is_empty()).then_some(r)
        });
        assert!(r[0]["value"][1].is_string(), "{q}: {r:?}");
    }
}
