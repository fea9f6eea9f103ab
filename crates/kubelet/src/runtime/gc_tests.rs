use super::*;

const S: i64 = 1_000_000_000;

fn c(id: &str, uid: &str, name: &str, created_s: i64, state: ContainerState) -> GcContainer {
    GcContainer {
        id: id.into(),
        pod_uid: uid.into(),
        name: name.into(),
        sandbox_id: format!("sb-{uid}"),
        created_at: created_s * S,
        state,
    }
}

fn states(ready: bool, pods: &[(&str, PodGcState)]) -> PodStates {
    PodStates {
        sources_ready: ready,
        pods: pods.iter().map(|(u, s)| (u.to_string(), *s)).collect(),
    }
}

fn policy(min_age_s: u64, per: i64, max: i64) -> ContainerGcPolicy {
    ContainerGcPolicy {
        min_age: Duration::from_secs(min_age_s),
        max_per_pod_container: per,
        max_containers: max,
    }
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

use ContainerState::{Created, Exited, Running, Unknown};
use PodGcState::{Active, Terminated};

#[test]
fn container_eviction_table() {
    // pod a: container x with 4 instances (newest running), container y with 2 dead.
    // pod b: container x with 3 dead. pod z: unknown to the kubelet (deleted).
    let all = vec![
        c("a-x-1", "a", "x", 10, Exited),
        c("a-x-2", "a", "x", 20, Exited),
        c("a-x-3", "a", "x", 30, Exited),
        c("a-x-4", "a", "x", 40, Running),
        c("a-y-1", "a", "y", 11, Exited),
        c("a-y-2", "a", "y", 21, Unknown),
        c("b-x-1", "b", "x", 12, Exited),
        c("b-x-2", "b", "x", 22, Exited),
        c("b-x-3", "b", "x", 32, Created),
        c("z-x-1", "z", "x", 5, Exited),
    ];
    let st = states(true, &[("a", Active), ("b", Terminated)]);
    let now = 100 * S;
    // (what, policy, evict_non_deleted, removed)
    let cases: Vec<(&str, ContainerGcPolicy, bool, Vec<&str>)> = vec![
        (
            "defaults: one dead instance per container",
            policy(0, 1, -1),
            false,
            vec!["a-x-1", "a-x-2", "a-y-1", "b-x-1", "b-x-2"],
        ),
        (
            "two per container",
            policy(0, 2, -1),
            false,
            vec!["a-x-1", "b-x-1"],
        ),
        ("no limits", policy(0, -1, -1), false, vec![]),
        (
            "zero per container still keeps the newest dead one",
            policy(0, 0, -1),
            false,
            vec!["a-x-1", "a-x-2", "a-y-1", "b-x-1", "b-x-2"],
        ),
        (
            "min age keeps the young ones out",
            policy(75, -1, 0),
            false,
            // Evictable: created at or before 25 s: a-x-1, a-x-2, a-y-1, a-y-2, b-x-1, b-x-2.
            // Each group keeps its newest evictable instance.
            vec!["a-x-1", "a-y-1", "b-x-1"],
        ),
        (
            "max containers: an equal share, then oldest first, never a group's newest",
            policy(0, -1, 3),
            false,
            // 3 groups, share 1: a-x keeps a-x-3, a-y keeps a-y-2, b-x keeps b-x-3.
            vec!["a-x-1", "a-x-2", "a-y-1", "b-x-1", "b-x-2"],
        ),
        (
            "max containers above the share: oldest first",
            policy(0, -1, 5),
            false,
            // 8 evictable, 3 groups: a share of 5/3 = 1 each leaves 3, within 5.
            vec!["a-x-1", "a-x-2", "a-y-1", "b-x-1", "b-x-2"],
        ),
        (
            "eviction's delete-all: every dead container of a finished pod",
            policy(0, 1, -1),
            true,
            vec!["a-x-1", "a-x-2", "a-y-1", "b-x-1", "b-x-2", "b-x-3"],
        ),
    ];
    for (what, p, evict, want) in cases {
        let got = sorted(containers_to_remove(&all, &st, &p, now, evict));
        let want = sorted(want.into_iter().map(String::from).collect());
        assert_eq!(got, want, "{what}");
    }
}

#[test]
fn max_containers_removes_oldest_first_across_groups() {
    let all = vec![
        c("p-1", "p", "x", 1, Exited),
        c("p-2", "p", "x", 2, Exited),
        c("p-3", "p", "x", 3, Exited),
        c("p-4", "p", "x", 4, Exited),
        c("q-1", "q", "x", 5, Exited),
        c("q-2", "q", "x", 6, Exited),
    ];
    let st = states(true, &[("p", Active), ("q", Active)]);
    // 6 dead containers, at most 6: nothing to do.
    let got = sorted(containers_to_remove(
        &all,
        &st,
        &policy(0, -1, 6),
        10 * S,
        false,
    ));
    assert!(got.is_empty(), "{got:?}");
    let got = sorted(containers_to_remove(
        &all,
        &st,
        &policy(0, -1, 5),
        10 * S,
        false,
    ));
    // Share 2: p keeps p-4, p-3 (p-1, p-2 go); q keeps both: 4 <= 5.
    assert_eq!(got, ["p-1", "p-2"]);
    let got = sorted(containers_to_remove(
        &all,
        &st,
        &policy(0, -1, 3),
        10 * S,
        false,
    ));
    // Share 1: p keeps p-4, q keeps q-2: 2 <= 3.
    assert_eq!(got, ["p-1", "p-2", "p-3", "q-1"]);
    let got = sorted(containers_to_remove(
        &all,
        &st,
        &policy(0, 3, 4),
        10 * S,
        false,
    ));
    // Per container 3: p-1 goes; then 5 > 4, share 2: p-2 goes too.
    assert_eq!(got, ["p-1", "p-2"]);
}

#[test]
fn sandbox_eviction_table() {
    let sb = |id: &str, uid: &str, created: i64, ready: bool| GcSandbox {
        id: id.into(),
        pod_uid: uid.into(),
        created_at: created * S,
        ready,
    };
    let sandboxes = vec![
        sb("a-1", "a", 1, false),
        sb("a-2", "a", 2, false),
        sb("a-3", "a", 3, true),
        sb("b-1", "b", 1, false),
        sb("b-2", "b", 2, false),
        sb("c-1", "c", 1, false),
        sb("z-1", "z", 1, false),
    ];
    let holding = |sid: &str| GcContainer {
        id: format!("in-{sid}"),
        pod_uid: String::new(),
        name: "x".into(),
        sandbox_id: sid.into(),
        created_at: 0,
        state: Exited,
    };
    let st = states(true, &[("a", Active), ("b", Terminated), ("c", Active)]);
    // a-2 still holds a container; c's only sandbox is its newest; z is the workers'.
    let remaining = vec![holding("a-2")];
    let got = sorted(sandboxes_to_remove(&sandboxes, &remaining, &st, false));
    assert_eq!(got, ["a-1", "b-1"]);
    let got = sorted(sandboxes_to_remove(&sandboxes, &remaining, &st, true));
    assert_eq!(got, ["a-1", "b-1", "b-2"]);
    // Sources not read yet: a finished pod keeps its newest even under eviction.
    let not_ready = PodStates {
        sources_ready: false,
        ..st.clone()
    };
    let got = sorted(sandboxes_to_remove(&sandboxes, &[], &not_ready, true));
    assert_eq!(got, ["a-1", "a-2", "b-1"]);
}

#[test]
fn log_directories_of_deleted_pods() {
    let dirs: Vec<String> = [
        "default_web_uid-a",
        "kube-system_dns_uid-b",
        "default_gone_uid-c",
        "default_left_in_runtime_uid-d",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let runtime: HashSet<String> = ["uid-d".to_string()].into();
    let st = states(true, &[("uid-a", Active), ("uid-b", Terminated)]);
    assert_eq!(
        log_dirs_to_remove(&dirs, &st, &runtime),
        ["default_gone_uid-c"]
    );
    let st = states(false, &[]);
    assert!(log_dirs_to_remove(&dirs, &st, &runtime).is_empty());
    assert_eq!(pod_uid_of_logs_dir("ns_name_with_underscores_u1"), "u1");
}

#[test]
fn legacy_symlink_names() {
    let id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    assert_eq!(
        container_id_of_symlink(&format!("web_default_app-1-{id}.log")),
        Some(id)
    );
    assert_eq!(container_id_of_symlink("web_default_app-123.log"), None);
    assert_eq!(container_id_of_symlink(&format!("x-{id}.txt")), None);
}
