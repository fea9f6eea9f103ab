//! Volumes against a real containerd: emptyDir (disk and tmpfs), hostPath types, readOnly,
//! subPath (and its refusal to escape the volume through a symlink), and clean up of mounts and
//! pod directories, also after a crash.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Pod;

/// Lines of the host's mount table whose mount point is inside `dir`.
fn host_mounts_under(dir: &Path) -> Vec<String> {
    let dir = dir.to_string_lossy().into_owned();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.split(' ').nth(4).is_some_and(|m| m.starts_with(&dir)))
        .map(str::to_string)
        .collect()
}

fn pod_dir(env: &Env, pod: &Pod) -> PathBuf {
    env.root.join("pods").join(uid(pod))
}

/// Removes the manifest and waits until the pod, its mounts and its directory are gone.
fn remove_and_check_clean(env: &Env, file: &str, name: &str, dir: &Path) {
    env.remove_manifest(file);
    wait_until(Duration::from_secs(30), "pod gone", || {
        env.pod(name).is_none().then_some(())
    });
    wait_until(Duration::from_secs(20), "pod dir and mounts gone", || {
        (!dir.exists() && host_mounts_under(dir).is_empty()).then_some(())
    });
}

const SHARED: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: shared}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - {name: scratch, emptyDir: {}}
  - {name: mem, emptyDir: {medium: Memory, sizeLimit: 16Mi}}
  containers:
  - name: writer
    image: rkubelet.local/busybox:1.35
    command: [sh, -c, "echo hello > /out/msg; exec sleep 3600"]
    volumeMounts: [{name: scratch, mountPath: /out}, {name: mem, mountPath: /mem}]
  - name: reader
    image: rkubelet.local/busybox:1.35
    command: [sh, -c, "exec sleep 3600"]
    volumeMounts: [{name: scratch, mountPath: /in}]
"#;

#[tokio::test]
async fn empty_dir_is_shared_and_memory_is_a_sized_tmpfs() {
    let mut env = Env::new(181);
    env.start_kubelet();
    env.write_manifest("shared.yaml", SHARED);
    let pod = env.wait_running("shared");
    let dir = pod_dir(&env, &pod);

    let mut read = (1, String::new());
    for _ in 0..50 {
        read = exec_in(&env, &pod, "reader", &["cat", "/in/msg"]).await;
        if read.0 == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let read = read.1;
    assert_eq!(read.trim(), "hello");
    let (_, mode) = exec_in(&env, &pod, "reader", &["stat", "-c", "%a", "/in"]).await;
    assert_eq!(mode.trim(), "777");
    let scratch = dir.join("volumes/kubernetes.io~empty-dir/scratch");
    assert_eq!(
        std::fs::read_to_string(scratch.join("msg")).unwrap(),
        "hello\n"
    );

    // Memory: a tmpfs of 16 MiB, in the container and on the host.
    let (code, mounts) = exec_in(&env, &pod, "writer", &["cat", "/proc/mounts"]).await;
    assert_eq!(code, 0);
    let line = mounts
        .lines()
        .find(|l| l.split(' ').nth(1) == Some("/mem"))
        .unwrap_or_else(|| panic!("no /mem in {mounts}"));
    assert!(line.starts_with("tmpfs /mem tmpfs "), "{line}");
    assert!(line.contains("size=16384k"), "{line}");
    let (_, df) = exec_in(&env, &pod, "writer", &["df", "-k", "/mem"]).await;
    assert!(df.contains("16384"), "{df}");
    let host = host_mounts_under(&dir);
    assert!(
        host.iter()
            .any(|l| l.contains("kubernetes.io~empty-dir/mem") && l.contains(" - tmpfs ")),
        "{host:?}"
    );

    remove_and_check_clean(&env, "shared.yaml", "shared", &dir);
}

fn host_path_pod(name: &str, path: &Path, ty: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - {{name: hp, hostPath: {{path: {path}, type: "{ty}"}}}}
  containers:
  - name: main
    image: rkubelet.local/busybox:1.35
    command: [sh, -c, "exec sleep 3600"]
    volumeMounts: [{{name: hp, mountPath: /hp}}]
"#,
        path = path.display()
    )
}

