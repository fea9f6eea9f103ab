use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;

use k8s_openapi::api::core::v1::{Container, EmptyDirVolumeSource, VolumeMount};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use rkubelet_cri::api;

use super::host_path::check_type;
use super::mounts::{expand_sub_path_expr, make_mounts, propagation, MountsError};
use super::subpath::{self, SubPathError};
use super::*;

fn type_err(path: &Path, ty: &str) -> String {
    check_type(path, ty).unwrap_err().to_string()
}

#[test]
fn host_path_directory_types() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("a/b");
    assert_eq!(
        type_err(&missing, "Directory"),
        format!(
            "hostPath type check failed: {} is not a directory",
            missing.display()
        )
    );
    // DirectoryOrCreate makes every missing component, 0755.
    check_type(&missing, "DirectoryOrCreate").unwrap();
    let meta = std::fs::metadata(&missing).unwrap();
    assert!(meta.is_dir());
    assert_eq!(meta.permissions().mode() & 0o777, 0o755 & !umask());
    check_type(&missing, "Directory").unwrap();
    check_type(&missing, "DirectoryOrCreate").unwrap();
    // A file where a directory is wanted fails, even with OrCreate.
    let file = tmp.path().join("f");
    std::fs::write(&file, "x").unwrap();
    assert!(type_err(&file, "DirectoryOrCreate").ends_with("is not a directory"));
    // No type: nothing is checked.
    check_type(&tmp.path().join("nothing"), "").unwrap();
}

/// The process umask, read without changing it (other tests run in parallel).
fn umask() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Umask:")).unwrap();
    u32::from_str_radix(line.trim_start_matches("Umask:").trim(), 8).unwrap()
}

#[test]
fn host_path_file_types() {
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("f");
    assert_eq!(
        type_err(&f, "File"),
        format!("hostPath type check failed: {} is not a file", f.display())
    );
    check_type(&f, "FileOrCreate").unwrap();
    let meta = std::fs::metadata(&f).unwrap();
    assert!(meta.is_file());
    assert_eq!(meta.len(), 0);
    assert_eq!(meta.permissions().mode() & 0o777, 0o644 & !umask());
    check_type(&f, "File").unwrap();
    // FileOrCreate keeps an existing file's content.
    std::fs::write(&f, "keep").unwrap();
    check_type(&f, "FileOrCreate").unwrap();
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "keep");
    // Upstream creates the file only, not its parents.
    let deep = tmp.path().join("no/such/file");
    assert!(matches!(
        check_type(&deep, "FileOrCreate"),
        Err(VolumeError::Io { .. })
    ));
    assert!(type_err(tmp.path(), "File").ends_with("is not a file"));
    assert!(type_err(tmp.path(), "FileOrCreate").ends_with("is not a file"));
}

#[test]
fn host_path_special_types() {
    let tmp = tempfile::tempdir().unwrap();
    let sock = tmp.path().join("s.sock");
    let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    check_type(&sock, "Socket").unwrap();
    assert_eq!(
        type_err(tmp.path(), "Socket"),
        format!(
            "hostPath type check failed: {} is not a socket file",
            tmp.path().display()
        )
    );
    check_type(Path::new("/dev/null"), "CharDevice").unwrap();
    assert_eq!(
        type_err(&sock, "CharDevice"),
        format!(
            "hostPath type check failed: {} is not a character device",
            sock.display()
        )
    );
    assert_eq!(
        type_err(Path::new("/dev/null"), "BlockDevice"),
        "hostPath type check failed: /dev/null is not a block device"
    );
    // Symlinks are followed, as upstream's os.Stat does.
    let link = tmp.path().join("null");
    symlink("/dev/null", &link).unwrap();
    check_type(&link, "CharDevice").unwrap();
    assert_eq!(type_err(&link, "Bogus"), "Bogus is an invalid volume type");
}

#[test]
fn sub_path_validation() {
    assert_eq!(
        subpath::validate("/etc").unwrap_err(),
        SubPathError::Absolute("/etc".into())
    );
    assert_eq!(
        subpath::validate("a/../../x").unwrap_err(),
        SubPathError::Backsteps("a/../../x".into())
    );
    subpath::validate("a/b..c/d").unwrap();
}

#[test]
fn sub_path_is_created_with_the_volume_mode() {
    let tmp = tempfile::tempdir().unwrap();
    let vol = tmp.path().join("vol");
    std::fs::create_dir(&vol).unwrap();
    std::fs::set_permissions(&vol, std::fs::Permissions::from_mode(0o777)).unwrap();
    let p = subpath::resolve(&vol, "a/b").unwrap().1;
    assert_eq!(p, vol.canonicalize().unwrap().join("a/b"));
    for d in ["a", "a/b"] {
        let mode = std::fs::metadata(vol.join(d)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o777, "{d}");
    }
    // Existing paths are used as they are, files too.
    std::fs::write(vol.join("file"), "x").unwrap();
    assert_eq!(
        subpath::resolve(&vol, "file").unwrap().1,
        vol.canonicalize().unwrap().join("file")
    );
}

