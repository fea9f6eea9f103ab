#!/usr/bin/env bash
# Eviction benchmark. Prints figures; asserts nothing (timings on a shared machine belong here,
# not in the tests).
#
#   bench/eviction.sh [RUNS] [PODS] [PASSES]     default: 5 100 6   (RUNS 0: part 2 only)
#
# 1. Latency, RUNS times: the memory test of crates/rkubelet/tests/eviction.rs (a real
#    kube-apiserver and containerd; rkubelet's debug build, as `cargo test` builds it) with a
#    memory.available threshold 3 GiB under what the machine has and a pod writing 6 GiB into a
#    tmpfs. The test watches the machine's memory.available every 20 ms and prints when it
#    crossed the threshold, and the kubelet log's times of the eviction decision ("evicting pod")
#    and of the pod stopped and cleaned up; p50/p99 of crossed -> decided and crossed -> stopped.
# 2. Cost of a monitoring pass with PODS static sleeper pods (release build, a fresh private
#    containerd, INDEX 88): rkubelet with `--vmodule=eviction/*=4` logs each pass's wall time and
#    the process's CPU during it (utime+stime, clock-tick resolution: other tasks running at the
#    same moment are included, so it is an upper bound); PASSES passes after all pods are Running,
#    p50/p99/max. Static pods are critical, so nothing is evicted, but each pass reads the whole
#    summary (runtime stats, every pod's storage walk through its 10 s cache) and checks every
#    pod's local storage limits, which is what a pass costs when no threshold is met.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

RKUBELET="${RKUBELET:-$REPO_ROOT/target/release/rkubelet}"
NODE_NAME=evictionbench
INDEX=88 # tests use 101.., static-pods.sh 60.., api-pods.sh 70.., probes.sh 80..82, streaming.sh 84, summary.sh 86
DIR=/tmp/rkubelet-evictionbench LOGF=/tmp/rkubelet-evictionbench.log
KPID=""

cleanup() {
    if [[ -n "$KPID" ]] && kill -0 "$KPID" 2>/dev/null; then
        kill -TERM "$KPID" 2>/dev/null || true
        timeout 10 tail --pid="$KPID" -f /dev/null || kill -KILL "$KPID" 2>/dev/null || true
    fi
    containerd_down "$DIR" 2>/dev/null || true
}
bench_traps 'cleanup'

