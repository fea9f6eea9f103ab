//! The CRI calls of the fake runtime: each records itself, waits its scripted delay, returns a
//! scripted fault or acts on the in-memory state with the CRI's semantics.

use super::*;
use crate::events::{Envelope, EventStream, SubscribeRequest, Topic};
use crate::service::Runtime;

impl Runtime for FakeRuntime {
    fn version(&self, _: api::VersionRequest) -> Reply<api::VersionResponse> {
        self.call(
            "version",
            |_| String::new(),
            String::new(),
            |_, _| {
                Ok(api::VersionResponse {
                    version: "0.1.0".into(),
                    runtime_name: "fake".into(),
                    runtime_version: "0.1.0".into(),
                    runtime_api_version: "v1".into(),
                })
            },
        )
    }

    fn status(&self, _: api::StatusRequest) -> Reply<api::StatusResponse> {
        self.call(
            "status",
            |_| String::new(),
            String::new(),
            |_, _| {
                let cond = |t: &str| api::RuntimeCondition {
                    r#type: t.into(),
                    status: true,
                    ..Default::default()
                };
                Ok(api::StatusResponse {
                    status: Some(api::RuntimeStatus {
                        conditions: vec![cond("RuntimeReady"), cond("NetworkReady")],
                    }),
                    ..Default::default()
                })
            },
        )
    }

    fn list_container_stats(
        &self,
        _: api::ListContainerStatsRequest,
    ) -> Reply<api::ListContainerStatsResponse> {
        self.call(
            "list_container_stats",
            |_| String::new(),
            String::new(),
            |_, _| Ok(Default::default()),
        )
    }

    fn list_pod_sandbox_stats(
        &self,
        _: api::ListPodSandboxStatsRequest,
    ) -> Reply<api::ListPodSandboxStatsResponse> {
        self.call(
            "list_pod_sandbox_stats",
            |_| String::new(),
            String::new(),
            |_, _| Ok(Default::default()),
        )
    }

    fn run_pod_sandbox(&self, req: api::RunPodSandboxRequest) -> Reply<api::RunPodSandboxResponse> {
        let config = req.config.unwrap_or_default();
        let key = pod_name(&config).to_string();
        let uid = config
            .metadata
            .as_ref()
            .map(|m| m.uid.clone())
            .unwrap_or_default();
        self.call(
            "run_pod_sandbox",
            |_| key,
            uid,
            move |st, now| {
                st.next_id += 1;
                let id = format!("sandbox-{}", st.next_id);
                let ip = format!("10.88.{}.{}", st.next_id / 250, st.next_id % 250 + 2);
                st.sandboxes.insert(
                    id.clone(),
                    Sandbox {
                        config,
                        ready: true,
                        created_at: now,
                        ip,
                    },
                );
                st.emit(Topic::ContainerCreate, &id, now);
                st.emit(Topic::TaskStart, &id, now);
                Ok(api::RunPodSandboxResponse { pod_sandbox_id: id })
            },
        )
    }

    fn stop_pod_sandbox(
        &self,
        req: api::StopPodSandboxRequest,
    ) -> Reply<api::StopPodSandboxResponse> {
        let id = req.pod_sandbox_id;
        let key = |st: &State| sandbox_key(st, &id);
        let id2 = id.clone();
        let uid = sandbox_uid(&self.lock(), &id);
        self.call("stop_pod_sandbox", key, uid, move |st, now| {
            let mut exited = Vec::new();
            let survive = &mut st.survive_stops;
            for (cid, c) in st.containers.iter_mut() {
                if c.sandbox_id == id2
                    && c.state == api::ContainerState::ContainerRunning
                    && !survives_stop(survive, container_name(&c.config))
                {
                    exit(c, 137, now);
                    exited.push(cid.clone());
                }
            }
            if let Some(s) = st.sandboxes.get_mut(&id2) {
                if s.ready {
                    exited.push(id2.clone());
                }
                s.ready = false;
            }
            for cid in exited {
                st.emit(Topic::TaskExit, &cid, now);
            }
            Ok(Default::default())
        })
    }

