//! Runtime event streams: CRI `GetContainerEvents` (containerd 1.7+, CRI-O) and containerd's own
//! events service (`containerd.services.events.v1.Events/Subscribe`, on the same socket), which
//! containerd 1.6 has while it lacks the CRI call. PLEG uses either as a fast path (upstream
//! `pkg/kubelet/pleg/evented.go`); this module only opens and decodes them.

use std::pin::Pin;

use prost::Message;
use tokio_stream::Stream;

/// containerd's API as generated from proto/containerd (v1.6.20, see build.rs).
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod containerd {
    pub mod services {
        pub mod events {
            pub mod v1 {
                tonic::include_proto!("containerd.services.events.v1");
            }
        }
    }
    pub mod events {
        tonic::include_proto!("containerd.events");
    }
    pub mod types {
        tonic::include_proto!("containerd.types");
    }
}

pub use containerd::services::events::v1::{Envelope, SubscribeRequest};

/// A server stream as every backend hands it out (tonic's `Streaming`, or the fake's channel).
pub type EventStream<T> = Pin<Box<dyn Stream<Item = Result<T, tonic::Status>> + Send>>;

/// The namespace containerd's CRI plugin keeps the kubelet's sandboxes and containers in.
pub const CRI_NAMESPACE: &str = "k8s.io";

/// Subscribe filters: the CRI namespace and the topics of a container's end only, `/tasks/exit`,
/// `/tasks/oom` and `/tasks/delete` (containerd ORs the filters and ANDs the comma-separated
/// parts of one). PLEG reads a pod for none of the others (creations, starts and removals are
/// the kubelet's own doing), and subscribing to every task and container topic had containerd
/// send, and the kubelet decode, six events per pod started for nothing: about 1.5% of the
/// kubelet's CPU to start 100 pods.
pub fn cri_filters() -> Vec<String> {
    ["/tasks/exit", "/tasks/oom", "/tasks/delete"]
        .iter()
        .map(|t| format!("namespace=={CRI_NAMESPACE},topic==\"{t}\""))
        .collect()
}

/// The containerd topics that change what CRI reports for a container or sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Topic {
    /// `/containers/create`: a container (or a sandbox's pause container) exists.
    ContainerCreate,
    /// `/containers/delete`: it is gone.
    ContainerDelete,
    /// `/tasks/start`: its process runs.
    TaskStart,
    /// `/tasks/exit` of the init process: it exited.
    TaskExit,
    /// `/tasks/oom`: the kernel killed it for memory (its exit follows).
    TaskOom,
    /// `/tasks/delete` of the init process: the task is cleaned up (containerd's CRI plugin
    /// marks the container exited right after it).
    TaskDelete,
}

impl Topic {
    /// The topic as containerd names it (and the metrics' label).
    pub fn name(self) -> &'static str {
        match self {
            Topic::ContainerCreate => "/containers/create",
            Topic::ContainerDelete => "/containers/delete",
            Topic::TaskStart => "/tasks/start",
            Topic::TaskExit => "/tasks/exit",
            Topic::TaskOom => "/tasks/oom",
            Topic::TaskDelete => "/tasks/delete",
        }
    }
}

/// One decoded containerd event about a container or sandbox of the CRI namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerdEvent {
    pub topic: Topic,
    /// The container ID (a sandbox's ID for its pause container).
    pub id: String,
    /// When containerd published it, unix nanoseconds (0 when the envelope had no time).
    pub at_ns: i64,
}

/// Why an envelope could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("containerd event {topic} has no payload")]
    NoPayload { topic: String },
    #[error("decoding containerd event {topic}: {source}")]
    Payload {
        topic: String,
        source: prost::DecodeError,
    },
}

/// Reads an envelope: `Ok(None)` for other namespaces, other topics and exec processes (a
/// probe's `ExecSync` exits too, with its exec ID; only the init process is the container).
pub fn decode(env: &Envelope) -> Result<Option<ContainerdEvent>, DecodeError> {
    use containerd::events as ev;
    if env.namespace != CRI_NAMESPACE {
        return Ok(None);
    }
    let topic = env.topic.as_str();
    let payload = || {
        env.event
            .as_ref()
            .map(|a| a.value.as_slice())
            .ok_or_else(|| DecodeError::NoPayload {
                topic: topic.to_string(),
            })
    };
    let err = |source| DecodeError::Payload {
        topic: topic.to_string(),
        source,
    };
    let init = |container_id: &str, exec_id: &str| exec_id.is_empty() || exec_id == container_id;
    let (topic, id) = match topic {
        "/containers/create" => (
            Topic::ContainerCreate,
            ev::ContainerCreate::decode(payload()?).map_err(err)?.id,
        ),
        "/containers/delete" => (
            Topic::ContainerDelete,
            ev::ContainerDelete::decode(payload()?).map_err(err)?.id,
        ),
        "/tasks/start" => (
            Topic::TaskStart,
            ev::TaskStart::decode(payload()?).map_err(err)?.container_id,
        ),
        "/tasks/exit" => {
            let e = ev::TaskExit::decode(payload()?).map_err(err)?;
            if !init(&e.container_id, &e.id) {
                return Ok(None);
            }
            (Topic::TaskExit, e.container_id)
        }
        "/tasks/delete" => {
            let e = ev::TaskDelete::decode(payload()?).map_err(err)?;
            if !init(&e.container_id, &e.id) {
                return Ok(None);
            }
            (Topic::TaskDelete, e.container_id)
        }
        "/tasks/oom" => (
            Topic::TaskOom,
            ev::TaskOom::decode(payload()?).map_err(err)?.container_id,
        ),
        _ => return Ok(None),
    };
    let at_ns = env
        .timestamp
        .as_ref()
        .map(|t| t.seconds.saturating_mul(1_000_000_000) + t.nanos as i64)
        .unwrap_or(0);
    Ok(Some(ContainerdEvent { topic, id, at_ns }))
}

