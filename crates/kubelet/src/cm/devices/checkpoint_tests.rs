//! Golden files printed by upstream's own checkpoint package (Kubernetes 1.20.2,
//! `checkpoint.New(...).MarshalCheckpoint()`), so the checksum is byte-for-byte upstream's.

use super::*;

const EMPTY: &str =
    r#"{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{}},"Checksum":3467439661}"#;
const FULL: &str = r#"{"Data":{"PodDeviceEntries":[{"PodUID":"uid-1","ContainerName":"c","ResourceName":"example.com/resource","DeviceIDs":{"0":["Dev-1"],"1":["Dev-3","Dev-2"]},"AllocResp":"EgoKAi9h"},{"PodUID":"uid-2","ContainerName":"d","ResourceName":"example.com/resource","DeviceIDs":null,"AllocResp":""}],"RegisteredDevices":{"a.b/c":[],"example.com/resource":["Dev-2","Dev-1"]}},"Checksum":4166672724}"#;

#[test]
fn upstream_checkpoints_verify_and_re_encode_byte_for_byte() {
    for golden in [EMPTY, FULL] {
        let data = decode(golden.as_bytes()).unwrap_or_else(|e| panic!("{golden}: {e}"));
        assert_eq!(String::from_utf8(encode(&data)).unwrap(), golden);
    }
}

#[test]
fn decoded_fields_keep_go_nil_apart_from_empty() {
    let data = decode(FULL.as_bytes()).unwrap();
    let entries = data.pod_device_entries.unwrap();
    assert_eq!(
        entries[0].alloc_resp.as_deref(),
        Some(&[0x12, 0x0a, 0x0a, 0x02, 0x2f, 0x61][..])
    );
    assert_eq!(
        entries[0].device_ids.as_ref().unwrap()[&1],
        vec!["Dev-3", "Dev-2"]
    );
    assert_eq!(entries[1].device_ids, None);
    assert_eq!(entries[1].alloc_resp.as_deref(), Some(&[][..]));
    assert_eq!(
        data.registered_devices.unwrap()["a.b/c"],
        Vec::<String>::new()
    );
}

#[test]
fn a_changed_checkpoint_is_corrupt() {
    let tampered = FULL.replace("Dev-3", "Dev-9");
    assert!(matches!(
        decode(tampered.as_bytes()),
        Err(CheckpointError::Corrupt {
            stored: 4166672724,
            ..
        })
    ));
    assert!(matches!(decode(b"{"), Err(CheckpointError::Json(_))));
}