STATS_PY=$(
    cat <<'PY'
import sys
def pct(xs, q):
    s = sorted(xs)
    return s[max(0, min(len(s) - 1, -(-len(s) * q // 100) - 1))]
title, unit = sys.argv[1], sys.argv[2]
xs = [float(x) for x in sys.stdin.read().split()]
if not xs:
    print(f"  {title:<34} no samples")
else:
    print(f"  {title:<34} p50 {pct(xs, 50):8.1f} {unit}  p99 {pct(xs, 99):8.1f} {unit}  max {max(xs):8.1f} {unit}  (n={len(xs)})")
PY
)
stats() { python3 -c "$STATS_PY" "$@"; }

latency() {
    local runs="$1" i out decided="" stopped=""
    log "building the eviction test"
    (cd "$REPO_ROOT" && cargo test -p rkubelet --test eviction --no-run >/dev/null 2>&1)
    for ((i = 1; i <= runs; i++)); do
        out="$(cd "$REPO_ROOT" && cargo test -p rkubelet --test eviction -- memory_pressure_evicts --nocapture 2>&1)" ||
            { echo "$out" | tail -n 30 >&2; die "run $i failed"; }
        local line
        line="$(grep -o 'BENCH .*' <<<"$out" || true)"
        [[ -n "$line" ]] || { log "run $i: no BENCH line"; continue; }
        log "run $i: ${line#BENCH }"
        decided+="$(sed -n 's/.*crossed_to_decided_ms=\([-0-9]*\).*/\1/p' <<<"$line") "
        stopped+="$(sed -n 's/.*crossed_to_stopped_ms=\([-0-9]*\).*/\1/p' <<<"$line") "
    done
    echo
    echo "=== memory.available crossed -> eviction ($runs runs) ==="
    stats "crossed -> eviction decided" ms <<<"$decided"
    stats "crossed -> pod stopped and removed" ms <<<"$stopped"
}

pass_cost() {
    local n="$1" passes="$2" port i
    if [[ ! -x "$RKUBELET" ]]; then
        log "building $RKUBELET"
        (cd "$REPO_ROOT" && cargo build --release -p rkubelet)
    fi
    cleanup
    "$HACK_DIR/containerd.sh" up "$DIR" "$INDEX" >/dev/null 2>"$LOGF" || { cat "$LOGF" >&2; die "containerd did not start"; }
    port=20950
    while ss -Htln "sport = :$port" | grep -q .; do port=$((port + 1)); done
    mkdir -p "$DIR/manifests" "$DIR/kubelet"
    # Thresholds this shared machine does not meet (its disk is often >85% full).
    cat >"$DIR/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: $DIR/manifests
podLogsDir: $DIR/pod-logs
readOnlyPort: $port
healthzPort: 0
enableServer: false
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%}
EOF
    local sleeper="trap 'exit 0' TERM; while true; do sleep 1; done"
    for ((i = 0; i < n; i++)); do
        cat >"$DIR/manifests/p$i.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata: {name: p$i}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: main, image: rkubelet.local/busybox:1.35, command: ["sh", "-c", "$sleeper"]}
EOF
    done
    "$RKUBELET" --config "$DIR/kubelet-config.yaml" --v=0 --vmodule='eviction/*=4' \
        --container-runtime-endpoint "unix://$(sed -n 's/^CONTAINERD_SOCK=//p' "$DIR/env")" \
        --root-dir "$DIR/kubelet" --hostname-override "$NODE_NAME" >"$LOGF" 2>&1 &
    KPID=$!
    local running=0
    for ((i = 0; i < 3000; i++)); do
        running="$(curl -sf --max-time 2 "http://127.0.0.1:$port/pods" 2>/dev/null |
            python3 -c 'import json,sys; print(sum(1 for p in json.load(sys.stdin)["items"] if (p.get("status") or {}).get("phase") == "Running"))' 2>/dev/null || echo 0)"
        [[ "$running" -ge "$n" ]] && break
        kill -0 "$KPID" 2>/dev/null || { tail -n 20 "$LOGF" >&2; die "rkubelet exited"; }
        sleep 0.2
    done
    [[ "$running" -ge "$n" ]] || die "only $running of $n pods Running"
    local mark
    mark="$(grep -c 'eviction manager pass' "$LOGF" || true)"
    log "$n pods Running; waiting for $passes eviction manager passes (one per 10 s)"
    for ((i = 0; i < passes * 12 + 20; i++)); do
        [[ "$(grep -c 'eviction manager pass' "$LOGF" || true)" -ge $((mark + passes)) ]] && break
        sleep 1
    done
    local lines
    lines="$(grep 'eviction manager pass' "$LOGF" | tail -n +"$((mark + 1))" | grep "pods=$n" || true)"
    echo
    echo "=== eviction manager pass with $n pods ==="
    stats "wall time per pass" ms <<<"$(sed -n 's/.*took_us=\([0-9]*\).*/\1/p' <<<"$lines" | awk '{print $1/1000}')"
    stats "process CPU per pass (upper bound)" ms <<<"$(sed -n 's/.*cpu_ms=\([0-9]*\).*/\1/p' <<<"$lines")"
    echo "  rkubelet log: $LOGF ($(grep -c '^E[0-9]' "$LOGF" || true) error, $(grep -c '^W[0-9]' "$LOGF" || true) warning lines)"
}

main() {
    need_root
    need_cmd python3 curl ss containerd kubectl
    local runs="${1:-5}" pods="${2:-100}" passes="${3:-6}"
    [[ "$runs" =~ ^[0-9]+$ ]] || die "RUNS must be a number, got '$runs'"
    for v in "$pods" "$passes"; do
        [[ "$v" =~ ^[1-9][0-9]*$ ]] || die "PODS and PASSES must be positive integers, got '$v'"
    done
    if ((runs > 0)); then latency "$runs"; fi
    pass_cost "$pods" "$passes"
}

main "$@"