    fn remove_pod_sandbox(
        &self,
        req: api::RemovePodSandboxRequest,
    ) -> Reply<api::RemovePodSandboxResponse> {
        let id = req.pod_sandbox_id;
        let id2 = id.clone();
        let uid = sandbox_uid(&self.lock(), &id);
        self.call(
            "remove_pod_sandbox",
            |st| sandbox_key(st, &id),
            uid,
            move |st, now| {
                let gone: Vec<String> = st
                    .containers
                    .iter()
                    .filter(|(_, c)| c.sandbox_id == id2)
                    .map(|(id, _)| id.clone())
                    .collect();
                for id in &gone {
                    st.emit(Topic::ContainerDelete, id, now);
                    st.containers.remove(id);
                }
                if st.sandboxes.contains_key(&id2) {
                    st.emit(Topic::ContainerDelete, &id2, now);
                }
                st.sandboxes.remove(&id2);
                Ok(Default::default())
            },
        )
    }

    fn pod_sandbox_status(
        &self,
        req: api::PodSandboxStatusRequest,
    ) -> Reply<api::PodSandboxStatusResponse> {
        let id = req.pod_sandbox_id;
        let id2 = id.clone();
        self.call(
            "pod_sandbox_status",
            |st| sandbox_key(st, &id),
            String::new(),
            move |st, _| {
                let s = st
                    .sandboxes
                    .get(&id2)
                    .ok_or_else(|| not_found("sandbox", &id2))?;
                let ns_options = s
                    .config
                    .linux
                    .as_ref()
                    .and_then(|l| l.security_context.as_ref())
                    .and_then(|c| c.namespace_options.clone());
                let host_network = ns_options
                    .as_ref()
                    .is_some_and(|o| o.network == api::NamespaceMode::Node as i32);
                Ok(api::PodSandboxStatusResponse {
                    status: Some(api::PodSandboxStatus {
                        id: id2.clone(),
                        metadata: s.config.metadata.clone(),
                        state: if s.ready {
                            api::PodSandboxState::SandboxReady
                        } else {
                            api::PodSandboxState::SandboxNotready
                        } as i32,
                        created_at: s.created_at,
                        network: Some(api::PodSandboxNetworkStatus {
                            ip: if host_network {
                                String::new()
                            } else {
                                s.ip.clone()
                            },
                            ..Default::default()
                        }),
                        linux: Some(api::LinuxPodSandboxStatus {
                            namespaces: Some(api::Namespace {
                                options: ns_options,
                            }),
                        }),
                        labels: s.config.labels.clone(),
                        annotations: s.config.annotations.clone(),
                        runtime_handler: String::new(),
                    }),
                    ..Default::default()
                })
            },
        )
    }

    fn list_pod_sandbox(
        &self,
        req: api::ListPodSandboxRequest,
    ) -> Reply<api::ListPodSandboxResponse> {
        let filter = req.filter.unwrap_or_default();
        // The pod UID a listing is filtered to ("" for a whole listing, a relist's).
        let uid = filter
            .label_selector
            .get("io.kubernetes.pod.uid")
            .cloned()
            .unwrap_or_default();
        self.call(
            "list_pod_sandbox",
            |_| String::new(),
            uid,
            move |st, _| {
                let items = st
                    .sandboxes
                    .iter()
                    .filter(|(id, s)| {
                        (filter.id.is_empty() || **id == filter.id)
                            && labels_match(&s.config.labels, &filter.label_selector)
                            && filter.state.as_ref().is_none_or(|w| {
                                (w.state == api::PodSandboxState::SandboxReady as i32) == s.ready
                            })
                    })
                    .map(|(id, s)| api::PodSandbox {
                        id: id.clone(),
                        metadata: s.config.metadata.clone(),
                        state: if s.ready {
                            api::PodSandboxState::SandboxReady
                        } else {
                            api::PodSandboxState::SandboxNotready
                        } as i32,
                        created_at: s.created_at,
                        labels: s.config.labels.clone(),
                        annotations: s.config.annotations.clone(),
                        runtime_handler: String::new(),
                    })
                    .collect();
                Ok(api::ListPodSandboxResponse { items })
            },
        )
    }

