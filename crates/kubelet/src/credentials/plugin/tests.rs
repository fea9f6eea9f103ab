use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use super::*;

const V1: &str = "credentialprovider.kubelet.k8s.io/v1";

fn cred(u: &str, p: &str) -> Credential {
    Credential {
        username: u.into(),
        password: p.into(),
        ..Default::default()
    }
}

fn parse_cfg(text: &str) -> Result<Vec<ProviderConfig>, ConfigError> {
    config::parse(Path::new("/etc/kubernetes/cp.yaml"), text)
}

const GOOD: &str = r#"
apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: ecr-login
  matchImages: ["*.dkr.ecr.*.amazonaws.com", "127.0.0.1:5000/team"]
  defaultCacheDuration: 12h
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  args: [get-credentials]
  env:
  - {name: AWS_PROFILE, value: temp}
"#;

#[test]
fn config_decodes_every_field() {
    let got = parse_cfg(GOOD).unwrap();
    assert_eq!(
        got,
        vec![ProviderConfig {
            name: "ecr-login".into(),
            match_images: vec![
                "*.dkr.ecr.*.amazonaws.com".into(),
                "127.0.0.1:5000/team".into()
            ],
            default_cache_duration: Duration::from_secs(12 * 3600),
            api_version: V1.into(),
            args: vec!["get-credentials".into()],
            env: vec![EnvVar {
                name: "AWS_PROFILE".into(),
                value: "temp".into()
            }],
        }]
    );
    // JSON, the older config versions and plugin API versions upstream still serves.
    for (cfg_v, plugin_v) in [
        (
            "kubelet.config.k8s.io/v1beta1",
            "credentialprovider.kubelet.k8s.io/v1beta1",
        ),
        (
            "kubelet.config.k8s.io/v1alpha1",
            "credentialprovider.kubelet.k8s.io/v1alpha1",
        ),
    ] {
        let json = format!(
            r#"{{"apiVersion":"{cfg_v}","kind":"CredentialProviderConfig","providers":[{{"name":"p","matchImages":["r.io"],"defaultCacheDuration":"0s","apiVersion":"{plugin_v}"}}]}}"#
        );
        let got = parse_cfg(&json).unwrap();
        assert_eq!(got[0].api_version, plugin_v);
        assert_eq!(got[0].default_cache_duration, Duration::ZERO);
    }
}

