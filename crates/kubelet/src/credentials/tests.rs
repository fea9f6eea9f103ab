use super::*;
use k8s_openapi::ByteString;

fn cred(u: &str, p: &str) -> Credential {
    Credential {
        username: u.into(),
        password: p.into(),
        ..Default::default()
    }
}

fn secret(name: &str, type_: &str, key: &str, body: &str) -> Secret {
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        type_: Some(type_.into()),
        data: Some(BTreeMap::from([(
            key.to_string(),
            ByteString(body.as_bytes().to_vec()),
        )])),
        ..Default::default()
    }
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

#[test]
fn dockerconfigjson_auth_field_wins_over_username() {
    let body = format!(
        r#"{{"auths":{{"reg.example:5000":{{"auth":"{}","username":"ignored","password":"x"}},
            "other.example":{{"username":"bob","password":"pw","email":"b@x"}}}}}}"#,
        b64("alice:s3:cret")
    );
    let s = secret("s", TYPE_DOCKER_CONFIG_JSON, KEY_DOCKER_CONFIG_JSON, &body);
    let got = secret_entries(&s).unwrap();
    assert_eq!(
        got,
        vec![
            ("other.example".to_string(), cred("bob", "pw")),
            // Only the first colon separates user from password.
            ("reg.example:5000".to_string(), cred("alice", "s3:cret")),
        ]
    );
}

#[test]
fn auth_field_padded_and_unpadded() {
    // "ab:c" encodes to 4 unpadded-free chars; "a:bc1" needs padding.
    assert_eq!(decode_auth(&b64("a:bc1")), Some(("a".into(), "bc1".into())));
    assert!(b64("a:bc1").ends_with('='));
    let unpadded = b64("a:bc1").trim_end_matches('=').to_string();
    assert_eq!(decode_auth(&unpadded), Some(("a".into(), "bc1".into())));
    assert_eq!(decode_auth(&b64("nocolon")), None);
    assert_eq!(decode_auth("!!!"), None);
}

#[test]
fn dockercfg_is_a_bare_map_with_tokens() {
    let body = format!(
        r#"{{"https://index.docker.io/v1/":{{"auth":"{}","identitytoken":"idt"}}}}"#,
        b64("u:p")
    );
    let s = secret("old", TYPE_DOCKERCFG, KEY_DOCKERCFG, &body);
    let got = secret_entries(&s).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, "https://index.docker.io/v1/");
    assert_eq!(
        got[0].1,
        Credential {
            username: "u".into(),
            password: "p".into(),
            identity_token: "idt".into(),
            registry_token: String::new(),
        }
    );
    let cri = got[0].1.to_cri();
    assert_eq!(
        (cri.username.as_str(), cri.identity_token.as_str()),
        ("u", "idt")
    );
}

