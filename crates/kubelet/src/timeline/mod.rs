//! A pod's start-up timeline (issue 20; no upstream counterpart): the moments the kubelet saw the
//! pod, admitted it, had its volumes ready, created its sandbox (CNI done), pulled each image,
//! created and started each container, and saw it Ready. So that "why was this pod slow to
//! start" has an answer: per stage in `kubelet_pod_start_stage_duration_seconds{stage}`, per pod
//! at `/pods/<namespace>/<name>/timeline` on 10250 and in one log line at verbosity 2.
//!
//! Each stage's duration is the time from the milestone before it, whatever that was: the wait
//! for a volume that needed three syncs is the `volumes` stage, the first container's image pull
//! starts counting when the sandbox was created, the second's when the first one started. Only
//! the first occurrence of each milestone counts, and the timeline closes at the first Ready:
//! restarts later are not start-up. This file holds the pure part; [`store`] the task owning
//! the timelines.

use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

pub mod store;

pub use store::{TimelineHandle, TimelineTask};

/// One milestone of a pod's start-up.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Mark {
    /// A source delivered the pod to the SyncLoop for the first time.
    Seen,
    /// Admission accepted it.
    Admitted,
    /// Every volume set up (upstream `WaitForAttachAndMount` returned).
    VolumesReady,
    /// RunPodSandbox returned: the sandbox runs and CNI gave it its network.
    SandboxCreated,
    /// The container's image is present (pulled or found).
    ImagePulled(String),
    /// CreateContainer returned.
    ContainerCreated(String),
    /// StartContainer returned (and the postStart hook, if any, ran).
    ContainerStarted(String),
    /// The pod's Ready condition turned True.
    Ready,
}

impl Mark {
    /// The milestone's name in the JSON.
    pub fn name(&self) -> &'static str {
        match self {
            Mark::Seen => "seen",
            Mark::Admitted => "admitted",
            Mark::VolumesReady => "volumesReady",
            Mark::SandboxCreated => "sandboxCreated",
            Mark::ImagePulled(_) => "imagePulled",
            Mark::ContainerCreated(_) => "containerCreated",
            Mark::ContainerStarted(_) => "containerStarted",
            Mark::Ready => "ready",
        }
    }

    /// The stage that ends at this milestone: the `stage` label of the histogram. `None` for
    /// `Seen`, which starts the timeline.
    pub fn stage(&self) -> Option<&'static str> {
        Some(match self {
            Mark::Seen => return None,
            Mark::Admitted => "admission",
            Mark::VolumesReady => "volumes",
            Mark::SandboxCreated => "sandbox",
            Mark::ImagePulled(_) => "image_pull",
            Mark::ContainerCreated(_) => "container_create",
            Mark::ContainerStarted(_) => "container_start",
            Mark::Ready => "readiness",
        })
    }

    pub fn container(&self) -> Option<&str> {
        match self {
            Mark::ImagePulled(c) | Mark::ContainerCreated(c) | Mark::ContainerStarted(c) => Some(c),
            _ => None,
        }
    }
}

/// When a milestone was reached: wall clock for people, monotonic for durations.
#[derive(Debug, Clone, Copy)]
pub struct At {
    pub wall: SystemTime,
    pub mono: Instant,
}

impl At {
    pub fn now() -> Self {
        At {
            wall: SystemTime::now(),
            mono: Instant::now(),
        }
    }
}

/// One pod's milestones, in the order reached.
#[derive(Debug, Clone)]
pub struct PodTimeline {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub marks: Vec<(Mark, At)>,
}

impl PodTimeline {
    pub fn new(uid: &str, namespace: &str, name: &str) -> Self {
        PodTimeline {
            uid: uid.into(),
            namespace: namespace.into(),
            name: name.into(),
            marks: Vec::new(),
        }
    }

    /// Ready reached: nothing more is recorded.
    pub fn complete(&self) -> bool {
        self.marks.iter().any(|(m, _)| *m == Mark::Ready)
    }

    /// Records `mark` unless it was reached before or the timeline is complete; true if recorded.
    pub fn record(&mut self, mark: Mark, at: At) -> bool {
        if self.complete() || self.marks.iter().any(|(m, _)| *m == mark) {
            return false;
        }
        self.marks.push((mark, at));
        true
    }

    /// Whether the pod started under the kubelet's eyes (its sandbox created here); a pod adopted
    /// running after a restart has a timeline but no start-up to measure.
    pub fn started_here(&self) -> bool {
        self.marks.iter().any(|(m, _)| *m == Mark::SandboxCreated)
    }

    /// Each stage reached, with its duration from the milestone before it (marks are recorded
    /// in order, so the previous entry is the previous milestone).
    pub fn stages(&self) -> Vec<(&Mark, Duration)> {
        self.marks
            .windows(2)
            .map(|w| (&w[1].0, w[1].1.mono.saturating_duration_since(w[0].1.mono)))
            .collect()
    }

    /// From the first milestone to the last.
    pub fn total(&self) -> Duration {
        match (self.marks.first(), self.marks.last()) {
            (Some(a), Some(b)) => b.1.mono.saturating_duration_since(a.1.mono),
            _ => Duration::ZERO,
        }
    }

    /// The log line's `stages` value: `admission=0.001s volumes=0.012s image_pull[app]=1.5s ...`.
    pub fn summary(&self) -> String {
        self.stages()
            .iter()
            .filter_map(|(m, d)| {
                let stage = m.stage()?;
                Some(match m.container() {
                    Some(c) => format!("{stage}[{c}]={:.3}s", d.as_secs_f64()),
                    None => format!("{stage}={:.3}s", d.as_secs_f64()),
                })
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The `/pods/<namespace>/<name>/timeline` body.
    pub fn to_json(&self) -> TimelineJson {
        let first = self.marks.first().map(|(_, a)| a.mono);
        let mut prev = first;
        let events = self
            .marks
            .iter()
            .map(|(m, at)| {
                let since = |from: Option<Instant>| {
                    from.map_or(0.0, |f| at.mono.saturating_duration_since(f).as_secs_f64())
                };
                let e = EventJson {
                    milestone: m.name(),
                    stage: m.stage(),
                    container: m.container().map(str::to_string),
                    time: Timestamp::try_from(at.wall)
                        .map(|t| t.to_string())
                        .unwrap_or_default(),
                    since_seen_seconds: since(first),
                    stage_seconds: since(prev),
                };
                prev = Some(at.mono);
                e
            })
            .collect();
        TimelineJson {
            kind: "PodStartupTimeline",
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            complete: self.complete(),
            total_seconds: self.total().as_secs_f64(),
            events,
        }
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TimelineJson {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The pod reached Ready; the timeline records nothing more.
    pub complete: bool,
    pub total_seconds: f64,
    pub events: Vec<EventJson>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventJson {
    pub milestone: &'static str,
    /// The stage this milestone ends (the histogram's label); none for `seen`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// RFC 3339, the node's wall clock.
    pub time: String,
    pub since_seen_seconds: f64,
    /// From the milestone before this one.
    pub stage_seconds: f64,
}

#[cfg(test)]
mod tests;