/// Each bad input names the file and the field (with the provider's index).
#[test]
fn config_errors_name_file_and_field() {
    let provider = |body: &str| {
        format!("apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- {body}\n")
    };
    let ok = "matchImages: [r.io], defaultCacheDuration: 1m, apiVersion: credentialprovider.kubelet.k8s.io/v1";
    let table: Vec<(String, &str)> = vec![
        (
            "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\n".into(),
            "providers: Required value: at least 1 item in plugins is required",
        ),
        (provider(&format!("{{name: a/b, {ok}}}")), "providers[0].name: Invalid value: \"a/b\": provider name cannot contain '/'"),
        (provider(&format!("{{name: 'a b', {ok}}}")), "providers[0].name: Invalid value: \"a b\": provider name cannot contain spaces"),
        (provider(&format!("{{name: '..', {ok}}}")), "provider name cannot be '..'"),
        (provider("{name: p, matchImages: [r.io], defaultCacheDuration: 1m}"), "providers[0].apiVersion: Required value"),
        (
            provider("{name: p, matchImages: [r.io], defaultCacheDuration: 1m, apiVersion: credentialprovider.kubelet.k8s.io/v2}"),
            "providers[0].apiVersion: Unsupported value: \"credentialprovider.kubelet.k8s.io/v2\": supported values: \"credentialprovider.kubelet.k8s.io/v1\"",
        ),
        (
            provider("{name: p, defaultCacheDuration: 1m, apiVersion: credentialprovider.kubelet.k8s.io/v1}"),
            "providers[0].matchImages: Required value: at least 1 item in matchImages is required",
        ),
        (
            provider("{name: p, matchImages: ['r.io:abc'], defaultCacheDuration: 1m, apiVersion: credentialprovider.kubelet.k8s.io/v1}"),
            "providers[0].matchImages: Invalid value: \"r.io:abc\": match image is invalid: invalid port \":abc\" after host",
        ),
        (
            provider("{name: p, matchImages: [r.io], apiVersion: credentialprovider.kubelet.k8s.io/v1}"),
            "providers[0].defaultCacheDuration: Required value",
        ),
        (
            provider("{name: p, matchImages: [r.io], defaultCacheDuration: -1m, apiVersion: credentialprovider.kubelet.k8s.io/v1}"),
            "providers[0].defaultCacheDuration: Invalid value: \"-1m\": defaultCacheDuration must be greater than or equal to 0",
        ),
        (
            provider("{name: p, matchImages: [r.io], defaultCacheDuration: 5 minutes, apiVersion: credentialprovider.kubelet.k8s.io/v1}"),
            "providers[0].defaultCacheDuration: Invalid value: \"5 minutes\"",
        ),
        (
            provider(&format!("{{name: p, tokenAttributes: {{serviceAccountTokenAudience: x}}, {ok}}}")),
            "providers[0].tokenAttributes: Forbidden",
        ),
        (
            format!("{}- {{name: p, {ok}}}\n", provider(&format!("{{name: p, {ok}}}"))),
            "providers[1].name: Duplicate value: \"p\"",
        ),
        // Strict decoding, the kind and the group, as upstream's codecs.
        (provider(&format!("{{name: p, matchImage: [x], {ok}}}")), "strict decoding error"),
        ("apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\n".into(), "failed to decode \"KubeletConfiguration\" (wrong Kind)"),
        ("apiVersion: other.io/v1\nkind: CredentialProviderConfig\n".into(), "no kind \"CredentialProviderConfig\" is registered for version \"other.io/v1\""),
        ("providers: []\n".into(), "Object 'Kind' or 'apiVersion' is missing"),
    ];
    for (text, want) in table {
        let e = parse_cfg(&text).expect_err(&text).to_string();
        assert!(e.contains("\"/etc/kubernetes/cp.yaml\""), "{e}");
        assert!(e.contains(want), "{text}\nwant {want:?}\ngot  {e}");
    }
}

#[test]
fn config_directory_merges_in_order_and_refuses_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let one = |name: &str| {
        format!("{{\"apiVersion\":\"kubelet.config.k8s.io/v1\",\"kind\":\"CredentialProviderConfig\",\"providers\":[{{\"name\":\"{name}\",\"matchImages\":[\"r.io\"],\"defaultCacheDuration\":\"1m\",\"apiVersion\":\"{V1}\"}}]}}")
    };
    std::fs::write(dir.path().join("b.json"), one("second")).unwrap();
    std::fs::write(dir.path().join("a.yaml"), one("first")).unwrap();
    std::fs::write(dir.path().join("ignored.txt"), "not a config").unwrap();
    let got = config::read(dir.path()).unwrap();
    let names: Vec<&str> = got.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["first", "second"]);
    std::fs::write(dir.path().join("c.yml"), one("first")).unwrap();
    let e = config::read(dir.path()).unwrap_err().to_string();
    assert!(
        e.contains("duplicate provider name \"first\"") && e.contains("c.yml"),
        "{e}"
    );

    let empty = tempfile::tempdir().unwrap();
    let e = config::read(empty.path()).unwrap_err().to_string();
    assert!(
        e.starts_with("no configuration files found in directory"),
        "{e}"
    );
    let e = config::read(Path::new("/nonexistent/cp.yaml"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("unable to access path \"/nonexistent/cp.yaml\""),
        "{e}"
    );
    assert_eq!(
        config::read(Path::new("")).unwrap_err().to_string(),
        "credential provider config path is empty"
    );
}

