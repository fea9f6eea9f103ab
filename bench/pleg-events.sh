#!/usr/bin/env bash
# PLEG's runtime-event fast path (issue 20): container death -> status visible on /pods, p50/p99
# over N deaths (default 50), with the fast path (containerd's events service) and with relists
# only (RKUBELET_PLEG_EVENTS=off); plus rkubelet's CPU idle and per relist, and RSS, at N pods.
# Prints figures; asserts nothing.
#
#   bench/pleg-events.sh [N]
#
# Each mode on a fresh private containerd (INDEX 119, bridge rkbr119), rkubelet standalone with
# N static pods (bench/pleg-events.py). RKUBELET=path picks the binary (default
# target/release/rkubelet, else target/debug/rkubelet; built (debug) if neither exists). Logs:
# /tmp/rkubelet-plegbench-MODE.log.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

N="${1:-50}"
INDEX=119
NODE_NAME=plegbench
CGROUP_ROOT=/rkubelet-plegbench
CD=/tmp/rkubelet-plegbench-cd
PY="$REPO_ROOT/bench/pleg-events.py"
CUR_PID=""

if [[ -z "${RKUBELET:-}" ]]; then
    RKUBELET="$REPO_ROOT/target/release/rkubelet"
    [[ -x "$RKUBELET" ]] || RKUBELET="$REPO_ROOT/target/debug/rkubelet"
fi

stop_rkubelet() {
    if [[ -n "$CUR_PID" ]] && kill -0 "$CUR_PID" 2>/dev/null; then
        kill -TERM "$CUR_PID" 2>/dev/null || true
        timeout 20 tail --pid="$CUR_PID" -f /dev/null || kill -KILL "$CUR_PID" 2>/dev/null || true
    fi
    CUR_PID=""
}

cleanup() {
    stop_rkubelet
    containerd_down "$CD" 2>/dev/null || true
    remove_cgroup_root "$CGROUP_ROOT"
}
bench_traps 'cleanup'

bench_mode() {
    local mode="$1" events="$2" sock port sport logf i
    logf="/tmp/rkubelet-plegbench-$mode.log"
    "$HACK_DIR/containerd.sh" up "$CD" "$INDEX" >/dev/null 2>"$logf" || { cat "$logf" >&2; die "containerd did not start"; }
    sock="$(sed -n 's/^CONTAINERD_SOCK=//p' "$CD/env")"
    port="$(free_port 23000)"
    sport="$(free_port 23100)"
    mkdir -p "$CD/manifests" "$CD/kubelet"
    cat >"$CD/kubelet-config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: $CD/manifests
podLogsDir: $CD/pod-logs
readOnlyPort: $port
port: $sport
healthzPort: 0
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%}
imageGCHighThresholdPercent: 100
YAML
    RKUBELET_PLEG_EVENTS="$events" "$RKUBELET" --config "$CD/kubelet-config.yaml" \
        --container-runtime-endpoint "unix://$sock" --root-dir "$CD/kubelet" \
        --hostname-override "$NODE_NAME" --cgroup-root "$CGROUP_ROOT" >"$logf" 2>&1 &
    CUR_PID=$!
    for ((i = 0; i < 100; i++)); do
        curl -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
        kill -0 "$CUR_PID" 2>/dev/null || { tail -n 20 "$logf" >&2; die "rkubelet exited"; }
        sleep 0.2
    done
    log "$mode: rkubelet pid $CUR_PID ($RKUBELET), log $logf"
    python3 "$PY" run "$mode" "$N" "$port" "$CD/manifests" "$NODE_NAME" "$sock" "$CUR_PID"
    cleanup
}

main() {
    need_root
    need_cmd python3 ctr containerd ss curl
    [[ "$N" =~ ^[1-9][0-9]*$ ]] || die "N must be a positive integer, got '$N'"
    if [[ ! -x "$RKUBELET" ]]; then
        (cd "$REPO_ROOT" && cargo build -p rkubelet)
    fi
    containerd_down "$CD" 2>/dev/null || true
    bench_mode events on
    bench_mode relist-only off
}

main "$@"
