use std::time::{Duration, Instant, SystemTime};

use super::*;

fn at(base: Instant, ms: u64) -> At {
    At {
        wall: SystemTime::UNIX_EPOCH
            + Duration::from_secs(1_700_000_000)
            + Duration::from_millis(ms),
        mono: base + Duration::from_millis(ms),
    }
}

fn timeline(marks: &[(Mark, u64)]) -> PodTimeline {
    let base = Instant::now();
    let mut t = PodTimeline::new("u1", "ns", "web");
    for (m, ms) in marks {
        t.record(m.clone(), at(base, *ms));
    }
    t
}

fn c(name: &str) -> String {
    name.to_string()
}

/// (stage, container, milliseconds)
type Stage<'a> = (&'a str, Option<&'a str>, u64);
/// (milestones at milliseconds, stages wanted, complete, total milliseconds)
type Case<'a> = (Vec<(Mark, u64)>, Vec<Stage<'a>>, bool, u64);

#[test]
fn stages_are_gaps_from_the_previous_milestone() {
    use Mark::*;
    let cases: Vec<Case> = vec![
        // A one-container pod, every milestone.
        (
            vec![
                (Seen, 0),
                (Admitted, 1),
                (VolumesReady, 11),
                (SandboxCreated, 511),
                (ImagePulled(c("app")), 512),
                (ContainerCreated(c("app")), 552),
                (ContainerStarted(c("app")), 702),
                (Ready, 800),
            ],
            vec![
                ("admission", None, 1),
                ("volumes", None, 10),
                ("sandbox", None, 500),
                ("image_pull", Some("app"), 1),
                ("container_create", Some("app"), 40),
                ("container_start", Some("app"), 150),
                ("readiness", None, 98),
            ],
            true,
            800,
        ),
        // Two containers: the second's pull counts from the first's start.
        (
            vec![
                (Seen, 0),
                (SandboxCreated, 100),
                (ImagePulled(c("a")), 300),
                (ContainerCreated(c("a")), 310),
                (ContainerStarted(c("a")), 320),
                (ImagePulled(c("b")), 1320),
            ],
            vec![
                ("sandbox", None, 100),
                ("image_pull", Some("a"), 200),
                ("container_create", Some("a"), 10),
                ("container_start", Some("a"), 10),
                ("image_pull", Some("b"), 1000),
            ],
            false,
            1320,
        ),
        // Repeats (a second sync, a restart) and anything after Ready are not recorded.
        (
            vec![
                (Seen, 0),
                (Seen, 5),
                (Admitted, 10),
                (Ready, 20),
                (ContainerStarted(c("a")), 30),
            ],
            vec![("admission", None, 10), ("readiness", None, 10)],
            true,
            20,
        ),
        (vec![], vec![], false, 0),
    ];
    for (marks, want, complete, total) in cases {
        let t = timeline(&marks);
        let got: Vec<Stage> = t
            .stages()
            .iter()
            .map(|(m, d)| (m.stage().unwrap(), m.container(), d.as_millis() as u64))
            .collect();
        assert_eq!(got, want, "{marks:?}");
        assert_eq!(t.complete(), complete, "{marks:?}");
        assert_eq!(t.total(), Duration::from_millis(total), "{marks:?}");
    }
}

#[test]
fn summary_line_and_started_here() {
    use Mark::*;
    let t = timeline(&[
        (Seen, 0),
        (Admitted, 2),
        (SandboxCreated, 1502),
        (ImagePulled(c("app")), 1503),
        (Ready, 2003),
    ]);
    assert_eq!(
        t.summary(),
        "admission=0.002s sandbox=1.500s image_pull[app]=0.001s readiness=0.500s"
    );
    assert!(t.started_here());
    // Adopted running after a restart: no sandbox created here, nothing to measure.
    assert!(!timeline(&[(Seen, 0), (Admitted, 1), (Ready, 3)]).started_here());
}

#[test]
fn json_names_milestones_stages_and_times() {
    use Mark::*;
    let t = timeline(&[
        (Seen, 0),
        (SandboxCreated, 250),
        (ContainerStarted(c("app")), 1000),
    ]);
    let j = serde_json::to_value(t.to_json()).unwrap();
    assert_eq!(j["kind"], "PodStartupTimeline");
    assert_eq!(
        (j["namespace"].as_str(), j["name"].as_str()),
        (Some("ns"), Some("web"))
    );
    assert_eq!(j["complete"], false);
    assert_eq!(j["totalSeconds"], 1.0);
    let e = j["events"].as_array().unwrap();
    assert_eq!(e.len(), 3);
    assert_eq!(e[0]["milestone"], "seen");
    assert!(e[0].get("stage").is_none());
    assert_eq!(e[0]["time"], "2023-11-14T22:13:20Z");
    assert_eq!(e[1]["stage"], "sandbox");
    assert_eq!(e[1]["stageSeconds"], 0.25);
    assert_eq!(e[2]["milestone"], "containerStarted");
    assert_eq!(e[2]["container"], "app");
    assert_eq!(e[2]["sinceSeenSeconds"], 1.0);
    assert_eq!(e[2]["stageSeconds"], 0.75);
}

fn pod(uid: &str, name: &str) -> k8s_openapi::api::core::v1::Pod {
    let mut p = k8s_openapi::api::core::v1::Pod::default();
    p.metadata.uid = Some(uid.into());
    p.metadata.name = Some(name.into());
    p.metadata.namespace = Some("ns".into());
    p
}

#[tokio::test]
async fn store_records_finds_by_name_and_forgets() {
    let (task, h) = TimelineHandle::new();
    let cancel = tokio_util::sync::CancellationToken::new();
    let run = tokio::spawn(task.run(cancel.clone()));
    let a = pod("u-a", "a");
    h.mark(&a, Mark::Seen);
    h.mark(&a, Mark::SandboxCreated);
    h.mark(&pod("u-b", "b"), Mark::Seen);
    let t = h.get("ns", "a").await.expect("a's timeline");
    assert_eq!(t.uid, "u-a");
    let names: Vec<&str> = t.marks.iter().map(|(m, _)| m.name()).collect();
    assert_eq!(names, ["seen", "sandboxCreated"]);
    assert!(h.get("other", "a").await.is_none());
    h.forget("u-a");
    assert!(h.get("ns", "a").await.is_none());
    assert!(h.get("ns", "b").await.is_some());
    cancel.cancel();
    run.await.unwrap();
    // The task is gone: a handle finds nothing and recording does not fail.
    h.mark(&a, Mark::Seen);
    assert!(h.get("ns", "b").await.is_none());
}