#[test]
fn wrong_type_or_key_is_ignored_bad_json_and_bad_auth_are_errors() {
    // A dockercfg body under the dockerconfigjson type's key is not read as dockercfg.
    let s = secret("a", "Opaque", KEY_DOCKER_CONFIG_JSON, r#"{"auths":{}}"#);
    assert!(secret_entries(&s).unwrap().is_empty());
    let s = secret("b", TYPE_DOCKER_CONFIG_JSON, KEY_DOCKERCFG, r#"{}"#);
    assert!(secret_entries(&s).unwrap().is_empty());
    let s = secret(
        "c",
        TYPE_DOCKER_CONFIG_JSON,
        KEY_DOCKER_CONFIG_JSON,
        "{nope",
    );
    let e = secret_entries(&s).unwrap_err().to_string();
    assert!(
        e.contains("\"c\"") && e.contains(".dockerconfigjson"),
        "{e}"
    );
    let s = secret(
        "d",
        TYPE_DOCKER_CONFIG_JSON,
        KEY_DOCKER_CONFIG_JSON,
        r#"{"auths":{"r.io":{"auth":"bm9jb2xvbg=="}}}"#,
    );
    let e = secret_entries(&s).unwrap_err().to_string();
    assert!(
        e.contains("r.io") && e.contains("base64(username:password)"),
        "{e}"
    );
}

#[test]
fn repository_normalization() {
    assert_eq!(repository("busybox"), "docker.io/library/busybox");
    assert_eq!(repository("busybox:1.35"), "docker.io/library/busybox");
    assert_eq!(
        repository("google/pause@sha256:ab"),
        "docker.io/google/pause"
    );
    assert_eq!(repository("index.docker.io/foo/bar:1"), "docker.io/foo/bar");
    assert_eq!(repository("127.0.0.1:5000/x/y:1"), "127.0.0.1:5000/x/y");
    assert_eq!(repository("127.0.0.1:5000/x"), "127.0.0.1:5000/x");
    assert_eq!(repository("localhost/x:2"), "localhost/x");
    assert_eq!(repository("quay.io/a/b"), "quay.io/a/b");
}

#[test]
fn url_matching_as_upstream() {
    assert!(url_matches("*.kubernetes.io", "prefix.kubernetes.io"));
    assert!(url_matches("prefix.*.io", "prefix.kubernetes.io"));
    assert!(url_matches(
        "*-good.kubernetes.io",
        "prefix-good.kubernetes.io"
    ));
    assert!(url_matches("*.*.io", "prefix.kubernetes.io/path"));
    assert!(url_matches("gcr.io", "gcr.io/project/image"));
    // Labels count must agree: a wildcard is one label, never zero or several.
    assert!(!url_matches("*.kubernetes.io", "kubernetes.io"));
    assert!(!url_matches("*.kubernetes.io", "a.b.kubernetes.io"));
    // Ports must agree.
    assert!(!url_matches("prefix.docker.io", "prefix.docker.io:5000"));
    assert!(!url_matches("127.0.0.1:5000", "127.0.0.1:5001/x"));
    assert!(url_matches("127.0.0.1:5000", "127.0.0.1:5000/x"));
    // The key's path must be a prefix of the image's.
    assert!(url_matches("r.io/team", "r.io/team/app"));
    assert!(!url_matches("r.io/team", "r.io/other/app"));
    assert!(!url_matches("?.io", "ab.io"));
}

#[test]
fn keyring_most_specific_first_and_scheme_less() {
    let mut k = Keyring::default();
    k.add("https://r.io", cred("host", "1"));
    k.add("http://r.io/team/", cred("team", "2"));
    k.add("r.io:443", cred("port", "3"));
    k.add("https://r.io/v2/", cred("host-v2", "4"));
    // Same credential under the same key is kept once.
    k.add("r.io", cred("host", "1"));
    let got: Vec<String> = k
        .lookup("r.io/team/app")
        .into_iter()
        .map(|c| c.username)
        .collect();
    assert_eq!(got, ["team", "host", "host-v2"]);
    let got: Vec<String> = k.lookup("r.io/x").into_iter().map(|c| c.username).collect();
    assert_eq!(got, ["host", "host-v2"]);
    assert_eq!(k.lookup("r.io:443/x"), vec![cred("port", "3")]);
    assert!(k.lookup("s.io/x").is_empty());
}

#[test]
fn docker_hub_uses_the_index_key() {
    let mut k = Keyring::default();
    k.add("https://index.docker.io/v1/", cred("hub", "h"));
    assert_eq!(k.lookup(&repository("busybox")), vec![cred("hub", "h")]);
    assert_eq!(k.lookup(&repository("me/app:1")), vec![cred("hub", "h")]);
    assert!(k.lookup(&repository("quay.io/me/app")).is_empty());
    assert!(k.lookup(&repository("localhost:5000/me/app")).is_empty());
}

#[test]
fn keyring_from_several_secrets() {
    let a = secret(
        "a",
        TYPE_DOCKER_CONFIG_JSON,
        KEY_DOCKER_CONFIG_JSON,
        r#"{"auths":{"*.corp.io":{"username":"wild","password":"w"}}}"#,
    );
    let b = secret(
        "b",
        TYPE_DOCKERCFG,
        KEY_DOCKERCFG,
        r#"{"eu.corp.io":{"username":"eu","password":"e"}}"#,
    );
    let k = Keyring::from_secrets(&[a, b]).unwrap();
    // Reverse lexical order puts the wildcard key after the literal one.
    assert_eq!(
        k.lookup("eu.corp.io/app"),
        vec![cred("eu", "e"), cred("wild", "w")]
    );
    assert_eq!(k.lookup("us.corp.io/app"), vec![cred("wild", "w")]);
    assert!(Keyring::from_secrets(&[]).unwrap().is_empty());
}
