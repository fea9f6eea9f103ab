//! Container logs and termination messages against a real containerd: rotation with
//! ReopenContainerLog, the /var/log/containers symlinks, the `kubectl logs` reader (tail, since,
//! limitBytes, timestamps, follow, previous) and terminated-state messages.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::core::v1::Pod;
use kubelet::logs::reader::log_container_id;
use kubelet::logs::{container_logs, LogOptions};

/// The container ID `kubectl logs [--previous]` would read, from the pod's status.
fn log_id(pod: &Pod, container: &str, previous: bool) -> String {
    log_container_id(
        pod.metadata.name.as_deref().unwrap(),
        container_status(pod, container),
        previous,
    )
    .unwrap()
}

async fn read(env: &Env, id: &str, opts: LogOptions) -> String {
    let mut out = Vec::new();
    container_logs(&env.cri(), id, &opts, &mut out)
        .await
        .unwrap();
    String::from_utf8(out).unwrap()
}

fn container_log_dir(env: &Env, pod: &Pod, container: &str) -> PathBuf {
    env.logs.join(format!(
        "default_{}_{}/{container}",
        pod.metadata.name.as_deref().unwrap(),
        uid(pod)
    ))
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The numbers of `line <n> ...` messages; `skip` words come before them (4 in raw CRI lines:
/// time, stream, tag, "line").
fn numbers(text: &str, skip: usize) -> Vec<u64> {
    text.lines()
        .filter_map(|l| l.split_whitespace().nth(skip)?.parse().ok())
        .collect()
}

#[tokio::test]
async fn rotation_keeps_max_files_and_the_container_keeps_logging() {
    let mut env = Env::new(151);
    env.start_kubelet_with(&[
        "--container-log-max-size=4Ki",
        "--container-log-max-files=3",
    ]);
    // About 4 KiB a second: every 10 s check finds the log over 4 KiB.
    let script = "pad=$(head -c 200 /dev/zero | tr '\\0' x); i=0; \
                  while true; do i=$((i+1)); echo \"line $i $pad\"; sleep 0.05; done";
    env.write_manifest("chatty.yaml", &simple_pod("chatty", "Always", script));
    let pod = env.wait_running("chatty");
    let dir = container_log_dir(&env, &pod, "main");

    // Three rotations: the cap of 3 files (2 rotated + live) must have removed the oldest.
    let mut rotated_seen = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    // A rotated file is `0.log.<stamp>`, gzipped (`.gz`) once a newer one exists; `.tmp` is a
    // compression in progress.
    let settled = |files: Vec<String>| -> Vec<String> {
        files.into_iter().filter(|f| !f.ends_with(".tmp")).collect()
    };
    while rotated_seen.len() < 3 {
        let files = settled(files_in(&dir));
        assert!(files.len() <= 3, "more than 3 files kept: {files:?}");
        rotated_seen.extend(
            files
                .into_iter()
                .filter(|f| f.starts_with("0.log."))
                .map(|f| f.trim_end_matches(".gz").to_string()),
        );
        assert!(
            Instant::now() < deadline,
            "only {rotated_seen:?} rotations; kubelet log:\n{}",
            tail(&env.kubelet_log(), 40)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let files = settled(files_in(&dir));
    assert_eq!(files.len(), 3, "{files:?}");
    assert!(files.contains(&"0.log".to_string()), "{files:?}");
    let first_rotated = rotated_seen.iter().next().unwrap();
    assert!(
        !files.iter().any(|f| f.starts_with(first_rotated.as_str())),
        "oldest rotated file {first_rotated} still there: {files:?}"
    );
    // The older kept rotation is gzipped (upstream compresses all but the newest) and holds
    // CRI log lines.
    let gz = files
        .iter()
        .find(|f| f.ends_with(".gz"))
        .unwrap_or_else(|| panic!("no compressed rotation: {files:?}"));
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut flate2::read::GzDecoder::new(std::fs::File::open(dir.join(gz)).unwrap()),
        &mut text,
    )
    .unwrap();
    assert!(
        text.contains(" stdout F "),
        "{}",
        &text[..text.len().min(200)]
    );
    // Upstream's name: `0.log.YYYYMMDD-hhmmss`.
    let stamp = first_rotated.trim_start_matches("0.log.");
    assert!(
        stamp.len() == 15 && stamp.as_bytes()[8] == b'-',
        "{first_rotated}"
    );

    // The runtime reopened the log: the live file keeps growing with later lines than any
    // rotated one, and the reader sees them.
    let id = log_id(&env.wait_running("chatty"), "main", false);
    let newest_rotated = files
        .iter()
        .rfind(|f| f.starts_with("0.log.") && !f.ends_with(".gz"))
        .unwrap();
    let rotated_max = *numbers(
        &std::fs::read_to_string(dir.join(newest_rotated)).unwrap(),
        4,
    )
    .iter()
    .max()
    .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let live = read(&env, &id, LogOptions::default()).await;
    let live_numbers = numbers(&live, 1);
    assert!(
        !live_numbers.is_empty() && live_numbers[0] > rotated_max,
        "live log does not continue after the rotated one (rotated up to {rotated_max}): {:?}",
        &live_numbers[..live_numbers.len().min(5)]
    );
    let tail5 = read(
        &env,
        &id,
        LogOptions {
            tail: Some(5),
            ..Default::default()
        },
    )
    .await;
    let n = numbers(&tail5, 1);
    assert_eq!(n.len(), 5, "{tail5}");
    assert!(n.windows(2).all(|w| w[1] == w[0] + 1), "{n:?}");
    // The symlink follows the live file, not the rotated one.
    let link = env.container_logs_dir().join(format!(
        "{}_default_main-{id}.log",
        pod.metadata.name.as_deref().unwrap()
    ));
    assert_eq!(
        std::fs::canonicalize(&link).unwrap(),
        std::fs::canonicalize(dir.join("0.log")).unwrap()
    );

    // Deleting the pod removes the live log, every rotated one and the symlink. The symlink lies
    // outside the pod's log directory: the kubelet finds it by the names in the status it read of
    // the pod (it asks no ContainerStatus of its own before removing the container).
    env.remove_manifest("chatty.yaml");
    wait_until(Duration::from_secs(60), "logs and symlink removed", || {
        let left: Vec<String> = std::fs::read_dir(&dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        (left.is_empty() && std::fs::symlink_metadata(&link).is_err()).then_some(())
    });
}

#[tokio::test]
async fn reader_tail_since_limit_timestamps_and_symlink() {
    let mut env = Env::new(152);
    env.start_kubelet();
    let script = "for i in 1 2 3 4 5 6 7 8 9 10; do echo l$i; sleep 0.2; done; echo err >&2; \
                  exec sleep 3600";
    env.write_manifest("ten.yaml", &simple_pod("ten", "Always", script));
    let pod = env.wait_running("ten");
    let id = log_id(&pod, "main", false);
    let all = "l1\nl2\nl3\nl4\nl5\nl6\nl7\nl8\nl9\nl10\nerr\n";
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = read(&env, &id, LogOptions::default()).await;
        if out == all {
            break;
        }
        assert!(Instant::now() < deadline, "not all lines logged: {out:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let opts = |f: &dyn Fn(&mut LogOptions)| {
        let mut o = LogOptions::default();
        f(&mut o);
        o
    };
    assert_eq!(
        read(&env, &id, opts(&|o| o.tail = Some(3))).await,
        "l9\nl10\nerr\n"
    );
    assert_eq!(read(&env, &id, opts(&|o| o.tail = Some(0))).await, "");
    assert_eq!(
        read(&env, &id, opts(&|o| o.limit_bytes = Some(5))).await,
        "l1\nl2"
    );
    let stamped = read(&env, &id, opts(&|o| o.timestamps = true)).await;
    let lines: Vec<&str> = stamped.lines().collect();
    assert_eq!(lines.len(), 11, "{stamped}");
    for l in &lines {
        let (ts, _) = l.split_once(' ').unwrap();
        // RFC3339NanoFixed: 2006-01-02T15:04:05.000000000Z
        assert_eq!(ts.len(), 30, "{l}");
        assert!(ts.parse::<k8s_openapi::jiff::Timestamp>().is_ok(), "{l}");
    }
    assert!(lines[5].ends_with(" l6"), "{stamped}");
    let since: k8s_openapi::jiff::Timestamp = lines[5].split_once(' ').unwrap().0.parse().unwrap();
    assert_eq!(
        read(&env, &id, opts(&|o| o.since = Some(since))).await,
        "l6\nl7\nl8\nl9\nl10\nerr\n"
    );

    // The /var/log/containers symlink exists while the container does, and goes with it.
    let link = env
        .container_logs_dir()
        .join(format!("ten-{}_default_main-{id}.log", env.node));
    assert_eq!(std::fs::read_to_string(&link).unwrap().lines().count(), 11);
    env.remove_manifest("ten.yaml");
    wait_until(Duration::from_secs(20), "symlink removed", || {
        (!link.exists() && std::fs::symlink_metadata(&link).is_err()).then_some(())
    });
}

#[tokio::test]
async fn previous_reads_the_last_terminated_instance() {
    let mut env = Env::new(153);
    env.start_kubelet();
    let script = "echo run-$(cat /proc/sys/kernel/random/uuid); sleep 3; exit 1";
    env.write_manifest("again.yaml", &simple_pod("again", "Always", script));
    let first = env.wait_running("again");
    let err = log_container_id("again", container_status(&first, "main"), true).unwrap_err();
    assert!(
        err.to_string().contains("previous terminated container"),
        "{err}"
    );

    let pod = env.wait_pod(
        "again",
        Duration::from_secs(40),
        "restarted and running",
        |p| {
            let c = find_container_status(p, "main")?;
            let running = c.state.as_ref().is_some_and(|s| s.running.is_some());
            (c.restart_count >= 1 && running).then(|| p.clone())
        },
    );
    let prev = read(&env, &log_id(&pod, "main", true), LogOptions::default()).await;
    let cur = read(&env, &log_id(&pod, "main", false), LogOptions::default()).await;
    assert!(
        prev.starts_with("run-") && cur.starts_with("run-"),
        "{prev:?} {cur:?}"
    );
    assert_ne!(prev, cur, "previous and current instance logged the same");
    let first_id = log_id(&first, "main", false);
    assert_eq!(log_id(&pod, "main", true), first_id);
}

#[tokio::test]
async fn follow_returns_new_lines_until_the_container_exits() {
    let mut env = Env::new(154);
    env.start_kubelet();
    let script = "for i in 1 2 3 4 5 6 7 8 9 10; do echo f$i; sleep 0.3; done";
    env.write_manifest("follow.yaml", &simple_pod("follow", "Never", script));
    let pod = env.wait_running("follow");
    let id = log_id(&pod, "main", false);
    let start = Instant::now();
    let out = tokio::time::timeout(
        Duration::from_secs(20),
        read(
            &env,
            &id,
            LogOptions {
                follow: true,
                ..Default::default()
            },
        ),
    )
    .await
    .expect("follow ends after the container exits");
    assert_eq!(out, "f1\nf2\nf3\nf4\nf5\nf6\nf7\nf8\nf9\nf10\n");
    // It waited for lines written after it started.
    assert!(start.elapsed() > Duration::from_millis(500));
}

/// Exit code and message of the container's terminated state; None before it has one (or
/// before the pod has container statuses at all).
fn terminated_message(pod: &Pod, name: &str) -> Option<(i32, Option<String>)> {
    let t = pod
        .status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == name)?
        .state
        .as_ref()?
        .terminated
        .clone()?;
    Some((t.exit_code, t.message))
}

#[tokio::test]
async fn termination_message_from_file() {
    let mut env = Env::new(155);
    env.start_kubelet();
    env.write_manifest(
        "bye.yaml",
        &simple_pod("bye", "Never", "echo bye > /dev/termination-log; exit 3"),
    );
    let msg = env.wait_pod("bye", Duration::from_secs(30), "terminated", |p| {
        terminated_message(p, "main")
    });
    assert_eq!(msg, (3, Some("bye\n".to_string())));
}

#[tokio::test]
async fn fallback_to_logs_on_error_uses_the_log_tail() {
    let mut env = Env::new(156);
    env.start_kubelet();
    let manifest = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: fallback
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 2
  containers:
  - name: fails
    image: {IMAGE}
    terminationMessagePolicy: FallbackToLogsOnError
    command: ["sh", "-c", "for i in $(seq 1 100); do echo line $i; done; exit 2"]
  - name: succeeds
    image: {IMAGE}
    terminationMessagePolicy: FallbackToLogsOnError
    command: ["sh", "-c", "echo fine; exit 0"]
  - name: writes
    image: {IMAGE}
    terminationMessagePolicy: FallbackToLogsOnError
    command: ["sh", "-c", "echo noise; echo from-file > /dev/termination-log; exit 1"]
"#
    );
    env.write_manifest("fallback.yaml", &manifest);
    let pod = env.wait_pod("fallback", Duration::from_secs(30), "all terminated", |p| {
        ["fails", "succeeds", "writes"]
            .iter()
            .all(|c| terminated_message(p, c).is_some())
            .then(|| p.clone())
    });
    let want: String = (21..=100).map(|i| format!("line {i}\n")).collect();
    assert_eq!(terminated_message(&pod, "fails"), Some((2, Some(want))));
    // Exit 0: no fallback; a message in the file wins over the log.
    assert_eq!(terminated_message(&pod, "succeeds"), Some((0, None)));
    assert_eq!(
        terminated_message(&pod, "writes"),
        Some((1, Some("from-file\n".into())))
    );
}
