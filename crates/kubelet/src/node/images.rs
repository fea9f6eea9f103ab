//! The node's `status.images` (upstream `nodestatus.Images` over the image manager's
//! `GetImageList`): what the scheduler's ImageLocality plugin scores nodes by.

use k8s_openapi::api::core::v1::ContainerImage;
use rkubelet_cri::api;

/// Upstream `MaxNamesPerImageInNodeStatus`.
pub const MAX_NAMES_PER_IMAGE: usize = 5;

/// The images as the Node shows them: largest first (ties by ID, descending, as upstream's
/// `ByImageSize`), at most `max_images` of them (-1: all; 0: none), each named by its repo
/// digests then its repo tags, at most [`MAX_NAMES_PER_IMAGE`] names. None when the list is
/// empty, as upstream leaves the field nil then.
pub fn node_images(listed: &[api::Image], max_images: i64) -> Option<Vec<ContainerImage>> {
    let mut sorted: Vec<&api::Image> = listed.iter().collect();
    sorted.sort_by(|a, b| b.size.cmp(&a.size).then_with(|| b.id.cmp(&a.id)));
    if let Ok(cap) = usize::try_from(max_images) {
        sorted.truncate(cap);
    }
    let out: Vec<ContainerImage> = sorted
        .into_iter()
        .map(|i| ContainerImage {
            names: Some(
                i.repo_digests
                    .iter()
                    .chain(&i.repo_tags)
                    .take(MAX_NAMES_PER_IMAGE)
                    .cloned()
                    .collect(),
            ),
            size_bytes: Some(i64::try_from(i.size).unwrap_or(i64::MAX)),
        })
        .collect();
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(id: &str, size: u64, tags: &[&str], digests: &[&str]) -> api::Image {
        api::Image {
            id: id.into(),
            size,
            repo_tags: tags.iter().map(|s| s.to_string()).collect(),
            repo_digests: digests.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    fn summary(v: &Option<Vec<ContainerImage>>) -> Vec<(Vec<String>, i64)> {
        v.iter()
            .flatten()
            .map(|c| {
                (
                    c.names.clone().unwrap_or_default(),
                    c.size_bytes.unwrap_or(-1),
                )
            })
            .collect()
    }

    #[test]
    fn sorted_capped_and_named_as_upstream() {
        let list = vec![
            image("sha256:a", 3, &["a:1"], &["a@sha256:1"]),
            image("sha256:b", 1, &["b:1", "b:2"], &[]),
            image("sha256:c", 4, &[], &["c@sha256:1"]),
            image("sha256:d", 3, &["d:1"], &[]),
        ];
        let names = |v: &[(Vec<String>, i64)]| {
            v.iter()
                .map(|(n, s)| (n[0].clone(), *s))
                .collect::<Vec<_>>()
        };
        type Case = (&'static str, i64, Vec<(&'static str, i64)>);
        let cases: Vec<Case> = vec![
            (
                "no cap: size descending, equal sizes by ID descending",
                -1,
                vec![("c@sha256:1", 4), ("d:1", 3), ("a@sha256:1", 3), ("b:1", 1)],
            ),
            ("capped", 2, vec![("c@sha256:1", 4), ("d:1", 3)]),
            (
                "a cap above the count",
                50,
                vec![("c@sha256:1", 4), ("d:1", 3), ("a@sha256:1", 3), ("b:1", 1)],
            ),
            ("zero leaves the list empty", 0, vec![]),
        ];
        for (name, cap, want) in cases {
            let got = names(&summary(&node_images(&list, cap)));
            let want: Vec<(String, i64)> =
                want.into_iter().map(|(n, s)| (n.to_string(), s)).collect();
            assert_eq!(got, want, "{name}");
        }
        assert_eq!(node_images(&list, 0), None);
        assert_eq!(node_images(&[], -1), None);
    }

    #[test]
    fn digests_then_tags_at_most_five() {
        let many = image(
            "sha256:m",
            10,
            &["m:1", "m:2", "m:3", "m:4"],
            &["m@sha256:1", "m@sha256:2"],
        );
        let got = summary(&node_images(&[many], -1));
        assert_eq!(
            got,
            vec![(
                vec!["m@sha256:1", "m@sha256:2", "m:1", "m:2", "m:3"]
                    .into_iter()
                    .map(String::from)
                    .collect(),
                10
            )]
        );
    }
}
