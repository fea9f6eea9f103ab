//! Container config against a real containerd: environment and `$(VAR)` expansion, image
//! ENTRYPOINT/CMD rules, security context, runAsNonRoot, /etc/hosts, resolv.conf and sysctls,
//! each observed from inside the container (CRI exec) or in the pod status.

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Pod;

fn cpus() -> usize {
    std::fs::read_to_string("/proc/cpuinfo")
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count()
        .max(1)
}

/// The CRI log lines' text of one container instance (`<ts> <stream> <tag> <text>`).
fn log_text(env: &Env, pod: &Pod, container: &str) -> String {
    let path = env.logs.join(format!(
        "default_{}_{}/{container}/0.log",
        pod.metadata.name.as_deref().unwrap(),
        uid(pod)
    ));
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.splitn(4, ' ').nth(3))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn env_values_downward_api_and_expansion() {
    let mut env = Env::new(141);
    env.start_kubelet_with(&["--node-ip=192.0.2.10"]);
    env.write_manifest(
        "envs.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: envs
  labels: {{app: envs, tier: web}}
  annotations: {{note: hello}}
spec:
  terminationGracePeriodSeconds: 2
  serviceAccountName: builder
  containers:
  - name: main
    image: {IMAGE}
    workingDir: /tmp
    command: ["sh", "-c", "printf '%s|' \"$@\" > cmd; pwd > wd; {SLEEPER}", "sh"]
    args: ["$(GREETING)", "$$(POD_NAME)", "$(MISSING)"]
    resources:
      limits: {{memory: 64Mi}}
    env:
    - {{name: POD_NAME, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}
    - {{name: POD_NS, valueFrom: {{fieldRef: {{fieldPath: metadata.namespace}}}}}}
    - {{name: POD_UID, valueFrom: {{fieldRef: {{fieldPath: metadata.uid}}}}}}
    - {{name: TIER, valueFrom: {{fieldRef: {{fieldPath: "metadata.labels['tier']"}}}}}}
    - {{name: NOTE, valueFrom: {{fieldRef: {{fieldPath: "metadata.annotations['note']"}}}}}}
    - {{name: NODE, valueFrom: {{fieldRef: {{fieldPath: spec.nodeName}}}}}}
    - {{name: SA, valueFrom: {{fieldRef: {{fieldPath: spec.serviceAccountName}}}}}}
    - {{name: POD_IP, valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}}}
    - {{name: HOST_IP, valueFrom: {{fieldRef: {{fieldPath: status.hostIP}}}}}}
    - {{name: MEM_MI, valueFrom: {{resourceFieldRef: {{resource: limits.memory, divisor: 1Mi}}}}}}
    - {{name: CPU_M, valueFrom: {{resourceFieldRef: {{resource: limits.cpu, divisor: 1m}}}}}}
    - {{name: EARLY, value: "$(GREETING)"}}
    - {{name: GREETING, value: "hello-$(POD_NAME)"}}
    - {{name: ESCAPED, value: "$$(POD_NAME)"}}
"#
        ),
    );
    let pod = env.wait_running("envs");
    let pod_ip = pod.status.as_ref().unwrap().pod_ip.clone().unwrap();
    let (code, out) = exec_in(&env, &pod, "main", &["env"]).await;
    assert_eq!(code, 0, "{out}");
    let vars: std::collections::HashMap<&str, &str> =
        out.lines().filter_map(|l| l.split_once('=')).collect();
    let name = pod.metadata.name.clone().unwrap();
    let want = [
        ("POD_NAME", name.as_str()),
        ("POD_NS", "default"),
        ("POD_UID", uid(&pod).leak()),
        ("TIER", "web"),
        ("NOTE", "hello"),
        ("NODE", env.node.as_str()),
        ("SA", "builder"),
        ("POD_IP", pod_ip.as_str()),
        ("HOST_IP", "192.0.2.10"),
        ("MEM_MI", "64"),
        // No cpu limit: node allocatable (all CPUs) stands in, as upstream.
        ("CPU_M", (cpus() * 1000).to_string().leak()),
        // Only earlier variables expand; the later GREETING is not seen.
        ("EARLY", "$(GREETING)"),
        ("GREETING", format!("hello-{name}").leak()),
        ("ESCAPED", "$(POD_NAME)"),
    ];
    for (k, v) in want {
        assert_eq!(vars.get(k).copied(), Some(v), "{k} in\n{out}");
    }
    let (_, cmd) = exec_in(&env, &pod, "main", &["cat", "/tmp/cmd", "/tmp/wd"]).await;
    assert_eq!(
        cmd,
        format!("hello-{name}|$(POD_NAME)|$(MISSING)|/tmp\n"),
        "command expansion and workingDir"
    );
}