    fn create_container(
        &self,
        req: api::CreateContainerRequest,
    ) -> Reply<api::CreateContainerResponse> {
        let config = req.config.unwrap_or_default();
        let key = container_name(&config).to_string();
        let sandbox_id = req.pod_sandbox_id;
        self.call(
            "create_container",
            |_| key,
            String::new(),
            move |st, now| {
                if !st.sandboxes.get(&sandbox_id).is_some_and(|s| s.ready) {
                    return Err(tonic::Status::failed_precondition(format!(
                        "sandbox {sandbox_id:?} is not ready"
                    )));
                }
                let image = config
                    .image
                    .as_ref()
                    .map(|i| i.image.clone())
                    .unwrap_or_default();
                // By name or by the ref the kubelet resolved it to, as containerd accepts both.
                let image_ref = st
                    .images
                    .get(&image)
                    .or_else(|| st.images.values().find(|r| **r == image))
                    .cloned()
                    .ok_or_else(|| not_found("image", &image))?;
                st.next_id += 1;
                let id = format!("container-{}", st.next_id);
                st.containers.insert(
                    id.clone(),
                    Container {
                        sandbox_id,
                        config,
                        state: api::ContainerState::ContainerCreated,
                        created_at: now,
                        started_at: 0,
                        finished_at: 0,
                        exit_code: 0,
                        reason: String::new(),
                        image_ref,
                    },
                );
                st.emit(Topic::ContainerCreate, &id, now);
                Ok(api::CreateContainerResponse { container_id: id })
            },
        )
    }

    fn start_container(
        &self,
        req: api::StartContainerRequest,
    ) -> Reply<api::StartContainerResponse> {
        let id = req.container_id;
        let id2 = id.clone();
        self.call(
            "start_container",
            |st| container_key(st, &id),
            String::new(),
            move |st, now| {
                let exit_code = st
                    .containers
                    .get(&id2)
                    .and_then(|c| st.exit_on_start.get(container_name(&c.config)).copied());
                let c = st
                    .containers
                    .get_mut(&id2)
                    .ok_or_else(|| not_found("container", &id2))?;
                if c.state != api::ContainerState::ContainerCreated {
                    return Err(tonic::Status::failed_precondition(format!(
                        "container {id2:?} is not in created state"
                    )));
                }
                c.state = api::ContainerState::ContainerRunning;
                c.started_at = now;
                if let Some(code) = exit_code {
                    exit(c, code, now);
                }
                st.emit(Topic::TaskStart, &id2, now);
                if exit_code.is_some() {
                    st.emit(Topic::TaskExit, &id2, now);
                }
                Ok(Default::default())
            },
        )
    }

    fn stop_container(&self, req: api::StopContainerRequest) -> Reply<api::StopContainerResponse> {
        let id = req.container_id;
        let id2 = id.clone();
        let ignores = {
            let st = self.lock();
            st.ignore_sigterm.contains(&container_key(&st, &id))
        };
        let timeout = Duration::from_secs(req.timeout.max(0) as u64);
        let reply = self.call(
            "stop_container",
            |st| container_key(st, &id),
            req.timeout.to_string(),
            move |st, now| {
                let name = st
                    .containers
                    .get(&id2)
                    .map(|c| container_name(&c.config).to_string());
                if name.is_some_and(|n| survives_stop(&mut st.survive_stops, &n)) {
                    return Ok(Default::default());
                }
                let stopped = match st.containers.get_mut(&id2) {
                    Some(c) if c.state == api::ContainerState::ContainerRunning => {
                        exit(c, 137, now);
                        true
                    }
                    _ => false,
                };
                if stopped {
                    st.emit(Topic::TaskExit, &id2, now);
                }
                Ok(Default::default())
            },
        );
        if !ignores {
            return reply;
        }
        Box::pin(async move {
            tokio::time::sleep(timeout).await;
            reply.await
        })
    }

