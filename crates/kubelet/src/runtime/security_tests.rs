use super::*;
use k8s_openapi::api::core::v1::{Capabilities, PodSecurityContext, PodSpec};
use rkubelet_cri::api::security_profile::ProfileType;

fn pod(psc: Option<PodSecurityContext>, csc: Option<SecurityContext>) -> (Pod, Container) {
    let c = Container {
        name: "main".into(),
        security_context: csc,
        ..Default::default()
    };
    let mut p = Pod::default();
    p.metadata.name = Some("web".into());
    p.metadata.namespace = Some("default".into());
    p.metadata.uid = Some("u1".into());
    p.spec = Some(PodSpec {
        security_context: psc,
        containers: vec![c.clone()],
        ..Default::default()
    });
    (p, c)
}

fn root() -> ImageUser {
    ImageUser::from_image(None)
}

fn uid(n: i64) -> ImageUser {
    ImageUser {
        uid: Some(n),
        username: String::new(),
    }
}

#[test]
fn image_user_from_cri() {
    assert_eq!(root(), uid(0));
    let img = api::Image {
        uid: Some(api::Int64Value { value: 1000 }),
        ..Default::default()
    };
    assert_eq!(ImageUser::from_image(Some(&img)), uid(1000));
    let img = api::Image {
        username: "app".into(),
        ..Default::default()
    };
    assert_eq!(
        ImageUser::from_image(Some(&img)),
        ImageUser {
            uid: None,
            username: "app".into()
        }
    );
    assert_eq!(ImageUser::from_image(Some(&api::Image::default())), uid(0));
}

#[test]
fn run_as_non_root_as_upstream() {
    let non_root = PodSecurityContext {
        run_as_non_root: Some(true),
        ..Default::default()
    };
    // Not requested: anything goes.
    let (p, c) = pod(None, None);
    assert!(verify_run_as_non_root(&p, &c, &root()).is_ok());
    // Requested, image root.
    let (p, c) = pod(Some(non_root.clone()), None);
    let e = verify_run_as_non_root(&p, &c, &root()).unwrap_err();
    assert_eq!(
        e.0,
        "container has runAsNonRoot and image will run as root (pod: \"web_default(u1)\", container: main)"
    );
    // Image with a numeric non-root user passes; a user name cannot be verified.
    assert!(verify_run_as_non_root(&p, &c, &uid(1000)).is_ok());
    let named = ImageUser {
        uid: None,
        username: "app".into(),
    };
    assert!(verify_run_as_non_root(&p, &c, &named)
        .unwrap_err()
        .0
        .starts_with("container has runAsNonRoot and image has non-numeric user (app), cannot verify user is non-root"));
    // runAsUser decides when set, whatever the image.
    let (p, c) = pod(
        Some(non_root.clone()),
        Some(SecurityContext {
            run_as_user: Some(0),
            ..Default::default()
        }),
    );
    assert!(verify_run_as_non_root(&p, &c, &uid(1000))
        .unwrap_err()
        .0
        .starts_with("container's runAsUser breaks non-root policy"));
    let (p, c) = pod(
        Some(PodSecurityContext {
            run_as_user: Some(65534),
            ..non_root
        }),
        None,
    );
    assert!(verify_run_as_non_root(&p, &c, &root()).is_ok());
    // The container can switch the check off.
    let (p, c) = pod(
        Some(PodSecurityContext {
            run_as_non_root: Some(true),
            ..Default::default()
        }),
        Some(SecurityContext {
            run_as_non_root: Some(false),
            ..Default::default()
        }),
    );
    assert!(verify_run_as_non_root(&p, &c, &root()).is_ok());
}

#[test]
fn container_over_pod_and_image_user_fallback() {
    let psc = PodSecurityContext {
        run_as_user: Some(1000),
        run_as_group: Some(2000),
        fs_group: Some(3000),
        supplemental_groups: Some(vec![4000, 4001]),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            localhost_profile: None,
        }),
        ..Default::default()
    };
    let csc = SecurityContext {
        run_as_user: Some(65534),
        read_only_root_filesystem: Some(true),
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            add: Some(vec!["NET_ADMIN".into()]),
            drop: Some(vec!["ALL".into()]),
        }),
        ..Default::default()
    };
    let (p, c) = pod(Some(psc), Some(csc));
    let root_dir = Path::new("/var/lib/kubelet/seccomp");
    let sc = linux_security_context(&p, &c, &uid(5), root_dir, false).unwrap();
    assert_eq!(sc.run_as_user, Some(api::Int64Value { value: 65534 }));
    assert_eq!(sc.run_as_group, Some(api::Int64Value { value: 2000 }));
    assert_eq!(sc.supplemental_groups, vec![3000, 4000, 4001]);
    assert!(sc.readonly_rootfs && sc.no_new_privs && !sc.privileged);
    let caps = sc.capabilities.unwrap();
    assert_eq!(
        (caps.add_capabilities, caps.drop_capabilities),
        (vec!["NET_ADMIN".to_string()], vec!["ALL".to_string()])
    );
    assert_eq!(
        sc.seccomp.unwrap().profile_type,
        ProfileType::RuntimeDefault as i32
    );
    assert_eq!(sc.masked_paths.len(), DEFAULT_MASKED_PATHS.len());
    assert_eq!(sc.readonly_paths.len(), DEFAULT_READONLY_PATHS.len());
    #[allow(deprecated)]
    let deprecated_apparmor = sc.apparmor_profile.clone();
    assert!(sc.apparmor.is_none() && deprecated_apparmor.is_empty());

    // Nothing set: the image's user, Unconfined seccomp, privilege escalation allowed.
    let (p, c) = pod(None, None);
    let sc = linux_security_context(&p, &c, &uid(1000), root_dir, false).unwrap();
    assert_eq!(sc.run_as_user, Some(api::Int64Value { value: 1000 }));
    assert_eq!(
        sc.seccomp.unwrap().profile_type,
        ProfileType::Unconfined as i32
    );
    assert!(!sc.no_new_privs && sc.capabilities.is_none());
    let named = ImageUser {
        uid: None,
        username: "app".into(),
    };
    let sc = linux_security_context(&p, &c, &named, root_dir, false).unwrap();
    assert_eq!((sc.run_as_user, sc.run_as_username.as_str()), (None, "app"));

    // procMount Unmasked clears the default paths.
    let (p, c) = pod(
        None,
        Some(SecurityContext {
            proc_mount: Some("Unmasked".into()),
            ..Default::default()
        }),
    );
    let sc = linux_security_context(&p, &c, &root(), root_dir, false).unwrap();
    assert!(sc.masked_paths.is_empty() && sc.readonly_paths.is_empty());
}