#[tokio::test]
async fn host_path_types_are_checked() {
    let mut env = Env::new(182);
    env.start_kubelet();
    let base = env.dir.join("host");
    std::fs::create_dir_all(&base).unwrap();

    // DirectoryOrCreate creates the directory, and the container writes to the host through it.
    let created = base.join("made/here");
    env.write_manifest(
        "doc.yaml",
        &host_path_pod("doc", &created, "DirectoryOrCreate"),
    );
    // File: an existing file is mounted as it is.
    let file = base.join("file.txt");
    std::fs::write(&file, "from host\n").unwrap();
    env.write_manifest("file.yaml", &host_path_pod("file", &file, "File"));
    // Directory on a missing path: FailedMount, the container waits in ContainerCreating.
    let missing = base.join("missing");
    env.write_manifest("dir.yaml", &host_path_pod("dir", &missing, "Directory"));

    let doc = env.wait_running("doc");
    assert!(created.is_dir());
    let (code, _) = exec_in(&env, &doc, "main", &["sh", "-c", "echo x > /hp/y"]).await;
    assert_eq!(code, 0);
    assert_eq!(std::fs::read_to_string(created.join("y")).unwrap(), "x\n");

    let f = env.wait_running("file");
    let (_, out) = exec_in(&env, &f, "main", &["cat", "/hp"]).await;
    assert_eq!(out, "from host\n");

    let expected = format!(
        "hostPath type check failed: {} is not a directory",
        missing.display()
    );
    wait_until(Duration::from_secs(15), "FailedMount in the log", || {
        let log = env.kubelet_log();
        log.lines()
            .any(|l| l.contains("FailedMount") && l.contains(&expected))
            .then_some(())
    });
    std::thread::sleep(Duration::from_secs(2));
    let p = env.pod("dir").unwrap();
    let st = container_status(&p, "main");
    let waiting = st.state.as_ref().and_then(|s| s.waiting.as_ref()).unwrap();
    assert_eq!(waiting.reason.as_deref(), Some("ContainerCreating"));
    assert_eq!(p.status.as_ref().unwrap().phase.as_deref(), Some("Pending"));
    assert!(env.containers_of(&uid(&p)).await.is_empty());
    // Once the directory exists the retried sync mounts it.
    std::fs::create_dir(&missing).unwrap();
    env.wait_running("dir");

    // A configMap volume needs the API server: standalone, it fails naming the object, as
    // upstream's message without a kubeClient.
    let cm = host_path_pod("cm", &created, "").replace(
        &format!("hostPath: {{path: {}, type: \"\"}}", created.display()),
        "configMap: {name: settings}",
    );
    env.write_manifest("cm.yaml", &cm);
    wait_until(
        Duration::from_secs(15),
        "FailedMount for the configMap",
        || {
            env.kubelet_log()
                .lines()
                .any(|l| {
                    l.contains("FailedMount")
                        && l.contains(
                            "couldn't get configMap default/settings, no kubeClient defined",
                        )
                        && l.contains("hp")
                })
                .then_some(())
        },
    );
    // hostPath content survives the pod.
    let dir = pod_dir(&env, &doc);
    remove_and_check_clean(&env, "doc.yaml", "doc", &dir);
    assert!(created.join("y").exists());
}

const MOUNTS: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: mounts}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - {name: data, emptyDir: {}}
  containers:
  - name: main
    image: rkubelet.local/busybox:1.35
    command: [sh, -c, "exec sleep 3600"]
    env:
    - name: POD_NAME
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    volumeMounts:
    - {name: data, mountPath: /data}
    - {name: data, mountPath: /ro, readOnly: true}
    - {name: data, mountPath: /sub, subPath: a/b}
    - {name: data, mountPath: /expr, subPathExpr: "per-pod/$(POD_NAME)"}
"#;

#[tokio::test]
async fn read_only_and_sub_path_mounts() {
    let mut env = Env::new(183);
    env.start_kubelet();
    env.write_manifest("mounts.yaml", MOUNTS);
    let pod = env.wait_running("mounts");
    let vol = pod_dir(&env, &pod).join("volumes/kubernetes.io~empty-dir/data");

    let (code, out) = exec_in(&env, &pod, "main", &["touch", "/ro/nope"]).await;
    assert_ne!(code, 0, "readOnly mount accepted a write");
    assert!(out.contains("Read-only file system"), "{out}");
    let (code, _) = exec_in(&env, &pod, "main", &["sh", "-c", "echo s > /sub/f"]).await;
    assert_eq!(code, 0);
    assert_eq!(std::fs::read_to_string(vol.join("a/b/f")).unwrap(), "s\n");
    let (_, out) = exec_in(&env, &pod, "main", &["cat", "/data/a/b/f", "/ro/a/b/f"]).await;
    assert_eq!(out, "s\ns\n");
    let (code, _) = exec_in(&env, &pod, "main", &["touch", "/expr/e"]).await;
    assert_eq!(code, 0);
    let name = pod.metadata.name.clone().unwrap();
    assert!(vol.join("per-pod").join(name).join("e").exists());

    // Each subPath is pinned by a bind mount under the pod directory, as upstream does.
    let dir = pod_dir(&env, &pod);
    let host = host_mounts_under(&dir);
    for bind in [
        "volume-subpaths/data/main/2 ",
        "volume-subpaths/data/main/3 ",
    ] {
        assert!(host.iter().any(|l| l.contains(bind)), "{bind} in {host:?}");
    }
    remove_and_check_clean(&env, "mounts.yaml", "mounts", &dir);
}