#[test]
fn sub_path_symlinks_must_stay_in_the_volume() {
    let tmp = tempfile::tempdir().unwrap();
    let vol = tmp.path().join("vol");
    let outside = tmp.path().join("outside");
    std::fs::create_dir(&vol).unwrap();
    std::fs::create_dir(&outside).unwrap();
    // A link inside the volume to another place inside it is fine.
    std::fs::create_dir(vol.join("real")).unwrap();
    symlink("real", vol.join("inner")).unwrap();
    assert_eq!(
        subpath::resolve(&vol, "inner").unwrap().1,
        vol.canonicalize().unwrap().join("real")
    );
    // A link out of the volume is refused, also as a prefix of a path to create.
    symlink(&outside, vol.join("escape")).unwrap();
    assert!(matches!(
        subpath::resolve(&vol, "escape"),
        Err(SubPathError::NotWithinVolume { .. })
    ));
    assert!(matches!(
        subpath::resolve(&vol, "escape/new"),
        Err(SubPathError::OutsideBase { .. })
    ));
    assert!(!outside.join("new").exists(), "nothing created outside");
    // A relative link climbing out is refused the same way.
    symlink("../outside", vol.join("up")).unwrap();
    assert!(subpath::resolve(&vol, "up").is_err());
    // A dangling link is not followed to create its target.
    symlink(outside.join("ghost"), vol.join("dangling")).unwrap();
    assert!(subpath::resolve(&vol, "dangling").is_err());
    assert!(!outside.join("ghost").exists());
}

fn mount(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        ..Default::default()
    }
}

#[test]
fn mounts_from_volume_mounts() {
    let tmp = tempfile::tempdir().unwrap();
    let vol = tmp.path().join("data");
    std::fs::create_dir(&vol).unwrap();
    let vols = PodVolumes::new([("data".to_string(), vol.clone())].into_iter().collect());
    let c = Container {
        name: "app".into(),
        volume_mounts: Some(vec![VolumeMount {
            read_only: Some(true),
            mount_propagation: Some("HostToContainer".into()),
            ..mount("data", "/ro")
        }]),
        ..Default::default()
    };
    let envs = vec![("POD".to_string(), "web-1".to_string())];
    let m = make_mounts(tmp.path(), &c, &vols, &envs).unwrap();
    assert_eq!(
        m[0],
        api::Mount {
            container_path: "/ro".into(),
            host_path: vol.display().to_string(),
            readonly: true,
            propagation: api::MountPropagation::PropagationHostToContainer as i32,
            ..Default::default()
        }
    );
    assert_eq!(m.len(), 1);
    let unknown = Container {
        name: "app".into(),
        volume_mounts: Some(vec![mount("nope", "/x")]),
        ..Default::default()
    };
    assert_eq!(
        make_mounts(tmp.path(), &unknown, &vols, &envs)
            .unwrap_err()
            .to_string(),
        "cannot find volume \"nope\" to mount into container \"app\""
    );
}

#[test]
fn sub_path_expr_needs_every_variable() {
    let envs = vec![
        ("A".to_string(), "a".to_string()),
        ("EMPTY".to_string(), String::new()),
    ];
    assert_eq!(expand_sub_path_expr("x/$(A)", &envs).unwrap(), "x/a");
    assert_eq!(expand_sub_path_expr("$$(A)", &envs).unwrap(), "$(A)");
    assert_eq!(
        expand_sub_path_expr("$(Z)/$(EMPTY)/$(A)", &envs).unwrap_err(),
        MountsError::MissingExpansion("EMPTY, Z".into())
    );
}

#[test]
fn mount_propagation_modes() {
    let with = |p: Option<&str>| VolumeMount {
        mount_propagation: p.map(str::to_string),
        ..mount("v", "/v")
    };
    use api::MountPropagation as P;
    assert_eq!(propagation(&with(None)).unwrap(), P::PropagationPrivate);
    assert_eq!(
        propagation(&with(Some("None"))).unwrap(),
        P::PropagationPrivate
    );
    assert_eq!(
        propagation(&with(Some("Bidirectional"))).unwrap(),
        P::PropagationBidirectional
    );
    assert_eq!(
        propagation(&with(Some("Shared"))).unwrap_err().to_string(),
        "invalid MountPropagation mode: \"Shared\""
    );
}