#[tokio::test]
async fn image_entrypoint_and_cmd_rules() {
    let mut env = Env::new(142);
    env.start_kubelet();
    // The image: ENTRYPOINT ["/bin/echo", "from-entrypoint"], CMD ["default-cmd"].
    env.write_manifest(
        "ep.yaml",
        r#"apiVersion: v1
kind: Pod
metadata: {name: ep}
spec:
  restartPolicy: Never
  containers:
  - {name: neither, image: "rkubelet.local/busybox-entrypoint:1.35"}
  - {name: args, image: "rkubelet.local/busybox-entrypoint:1.35", args: ["my-arg"]}
  - {name: command, image: "rkubelet.local/busybox-entrypoint:1.35", command: ["/bin/echo", "my-cmd"]}
  - {name: both, image: "rkubelet.local/busybox-entrypoint:1.35", command: ["/bin/echo"], args: ["c", "a"]}
"#,
    );
    let pod = env.wait_pod("ep", Duration::from_secs(40), "Succeeded", |p| {
        (p.status.as_ref()?.phase.as_deref() == Some("Succeeded")).then(|| p.clone())
    });
    for (c, want) in [
        ("neither", "from-entrypoint default-cmd"),
        ("args", "from-entrypoint my-arg"),
        ("command", "my-cmd"),
        ("both", "c a"),
    ] {
        // containerd copies a container's output to its log on its own, and may finish that
        // just after it reports the exit: the log is read until it has a line.
        let got = wait_until(
            Duration::from_secs(10),
            &format!("a log line of {c}"),
            || Some(log_text(&env, &pod, c)).filter(|t| !t.is_empty()),
        );
        assert_eq!(got, want, "container {c}");
    }
}

#[tokio::test]
async fn security_context_reaches_the_process() {
    let mut env = Env::new(143);
    env.start_kubelet();
    env.write_manifest(
        "sec.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: sec}}
spec:
  terminationGracePeriodSeconds: 2
  securityContext:
    runAsUser: 1000
    runAsGroup: 3000
    fsGroup: 2000
    supplementalGroups: [4000]
  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", {SLEEPER:?}]
    securityContext:
      runAsUser: 65534
      readOnlyRootFilesystem: true
      allowPrivilegeEscalation: false
      capabilities: {{drop: [ALL], add: [NET_BIND_SERVICE]}}
  - name: caps
    image: {IMAGE}
    command: ["sh", "-c", {SLEEPER:?}]
    securityContext:
      runAsUser: 0
      capabilities: {{drop: [ALL], add: [NET_BIND_SERVICE]}}
  - name: strict
    image: {IMAGE}
    command: ["sh", "-c", {SLEEPER:?}]
    securityContext:
      seccompProfile: {{type: RuntimeDefault}}
"#
        ),
    );
    let pod = env.wait_running("sec");
    let (_, id) = exec_in(&env, &pod, "main", &["id"]).await;
    // Container runAsUser over the pod's; the pod's group, fsGroup and supplementalGroups.
    assert!(id.starts_with("uid=65534(nobody) gid=3000"), "{id}");
    assert!(id.contains("2000") && id.contains("4000"), "{id}");
    let (code, out) = exec_in(&env, &pod, "main", &["touch", "/written"]).await;
    assert_ne!(
        code, 0,
        "write to a read-only root filesystem succeeded: {out}"
    );
    assert!(out.contains("Read-only file system"), "{out}");
    let (_, status) = exec_in(&env, &pod, "main", &["cat", "/proc/self/status"]).await;
    let field = |s: &str, k: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}:")))
            .map(|v| v.trim().to_string())
            .unwrap_or_default()
    };
    // Only CAP_NET_BIND_SERVICE (bit 10) is left; a non-root user has none effective.
    assert_eq!(field(&status, "CapBnd"), "0000000000000400", "{status}");
    assert_eq!(field(&status, "CapEff"), "0000000000000000", "{status}");
    let (_, caps) = exec_in(&env, &pod, "caps", &["cat", "/proc/self/status"]).await;
    assert_eq!(field(&caps, "CapEff"), "0000000000000400", "{caps}");
    assert_eq!(field(&status, "NoNewPrivs"), "1");
    // No seccomp profile means Unconfined; RuntimeDefault is filtered (mode 2).
    assert_eq!(field(&status, "Seccomp"), "0");
    let (_, strict) = exec_in(&env, &pod, "strict", &["cat", "/proc/self/status"]).await;
    assert_eq!(field(&strict, "Seccomp"), "2", "{strict}");
    assert_eq!(field(&strict, "NoNewPrivs"), "0");
    // Pod-level runAsUser applies where the container sets none.
    let (_, id) = exec_in(&env, &pod, "strict", &["id", "-u"]).await;
    assert_eq!(id.trim(), "1000");
    // Default masked and read-only paths: /proc/keys is covered, /proc/sys mounted read-only.
    let (_, mounts) = exec_in(&env, &pod, "strict", &["cat", "/proc/self/mountinfo"]).await;
    assert!(mounts.contains(" /proc/keys "), "{mounts}");
    let sys = mounts
        .lines()
        .find(|l| l.split(' ').nth(4) == Some("/proc/sys"))
        .unwrap_or_else(|| panic!("/proc/sys not mounted: {mounts}"));
    assert!(sys.split(' ').nth(5).unwrap().starts_with("ro"), "{sys}");
}

