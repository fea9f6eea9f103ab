use super::*;

const R: &str = "example.com/resource";

fn dev(id: &str, healthy: bool) -> api::Device {
    api::Device {
        id: id.into(),
        health: if healthy { api::HEALTHY } else { "Unhealthy" }.into(),
        topology: None,
    }
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

fn alloc(ids: &[&str]) -> Allocation {
    Allocation {
        per_numa: BTreeMap::from([(0, ids.iter().map(|s| s.to_string()).collect())]),
        response: api::ContainerAllocateResponse::default(),
    }
}

fn two_devices() -> State {
    let mut st = State::default();
    st.update_devices(R, &[dev("Dev-1", true), dev("Dev-2", true)]);
    st.endpoints.insert(R.into(), EndpointState::Running);
    st
}

#[test]
fn capacity_counts_all_devices_and_allocatable_only_healthy_ones() {
    let now = Instant::now();
    let mut st = State::default();
    st.update_devices(R, &[dev("a", true), dev("b", false), dev("c", true)]);
    st.endpoints.insert(R.into(), EndpointState::Running);
    let cap = st.capacity(now);
    assert_eq!((cap.capacity[R], cap.allocatable[R]), (3, 2));
    // The plugin dies: everything unhealthy, capacity stays for the grace period.
    st.mark_unhealthy(R, now);
    let cap = st.capacity(now + Duration::from_secs(60));
    assert_eq!(
        (cap.capacity[R], cap.allocatable[R], cap.deleted.len()),
        (3, 0, 0)
    );
    // After it, the resource is gone and reported once as deleted.
    let cap = st.capacity(now + STOP_GRACE_PERIOD);
    assert_eq!(cap.deleted, vec![R.to_string()]);
    assert!(cap.capacity.is_empty());
    assert!(st.capacity(now + STOP_GRACE_PERIOD).deleted.is_empty());
}

#[test]
fn devices_to_allocate_table() {
    let mut st = two_devices();
    st.insert("p1", "c", R, alloc(&["Dev-1"]));
    let none = BTreeSet::new();
    // (pod, container, required, reusable, expected)
    type Case = (
        &'static str,
        &'static str,
        usize,
        BTreeSet<String>,
        Result<Need, AllocError>,
    );
    let cases: Vec<Case> = vec![
        ("p1", "c", 1, none.clone(), Ok(Need::Satisfied)),
        (
            "p1",
            "c",
            2,
            none.clone(),
            Err(AllocError::Changed {
                pod: "p1".into(),
                container: "c".into(),
                resource: R.into(),
                from: 1,
                to: 2,
            }),
        ),
        (
            "p2",
            "c",
            1,
            none.clone(),
            Ok(Need::Choose {
                needed: 1,
                reusable: none.clone(),
                available: set(&["Dev-2"]),
            }),
        ),
        (
            "p2",
            "c",
            2,
            none.clone(),
            Err(AllocError::Unavailable {
                resource: R.into(),
                requested: 2,
                available: 1,
            }),
        ),
        // An init container's device is reused before anything new is taken.
        (
            "p2",
            "app",
            1,
            set(&["Dev-1"]),
            Ok(Need::Choose {
                needed: 0,
                reusable: set(&["Dev-1"]),
                available: set(&["Dev-2"]),
            }),
        ),
        ("p2", "c", 0, none.clone(), Ok(Need::Satisfied)),
    ];
    for (pod, c, required, reusable, want) in cases {
        assert_eq!(
            st.devices_to_allocate(pod, c, R, required, &reusable),
            want,
            "{pod}/{c} x{required}"
        );
    }
    assert_eq!(
        st.devices_to_allocate("p2", "c", "other.io/x", 1, &none),
        Err(AllocError::Unregistered("other.io/x".into()))
    );
}

#[test]
fn requested_devices_unavailable_message_is_upstreams() {
    let e = AllocError::Unavailable {
        resource: R.into(),
        requested: 1,
        available: 0,
    };
    assert_eq!(
        e.to_string(),
        "requested number of devices unavailable for example.com/resource. Requested: 1, Available: 0"
    );
}

#[test]
fn choose_prefers_reusable_then_plugin_preference_then_id_order() {
    let avail = set(&["a", "b", "c"]);
    type Case = (usize, BTreeSet<String>, Vec<&'static str>, BTreeSet<String>);
    let cases: Vec<Case> = vec![
        (2, BTreeSet::new(), vec![], set(&["a", "b"])),
        (2, BTreeSet::new(), vec!["c"], set(&["a", "c"])),
        (1, BTreeSet::new(), vec!["x", "b"], set(&["b"])),
        (1, set(&["z"]), vec![], set(&["z", "a"])),
        (0, set(&["z"]), vec!["c"], set(&["z"])),
    ];
    for (need, reusable, preferred, want) in cases {
        let preferred: Vec<String> = preferred.into_iter().map(String::from).collect();
        // Without an affinity every available device is "no affinity" (upstream
        // `filterByAffinity` without a hint).
        let split = crate::cm::devices::hints::Split {
            no_affinity: avail.clone(),
            ..Default::default()
        };
        let plan = crate::cm::devices::hints::Plan::new(need + reusable.len(), &reusable, split);
        assert_eq!(plan.finish(&preferred), want);
    }
}

#[test]
fn inactive_pods_give_their_devices_back() {
    let mut st = two_devices();
    st.insert("p1", "c", R, alloc(&["Dev-1"]));
    st.insert("p2", "c", R, alloc(&["Dev-2"]));
    assert!(!st.remove_inactive(&HashSet::from(["p1".into(), "p2".into()])));
    assert!(st.remove_inactive(&HashSet::from(["p2".into()])));
    assert_eq!(st.allocated[R], set(&["Dev-2"]));
}

#[test]
fn checkpoint_round_trip_keeps_allocations_and_registers_resources_stopped() {
    let mut st = two_devices();
    let mut a = alloc(&["Dev-2"]);
    a.response.envs.insert("DEV".into(), "2".into());
    st.insert("p1", "c", R, a.clone());
    let data = checkpoint::decode(&checkpoint::encode(&st.to_checkpoint())).unwrap();
    let now = Instant::now();
    let (back, skipped) = State::from_checkpoint(data, now);
    assert!(skipped.is_empty());
    assert_eq!(back.container_devices("p1", "c", R), Some(&a));
    assert_eq!(back.allocated[R], set(&["Dev-2"]));
    // Registered, but no device is allocatable until the plugin is back.
    assert_eq!(back.endpoints[R], EndpointState::Stopped(now));
    assert!(back.healthy[R].is_empty());
    assert!(back.is_device_resource(R));
}

#[test]
fn run_options_merge_first_setting_wins() {
    let mut st = two_devices();
    let mut a = alloc(&["Dev-1"]);
    a.response.envs.insert("A".into(), "1".into());
    a.response.mounts.push(api::Mount {
        container_path: "/dev-1".into(),
        host_path: "/tmp/Dev-1".into(),
        read_only: true,
    });
    a.response.annotations.insert("x".into(), "1".into());
    let mut b = alloc(&["g"]);
    b.response.envs.insert("A".into(), "2".into());
    b.response.devices.push(api::DeviceSpec {
        container_path: "/dev/g".into(),
        host_path: "/dev/null".into(),
        permissions: "rw".into(),
    });
    st.insert("p", "c", R, a);
    st.insert("p", "c", "other.io/gpu", b);
    let (opts, conflicts) = st.run_options("p", "c");
    assert_eq!(opts.envs, vec![("A".to_string(), "1".to_string())]);
    assert_eq!(opts.mounts.len(), 1);
    assert_eq!(opts.devices.len(), 1);
    assert_eq!(opts.annotations, vec![("x".to_string(), "1".to_string())]);
    assert_eq!(conflicts.len(), 1, "{conflicts:?}");
    assert_eq!(st.run_options("p", "none").0, RunOptions::default());
}
