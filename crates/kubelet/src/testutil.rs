//! Helpers shared by unit tests of more than one module.

use std::sync::{Arc, Mutex};

/// A kube `Client` over a scripted API server: each request is recorded as
/// `"<METHOD> <path> <content-type or -> <body>"` and answered with `answer(path)`'s status code
/// and body. For checking that hand-built requests are the ones kube's `Api` methods send, and
/// how their answers and error Statuses are read.
pub(crate) fn scripted_client(
    answer: fn(&str) -> (u16, &'static str),
) -> (kube::Client, Arc<Mutex<Vec<String>>>) {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = seen.clone();
    let svc = tower::service_fn(move |req: hyper::Request<kube::client::Body>| {
        let log = log.clone();
        async move {
            let ct = req
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-")
                .to_string();
            let (parts, body) = req.into_parts();
            let body = http_body_util::BodyExt::collect(body)
                .await
                .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
                .unwrap_or_default();
            let path = parts.uri.path().to_string();
            log.lock()
                .expect("log")
                .push(format!("{} {path} {ct} {body}", parts.method));
            let (code, body) = answer(&path);
            let mut res = hyper::Response::new(kube::client::Body::from(body.as_bytes().to_vec()));
            *res.status_mut() = hyper::StatusCode::from_u16(code).expect("code");
            Ok::<_, std::convert::Infallible>(res)
        }
    });
    (kube::Client::new(svc, "default"), seen)
}
