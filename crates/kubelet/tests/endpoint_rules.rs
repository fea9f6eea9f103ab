//! `containerRuntimeEndpoint` is validated twice: by the configuration at load time
//! (`kubelet_config::endpoint`, which must not depend on the tokio-based CRI client) and by the
//! CRI client when it connects (`rkubelet_cri::parse_endpoint`). This keeps the two rules, and
//! the message the operator sees, the same.

#[test]
fn config_and_cri_client_agree_on_endpoints() {
    for endpoint in [
        "unix:///run/containerd/containerd.sock",
        "/run/containerd/containerd.sock",
        "unix://relative.sock",
        "relative.sock",
        "",
        "tcp://127.0.0.1:1234",
        "npipe:////./pipe/containerd",
        "unix:///",
    ] {
        let config = kubelet_config::endpoint::parse_endpoint(endpoint);
        let cri = rkubelet_cri::parse_endpoint(endpoint);
        match (&config, &cri) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{endpoint:?}"),
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{endpoint:?}"),
            _ => panic!("{endpoint:?}: config says {config:?}, the CRI client {cri:?}"),
        }
    }
}