    fn remove_container(
        &self,
        req: api::RemoveContainerRequest,
    ) -> Reply<api::RemoveContainerResponse> {
        let id = req.container_id;
        let id2 = id.clone();
        self.call(
            "remove_container",
            |st| container_key(st, &id),
            String::new(),
            move |st, now| {
                if st.containers.contains_key(&id2) {
                    st.emit(Topic::ContainerDelete, &id2, now);
                }
                st.containers.remove(&id2);
                Ok(Default::default())
            },
        )
    }

    fn list_containers(
        &self,
        req: api::ListContainersRequest,
    ) -> Reply<api::ListContainersResponse> {
        let filter = req.filter.unwrap_or_default();
        // The pod UID a listing is filtered to ("" for a whole listing, a relist's).
        let uid = filter
            .label_selector
            .get("io.kubernetes.pod.uid")
            .cloned()
            .unwrap_or_default();
        self.call(
            "list_containers",
            |_| String::new(),
            uid,
            move |st, _| {
                let containers = st
                    .containers
                    .iter()
                    .filter(|(id, c)| {
                        (filter.id.is_empty() || **id == filter.id)
                            && (filter.pod_sandbox_id.is_empty()
                                || c.sandbox_id == filter.pod_sandbox_id)
                            && labels_match(&c.config.labels, &filter.label_selector)
                            && filter
                                .state
                                .as_ref()
                                .is_none_or(|w| w.state == c.state as i32)
                    })
                    .map(|(id, c)| api::Container {
                        id: id.clone(),
                        pod_sandbox_id: c.sandbox_id.clone(),
                        metadata: c.config.metadata.clone(),
                        image: c.config.image.clone(),
                        image_ref: c.image_ref.clone(),
                        state: c.state as i32,
                        created_at: c.created_at,
                        labels: c.config.labels.clone(),
                        annotations: c.config.annotations.clone(),
                        ..Default::default()
                    })
                    .collect();
                Ok(api::ListContainersResponse { containers })
            },
        )
    }

