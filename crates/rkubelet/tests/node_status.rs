//! Node status settings (issue 15 item 4) against a real kube-apiserver 1.20 and containerd:
//! `nodeStatusMaxImages` and `status.images` (the runtime's images, largest first, with their
//! sizes and names), `nodeLeaseDurationSeconds` (the Lease's duration, renewed every quarter
//! of it), and `nodeStatusUpdateFrequency` / `nodeStatusReportFrequency` (a changed status is
//! posted at the next update, an unchanged one only every report period), seen through the
//! Node and Lease objects and the apiserver's audit log.

mod common;

use std::time::{Duration, Instant};

use common::*;
use rkubelet_cri::api;

const UPDATE_S: u64 = 1;
const REPORT_S: f64 = 20.0;
const LEASE_S: i64 = 8;
const MAX_IMAGES: usize = 3;

/// `(names, sizeBytes)` of the Node's `status.images`.
fn node_images(cp: &ControlPlane, node: &str) -> Vec<(Vec<String>, i64)> {
    let n = cp.get_json(&["node", node]).unwrap_or_default();
    n["status"]["images"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| {
            let names = i["names"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect();
            (names, i["sizeBytes"].as_i64().unwrap_or(-1))
        })
        .collect()
}

/// Audit times (seconds) of the node's own requests with `verb` on `resource`/`subresource`.
fn request_times(cp: &ControlPlane, node: &str, verb: &str, resource: &str, sub: &str) -> Vec<f64> {
    let user = format!("system:node:{node}");
    let mut t: Vec<f64> = cp
        .audit_events()
        .iter()
        .filter(|e| e["user"]["username"] == user.as_str() && e["verb"] == verb)
        .filter(|e| e["objectRef"]["resource"] == resource)
        .filter(|e| e["objectRef"]["subresource"].as_str().unwrap_or_default() == sub)
        .filter_map(|e| {
            let ts: k8s_openapi::jiff::Timestamp =
                e["requestReceivedTimestamp"].as_str()?.parse().ok()?;
            Some(ts.as_microsecond() as f64 / 1e6)
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t
}

fn now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn node_images_lease_and_status_cadence() {
    let cp = ControlPlane::up_audited("nodestatus");
    let mut env = Env::new(236);
    env.extra_config = format!(
        "nodeStatusUpdateFrequency: {UPDATE_S}s\nnodeStatusReportFrequency: {REPORT_S}s\n\
         nodeLeaseDurationSeconds: {LEASE_S}\nnodeStatusMaxImages: {MAX_IMAGES}\n"
    );
    env.join(&cp, &[]);
    let node = env.node.clone();

    // status.images: the runtime's images, largest first, capped, digests then tags.
    let mut listed = env
        .cri()
        .list_images(api::ListImagesRequest { filter: None })
        .await
        .unwrap()
        .images;
    assert!(
        listed.len() > MAX_IMAGES,
        "the test needs more images than the cap: {listed:?}"
    );
    listed.sort_by(|a, b| b.size.cmp(&a.size).then_with(|| b.id.cmp(&a.id)));
    let want: Vec<(Vec<String>, i64)> = listed
        .iter()
        .take(MAX_IMAGES)
        .map(|i| {
            let names = i
                .repo_digests
                .iter()
                .chain(&i.repo_tags)
                .take(5)
                .cloned()
                .collect();
            (names, i.size as i64)
        })
        .collect();
    let got = wait_until(Duration::from_secs(30), "status.images", || {
        let got = node_images(&cp, &node);
        (!got.is_empty()).then_some(got)
    });
    assert_eq!(got, want, "Node.status.images against CRI ListImages");
    assert!(got
        .iter()
        .all(|(names, size)| *size > 0 && !names.is_empty()));

    // The Lease carries nodeLeaseDurationSeconds.
    let lease = wait_until(Duration::from_secs(30), "the node Lease", || {
        cp.get_json(&["lease", "-n", "kube-node-lease", &node])
    });
    assert_eq!(lease["spec"]["leaseDurationSeconds"], LEASE_S);
    assert_eq!(lease["spec"]["holderIdentity"], node.as_str());

    // A change (an image removed) is posted at the next update, well before the report period.
    let gone = listed[0].clone();
    env.cri()
        .remove_image(api::RemoveImageRequest {
            image: Some(api::ImageSpec {
                image: gone.id.clone(),
                ..Default::default()
            }),
        })
        .await
        .unwrap();
    let removed_at = Instant::now();
    let after = wait_until(
        Duration::from_secs(15),
        "the removed image leaves status.images",
        || {
            let got = node_images(&cp, &node);
            let named_gone = |names: &Vec<String>| {
                names
                    .iter()
                    .any(|n| gone.repo_tags.contains(n) || gone.repo_digests.contains(n))
            };
            (!got.is_empty() && !got.iter().any(|(n, _)| named_gone(n))).then_some(got)
        },
    );
    let seen_after = removed_at.elapsed();
    assert_eq!(
        after.len(),
        MAX_IMAGES,
        "the next image takes the freed place: {after:?}"
    );

    // Unchanged, the status is patched only every report period, while the Lease is renewed
    // every quarter of its duration. Watched over a window of 2.5 report periods.
    let window_start = now_s();
    tokio::time::sleep(Duration::from_secs_f64(REPORT_S * 2.5)).await;
    let window_end = now_s();
    let patches: Vec<f64> = request_times(&cp, &node, "patch", "nodes", "status")
        .into_iter()
        .filter(|t| *t >= window_start && *t <= window_end)
        .collect();
    let renewals: Vec<f64> = request_times(&cp, &node, "update", "leases", "")
        .into_iter()
        .filter(|t| *t >= window_start && *t <= window_end)
        .collect();
    let gaps = |t: &[f64]| t.windows(2).map(|w| w[1] - w[0]).collect::<Vec<_>>();
    eprintln!(
        "image removal seen in {seen_after:?}; status patches in the window: {patches:?} (gaps {:?}); \
         {} lease renewals, gaps {:?}",
        gaps(&patches),
        renewals.len(),
        gaps(&renewals)
    );
    // Every update period would be ~50 patches; the report period gives 2 or 3.
    assert!(
        (1..=3).contains(&patches.len()),
        "status patches in {:.0} s: {patches:?}",
        window_end - window_start
    );
    for g in gaps(&patches) {
        assert!(
            g > REPORT_S * 0.75,
            "status patched {g:.1} s after the previous one: {patches:?}"
        );
    }
    // Renewals every LEASE_S / 4 = 2 s: ~25 in the window (40 s duration would give ~5).
    let expected = (window_end - window_start) / (LEASE_S as f64 / 4.0);
    assert!(
        renewals.len() as f64 > expected * 0.6 && (renewals.len() as f64) < expected * 1.5,
        "{} lease renewals in {:.0} s, expected about {expected:.0}: {renewals:?}",
        renewals.len(),
        window_end - window_start
    );
}