/// An init container plants a symlink to / in the shared emptyDir; the main container's subPath
/// through it must not reach the host's root.
const ESCAPE: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: escape}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - {name: data, emptyDir: {}}
  initContainers:
  - name: plant
    image: rkubelet.local/busybox:1.35
    command: [sh, -c, "ln -s / /data/escape"]
    volumeMounts: [{name: data, mountPath: /data}]
  containers:
  - name: main
    image: rkubelet.local/busybox:1.35
    command: [sh, -c, "exec sleep 3600"]
    volumeMounts: [{name: data, mountPath: /host, subPath: escape}]
"#;

#[tokio::test]
async fn sub_path_cannot_escape_through_a_symlink() {
    let mut env = Env::new(184);
    env.start_kubelet();
    env.write_manifest("escape.yaml", ESCAPE);
    let msg = env.wait_pod(
        "escape",
        Duration::from_secs(40),
        "main waiting with CreateContainerConfigError",
        |p| {
            let st = p.status.as_ref()?.container_statuses.as_ref()?;
            let w = st
                .iter()
                .find(|c| c.name == "main")?
                .state
                .as_ref()?
                .waiting
                .as_ref()?;
            (w.reason.as_deref() == Some("CreateContainerConfigError")).then(|| w.message.clone())
        },
    );
    let msg = msg.unwrap_or_default();
    assert!(msg.contains("not within volume path"), "{msg}");
    assert!(msg.contains("\"data\""), "{msg}");
    let p = env.pod("escape").unwrap();
    let running = env
        .containers_of(&uid(&p))
        .await
        .into_iter()
        .filter(|c| c.metadata.as_ref().is_some_and(|m| m.name == "main"))
        .count();
    assert_eq!(running, 0, "main must never be created");
    let dir = pod_dir(&env, &p);
    remove_and_check_clean(&env, "escape.yaml", "escape", &dir);
}

const MEM: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: mem}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - {name: mem, emptyDir: {medium: Memory}}
  containers:
  - name: main
    image: rkubelet.local/busybox:1.35
    command: [sh, -c, "exec sleep 3600"]
    resources: {limits: {memory: 32Mi}}
    volumeMounts: [{name: mem, mountPath: /mem}]
"#;

#[tokio::test]
async fn mounts_and_pod_dirs_left_by_a_crash_are_cleaned_up() {
    let mut env = Env::new(185);
    env.start_kubelet();
    env.write_manifest("mem.yaml", MEM);
    let pod = env.wait_running("mem");
    let dir = pod_dir(&env, &pod);
    // Without a sizeLimit the tmpfs is as large as the pod's memory limit (upstream
    // SizeMemoryBackedVolumes).
    let host = host_mounts_under(&dir);
    assert!(
        host.iter()
            .any(|l| l.contains(" - tmpfs ") && l.contains("size=32768k")),
        "{host:?}"
    );

    // Crash, and while down the pod's manifest goes away and an orphan with a tmpfs appears.
    env.stop_kubelet(nix::sys::signal::Signal::SIGKILL);
    env.remove_manifest("mem.yaml");
    let orphan = env.root.join("pods/0rphan-uid");
    let orphan_vol = orphan.join("volumes/kubernetes.io~empty-dir/x");
    std::fs::create_dir_all(&orphan_vol).unwrap();
    nix::mount::mount(
        Some("tmpfs"),
        &orphan_vol,
        Some("tmpfs"),
        nix::mount::MsFlags::empty(),
        Some("size=1m"),
    )
    .unwrap();
    std::fs::write(orphan_vol.join("f"), "x").unwrap();

    env.start_kubelet();
    wait_until(
        Duration::from_secs(30),
        "orphan and old pod cleaned",
        || {
            (!dir.exists()
                && !orphan.exists()
                && host_mounts_under(&env.root.join("pods")).is_empty())
            .then_some(())
        },
    );
    assert!(env.containers_of(&uid(&pod)).await.is_empty());
}
