//! Golden checkpoints: two files upstream kubelets wrote on real nodes (quoted on public pages:
//! the default `none` file and a `static` one with an assignment), and files printed by a Go
//! program with upstream's checkpoint type and `checksum.New` over go-spew 1.1.1 (the version
//! Kubernetes vendors), so the checksum is byte-for-byte upstream's.

use super::*;

const NONE: &str = r#"{"policyName":"none","defaultCpuSet":"","checksum":1353318690}"#;
const STATIC_REAL: &str = r#"{"policyName":"static","defaultCpuSet":"0,2-12,14-23","entries":{"235148fe-393f-47a8-a17d-bd55bc1a836b":{"cgroup1-0":"1,13"}},"checksum":1552716370}"#;
const STATIC_TWO_PODS: &str = r#"{"policyName":"static","defaultCpuSet":"0,3-5","entries":{"uid-a":{"c0":"6","c1":"1-2"},"uid-b":{"app":"7"}},"checksum":88806479}"#;
const STATIC_EMPTY: &str = r#"{"policyName":"static","defaultCpuSet":"0-1","checksum":1636926438}"#;

#[test]
fn upstream_checkpoints_verify_and_re_encode_byte_for_byte() {
    for golden in [NONE, STATIC_REAL, STATIC_TWO_PODS, STATIC_EMPTY] {
        let cp = decode(golden.as_bytes()).unwrap_or_else(|e| panic!("{golden}: {e}"));
        assert_eq!(String::from_utf8(encode(&cp)).unwrap(), golden);
    }
    let cp = decode(STATIC_TWO_PODS.as_bytes()).unwrap();
    assert_eq!(cp.policy_name, "static");
    assert_eq!(cp.entries["uid-a"]["c1"], "1-2");
}

#[test]
fn spew_printing_is_go_spews() {
    let cp = Checkpoint {
        policy_name: "static".into(),
        default_cpu_set: "0,3-5".into(),
        entries: [(
            "uid-a".to_string(),
            [
                ("c1".to_string(), "1-2".to_string()),
                ("c0".to_string(), "6".to_string()),
            ]
            .into_iter()
            .collect(),
        )]
        .into_iter()
        .collect(),
    };
    assert_eq!(
        spew(&cp),
        "(*state.CPUManagerCheckpoint){PolicyName:(string)static DefaultCPUSet:(string)0,3-5 \
         Entries:(map[string]map[string]string)map[uid-a:map[c0:6 c1:1-2]] Checksum:(checksum.Checksum)0}"
    );
}

#[test]
fn a_changed_checkpoint_is_corrupt_and_a_zero_checksum_is_accepted() {
    let tampered = STATIC_REAL.replace("1,13", "1,14");
    assert!(matches!(
        decode(tampered.as_bytes()),
        Err(CheckpointError::Corrupt)
    ));
    assert!(matches!(decode(b"{"), Err(CheckpointError::Json(_))));
    let zero = r#"{"policyName":"static","defaultCpuSet":"0-3","checksum":0}"#;
    assert_eq!(decode(zero.as_bytes()).unwrap().default_cpu_set, "0-3");
}
