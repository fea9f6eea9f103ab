//! `seccompDefault` / `--seccomp-default` (issue 15 item 4) against a private containerd: what
//! the kernel reports as the container's seccomp mode (`Seccomp:` in /proc/1/status: 0 none,
//! 2 filter).

mod common;

use common::*;

/// The container's PID 1 seccomp mode as the kernel reports it.
async fn seccomp_mode(env: &Env, name: &str) -> String {
    let pod = env.wait_running(name);
    let (code, out) = exec_in(env, &pod, "main", &["cat", "/proc/1/status"]).await;
    assert_eq!(code, 0, "{out}");
    out.lines()
        .find_map(|l| l.strip_prefix("Seccomp:"))
        .unwrap_or_else(|| panic!("no Seccomp line in /proc/1/status: {out}"))
        .trim()
        .to_string()
}

fn with_pod_seccomp(name: &str, profile: &str) -> String {
    simple_pod(name, "Always", SLEEPER).replace(
        "spec:\n",
        &format!("spec:\n  securityContext:\n    seccompProfile: {{type: {profile}}}\n"),
    )
}

#[tokio::test]
async fn seccomp_default_gives_runtime_default_to_unset_profiles() {
    let mut env = Env::new(214);
    env.start_kubelet_with(&["--seccomp-default"]);
    env.write_manifest("unset.yaml", &simple_pod("unset", "Always", SLEEPER));
    env.write_manifest(
        "unconfined.yaml",
        &with_pod_seccomp("unconfined", "Unconfined"),
    );
    assert_eq!(
        seccomp_mode(&env, "unset").await,
        "2",
        "no profile set + seccompDefault: RuntimeDefault (a filter)"
    );
    assert_eq!(
        seccomp_mode(&env, "unconfined").await,
        "0",
        "an explicit Unconfined stays unconfined under seccompDefault"
    );
}

#[tokio::test]
async fn without_seccomp_default_unset_profiles_are_unconfined() {
    let mut env = Env::new(215);
    env.start_kubelet();
    env.write_manifest("unset.yaml", &simple_pod("unset", "Always", SLEEPER));
    env.write_manifest("rd.yaml", &with_pod_seccomp("rd", "RuntimeDefault"));
    assert_eq!(
        seccomp_mode(&env, "unset").await,
        "0",
        "upstream default: Unconfined"
    );
    assert_eq!(
        seccomp_mode(&env, "rd").await,
        "2",
        "explicit RuntimeDefault"
    );
}