#[tokio::test]
async fn run_as_non_root_checks_the_image_user() {
    let mut env = Env::new(144);
    env.start_kubelet();
    let non_root = |name: &str, image: &str| {
        format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  terminationGracePeriodSeconds: 2
  securityContext: {{runAsNonRoot: true}}
  containers:
  - name: main
    image: {image}
    command: ["sh", "-c", {SLEEPER:?}]
"#
        )
    };
    env.write_manifest("root.yaml", &non_root("root", IMAGE));
    env.write_manifest(
        "nonroot.yaml",
        &non_root("nonroot", "rkubelet.local/busybox-nonroot:1.35"),
    );
    let ok = env.wait_running("nonroot");
    let (_, id) = exec_in(&env, &ok, "main", &["id", "-u"]).await;
    assert_eq!(id.trim(), "1000", "the image's user");
    let (reason, message) = env.wait_pod(
        "root",
        Duration::from_secs(30),
        "CreateContainerConfigError",
        |p| {
            let w = find_container_status(p, "main")?
                .state
                .as_ref()?
                .waiting
                .clone()?;
            (w.reason.as_deref() == Some("CreateContainerConfigError"))
                .then(|| (w.reason.unwrap(), w.message.unwrap_or_default()))
        },
    );
    assert_eq!(reason, "CreateContainerConfigError");
    let root = env.pod("root").unwrap();
    assert_eq!(
        message,
        format!(
            "container has runAsNonRoot and image will run as root (pod: \"{}_default({})\", container: main)",
            root.metadata.name.as_deref().unwrap(),
            uid(&root)
        )
    );
    assert!(
        env.containers_of(&uid(&root)).await.is_empty(),
        "no container was created"
    );
}

#[tokio::test]
async fn etc_hosts_and_resolv_conf() {
    let mut env = Env::new(145);
    env.start_kubelet();
    env.write_manifest(
        "dns.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: dns}}
spec:
  terminationGracePeriodSeconds: 2
  hostname: myhost
  hostAliases:
  - {{ip: 10.1.2.3, hostnames: [foo.local, bar.local]}}
  dnsPolicy: "None"
  dnsConfig:
    nameservers: [9.9.9.9]
    searches: [my.search.example]
    options: [{{name: ndots, value: "2"}}, {{name: edns0}}]
  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", {SLEEPER:?}]
"#
        ),
    );
    let pod = env.wait_running("dns");
    let ip = pod.status.as_ref().unwrap().pod_ip.clone().unwrap();
    let (_, hosts) = exec_in(&env, &pod, "main", &["cat", "/etc/hosts"]).await;
    let want = format!(
        "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n\
         fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n\
         {ip}\tmyhost\n\n# Entries added by HostAliases.\n10.1.2.3\tfoo.local\tbar.local\n"
    );
    assert_eq!(hosts, want);
    let on_disk = env.root.join(format!("pods/{}/etc-hosts", uid(&pod)));
    assert_eq!(std::fs::read_to_string(on_disk).unwrap(), want);
    let (_, resolv) = exec_in(&env, &pod, "main", &["cat", "/etc/resolv.conf"]).await;
    assert!(resolv.contains("nameserver 9.9.9.9"), "{resolv}");
    assert!(resolv.contains("search my.search.example"), "{resolv}");
    assert!(resolv.contains("options ndots:2 edns0"), "{resolv}");
    assert_eq!(resolv.matches("nameserver").count(), 1, "{resolv}");
}