#[test]
fn load_checks_bin_dir_and_executables() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("cp.yaml");
    std::fs::write(&cfg, GOOD).unwrap();
    let bin = dir.path().join("bin");
    let e = Providers::load(&cfg, &bin).err().unwrap().to_string();
    assert_eq!(
        e,
        format!("plugin binary directory {} did not exist", bin.display())
    );
    std::fs::create_dir(&bin).unwrap();
    let e = Providers::load(&cfg, &bin).err().unwrap().to_string();
    assert_eq!(
        e,
        format!(
            "plugin binary executable {}/ecr-login did not exist",
            bin.display()
        )
    );
    std::fs::write(bin.join("ecr-login"), "#!/bin/sh\n").unwrap();
    let p = Providers::load(&cfg, &bin).unwrap();
    assert_eq!(p.names(), ["ecr-login"]);
}

#[test]
fn response_decoding() {
    let ok = format!(
        r#"{{"apiVersion":"{V1}","kind":"CredentialProviderResponse","cacheKeyType":"Registry","cacheDuration":"1m30s","auth":{{"r.io":{{"username":"u","password":"p"}}}}}}"#
    );
    assert_eq!(
        parse_response(V1, ok.as_bytes()).unwrap(),
        Response {
            cache_key_type: CacheKeyType::Registry,
            cache_duration: Some(Duration::from_secs(90)),
            auth: vec![("r.io".into(), cred("u", "p"))],
        }
    );
    let min = format!(
        r#"{{"apiVersion":"{V1}","kind":"CredentialProviderResponse","cacheKeyType":"Global"}}"#
    );
    let r = parse_response(V1, min.as_bytes()).unwrap();
    assert_eq!(
        (r.cache_key_type, r.cache_duration, r.auth.len()),
        (CacheKeyType::Global, None, 0)
    );

    let table = [
        ("not json".to_string(), "error reading GVK from response"),
        (
            ok.replace(V1, "credentialprovider.kubelet.k8s.io/v1beta1"),
            "apiVersion from credential plugin response did not match expected apiVersion:credentialprovider.kubelet.k8s.io/v1, actual apiVersion:credentialprovider.kubelet.k8s.io/v1beta1",
        ),
        (ok.replace("CredentialProviderResponse", "Other"), "unexpected Kind: \"Other\""),
        (ok.replace("\"username\"", "\"user\""), "error decoding credential provider plugin response from stdout"),
        (ok.replace("1m30s", "soon"), "error decoding credential provider plugin response from stdout"),
        (ok.replace("Registry", "Pod"), "did not return a valid cacheKeyType: \"Pod\""),
        (ok.replace("\"cacheKeyType\":\"Registry\",", ""), "did not return a valid cacheKeyType: \"\""),
    ];
    for (body, want) in table {
        let e = parse_response(V1, body.as_bytes()).unwrap_err().to_string();
        assert!(e.contains(want), "{body}\nwant {want}\ngot  {e}");
        // A decode error never quotes the response (it holds passwords).
        assert!(!e.contains("\"p\""), "{e}");
    }
    // The request upstream writes.
    assert_eq!(
        String::from_utf8(response::request(V1, "r.io/a/b")).unwrap(),
        format!("{{\"apiVersion\":\"{V1}\",\"image\":\"r.io/a/b\",\"kind\":\"CredentialProviderRequest\"}}\n")
    );
}

#[test]
fn cache_lookup_order_and_expiry() {
    let t0 = Instant::now();
    let s = Duration::from_secs;
    let a = |u: &str| vec![("r.io".to_string(), cred(u, "p"))];
    let mut c = Cache::default();
    c.put(
        cache_key(CacheKeyType::Registry, "r.io/team/app"),
        a("registry"),
        t0 + s(60),
    );
    c.put(
        cache_key(CacheKeyType::Image, "r.io/team/one"),
        a("image"),
        t0 + s(10),
    );
    // The image's own entry first, then its registry's.
    assert_eq!(c.get("r.io/team/one", t0), Some(a("image")));
    assert_eq!(c.get("r.io/other", t0), Some(a("registry")));
    assert_eq!(c.get("other.io/x", t0), None);
    // Expired: after (not at) the expiry, and then removed.
    assert_eq!(c.get("r.io/team/one", t0 + s(10)), Some(a("image")));
    assert_eq!(c.get("r.io/team/one", t0 + s(11)), Some(a("registry")));
    assert_eq!(c.len(), 1);
    c.put(
        cache_key(CacheKeyType::Global, "x.io/y"),
        a("global"),
        t0 + s(3600),
    );
    assert_eq!(c.get("other.io/x", t0 + s(61)), Some(a("global")));
    // The periodic purge drops entries nobody asks for.
    c.put("z.io/q".into(), a("stale"), t0 + s(1));
    assert_eq!(c.get("none.io/x", t0 + s(20 * 60)), Some(a("global")));
    assert_eq!(c.len(), 1);

    assert_eq!(
        expiry(Some(Duration::ZERO), s(60), t0),
        None,
        "explicit 0: not cached"
    );
    assert_eq!(
        expiry(None, Duration::ZERO, t0),
        None,
        "no default: not cached"
    );
    assert_eq!(expiry(None, s(60), t0), Some(t0 + s(60)));
    assert_eq!(expiry(Some(s(5)), s(60), t0), Some(t0 + s(5)));
}

