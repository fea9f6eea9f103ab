//! The kernel tunables a kubelet relies on (upstream `setupKernelTunables`), on this host's real
//! /proc/sys: with `--protect-kernel-defaults` a differing value stops the start with upstream's
//! words and is left as it was; without it rkubelet sets every value; with the values right, a
//! protecting kubelet starts and runs pods. Runs alone (hack/run-tests.sh SERIAL): it changes
//! host-wide sysctls that every other test's kubelet would set back. The host's values are put
//! back at the end, a failed run included (and by hack/clean-stale.sh if the process died).

mod common;

use std::time::Duration;

use common::tunables::*;
use common::*;

const INDEX: u32 = 114;

#[test]
fn protect_kernel_defaults_refuses_then_default_sets_then_protect_starts() {
    let mut env = Env::new(INDEX);
    let saved = read_tunables();
    assert_eq!(
        saved.len(),
        KUBELET_VALUES.len(),
        "every tunable readable: {saved:?}"
    );
    save_tunables(&env.dir.join("host-tunables"), &saved);
    let _restore = RestoreTunables(saved);

    // Two values a kubelet would change.
    write_tunable("kernel/panic", "0");
    write_tunable("vm/overcommit_memory", "0");
    let status =
        env.run_kubelet_to_exit(&["--protect-kernel-defaults=true"], Duration::from_secs(60));
    let log = env.kubelet_log();
    assert!(
        !status.success(),
        "refused start exits non-zero: {status}\n{log}"
    );
    for want in [
        "invalid kernel flag: vm/overcommit_memory, expected value: 1, actual value: 0",
        "invalid kernel flag: kernel/panic, expected value: 10, actual value: 0",
    ] {
        assert!(
            log.contains(want),
            "log names {want:?}:\n{}",
            tail(&log, 20)
        );
    }
    assert_eq!(tunable("kernel/panic"), "0", "protected: nothing written");
    assert_eq!(
        tunable("vm/overcommit_memory"),
        "0",
        "protected: nothing written"
    );

    // Without protection the kubelet sets them, and says so.
    env.start_kubelet();
    wait_until(Duration::from_secs(30), "tunables set", || {
        KUBELET_VALUES
            .iter()
            .all(|(k, v)| tunable(k) == *v)
            .then_some(())
    });
    env.stop_kubelet(nix::sys::signal::Signal::SIGTERM);
    let log = env.kubelet_log();
    assert!(
        log.contains("Updating kernel flag") && log.contains("kernel/panic"),
        "{}",
        tail(&log, 40)
    );

    // Protecting a host whose values are right: the kubelet starts and runs a pod.
    env.write_manifest(
        "tunables.yaml",
        &simple_pod("tunables", "Always", "sleep 3600"),
    );
    env.start_kubelet_with(&["--protect-kernel-defaults=true"]);
    env.wait_running("tunables");
    assert!(env.kubelet_alive(), "protecting kubelet keeps running");
    env.remove_manifest("tunables.yaml");
    wait_until(Duration::from_secs(60), "pod gone", || {
        env.pod("tunables").is_none().then_some(())
    });
    env.stop_kubelet(nix::sys::signal::Signal::SIGTERM);
}