#[tokio::test]
async fn sysctls_safe_applied_unsafe_rejected() {
    let mut env = Env::new(146);
    env.start_kubelet_with(&["--allowed-unsafe-sysctls=net.core.somaxconn"]);
    let with_sysctl = |name: &str, sysctl: &str, value: &str| {
        format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  terminationGracePeriodSeconds: 2
  securityContext:
    sysctls: [{{name: "{sysctl}", value: "{value}"}}]
  containers:
  - name: main
    image: {IMAGE}
    command: ["sh", "-c", {SLEEPER:?}]
"#
        )
    };
    env.write_manifest(
        "safe.yaml",
        &with_sysctl("safe", "net.ipv4.ip_unprivileged_port_start", "100"),
    );
    env.write_manifest(
        "allowed.yaml",
        &with_sysctl("allowed", "net/core/somaxconn", "777"),
    );
    env.write_manifest(
        "unsafe.yaml",
        &with_sysctl("unsafe", "kernel.msgmax", "9000"),
    );
    let safe = env.wait_running("safe");
    let (_, v) = exec_in(
        &env,
        &safe,
        "main",
        &["cat", "/proc/sys/net/ipv4/ip_unprivileged_port_start"],
    )
    .await;
    assert_eq!(v.trim(), "100");
    let allowed = env.wait_running("allowed");
    let (_, v) = exec_in(
        &env,
        &allowed,
        "main",
        &["cat", "/proc/sys/net/core/somaxconn"],
    )
    .await;
    assert_eq!(v.trim(), "777");
    let st = env.wait_pod("unsafe", Duration::from_secs(20), "rejected", |p| {
        let s = p.status.clone()?;
        (s.phase.as_deref() == Some("Failed")).then_some(s)
    });
    assert_eq!(st.reason.as_deref(), Some("SysctlForbidden"));
    assert_eq!(
        st.message.as_deref(),
        Some("Pod was rejected: forbidden sysctl: \"kernel.msgmax\" not allowlisted")
    );
    let rejected = env.pod("unsafe").unwrap();
    assert!(env.sandboxes_of(&uid(&rejected)).await.is_empty());
}

#[tokio::test]
async fn cluster_first_dns_and_host_network_hosts() {
    let mut env = Env::new(147);
    env.start_kubelet_with(&["--cluster-dns=10.96.0.10", "--cluster-domain=cluster.local"]);
    env.write_manifest("cf.yaml", &simple_pod("cf", "Always", SLEEPER));
    let host_net = simple_pod("hn", "Always", SLEEPER).replace(
        "  restartPolicy: Always\n",
        "  restartPolicy: Always\n  hostNetwork: true\n  hostAliases:\n  - {ip: 10.9.9.9, hostnames: [alias.local]}\n",
    );
    env.write_manifest("hn.yaml", &host_net);
    let cf = env.wait_running("cf");
    let (_, resolv) = exec_in(&env, &cf, "main", &["cat", "/etc/resolv.conf"]).await;
    assert!(resolv.contains("nameserver 10.96.0.10"), "{resolv}");
    assert!(
        resolv.contains("search default.svc.cluster.local svc.cluster.local cluster.local"),
        "{resolv}"
    );
    assert!(resolv.contains("options ndots:5"), "{resolv}");

    // Host network: the node's /etc/hosts under upstream's header, plus the aliases; DNS is the
    // node's (ClusterFirst falls back to Default there).
    let hn = env.wait_running("hn");
    let (_, hosts) = exec_in(&env, &hn, "main", &["cat", "/etc/hosts"]).await;
    let node_hosts = std::fs::read_to_string("/etc/hosts").unwrap();
    assert_eq!(
        hosts,
        format!(
            "# Kubernetes-managed hosts file (host network).\n{node_hosts}\n# Entries added by HostAliases.\n10.9.9.9\talias.local\n"
        )
    );
    let (_, resolv) = exec_in(&env, &hn, "main", &["cat", "/etc/resolv.conf"]).await;
    assert!(!resolv.contains("10.96.0.10"), "{resolv}");
}
