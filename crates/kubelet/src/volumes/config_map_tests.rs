//! The atomic writer's layout and updates, and configMap/secret payloads.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use k8s_openapi::api::core::v1::{KeyToPath, Pod};

use super::atomic_writer::{self, FileProjection, Payload, DATA_DIR, DATA_DIR_TMP};
use super::config_map::{make_payload, Source};
use super::set_up_pod;
use crate::objects::{ObjectData, ObjectError, ObjectKind, Objects};

fn file(data: &str, mode: u32) -> FileProjection {
    FileProjection {
        data: data.as_bytes().to_vec(),
        mode,
    }
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

fn link(p: &Path) -> String {
    std::fs::read_link(p)
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// The entries of `dir` whose names start with "..", sorted.
fn dot_entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".."))
        .collect();
    v.sort();
    v
}

#[test]
fn layout_is_upstreams() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let payload: Payload = [
        ("a".to_string(), file("1", 0o644)),
        ("dir/b".to_string(), file("2", 0o600)),
    ]
    .into();
    assert!(atomic_writer::write(t, &payload, 0).unwrap());
    let ts = link(&t.join(DATA_DIR));
    // ..YYYY_MM_DD_HH_MM_SS.NNNNNNNNN
    assert!(ts.starts_with("..") && ts.len() == 2 + 19 + 1 + 9, "{ts}");
    assert_eq!(ts.as_bytes()[6], b'_', "{ts}");
    assert_eq!(mode(&t.join(&ts)), 0o755);
    assert_eq!(link(&t.join("a")), "..data/a");
    assert_eq!(link(&t.join("dir")), "..data/dir");
    assert_eq!(std::fs::read_to_string(t.join("a")).unwrap(), "1");
    assert_eq!(std::fs::read_to_string(t.join("dir/b")).unwrap(), "2");
    assert_eq!(mode(&t.join("a")), 0o644);
    assert_eq!(mode(&t.join("dir/b")), 0o600);
    assert_eq!(dot_entries(t), vec![ts.clone(), DATA_DIR.to_string()]);

    // The same payload again writes nothing.
    assert!(!atomic_writer::write(t, &payload, 0).unwrap());
    assert_eq!(link(&t.join(DATA_DIR)), ts);
}

#[test]
fn update_swaps_data_and_removes_old_entries() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let first: Payload = [
        ("a".to_string(), file("1", 0o644)),
        ("dir/b".to_string(), file("2", 0o644)),
    ]
    .into();
    atomic_writer::write(t, &first, 0).unwrap();
    let old = link(&t.join(DATA_DIR));
    // A mode change alone is a change too.
    let second: Payload = [("a".to_string(), file("1", 0o400))].into();
    assert!(atomic_writer::write(t, &second, 0).unwrap());
    let new = link(&t.join(DATA_DIR));
    assert_ne!(old, new);
    assert_eq!(mode(&t.join("a")), 0o400);
    assert!(!t.join(&old).exists(), "old data dir left behind");
    assert!(
        std::fs::symlink_metadata(t.join("dir")).is_err(),
        "stale link"
    );
    let third: Payload = [("a".to_string(), file("changed", 0o400))].into();
    assert!(atomic_writer::write(t, &third, 0).unwrap());
    assert_eq!(std::fs::read_to_string(t.join("a")).unwrap(), "changed");
    assert_eq!(dot_entries(t).len(), 2);
}

/// With an fsGroup the ownership walk adds group bits after each write; the writer writes them
/// from the start, so the next sync finds the payload unchanged instead of rewriting it.
#[test]
fn files_owned_by_an_fs_group_are_not_rewritten_each_sync() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let bits = super::ownership::read_only_file_bits(Some(2000));
    let payload: Payload = [("a".to_string(), file("1", 0o400))].into();
    assert!(atomic_writer::write(t, &payload, bits).unwrap());
    let first = link(&t.join(DATA_DIR));
    assert_eq!(mode(&t.join("a")), 0o440);
    super::ownership::set_volume_ownership(
        t,
        Some(2000),
        super::ownership::ChangePolicy::Always,
        true,
    )
    .unwrap();
    assert!(!atomic_writer::write(t, &payload, bits).unwrap());
    assert_eq!(link(&t.join(DATA_DIR)), first);
    assert_eq!(mode(&t.join("a")), 0o440);
}

