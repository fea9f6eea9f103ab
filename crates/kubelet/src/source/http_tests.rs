use super::*;
use crate::source::static_pod::{CONFIG_SOURCE_ANNOTATION, MIRROR_ANNOTATION};
use crate::types::annotations::CONFIG_HASH_ANNOTATION;

const URL: &str = "http://127.0.0.1:8080/pods";

const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers:\n  - {name: c, image: busybox}\n";

fn ok(body: &str) -> Result<Answer, UrlError> {
    Ok(Answer {
        status: StatusCode::OK,
        body: body.as_bytes().to_vec(),
    })
}

fn status(code: u16) -> Result<Answer, UrlError> {
    Ok(Answer {
        status: StatusCode::from_u16(code).unwrap(),
        body: b"oops".to_vec(),
    })
}

/// (what was sent: None or the pod names, the error's text if any)
fn run(state: &mut UrlState, answer: Result<Answer, UrlError>) -> (Option<Vec<String>>, String) {
    let out = state.interpret(URL, "Node-1", answer);
    let sent = out.send.map(|pods| {
        pods.iter()
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect()
    });
    (sent, out.error.map(|e| e.to_string()).unwrap_or_default())
}

#[test]
fn polls_keep_last_good_pods_as_upstream() {
    let mut st = UrlState::default();
    let list = "apiVersion: v1\nkind: PodList\nitems:\n- metadata: {name: a}\n  spec: {containers: [{name: c, image: i}]}\n- metadata: {name: b}\n  spec: {containers: [{name: c, image: i}]}\n";
    let unreachable = || {
        Err(UrlError::Request {
            url: URL.into(),
            message: "connection refused".into(),
        })
    };
    // (answer, sent, error contains)
    type Step<'a> = (Result<Answer, UrlError>, Option<Vec<&'a str>>, &'a str);
    let steps: Vec<Step> = vec![
        // Not seen before the first good answer: nothing sent.
        (unreachable(), None, "connection refused"),
        (ok(POD), Some(vec!["web-node-1"]), ""),
        // The same body again: nothing to do.
        (ok(POD), None, ""),
        // Failures keep the pods: nothing sent, the URL and the reason reported.
        (
            status(500),
            None,
            "http://127.0.0.1:8080/pods: 500 Internal Server Error",
        ),
        (status(404), None, "404 Not Found"),
        (
            ok("{not yaml: ["),
            None,
            "http://127.0.0.1:8080/pods: couldn't parse",
        ),
        (
            ok("kind: Service\n"),
            None,
            "\"Service\" is not a Pod or PodList",
        ),
        (
            unreachable(),
            None,
            "GET http://127.0.0.1:8080/pods: connection refused",
        ),
        // Still the same pods after the failures: nothing to send.
        (ok(POD), None, ""),
        (ok(list), Some(vec!["a-node-1", "b-node-1"]), ""),
        // An empty body is an empty list (upstream marks the source seen with it) and an error.
        (
            ok(""),
            Some(vec![]),
            "zero-length data received from http://127.0.0.1:8080/pods",
        ),
        // The same list coming back restores its pods.
        (ok(list), Some(vec!["a-node-1", "b-node-1"]), ""),
    ];
    for (i, (answer, want_sent, want_err)) in steps.into_iter().enumerate() {
        let (sent, err) = run(&mut st, answer);
        let want_sent = want_sent.map(|v| v.into_iter().map(String::from).collect::<Vec<_>>());
        assert_eq!(sent, want_sent, "step {i}");
        if want_err.is_empty() {
            assert!(err.is_empty(), "step {i}: unexpected error {err}");
        } else {
            assert!(
                err.contains(want_err),
                "step {i}: {err:?} lacks {want_err:?}"
            );
        }
    }
}

#[test]
fn url_pods_get_the_http_source_and_a_url_derived_uid() {
    let mut st = UrlState::default();
    let out = st.interpret(URL, "Node-1", ok(POD));
    let pod = &out.send.unwrap()[0];
    let ann = pod.metadata.annotations.as_ref().unwrap();
    assert_eq!(ann[CONFIG_SOURCE_ANNOTATION], "http");
    assert!(!ann.contains_key(MIRROR_ANNOTATION));
    let uid = pod.metadata.uid.clone().unwrap();
    assert_eq!(ann[CONFIG_HASH_ANNOTATION], uid);
    assert_eq!(uid.len(), 32);
    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(spec.node_name.as_deref(), Some("Node-1"));
    // Upstream gives the NoExecute toleration to file pods only.
    assert!(spec.tolerations.as_ref().is_none_or(|t| t.is_empty()));

    // The UID depends on the URL, not the node; a file of the same content gets another one.
    let other_node = UrlState::default().interpret(URL, "node-2", ok(POD));
    assert_eq!(other_node.send.unwrap()[0].metadata.uid, Some(uid.clone()));
    let other_url = UrlState::default().interpret("http://other/pods", "Node-1", ok(POD));
    assert_ne!(other_url.send.unwrap()[0].metadata.uid, Some(uid.clone()));
    let file = parse_manifest(POD, Origin::File(URL), "Node-1").unwrap();
    assert_ne!(file[0].metadata.uid, Some(uid));
    let ann = file[0].metadata.annotations.as_ref().unwrap();
    assert_eq!(ann[CONFIG_SOURCE_ANNOTATION], "file");
}

#[tokio::test]
async fn unreachable_and_timeouts_name_the_url() {
    // A port nothing listens on: connection refused, with the URL in the error.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    let (tx, _rx) = mpsc::channel(1);
    let url = format!("http://127.0.0.1:{port}/m");
    let src = UrlSource::new(
        url.clone(),
        &[],
        "n".into(),
        Duration::from_secs(20),
        tx.clone(),
    );
    let e = src.fetch().await.unwrap_err().to_string();
    assert!(e.starts_with(&format!("GET {url}: ")), "{e}");
    assert!(e.to_lowercase().contains("refused"), "{e}");

    let src = UrlSource::new(
        "http://[bad".into(),
        &[],
        "n".into(),
        Duration::from_secs(20),
        tx,
    );
    let e = src.fetch().await.unwrap_err().to_string();
    assert!(e.contains("not a valid URL"), "{e}");
}