/// A plugin script in its own bin dir; each call appends the request to `calls`.
fn script(dir: &Path, name: &str, body: &str) {
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!("#!/bin/sh\ncat >> {}/calls\n{body}", dir.display()),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn provider(name: &str, match_images: &[&str], default_cache: Duration) -> ProviderConfig {
    ProviderConfig {
        name: name.into(),
        match_images: match_images.iter().map(|s| s.to_string()).collect(),
        default_cache_duration: default_cache,
        api_version: V1.into(),
        args: vec!["--flag".into()],
        env: vec![EnvVar {
            name: "PLUGIN_USER".into(),
            value: "from-env".into(),
        }],
    }
}

fn calls(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("calls"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn exec_protocol_matching_and_cache() {
    let dir = tempfile::tempdir().unwrap();
    // Answers with its env and first arg as the credential, for registry r.io and *.corp.io.
    script(
        dir.path(),
        "good",
        &format!(
            r#"printf '{{"apiVersion":"{V1}","kind":"CredentialProviderResponse","cacheKeyType":"Registry","auth":{{"r.io":{{"username":"%s","password":"%s"}},"*.corp.io":{{"username":"corp","password":"c"}}}}}}' "$PLUGIN_USER" "$1""#
        ),
    );
    let p = Plugin::new(
        dir.path(),
        provider(
            "good",
            &["r.io", "*.corp.io:5000/team"],
            Duration::from_secs(600),
        ),
    );
    // Not matched: never executed.
    for image in [
        "other.io/app",
        "corp.io:5000/team/app",
        "a.corp.io/team/app",
        "a.corp.io:5000/other",
    ] {
        assert!(p.provide(image).await.is_empty(), "{image}");
    }
    assert!(calls(dir.path()).is_empty());
    let got = p.provide("r.io/team/app").await;
    assert_eq!(got.len(), 2);
    assert!(
        got.contains(&("r.io".to_string(), cred("from-env", "--flag"))),
        "{got:?}"
    );
    let req: serde_json::Value = serde_json::from_str(&calls(dir.path())[0]).unwrap();
    assert_eq!(
        req,
        serde_json::json!({"apiVersion": V1, "kind": "CredentialProviderRequest", "image": "r.io/team/app"})
    );
    // Cached per registry: another image there is not a second exec.
    assert_eq!(p.provide("r.io/other").await, got);
    assert_eq!(p.provide("a.corp.io:5000/team/x").await.len(), 2);
    assert_eq!(
        calls(dir.path()).len(),
        2,
        "one exec for r.io, one for a.corp.io:5000"
    );

    // Through the keyring: the credential for the image's registry, by the auth map's globs.
    let providers = Providers::from_plugins(vec![Plugin::new(
        dir.path(),
        provider("good", &["*.corp.io", "r.io"], Duration::ZERO),
    )]);
    assert_eq!(
        providers.lookup("b.corp.io/x").await,
        vec![cred("corp", "c")]
    );
    assert_eq!(
        providers.lookup("r.io/x").await,
        vec![cred("from-env", "--flag")]
    );
    assert_eq!(
        providers.lookup("c.corp.io:5000/x").await,
        vec![],
        "not matched"
    );
}

#[tokio::test]
async fn failures_name_plugin_and_image_and_are_not_cached() {
    let dir = tempfile::tempdir().unwrap();
    script(dir.path(), "fails", "echo 'no token for you' >&2\nexit 3\n");
    script(dir.path(), "slow", "exec sleep 30\n");
    script(dir.path(), "garbage", "echo '{\"apiVersion\":\"credentialprovider.kubelet.k8s.io/v1\",\"kind\":\"CredentialProviderResponse\",\"cacheKeyType\":\"Forever\"}'\n");
    let fails = Plugin::new(
        dir.path(),
        provider("fails", &["r.io"], Duration::from_secs(600)),
    );
    let e = fails.exec("r.io/app").await.unwrap_err().to_string();
    assert_eq!(e, "error execing credential provider plugin fails for image r.io/app: exit status 3: no token for you");
    assert!(fails.provide("r.io/app").await.is_empty());
    assert!(fails.provide("r.io/app").await.is_empty());
    assert_eq!(
        calls(dir.path()).len(),
        3,
        "a failure is not cached: every pull asks again"
    );

    let slow = Plugin::new(dir.path(), provider("slow", &["r.io"], Duration::ZERO))
        .with_timeout(Duration::from_millis(300));
    let e = slow.exec("r.io/app").await.unwrap_err().to_string();
    assert!(e.starts_with("error execing credential provider plugin slow for image r.io/app: context deadline exceeded"), "{e}");

    let garbage = Plugin::new(dir.path(), provider("garbage", &["r.io"], Duration::ZERO));
    let e = garbage.exec("r.io/app").await.unwrap_err().to_string();
    assert!(
        e.contains("did not return a valid cacheKeyType: \"Forever\""),
        "{e}"
    );

    let missing = Plugin::new(dir.path(), provider("missing", &["r.io"], Duration::ZERO));
    let e = missing.exec("r.io/app").await.unwrap_err().to_string();
    assert!(
        e.starts_with(
            "error execing credential provider plugin missing for image r.io/app: No such file"
        ),
        "{e}"
    );

    // One failing plugin leaves another's credentials in place.
    script(
        dir.path(),
        "works",
        &format!(
            r#"echo '{{"apiVersion":"{V1}","kind":"CredentialProviderResponse","cacheKeyType":"Image","cacheDuration":"0s","auth":{{"r.io":{{"username":"w","password":"x"}}}}}}'"#
        ),
    );
    let both = Providers::from_plugins(vec![
        Plugin::new(dir.path(), provider("works", &["r.io"], Duration::ZERO)),
        Plugin::new(dir.path(), provider("fails", &["r.io"], Duration::ZERO)),
    ]);
    assert_eq!(both.names(), ["works", "fails"], "the config's order");
    assert_eq!(both.lookup("r.io/app").await, vec![cred("w", "x")]);
}

/// Concurrent pulls of one image exec the plugin once (upstream's singleflight), the others
/// taking its cached answer.
#[tokio::test]
async fn concurrent_pulls_of_one_image_exec_once() {
    let dir = tempfile::tempdir().unwrap();
    script(
        dir.path(),
        "slow-ok",
        &format!(
            r#"sleep 0.3
echo '{{"apiVersion":"{V1}","kind":"CredentialProviderResponse","cacheKeyType":"Image","auth":{{"r.io":{{"username":"s","password":"o"}}}}}}'"#
        ),
    );
    let p = Plugin::new(
        dir.path(),
        provider("slow-ok", &["r.io"], Duration::from_secs(60)),
    );
    let (a, b, c) = tokio::join!(
        p.provide("r.io/app"),
        p.provide("r.io/app"),
        p.provide("r.io/app")
    );
    assert_eq!((a.len(), b.len(), c.len()), (1, 1, 1));
    assert_eq!(calls(dir.path()).len(), 1);
    assert!(
        p.flights.lock().unwrap().is_empty(),
        "no pull in flight is remembered"
    );
}
