//! The fake runtime keeps the CRI state machine and its scripts.

use super::*;
use crate::CriClient;

fn client(f: &FakeRuntime) -> CriClient {
    CriClient::with_backend(Arc::new(f.clone()), "fake".into(), Duration::from_secs(2))
}

fn sandbox_config(name: &str, uid: &str) -> api::PodSandboxConfig {
    api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: "default".into(),
            attempt: 0,
        }),
        labels: [("io.kubernetes.pod.uid".to_string(), uid.to_string())].into(),
        ..Default::default()
    }
}

fn container_config(name: &str) -> api::ContainerConfig {
    api::ContainerConfig {
        metadata: Some(api::ContainerMetadata {
            name: name.into(),
            attempt: 0,
        }),
        image: Some(api::ImageSpec {
            image: "busybox".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[tokio::test]
async fn lifecycle_filters_and_scripted_faults() {
    let f = FakeRuntime::default();
    let c = client(&f);
    let sb = c
        .run_pod_sandbox(api::RunPodSandboxRequest {
            config: Some(sandbox_config("p", "u1")),
            ..Default::default()
        })
        .await
        .unwrap()
        .pod_sandbox_id;
    let create = api::CreateContainerRequest {
        pod_sandbox_id: sb.clone(),
        config: Some(container_config("app")),
        sandbox_config: None,
    };
    // No image yet: NotFound, as containerd answers.
    let err = c.create_container(create.clone()).await.unwrap_err();
    assert!(err.is_not_found(), "{err}");
    f.add_image("busybox");
    let id = c.create_container(create).await.unwrap().container_id;
    c.start_container(api::StartContainerRequest {
        container_id: id.clone(),
    })
    .await
    .unwrap();
    assert_eq!(
        f.containers()[0].state,
        api::ContainerState::ContainerRunning
    );
    assert_eq!(f.kill_container("app", 2), 1);
    let st = c
        .container_status(api::ContainerStatusRequest {
            container_id: id.clone(),
            verbose: false,
        })
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(st.state, api::ContainerState::ContainerExited as i32);
    assert_eq!((st.exit_code, st.reason.as_str()), (2, "Error"));
    let listed = c
        .list_pod_sandbox(api::ListPodSandboxRequest {
            filter: Some(api::PodSandboxFilter {
                label_selector: [("io.kubernetes.pod.uid".to_string(), "u2".to_string())].into(),
                ..Default::default()
            }),
        })
        .await
        .unwrap();
    assert!(listed.items.is_empty(), "label filter");

    f.fail_next("stop_pod_sandbox", "p", tonic::Status::unavailable("boom"));
    let err = c
        .stop_pod_sandbox(api::StopPodSandboxRequest {
            pod_sandbox_id: sb.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(tonic::Code::Unavailable));
    c.stop_pod_sandbox(api::StopPodSandboxRequest { pod_sandbox_id: sb })
        .await
        .unwrap();
    assert!(f.ready_sandboxes().is_empty());
    let ops: Vec<_> = f.calls().iter().map(|c| c.op).collect();
    assert_eq!(ops.iter().filter(|o| **o == "stop_pod_sandbox").count(), 2);
}

#[tokio::test(start_paused = true)]
async fn delays_follow_tokio_time_and_hit_the_client_timeout() {
    let f = FakeRuntime::default();
    let c = client(&f);
    f.delay("version", "", Duration::from_secs(5));
    let started = tokio::time::Instant::now();
    let err = c.version(api::VersionRequest::default()).await.unwrap_err();
    assert!(
        matches!(err, crate::CriError::Timeout { op: "version", .. }),
        "{err}"
    );
    assert_eq!(started.elapsed(), Duration::from_secs(2));
}
