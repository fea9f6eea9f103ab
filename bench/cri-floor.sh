#!/usr/bin/env bash
# The floor benchmark (issue 20): how close rkubelet comes to what the runtime alone can do. Prints
# figures and the ratios rkubelet/floor; it asserts nothing.
#
#   bench/cri-floor.sh [N...]     default: 10 30 100
#
# One control plane for the run (etcd + kube-apiserver 1.20, hack/control-plane.sh). Per N, on one
# fresh private containerd (INDEX 137, CNI bridge rkbr137, the same CNI config every test uses):
#   1. floor: bench/cri-floor (the project's cri crate, no kubelet) starts N one-container pods at
#      once, one task per pod as rkubelet's pod workers, with the CRI calls rkubelet makes, then
#      tears them down; then again with each pod in its own pod cgroup given as the sandbox's
#      cgroup parent, as a kubelet makes them (`--pod-cgroups`, under $FLOOR_CGROUP_ROOT); then
#      again sending the sandbox and container configs rkubelet sends for the same manifest, built
#      by rkubelet's config builders (`--kubelet-shape`: DNS, seccomp, the hosts and termination-log
#      mounts, masked paths): the runtime's work for rkubelet's pods, "floor+shape"; then again
#      making beside it, with the node's credentials, the API requests a node makes for static pods
#      (`--api`: mirror pods, status patches, events): "floor+api", what the node's phases pay
#      for the API server and etcd on the same cores with no kubelet's own work (run last in each
#      round: the mirrors' owner is the Node the node's phase registers); then again with the
#      pods as API pods that a user (admin credentials) POSTs and DELETEs one after another, as
#      the API phase's client does, each pod's runtime work waiting for its request's answer
#      (`--user`): "floor+user", the floor of the API phase, whose windows hold those requests;
#   2. rkubelet standalone (no --kubeconfig, no API server work on the same cores), static pods:
#      N manifests renamed into staticPodPath at once, polled on /pods;
#   3. rkubelet as a node of the control plane, the same static pods (mirror pods, status, events),
#      their mirror pods watched on the apiserver;
#   4. rkubelet, API pods: N pods POSTed (one client, as fast as it goes), watched on the apiserver.
# After each N's rounds, bench/critical_path.py splits every pod's start and delete into the time
# inside the runtime's CRI calls (containerd's log) and the caller's own time between them.
# Same image (rkubelet.local/busybox:1.35, already imported), same command, grace 5 s.
# "started" is rkubelet's `"started container"` log line (the moment the floor's StartContainer
# returns); "Running" is the pod seen Running+Ready where an operator looks.
#
# ROUNDS=k (default 3) runs every phase once per round, in the order above, on the same containerd
# (rkubelet started afresh for standalone and for the node's two phases, on the same root dir); the summary gives the median of
# each figure over the rounds (one run here varies by up to 30%), and the median of each round's
# ratio to that round's floor (paired: the phases of a round are minutes apart, the rounds more).
# RKUBELET=path and CRI_FLOOR=path pick the binaries (default target/release/...; built if missing).
# rkubelet runs with its defaults (kubeAPIQPS/kubeAPIBurst as the build honours them) and
# --cgroup-root /rkubelet-floorbench and --v=2 (the lines read above are V(2)); its log:
# /tmp/rkubelet-floorbench-N.log.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

RKUBELET="${RKUBELET:-$REPO_ROOT/target/release/rkubelet}"
CRI_FLOOR="${CRI_FLOOR:-$REPO_ROOT/target/release/cri-floor}"
PY="$REPO_ROOT/bench/cri-floor.py"
NODE_NAME=floorbench
INDEX=137
CGROUP_ROOT=/rkubelet-floorbench
FLOOR_CGROUP_ROOT=/rkubelet-floorbench-floor
ROUNDS="${ROUNDS:-3}"
CP=/tmp/rkubelet-floorbench-cp
CD=/tmp/rkubelet-floorbench-cd

CUR_PID="" RESULTS="" STARTED_AT=0

stop_rkubelet() {
    if [[ -n "$CUR_PID" ]] && kill -0 "$CUR_PID" 2>/dev/null; then
        kill -TERM "$CUR_PID" 2>/dev/null || true
        timeout 10 tail --pid="$CUR_PID" -f /dev/null || kill -KILL "$CUR_PID" 2>/dev/null || true
    fi
    CUR_PID=""
}

