#!/usr/bin/env bash
# Pod cgroup cost: what creating and removing a pod cgroup (the container manager's part of a pod
# start and delete) costs on this host's cgroups, at N = 30 and 100 by default. Per operation
# p50/p99/max wall time and the CPU the process spent, per pod. Asserts nothing.
#
#   bench/cgroups.sh [N...]
#
# Runs crates/cgroups/examples/cgroup_cost.rs (release) as root under /rkt-bench-<pid>, which it
# removes. No containerd or kubelet involved: the pod-start figures with cgroups are in
# bench/static-pods.sh and bench/api-pods.sh.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/../hack/lib.sh"
need_root
cd "$REPO_ROOT"
cargo run --quiet --release --locked -p rkubelet-cgroups --example cgroup_cost -- "$@"
