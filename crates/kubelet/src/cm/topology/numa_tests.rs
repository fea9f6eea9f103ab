//! Upstream `numa_info_test.go` tables.

use super::*;

fn mask(nodes: &[usize]) -> BitMask {
    BitMask::from_nodes(nodes)
}

fn info(rows: &[&[u64]]) -> NumaInfo {
    NumaInfo {
        nodes: (0..rows.len()).collect(),
        distances: rows
            .iter()
            .enumerate()
            .map(|(i, r)| (i, r.to_vec()))
            .collect(),
    }
}

const FOUR: &[&[u64]] = &[
    &[10, 11, 12, 12],
    &[11, 10, 12, 12],
    &[12, 12, 10, 11],
    &[12, 12, 11, 10],
];

#[test]
fn discover_reads_the_distance_files() {
    let dir = tempfile::tempdir().unwrap();
    for (i, row) in ["10 11 12 12", "11 10 12 12", "12 12 10 11", "12 12 11 10"]
        .iter()
        .enumerate()
    {
        let d = dir.path().join(format!("devices/system/node/node{i}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("distance"), row).unwrap();
    }
    for n in 1..=4 {
        let nodes: Vec<usize> = (0..n).collect();
        let got = NumaInfo::discover(dir.path(), &nodes).unwrap();
        assert_eq!(
            got,
            NumaInfo {
                nodes: nodes.clone(),
                distances: FOUR[..n]
                    .iter()
                    .enumerate()
                    .map(|(i, r)| (i, r.to_vec()))
                    .collect(),
            }
        );
    }
    let e = NumaInfo::discover(dir.path(), &[9]).unwrap_err();
    assert!(e.to_string().contains("No such file or directory"), "{e}");
}

#[test]
fn split_distances_table() {
    assert_eq!(split_distances("10"), Ok(vec![10]));
    assert_eq!(split_distances("10 20\n"), Ok(vec![10, 20]));
    assert!(split_distances("10 -20")
        .unwrap_err()
        .starts_with("cannot convert"));
}

#[test]
fn average_distance_table() {
    type Case<'a> = (&'a str, &'a [usize], &'a [&'a [u64]], f64);
    let cases: Vec<Case> = vec![
        ("1 NUMA node", &[0], &[&[10]], 10.0),
        (
            "2 NUMA node, 1 set in bitmask",
            &[0],
            &[&[10, 11], &[11, 10]],
            10.0,
        ),
        (
            "2 NUMA node, 2 set in bitmask",
            &[0, 1],
            &[&[10, 11], &[11, 10]],
            10.5,
        ),
        ("4 NUMA node, 2 set in bitmask", &[0, 2], FOUR, 11.0),
        (
            "4 NUMA node, 3 set in bitmask",
            &[0, 2, 3],
            FOUR,
            11.11111111111111,
        ),
        ("0 NUMA node, 0 set in bitmask", &[], &[], 0.0),
    ];
    for (name, bits, rows, want) in cases {
        assert_eq!(info(rows).average_distance(mask(bits)), want, "{name}");
    }
}

#[test]
fn closest_table() {
    let same3: &[&[u64]] = &[&[10, 10, 10], &[10, 10, 10], &[10, 10, 10]];
    let same4: &[&[u64]] = &[
        &[10, 10, 10, 10],
        &[10, 10, 10, 10],
        &[10, 10, 10, 10],
        &[10, 10, 10, 10],
    ];
    // (description, current, candidate, distances, current wins)
    type Case<'a> = (&'a str, &'a [usize], &'a [usize], &'a [&'a [u64]], bool);
    let cases: Vec<Case> = vec![
        ("length differs, current narrower", &[0], &[0, 2], &[], true),
        (
            "same length and distance, current more lower bits",
            &[0, 1],
            &[0, 2],
            same3,
            true,
        ),
        (
            "same length and distance, candidate more lower bits",
            &[0, 3],
            &[0, 2],
            same4,
            false,
        ),
        (
            "same length, candidate closer",
            &[0, 3],
            &[0, 1],
            FOUR,
            false,
        ),
        ("same length, current closer", &[2, 3], &[0, 3], FOUR, true),
    ];
    for (name, current, candidate, rows, current_wins) in cases {
        let (cur, cand) = (mask(current), mask(candidate));
        let got = info(rows).closest(cand, cur);
        assert_eq!(got, if current_wins { cur } else { cand }, "{name}");
    }
}

#[test]
fn node_count_limit() {
    let opts = PolicyOptions::default();
    let nine: Vec<usize> = (0..9).collect();
    let e = check_node_count(Policy::Restricted, &nine, &opts).unwrap_err();
    assert_eq!(
        e.to_string(),
        "unsupported on machines with more than 8 NUMA Nodes"
    );
    check_node_count(Policy::None, &nine, &opts).unwrap();
    check_node_count(Policy::Restricted, &nine[..8], &opts).unwrap();
    let more = PolicyOptions {
        max_allowable_numa_nodes: 9,
        ..opts
    };
    check_node_count(Policy::SingleNumaNode, &nine, &more).unwrap();
}
