#!/usr/bin/env bash
# Installs what the tests need and runs every test: formatting and lint gates, unit tests, and the
# integration tests against real private containerd instances. .ci/run calls exactly this.
# Fails if the suite leaves containers, mounts, bridges or processes behind.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need_root
# The suite's own deadline, inside CI's 90 min (5400 s) with 5 min to spare: run-tests.sh gives
# the cgroup v2 guest only what is left of it, so a slow guest fails with its report printed.
export RK_CI_DEADLINE="${RK_CI_DEADLINE:-$(($(date +%s) + ${RK_CI_BUDGET:-5100}))}"
"$HACK_DIR/install-deps.sh"
"$HACK_DIR/images.sh" build >&2
# The cgroup v2 guest's kernel and initramfs (hack/vm.sh), downloaded and built once.
"$HACK_DIR/vm.sh" prepare >&2
# etcd + kube-apiserver for the cluster tests; the apiserver is built once and cached.
"$HACK_DIR/control-plane.sh" build >&2
cd "$REPO_ROOT"

log "cargo fmt --check"
cargo fmt --all -- --check
log "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings

# What an earlier run that was killed half-way left behind is not this run's: remove it first
# (only things whose owning test process is gone), so the check below sees this run alone.
"$HACK_DIR/clean-stale.sh"

# Every kubelet the tests start sets the kernel tunables upstream's does (kernel.panic,
# vm.overcommit_memory, ...; setupKernelTunables): the host gets its own values back afterwards.
# A run killed before restoring leaves the file, and the next run restores from it (its values
# are the host's, not the ones that run's kubelets set).
tunables="$RK_CACHE/host-tunables"
mkdir -p "$RK_CACHE"
[[ -s "$tunables" ]] || save_tunables "$tunables"
trap 'set +e; restore_tunables "$tunables" && rm -f "$tunables"' EXIT

log "tests (unit + integration): hack/run-tests.sh"
"$HACK_DIR/run-tests.sh" 2

# Integration tests use /tmp/rkt-*, cgroups /rkt-* and bridges rkbr101..rkbr255; nothing of theirs
# may survive.
leftovers=""
if compgen -G "/tmp/rkt-*" >/dev/null; then leftovers+=" dirs:$(echo /tmp/rkt-*)"; fi
if mount | grep -q '/tmp/rkt-'; then leftovers+=" mounts"; fi
if ip -o link show | grep -Eq 'rkbr(1[0-9][0-9]|2[0-5][0-9]):'; then leftovers+=" bridges"; fi
if pgrep -f -- '-address /tmp/rkt-' >/dev/null; then leftovers+=" shims"; fi
if pgrep -f 'target/debug/rkubelet' >/dev/null; then leftovers+=" rkubelet"; fi
if pgrep -f 'target/debug/rkt-csi-hostpath' >/dev/null; then leftovers+=" csi-driver"; fi
if pgrep -f -- '/tmp/rkt-cp-' >/dev/null; then leftovers+=" control-plane"; fi
if pgrep -f 'qemu-system-x86_64 .*rk.job=' >/dev/null; then leftovers+=" cgroup-v2-guest"; fi
# The kubeadm test's nodes (hack/kubeadm.sh): a netns each, a veth and a route to its pods.
if ip netns list | grep -q '^rkt-'; then leftovers+=" netns"; fi
if ip -o link show | grep -q ' kadm[0-9]*h[@:]'; then leftovers+=" veths"; fi
if ip route | grep -q ' dev kadm'; then leftovers+=" routes"; fi
# Each test's pod cgroups live under its own --cgroup-root /rkt-<index>-<pid>.
if compgen -G "/sys/fs/cgroup/*/rkt-*" >/dev/null || compgen -G "/sys/fs/cgroup/rkt-*" >/dev/null; then
    leftovers+=" cgroups:$(echo /sys/fs/cgroup/*/rkt-* /sys/fs/cgroup/rkt-* | tr ' ' '\n' | grep -v '\*' | head -5 | tr '\n' ' ')"
fi
if [[ -n "$leftovers" ]]; then
    die "the test suite left things behind:$leftovers"
fi
log "all tests passed; nothing left behind"
