//! Naming, conversions and detection (lib.rs).

use super::*;

#[test]
fn naming_table() {
    let cases: &[(&[&str], &str, &str)] = &[
        (&[], "/", "/"),
        (&["kubepods"], "/kubepods", "/kubepods.slice"),
        (
            &["kubepods", "burstable"],
            "/kubepods/burstable",
            "/kubepods.slice/kubepods-burstable.slice",
        ),
        (
            &["kubepods", "burstable", "pod12-34"],
            "/kubepods/burstable/pod12-34",
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice",
        ),
    ];
    for (parts, fs, sd) in cases {
        let name = CgroupName::new(parts.iter().copied());
        assert_eq!(name.to_cgroupfs(), *fs, "{parts:?}");
        assert_eq!(name.to_systemd(), *sd, "{parts:?}");
        assert_eq!(CgroupName::from_cgroupfs(fs), name, "{fs}");
        assert_eq!(CgroupName::from_systemd(sd), name, "{sd}");
        assert_eq!(name.is_root(), parts.is_empty());
    }
    assert_eq!(CgroupName::from_cgroupfs(""), CgroupName::root());
    assert_eq!(
        CgroupName::from_cgroupfs("/a//b/"),
        CgroupName::new(["a", "b"])
    );
    assert_eq!(CgroupName::from_systemd(""), CgroupName::root());
    assert_eq!(
        CgroupName::from_systemd("kubepods-besteffort.slice"),
        CgroupName::new(["kubepods", "besteffort"])
    );
}

#[test]
fn child_parent_within() {
    let kp = CgroupName::new(["kubepods"]);
    let b = kp.child("burstable");
    assert_eq!(b.parts(), ["kubepods", "burstable"]);
    assert_eq!(b.parent(), Some(kp.clone()));
    assert_eq!(kp.parent(), Some(CgroupName::root()));
    assert_eq!(CgroupName::root().parent(), None);
    assert!(b.is_within(&kp) && b.is_within(&CgroupName::root()) && !kp.is_within(&b));
}

#[test]
fn cgroup_dir_by_driver() {
    let name = CgroupName::new(["kubepods", "pod-1"]);
    let m = Path::new("/m");
    assert_eq!(
        cgroup_dir(m, &name, Driver::Cgroupfs),
        Path::new("/m/kubepods/pod-1")
    );
    assert_eq!(
        cgroup_dir(m, &name, Driver::Systemd),
        Path::new("/m/kubepods.slice/kubepods-pod_1.slice")
    );
    assert_eq!(
        cgroup_dir(m, &CgroupName::root(), Driver::Systemd),
        Path::new("/m")
    );
}

#[test]
fn driver_parse() {
    assert_eq!(Driver::parse("cgroupfs").ok(), Some(Driver::Cgroupfs));
    assert_eq!(Driver::parse("systemd").ok(), Some(Driver::Systemd));
    let err = Driver::parse("Systemd")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("unknown cgroup driver \"Systemd\""), "{err}");
}

#[test]
fn shares_weight_table() {
    for (shares, weight) in [
        (0, 0),
        (1, 1),
        (2, 1),
        (1024, 39),
        (262_144, 10_000),
        (1_000_000, 10_000),
    ] {
        assert_eq!(cpu_shares_to_weight(shares), weight, "shares {shares}");
    }
    for (weight, shares) in [(0, 0), (1, 2), (10_000, 262_144)] {
        assert_eq!(cpu_weight_to_shares(weight), shares, "weight {weight}");
    }
    // Round trip: back to within one weight step (both divisions round down).
    for shares in [2, 512, 1024, 100_000] {
        let w = cpu_shares_to_weight(shares);
        assert!(
            w.abs_diff(cpu_shares_to_weight(cpu_weight_to_shares(w))) <= 1,
            "shares {shares}"
        );
    }
}

#[test]
fn hugetlb_names() {
    for (bytes, name) in [
        (2 << 20, "2MB"),
        (1 << 30, "1GB"),
        (64 << 10, "64KB"),
        (32 << 20, "32MB"),
    ] {
        assert_eq!(hugetlb_size_name(bytes), name);
        assert_eq!(parse_hugetlb_size_name(name), Some(bytes));
    }
    assert_eq!(parse_hugetlb_size_name("2M"), None);
    assert_eq!(parse_hugetlb_size_name("MB"), None);
}

#[test]
fn kernel_hugepages_from_dir() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    std::fs::create_dir(dir.path().join("hugepages-2048kB"))?;
    std::fs::create_dir(dir.path().join("hugepages-1048576kB"))?;
    std::fs::create_dir(dir.path().join("other"))?;
    assert_eq!(kernel_hugepage_sizes(dir.path()), vec![2 << 20, 1 << 30]);
    assert!(kernel_hugepage_sizes(&dir.path().join("missing")).is_empty());
    Ok(())
}

#[test]
fn detect_systemd_needs_running_systemd() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let err = detect_at(Driver::Systemd, dir.path(), &dir.path().join("no-systemd"))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("cgroupDriver systemd needs a running systemd"),
        "{err}"
    );
    Ok(())
}