    fn container_status(
        &self,
        req: api::ContainerStatusRequest,
    ) -> Reply<api::ContainerStatusResponse> {
        let id = req.container_id;
        let id2 = id.clone();
        self.call(
            "container_status",
            |st| container_key(st, &id),
            String::new(),
            move |st, _| {
                let c = st
                    .containers
                    .get(&id2)
                    .ok_or_else(|| not_found("container", &id2))?;
                Ok(api::ContainerStatusResponse {
                    status: Some(api::ContainerStatus {
                        id: id2.clone(),
                        metadata: c.config.metadata.clone(),
                        state: c.state as i32,
                        created_at: c.created_at,
                        started_at: c.started_at,
                        finished_at: c.finished_at,
                        exit_code: c.exit_code,
                        image: c.config.image.clone(),
                        image_ref: c.image_ref.clone(),
                        reason: c.reason.clone(),
                        labels: c.config.labels.clone(),
                        annotations: c.config.annotations.clone(),
                        log_path: c.config.log_path.clone(),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
            },
        )
    }

    fn update_container_resources(
        &self,
        req: api::UpdateContainerResourcesRequest,
    ) -> Reply<api::UpdateContainerResourcesResponse> {
        let id = req.container_id;
        let id2 = id.clone();
        self.call(
            "update_container_resources",
            |st| container_key(st, &id),
            String::new(),
            move |st, _| {
                let c = st
                    .containers
                    .get_mut(&id2)
                    .ok_or_else(|| not_found("container", &id2))?;
                // As containerd: only the fields set in the request change.
                if let Some(new) = req.linux {
                    let linux = c.config.linux.get_or_insert_with(Default::default);
                    let res = linux.resources.get_or_insert_with(Default::default);
                    if !new.cpuset_cpus.is_empty() {
                        res.cpuset_cpus = new.cpuset_cpus;
                    }
                }
                Ok(api::UpdateContainerResourcesResponse::default())
            },
        )
    }

    fn exec_sync(&self, req: api::ExecSyncRequest) -> Reply<api::ExecSyncResponse> {
        let key = req.cmd.join(" ");
        let id = req.container_id;
        self.call(
            "exec_sync",
            |_| key,
            String::new(),
            move |st, _| match st.containers.get(&id) {
                Some(c) if c.state == api::ContainerState::ContainerRunning => {
                    Ok(api::ExecSyncResponse::default())
                }
                _ => Err(tonic::Status::not_found(format!(
                    "container {id:?} is not running"
                ))),
            },
        )
    }

    fn exec(&self, _: api::ExecRequest) -> Reply<api::ExecResponse> {
        self.call(
            "exec",
            |_| String::new(),
            String::new(),
            |_, _| {
                Err(tonic::Status::unimplemented(
                    "the fake runtime does not stream",
                ))
            },
        )
    }

    fn attach(&self, _: api::AttachRequest) -> Reply<api::AttachResponse> {
        self.call(
            "attach",
            |_| String::new(),
            String::new(),
            |_, _| {
                Err(tonic::Status::unimplemented(
                    "the fake runtime does not stream",
                ))
            },
        )
    }

    fn port_forward(&self, _: api::PortForwardRequest) -> Reply<api::PortForwardResponse> {
        self.call(
            "port_forward",
            |_| String::new(),
            String::new(),
            |_, _| {
                Err(tonic::Status::unimplemented(
                    "the fake runtime does not stream",
                ))
            },
        )
    }

    fn reopen_container_log(
        &self,
        _: api::ReopenContainerLogRequest,
    ) -> Reply<api::ReopenContainerLogResponse> {
        self.call(
            "reopen_container_log",
            |_| String::new(),
            String::new(),
            |_, _| Ok(Default::default()),
        )
    }

    fn list_images(&self, _: api::ListImagesRequest) -> Reply<api::ListImagesResponse> {
        self.call(
            "list_images",
            |_| String::new(),
            String::new(),
            |st, _| {
                let images = st
                    .images
                    .iter()
                    .map(|(name, r)| api::Image {
                        id: r.clone(),
                        repo_tags: vec![name.clone()],
                        ..Default::default()
                    })
                    .collect();
                Ok(api::ListImagesResponse { images })
            },
        )
    }

    fn image_status(&self, req: api::ImageStatusRequest) -> Reply<api::ImageStatusResponse> {
        let image = req.image.map(|i| i.image).unwrap_or_default();
        let key = image.clone();
        self.call(
            "image_status",
            move |_| key,
            String::new(),
            move |st, _| {
                Ok(api::ImageStatusResponse {
                    image: st.images.get(&image).map(|r| api::Image {
                        id: r.clone(),
                        repo_tags: vec![image.clone()],
                        ..Default::default()
                    }),
                    ..Default::default()
                })
            },
        )
    }

    fn pull_image(&self, req: api::PullImageRequest) -> Reply<api::PullImageResponse> {
        let image = req.image.map(|i| i.image).unwrap_or_default();
        let key = image.clone();
        self.call(
            "pull_image",
            move |_| key,
            String::new(),
            move |st, _| {
                let r = image_ref(&image);
                st.images.insert(image, r.clone());
                Ok(api::PullImageResponse { image_ref: r })
            },
        )
    }

    fn remove_image(&self, req: api::RemoveImageRequest) -> Reply<api::RemoveImageResponse> {
        let image = req.image.map(|i| i.image).unwrap_or_default();
        let key = image.clone();
        self.call(
            "remove_image",
            move |_| key,
            String::new(),
            move |st, _| {
                st.images.retain(|name, r| *name != image && *r != image);
                Ok(Default::default())
            },
        )
    }

    fn image_fs_info(&self, _: api::ImageFsInfoRequest) -> Reply<api::ImageFsInfoResponse> {
        self.call(
            "image_fs_info",
            |_| String::new(),
            String::new(),
            |_, _| Ok(Default::default()),
        )
    }

    fn get_container_events(
        &self,
        _: api::GetEventsRequest,
    ) -> Reply<EventStream<api::ContainerEventResponse>> {
        self.cri_events()
    }

    fn subscribe_containerd_events(&self, _: SubscribeRequest) -> Reply<EventStream<Envelope>> {
        self.containerd_events()
    }
}