#[test]
fn empty_dir_size_limit_in_bytes() {
    let ed = |q: Option<&str>| EmptyDirVolumeSource {
        medium: Some("Memory".into()),
        size_limit: q.map(|q| Quantity(q.into())),
        ..Default::default()
    };
    assert_eq!(empty_dir::size_limit(&ed(None)).unwrap(), None);
    assert_eq!(
        empty_dir::size_limit(&ed(Some("64Mi"))).unwrap(),
        Some(64 << 20)
    );
    assert_eq!(empty_dir::size_limit(&ed(Some("1500m"))).unwrap(), Some(2));
    assert_eq!(empty_dir::size_limit(&ed(Some("0"))).unwrap(), None);
    assert!(empty_dir::size_limit(&ed(Some("lots"))).is_err());
}

#[test]
fn empty_dir_on_disk_is_world_writable() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = volume_dir(tmp.path(), EMPTY_DIR_PLUGIN, "cache");
    empty_dir::set_up(&dir, &EmptyDirVolumeSource::default(), None).unwrap();
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
    assert_eq!(mode & 0o7777, 0o777);
    // Idempotent.
    empty_dir::set_up(&dir, &EmptyDirVolumeSource::default(), None).unwrap();
    let bad = EmptyDirVolumeSource {
        medium: Some("Tape".into()),
        ..Default::default()
    };
    assert_eq!(
        empty_dir::set_up(&dir, &bad, None).unwrap_err().to_string(),
        "unknown storage medium \"Tape\""
    );
}

#[test]
fn unsupported_volumes_fail_by_name_and_type() {
    let tmp = tempfile::tempdir().unwrap();
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "p", "uid": "u"},
        "spec": {"containers": [], "volumes": [
            {"name": "share", "nfs": {"server": "nfs.example", "path": "/x"}},
            {"name": "data", "persistentVolumeClaim": {"claimName": "c"}},
            {"name": "ok", "emptyDir": {}},
        ]}
    }))
    .unwrap();
    // The sync resolved the claim and found it unbound (claims::ClaimSource::resolve).
    let pvs = PvInputs {
        claims: claims::Claims(
            [(
                "data".to_string(),
                Err("error processing PVC default/c: PVC is not bound".to_string()),
            )]
            .into_iter()
            .collect(),
        ),
        node_labels: Default::default(),
        csi: Default::default(),
    };
    let objects = Objects::default();
    let tokens = crate::token::Tokens::default();
    let allocatable = BTreeMap::new();
    let inputs = projected::Inputs {
        objects: &objects,
        tokens: &tokens,
        allocatable: &allocatable,
    };
    let errs = set_up_pod_with(tmp.path(), &pod, None, &inputs, &pvs).unwrap_err();
    let msgs: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
    assert_eq!(msgs.len(), 2, "{msgs:?}");
    assert!(msgs[0].starts_with(
        "MountVolume.SetUp failed for volume \"share\" : volume type nfs is not supported"
    ));
    // Upstream's WaitForAttachAndMount message with the populator's error.
    assert_eq!(
        msgs[1],
        "Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[data]: error processing PVC default/c: PVC is not bound"
    );
    // A claim no container uses is not resolved, and not set up.
    let none = set_up_pod(tmp.path(), &pod, None, &Default::default()).unwrap_err();
    assert_eq!(none.len(), 1);
}

#[test]
fn mountinfo_lines() {
    let text = "36 35 98:0 /mnt1 /mnt/with\\040space rw,noatime master:1 - tmpfs tmpfs rw\n\
                22 1 8:1 / / rw shared:1 - ext4 /dev/sda1 rw,errors=remount-ro\n";
    assert_eq!(
        parse_mountinfo(text),
        vec![
            MountEntry {
                mount_point: "/mnt/with space".into(),
                fs_type: "tmpfs".into()
            },
            MountEntry {
                mount_point: "/".into(),
                fs_type: "ext4".into()
            },
        ]
    );
}

#[test]
fn removing_a_pod_dir_without_mounts() {
    let tmp = tempfile::tempdir().unwrap();
    let pod_dir = tmp.path().join("pods/uid-1");
    let dir = volume_dir(&pod_dir, EMPTY_DIR_PLUGIN, "v");
    empty_dir::set_up(&dir, &EmptyDirVolumeSource::default(), None).unwrap();
    std::fs::write(dir.join("f"), "x").unwrap();
    assert_eq!(
        pod_dir_uids(&tmp.path().join("pods")).unwrap(),
        vec!["uid-1"]
    );
    remove_pod_dir(&pod_dir).unwrap();
    assert!(!pod_dir.exists());
    remove_pod_dir(&pod_dir).unwrap();
    assert!(pod_dir_uids(&tmp.path().join("nothing"))
        .unwrap()
        .is_empty());
}