#[test]
fn stale_dirs_from_a_crash_are_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let payload: Payload = [("a".to_string(), file("1", 0o644))].into();
    atomic_writer::write(t, &payload, 0).unwrap();
    // A crash between writing a new dir and the swap leaves both.
    std::fs::create_dir(t.join("..2020_01_01_00_00_00.000000001")).unwrap();
    std::fs::write(t.join("..2020_01_01_00_00_00.000000001/a"), "x").unwrap();
    std::os::unix::fs::symlink("..2020_01_01_00_00_00.000000001", t.join(DATA_DIR_TMP)).unwrap();
    let changed: Payload = [("a".to_string(), file("2", 0o644))].into();
    atomic_writer::write(t, &changed, 0).unwrap();
    let current = link(&t.join(DATA_DIR));
    assert_eq!(dot_entries(t), vec![current, DATA_DIR.to_string()]);
    // Even an unchanged write cleans up, and recreates a lost visible link.
    std::fs::create_dir(t.join("..2020_01_01_00_00_00.000000002")).unwrap();
    std::fs::remove_file(t.join("a")).unwrap();
    assert!(!atomic_writer::write(t, &changed, 0).unwrap());
    assert_eq!(dot_entries(t).len(), 2);
    assert_eq!(std::fs::read_to_string(t.join("a")).unwrap(), "2");
}

#[test]
fn payload_paths_are_validated() {
    let tmp = tempfile::tempdir().unwrap();
    for (p, why) in [
        ("/etc/passwd", "invalid path: must be relative path"),
        ("a/../../b", "invalid path: must not contain '..'"),
        ("..data", "invalid path: must not start with '..'"),
    ] {
        let payload: Payload = [(p.to_string(), file("x", 0o644))].into();
        let err = atomic_writer::write(tmp.path(), &payload, 0).unwrap_err();
        assert_eq!(err.to_string(), format!("{why}: {p:?}"));
    }
    assert!(std::fs::read_dir(tmp.path()).unwrap().next().is_none());
}

fn object() -> ObjectData {
    ObjectData {
        data: [
            ("k1".to_string(), b"v1".to_vec()),
            ("k2".to_string(), b"v2".to_vec()),
        ]
        .into(),
        binary_data: [("bin".to_string(), vec![0u8, 1, 2])].into(),
    }
}

fn item(key: &str, path: &str, mode: Option<i32>) -> KeyToPath {
    KeyToPath {
        key: key.into(),
        path: path.into(),
        mode,
        ..Default::default()
    }
}

#[test]
fn payload_from_keys_items_and_modes() {
    let obj = object();
    let src = Source {
        kind: ObjectKind::ConfigMap,
        name: "cm",
        items: &[],
        default_mode: None,
        optional: false,
    };
    let all = make_payload(&src, &obj).unwrap();
    assert_eq!(all.keys().collect::<Vec<_>>(), ["bin", "k1", "k2"]);
    assert!(all.values().all(|f| f.mode == 0o644));
    assert_eq!(all["bin"].data, vec![0, 1, 2]);

    let items = [item("k1", "sub/one", Some(0o400)), item("bin", "b", None)];
    let src = Source {
        items: &items,
        default_mode: Some(0o440),
        ..src
    };
    let some = make_payload(&src, &obj).unwrap();
    assert_eq!(some.len(), 2);
    assert_eq!(some["sub/one"], file("v1", 0o400));
    assert_eq!(some["b"].mode, 0o440);

    let missing = [item("nope", "n", None)];
    let src = Source {
        items: &missing,
        ..src
    };
    assert_eq!(
        make_payload(&src, &obj).unwrap_err().to_string(),
        "configmap references non-existent config key: nope"
    );
    let secret = Source {
        kind: ObjectKind::Secret,
        ..src
    };
    assert_eq!(
        make_payload(&secret, &obj).unwrap_err().to_string(),
        "references non-existent secret key: nope"
    );
    let optional = Source {
        optional: true,
        ..src
    };
    assert!(make_payload(&optional, &obj).unwrap().is_empty());
}

#[test]
fn missing_config_map_fails_unless_optional() {
    let tmp = tempfile::tempdir().unwrap();
    let pod = |optional: bool| -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [], "volumes": [
                {"name": "cfg", "configMap": {"name": "c", "optional": optional}},
            ]}
        }))
        .unwrap()
    };
    let mut objects = Objects::default();
    objects.0.insert(
        (ObjectKind::ConfigMap, "c".into()),
        Err(ObjectError::NotFound {
            kind: ObjectKind::ConfigMap,
            name: "c".into(),
        }),
    );
    let errs = set_up_pod(tmp.path(), &pod(false), None, &objects).unwrap_err();
    assert_eq!(
        errs[0].to_string(),
        "MountVolume.SetUp failed for volume \"cfg\" : configmap \"c\" not found"
    );
    let vols = set_up_pod(tmp.path(), &pod(true), None, &objects).unwrap();
    let dir = vols.get("cfg").unwrap();
    assert!(dir.ends_with("volumes/kubernetes.io~configmap/cfg"));
    assert!(vols.is_read_only("cfg"));
    assert!(std::fs::symlink_metadata(dir.join(DATA_DIR))
        .unwrap()
        .is_symlink());

    // The object appearing later fills the volume on the next set up.
    objects
        .0
        .insert((ObjectKind::ConfigMap, "c".into()), Ok(object()));
    set_up_pod(tmp.path(), &pod(true), None, &objects).unwrap();
    assert_eq!(std::fs::read_to_string(dir.join("k1")).unwrap(), "v1");
    assert_eq!(mode(&dir.join("k1")), 0o644);
}