/// Builds the envelope containerd would send for `topic` about `id` (the fake runtime's events
/// and the decoder's tests).
pub fn envelope(namespace: &str, topic: Topic, id: &str, exec_id: &str, at_ns: i64) -> Envelope {
    use containerd::events as ev;
    let id = id.to_string();
    let (url, value) = match topic {
        Topic::ContainerCreate => (
            "containerd.events.ContainerCreate",
            ev::ContainerCreate {
                id,
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        Topic::ContainerDelete => (
            "containerd.events.ContainerDelete",
            ev::ContainerDelete { id }.encode_to_vec(),
        ),
        Topic::TaskStart => (
            "containerd.events.TaskStart",
            ev::TaskStart {
                container_id: id,
                pid: 1,
            }
            .encode_to_vec(),
        ),
        Topic::TaskExit => (
            "containerd.events.TaskExit",
            ev::TaskExit {
                container_id: id,
                id: exec_id.to_string(),
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        Topic::TaskDelete => (
            "containerd.events.TaskDelete",
            ev::TaskDelete {
                container_id: id,
                id: exec_id.to_string(),
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        Topic::TaskOom => (
            "containerd.events.TaskOOM",
            ev::TaskOom { container_id: id }.encode_to_vec(),
        ),
    };
    Envelope {
        timestamp: Some(prost_types::Timestamp {
            seconds: at_ns.div_euclid(1_000_000_000),
            nanos: at_ns.rem_euclid(1_000_000_000) as i32,
        }),
        namespace: namespace.to_string(),
        topic: topic.name().to_string(),
        event: Some(prost_types::Any {
            type_url: url.to_string(),
            value,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_table() {
        let t = 1_700_000_000_123_456_789;
        // (namespace, topic, id, exec id) -> decoded (topic, id) or None
        let rows: &[(&str, Topic, &str, &str, Option<Topic>)] = &[
            ("k8s.io", Topic::TaskExit, "c1", "", Some(Topic::TaskExit)),
            ("k8s.io", Topic::TaskExit, "c1", "c1", Some(Topic::TaskExit)),
            // A probe's exec exiting is not the container exiting.
            ("k8s.io", Topic::TaskExit, "c1", "exec-9", None),
            ("k8s.io", Topic::TaskDelete, "c1", "exec-9", None),
            ("k8s.io", Topic::TaskStart, "c1", "", Some(Topic::TaskStart)),
            ("k8s.io", Topic::TaskOom, "c1", "", Some(Topic::TaskOom)),
            (
                "k8s.io",
                Topic::ContainerCreate,
                "c1",
                "",
                Some(Topic::ContainerCreate),
            ),
            (
                "k8s.io",
                Topic::ContainerDelete,
                "c1",
                "",
                Some(Topic::ContainerDelete),
            ),
            // Another client's namespace (ctr, moby) is none of the kubelet's business.
            ("default", Topic::TaskExit, "c1", "", None),
        ];
        for (ns, topic, id, exec, want) in rows {
            let got = decode(&envelope(ns, *topic, id, exec, t)).unwrap();
            assert_eq!(
                got.as_ref().map(|e| e.topic),
                *want,
                "{ns} {topic:?} {exec}"
            );
            if let Some(e) = got {
                assert_eq!(e.id, *id);
                assert_eq!(e.at_ns, t);
            }
        }
        let mut other = envelope("k8s.io", Topic::TaskExit, "c1", "", t);
        other.topic = "/images/create".into();
        assert_eq!(decode(&other).unwrap(), None);
        let mut broken = envelope("k8s.io", Topic::TaskExit, "c1", "", t);
        broken.event = Some(prost_types::Any {
            type_url: String::new(),
            value: vec![0xff, 0xff, 0xff],
        });
        assert!(decode(&broken).is_err());
        broken.event = None;
        assert!(matches!(
            decode(&broken),
            Err(DecodeError::NoPayload { .. })
        ));
    }

    #[test]
    fn filters_name_the_cri_namespace_and_the_end_of_a_container() {
        assert_eq!(
            cri_filters(),
            vec![
                "namespace==k8s.io,topic==\"/tasks/exit\"".to_string(),
                "namespace==k8s.io,topic==\"/tasks/oom\"".to_string(),
                "namespace==k8s.io,topic==\"/tasks/delete\"".to_string(),
            ]
        );
    }
}