/// A volume's data, `<tmp>/pv-data/keep` reading "precious", bind-mounted on `target` as a
/// local PV would be (same file system: only the kernel's mount-root attribute tells). Returns
/// the data's directory, to check that nothing was deleted through the mount.
fn bind_mount_precious(tmp: &Path, target: &Path) -> std::path::PathBuf {
    use nix::mount::{mount, MsFlags};
    let source = tmp.join("pv-data");
    std::fs::create_dir(&source).unwrap();
    std::fs::write(source.join("keep"), "precious").unwrap();
    mount(
        Some(&source),
        target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .unwrap();
    source
}

/// The walk that spares the mount table: a real bind mount (same file system, so only the
/// kernel's mount-root attribute can tell) deep in a pod directory is seen; the table then finds
/// it and the teardown unmounts it before anything is removed. Needs root, as the kubelet.
#[test]
fn bind_mount_below_a_pod_dir_is_found_and_unmounted() {
    let tmp = tempfile::tempdir().unwrap();
    let pod_dir = tmp.path().join("pods/uid-2");
    let target = pod_dir.join("volumes/kubernetes.io~local-volume/pv");
    std::fs::create_dir_all(&target).unwrap();
    std::fs::create_dir_all(pod_dir.join("containers/c")).unwrap();
    std::fs::write(pod_dir.join("etc-hosts"), "").unwrap();
    assert!(nothing_mounted_below(&pod_dir), "no mounts yet");
    assert_eq!(is_mount_root(&target), Some(false));
    let source = bind_mount_precious(tmp.path(), &target);
    assert_eq!(is_mount_root(&target), Some(true));
    assert!(!nothing_mounted_below(&pod_dir), "the bind mount is seen");
    let below = mounts_below(&pod_dir).unwrap();
    assert_eq!(below, vec![std::fs::canonicalize(&target).unwrap()]);
    remove_pod_dir(&pod_dir).unwrap();
    assert!(!pod_dir.exists());
    // The volume's own content was unmounted, never deleted through the mount.
    assert_eq!(
        std::fs::read_to_string(source.join("keep")).unwrap(),
        "precious"
    );
}

/// A pod directory without mounts goes in the one walk that asks about each entry (a file, a
/// symlink, nested directories); one with a mount below stops that walk at the mount, untouched.
#[test]
fn removal_walk_removes_plain_trees_and_stops_at_a_mount() {
    use nix::mount::umount;
    let tmp = tempfile::tempdir().unwrap();
    let plain = tmp.path().join("pods/uid-3");
    std::fs::create_dir_all(plain.join("containers/c/d")).unwrap();
    std::fs::write(plain.join("etc-hosts"), "").unwrap();
    std::fs::write(plain.join("containers/c/d/0"), "log").unwrap();
    std::os::unix::fs::symlink(tmp.path(), plain.join("link")).unwrap();
    assert!(remove_unmounted(&plain, 0), "a plain tree goes in one walk");
    assert!(!plain.exists());
    assert!(tmp.path().exists(), "a symlink is removed, not followed");
    assert!(
        remove_unmounted(&plain, 0),
        "a directory already gone is gone"
    );

    let mounted = tmp.path().join("pods/uid-4");
    let target = mounted.join("volumes/kubernetes.io~local-volume/pv");
    std::fs::create_dir_all(&target).unwrap();
    let source = bind_mount_precious(tmp.path(), &target);
    assert!(
        !remove_unmounted(&mounted, 0),
        "the walk stops at the mount"
    );
    assert!(target.exists());
    assert_eq!(
        std::fs::read_to_string(target.join("keep")).unwrap(),
        "precious"
    );
    umount(&target).unwrap();
    assert!(remove_unmounted(&mounted, 0));
    assert_eq!(
        std::fs::read_to_string(source.join("keep")).unwrap(),
        "precious"
    );
}

#[test]
fn memory_empty_dir_is_capped_by_the_pod_limit() {
    use super::empty_dir::{memory_size, pod_memory_limit};
    let pod = |spec: serde_json::Value| -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "spec": spec}))
            .unwrap()
    };
    let lim = |m: &str| serde_json::json!({"limits": {"memory": m}});
    let all = pod(serde_json::json!({
        "initContainers": [
            {"name": "i", "resources": lim("300Mi")},
            {"name": "side", "restartPolicy": "Always", "resources": lim("10Mi")},
        ],
        "containers": [{"name": "a", "resources": lim("100Mi")}, {"name": "b", "resources": lim("50Mi")}],
        "overhead": {"memory": "1Mi"},
    }));
    assert_eq!(pod_memory_limit(&all), Some((300 + 1) << 20));
    let partial = pod(serde_json::json!({
        "containers": [{"name": "a", "resources": lim("100Mi")}, {"name": "b"}],
    }));
    assert_eq!(pod_memory_limit(&partial), None);
    assert_eq!(memory_size(Some(16), Some(8)), Some(8));
    assert_eq!(memory_size(Some(16), Some(32)), Some(16));
    assert_eq!(memory_size(None, Some(32)), Some(32));
    assert_eq!(memory_size(None, None), None);
}