cleanup() {
    stop_rkubelet
    containerd_down "$CD" 2>/dev/null || true
    remove_cgroup_root "$CGROUP_ROOT"
    remove_cgroup_root "$FLOOR_CGROUP_ROOT"
}
bench_traps 'cleanup; "$HACK_DIR/control-plane.sh" down "$CP" 2>/dev/null || true; rm -f "$RESULTS"'

# Readiness checks for start_rkubelet: the read-only port answers; the node Ready in the API with
# a heartbeat from this rkubelet (with no node controller, the last round's Ready stays).
is_serving() { curl -sf "http://127.0.0.1:$1/pods" >/dev/null; }
node_ready() {
    local beat
    beat="$(kubectl --kubeconfig "$CP/admin.kubeconfig" get node "$NODE_NAME" \
        -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].lastHeartbeatTime}' 2>/dev/null)"
    [[ "$beat" == True\ * ]] && (($(date -d "${beat#True }" +%s) >= STARTED_AT))
}

# start_rkubelet LOG SOCK CHECK PORT [FLAG...]: rkubelet on the bench's config and containerd, plus
# FLAGs, in the background (CUR_PID), until CHECK PORT passes. LOG is appended to (one per phase
# kind, all rounds).
start_rkubelet() {
    local logf="$1" sock="$2" check="$3" port="$4" i
    shift 4
    "$RKUBELET" --config "$CD/kubelet-config.yaml" --node-ip 127.0.0.1 \
        --container-runtime-endpoint "unix://$sock" --root-dir "$CD/kubelet" \
        --hostname-override "$NODE_NAME" --cgroup-root "$CGROUP_ROOT" --v=2 "$@" >>"$logf" 2>&1 &
    CUR_PID=$!
    STARTED_AT=$(date +%s)
    for ((i = 0; i < 300; i++)); do
        "$check" "$port" && return 0
        kill -0 "$CUR_PID" 2>/dev/null || { tail -n 20 "$logf" >&2; die "rkubelet exited"; }
        sleep 0.2
    done
    die "rkubelet did not get ready within 60 s; log $logf"
}

# shaped_floor N SOCK [FLAG...]: the floor with pod cgroups and rkubelet's configs (floor+shape),
# plus FLAGs (floor+api, floor+user), then what it leaves: its cgroups and its root dir.
shaped_floor() {
    local n="$1" sock="$2"
    shift 2
    "$CRI_FLOOR" --endpoint "unix://$sock" --pods "$n" --logs-dir "$CD/floor-logs" --json "$RESULTS" \
        --pod-cgroups "$FLOOR_CGROUP_ROOT" --kubelet-shape "$CD/floor-root" "$@"
    remove_cgroup_root "$FLOOR_CGROUP_ROOT"
    rm -rf "$CD/floor-root"
}