#[test]
fn seccomp_and_apparmor_passthrough() {
    let root_dir = Path::new("/var/lib/kubelet/seccomp");
    let local = SeccompProfile {
        type_: "Localhost".into(),
        localhost_profile: Some("profiles/audit.json".into()),
    };
    let sp = seccomp_profile(Some(&local), root_dir, false).unwrap();
    assert_eq!(
        (sp.profile_type, sp.localhost_ref.as_str()),
        (
            ProfileType::Localhost as i32,
            "/var/lib/kubelet/seccomp/profiles/audit.json"
        )
    );
    let bad = SeccompProfile {
        type_: "Localhost".into(),
        localhost_profile: None,
    };
    assert!(seccomp_profile(Some(&bad), root_dir, false).is_err());
    // The container's seccomp wins over the pod's.
    let (p, c) = pod(
        Some(PodSecurityContext {
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                localhost_profile: None,
            }),
            ..Default::default()
        }),
        Some(SecurityContext {
            seccomp_profile: Some(SeccompProfile {
                type_: "Unconfined".into(),
                localhost_profile: None,
            }),
            ..Default::default()
        }),
    );
    let sc = linux_security_context(&p, &c, &root(), root_dir, false).unwrap();
    assert_eq!(
        sc.seccomp.unwrap().profile_type,
        ProfileType::Unconfined as i32
    );

    // AppArmor: container field, then the beta annotation, then the pod field.
    let (mut p, c) = pod(
        Some(PodSecurityContext {
            app_armor_profile: Some(AppArmorProfile {
                type_: "RuntimeDefault".into(),
                localhost_profile: None,
            }),
            ..Default::default()
        }),
        None,
    );
    let (a, dep) = apparmor_profile(&p, &c).unwrap();
    assert_eq!(
        (a.unwrap().profile_type, dep.as_str()),
        (ProfileType::RuntimeDefault as i32, "runtime/default")
    );
    p.metadata.annotations = Some(
        [(
            format!("{APPARMOR_ANNOTATION_PREFIX}main"),
            "localhost/k8s-deny-write".to_string(),
        )]
        .into(),
    );
    let (a, dep) = apparmor_profile(&p, &c).unwrap();
    let a = a.unwrap();
    assert_eq!(
        (a.profile_type, a.localhost_ref.as_str(), dep.as_str()),
        (
            ProfileType::Localhost as i32,
            "k8s-deny-write",
            "localhost/k8s-deny-write"
        )
    );
    let (_, c) = pod(
        None,
        Some(SecurityContext {
            app_armor_profile: Some(AppArmorProfile {
                type_: "Unconfined".into(),
                localhost_profile: None,
            }),
            ..Default::default()
        }),
    );
    let (a, dep) = apparmor_profile(&p, &c).unwrap();
    assert_eq!(
        (a.unwrap().profile_type, dep.as_str()),
        (ProfileType::Unconfined as i32, "unconfined")
    );
}

/// `seccompDefault`: only an unset profile (container and pod) changes; explicit ones stay.
#[test]
fn seccomp_default_table() {
    use ProfileType as T;
    let root_dir = Path::new("/var/lib/kubelet/seccomp");
    let prof = |t: &str| SeccompProfile {
        type_: t.into(),
        localhost_profile: (t == "Localhost").then(|| "p.json".into()),
    };
    let cases: &[(Option<&str>, bool, T)] = &[
        (None, false, T::Unconfined),
        (None, true, T::RuntimeDefault),
        (Some("Unconfined"), true, T::Unconfined),
        (Some("RuntimeDefault"), false, T::RuntimeDefault),
        (Some("Localhost"), true, T::Localhost),
    ];
    for (t, default, want) in cases {
        let p = t.map(prof);
        let got = seccomp_profile(p.as_ref(), root_dir, *default).unwrap();
        assert_eq!(
            got.profile_type, *want as i32,
            "{t:?} seccompDefault={default}"
        );
    }
    // Through the whole security context: a pod-level Unconfined is kept under seccompDefault.
    let (p, c) = pod(None, None);
    let sc = linux_security_context(&p, &c, &root(), root_dir, true).unwrap();
    assert_eq!(sc.seccomp.unwrap().profile_type, T::RuntimeDefault as i32);
    let psc = PodSecurityContext {
        seccomp_profile: Some(prof("Unconfined")),
        ..Default::default()
    };
    let (p, c) = pod(Some(psc), None);
    let sc = linux_security_context(&p, &c, &root(), root_dir, true).unwrap();
    assert_eq!(sc.seccomp.unwrap().profile_type, T::Unconfined as i32);
}