bench_one() {
    local n="$1" kc="$2" url="$3" sock port sport logf r
    logf="/tmp/rkubelet-floorbench-$n.log"
    log "N=$n: containerd (INDEX $INDEX) in $CD"
    # containerd's metrics: the CRI calls each rkubelet phase made (cri-floor.py reads them).
    export CONTAINERD_METRICS
    CONTAINERD_METRICS="127.0.0.1:$(free_port $((23000 + n)))"
    "$HACK_DIR/containerd.sh" up "$CD" "$INDEX" >/dev/null 2>"$logf" || { cat "$logf" >&2; die "containerd did not start"; }
    sock="$(sed -n 's/^CONTAINERD_SOCK=//p' "$CD/env")"

    port="$(free_port $((21000 + n)))"
    sport="$(free_port $((22000 + n)))"
    : >"$logf.standalone"
    mkdir -p "$CD/manifests" "$CD/kubelet"
    cat >"$CD/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: $CD/manifests
podLogsDir: $CD/pod-logs
readOnlyPort: $port
port: $sport
healthzPort: 0
fileCheckFrequency: 20s
# As the tests: upstream's disk thresholds (imagefs 15%) put a shared host more than 85% full under
# DiskPressure, and every API pod would be refused as Evicted.
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%}
imageGCHighThresholdPercent: 100
EOF
    # Every phase once per round, the floor's right before rkubelet's: the machine's speed drifts
    # by tens of percent within minutes here, and a ratio of two phases minutes apart measured the
    # drift. The summary's paired ratios divide each round's figures by the same round's floor.
    for ((r = 1; r <= ROUNDS; r++)); do
        log "N=$n: round $r of $ROUNDS"
        "$CRI_FLOOR" --endpoint "unix://$sock" --pods "$n" --logs-dir "$CD/floor-logs" --json "$RESULTS"
        "$CRI_FLOOR" --endpoint "unix://$sock" --pods "$n" --logs-dir "$CD/floor-logs" --json "$RESULTS" \
            --pod-cgroups "$FLOOR_CGROUP_ROOT"
        remove_cgroup_root "$FLOOR_CGROUP_ROOT"
        shaped_floor "$n" "$sock"

        # Standalone first (no API server: static pods only, nothing for kube-apiserver and etcd
        # to do on the same two cores), then as a node of the control plane.
        start_rkubelet "$logf.standalone" "$sock" is_serving "$port"
        log "N=$n: standalone rkubelet pid $CUR_PID, log $logf.standalone"
        sleep 3 # its first relists and housekeeping before the pods, as on a node up for a while
        RKUBELET_PID=$CUR_PID python3 "$PY" static "$n" "$port" "$CD/manifests" "$NODE_NAME" "$sock" "$logf.standalone" "$RESULTS" standalone
        stop_rkubelet

        start_rkubelet "$logf" "$sock" node_ready "$port" --kubeconfig "$kc"
        log "N=$n: node Ready; rkubelet pid $CUR_PID, log $logf"
        sleep 3
        RKUBELET_PID=$CUR_PID BENCH_APISERVER=$url BENCH_PKI=$CP/pki python3 "$PY" static "$n" "$port" "$CD/manifests" "$NODE_NAME" "$sock" "$logf" "$RESULTS"
        RKUBELET_PID=$CUR_PID BENCH_APISERVER=$url BENCH_PKI=$CP/pki python3 "$PY" api "$n" "$url" "$CP/pki" "$NODE_NAME" "$sock" "$logf" "$RESULTS" "$port"
        stop_rkubelet

        # floor+api and floor+user last: the mirror pods need the Node object (owner
        # reference), which the node's phase registered.
        shaped_floor "$n" "$sock" --api "$kc" --node "$NODE_NAME"
        shaped_floor "$n" "$sock" --api "$kc" --node "$NODE_NAME" --user "$CP/admin.kubeconfig"
    done
    echo "  rkubelet log: $(grep -c '^E[0-9]' "$logf" || true) error, $(grep -c '^W[0-9]' "$logf" || true) warning lines"
    # Per pod, all rounds: rkubelet's own time between its CRI calls against the runtime's time
    # inside them (a split the machine's drift in containerd's speed does not blur).
    python3 "$REPO_ROOT/bench/critical_path.py" "$CD/log/containerd.log" \
        "standalone=$logf.standalone" "node=$logf" || log "critical_path.py failed; figures above stand"
    cleanup
}

main() {
    need_root
    need_cmd python3 ctr kubectl containerd etcd ss curl
    local -a sizes=("$@")
    [[ ${#sizes[@]} -gt 0 ]] || sizes=(10 30 100)
    local n kc url
    for n in "${sizes[@]}"; do
        [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "N must be a positive integer, got '$n'"
    done
    [[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive integer, got '$ROUNDS'"
    if [[ ! -x "$RKUBELET" || ! -x "$CRI_FLOOR" ]]; then
        log "building $RKUBELET and $CRI_FLOOR"
        (cd "$REPO_ROOT" && cargo build --release -p rkubelet -p rkubelet-bench-cri-floor)
    fi
    # The floor has no kubelet to set the host's kernel tunables (the key quotas among them:
    # runc gives every container a session keyring); rkubelet sets them in the same run, so the
    # floor runs on the host as rkubelet leaves it. The host's values come back at exit.
    set_kubelet_tunables
    containerd_down "$CD" 2>/dev/null || true
    "$HACK_DIR/control-plane.sh" down "$CP" 2>/dev/null || true
    log "control plane in $CP"
    "$HACK_DIR/control-plane.sh" up "$CP" >/dev/null
    url="$(sed -n 's/^APISERVER_URL=//p' "$CP/env")"
    kc="$("$HACK_DIR/control-plane.sh" node-cert "$CP" "$NODE_NAME")"
    RESULTS="$(mktemp)"
    for n in "${sizes[@]}"; do
        bench_one "$n" "$kc" "$url"
    done
    python3 "$PY" summary "$RESULTS"
}

main "$@"
