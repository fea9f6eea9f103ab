#!/usr/bin/env bash
# Run rkubelet locally against a private containerd, with the static pods in
# examples/static-pods.
#
#   hack/local-up.sh          install deps, build, start containerd (or reuse the
#                             running one) and run rkubelet in the foreground
#   hack/local-up.sh --down   stop rkubelet, the pods and containerd; remove the state dir;
#                             the host's kernel tunables (which rkubelet sets, as upstream's
#                             kubelet) back as they were before the first up
#
# Environment: RK_LOCAL_DIR (state dir, default /tmp/rkubelet-local),
# RK_LOCAL_INDEX (containerd.sh INDEX: bridge rkbrN, subnet 10.88.N.0/24, default 42).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

STATE_DIR="$(realpath -m "${RK_LOCAL_DIR:-/tmp/rkubelet-local}")"
INDEX="${RK_LOCAL_INDEX:-42}"
NODE_NAME=local # static pods are named <pod>-local
READ_ONLY_PORT=10255
CGROUP_ROOT=/rkubelet-local # pod cgroups: /sys/fs/cgroup/<controller>/rkubelet-local/kubepods/...
MANIFESTS="$REPO_ROOT/examples/static-pods"
KUBELET_CONFIG="$STATE_DIR/kubelet-config.yaml"
RKUBELET="$REPO_ROOT/target/release/rkubelet"
SELF="hack/local-up.sh"

# alive PID: running and not a zombie.
alive() {
    local st
    st="$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null)" || return 1
    [[ -n "$st" && "${st:0:1}" != Z ]]
}

# PIDs of rkubelets started by this script (matched on their --config argument).
rkubelet_pids() {
    local p
    for p in /proc/[0-9]*; do
        # (2> first: the process may exit before its cmdline is opened.)
        if tr '\0' '\n' 2>/dev/null <"$p/cmdline" | grep -qxF -- "$KUBELET_CONFIG"; then
            echo "${p#/proc/}"
        fi
    done
}

# Value of KEY in STATE_DIR/env (written by containerd.sh up).
env_value() {
    sed -n "s/^$1=//p" "$STATE_DIR/env"
}

cmd_down() {
    need_root
    local pids p i n
    mapfile -t pids < <(rkubelet_pids)
    if [[ ${#pids[@]} -gt 0 ]]; then
        # Stop rkubelet first, or it would keep re-creating the pods.
        log "stopping rkubelet (pid ${pids[*]})"
        kill -TERM "${pids[@]}" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do
            n=0
            for p in "${pids[@]}"; do if alive "$p"; then n=1; fi; done
            ((n)) || break
            sleep 0.1
        done
        kill -KILL "${pids[@]}" 2>/dev/null || true
    fi
    restore_tunables "$STATE_DIR/host-tunables"
    # containerd.sh down kills containers and shims, unmounts everything under
    # the dir, removes the bridge and then the whole dir (kubelet root, pod logs).
    "$HACK_DIR/containerd.sh" down "$STATE_DIR"
    remove_cgroup_root "$CGROUP_ROOT"
}

# Start a containerd in STATE_DIR, or reuse the one a previous run left there.
containerd_up() {
    if [[ -f "$STATE_DIR/containerd.pid" ]] && alive "$(cat "$STATE_DIR/containerd.pid")" &&
        [[ -f "$STATE_DIR/env" ]]; then
        log "reusing containerd (pid $(cat "$STATE_DIR/containerd.pid")) in $STATE_DIR"
        return 0
    fi
    if [[ -e "$STATE_DIR" ]]; then
        # A dead or half-started instance: its leftovers (shims, mounts, IPAM
        # leases) would confuse a new one, so clear them out first.
        log "cleaning up a stale instance in $STATE_DIR"
        "$HACK_DIR/containerd.sh" down "$STATE_DIR"
    fi
    "$HACK_DIR/containerd.sh" up "$STATE_DIR" "$INDEX" >/dev/null
}

write_config() {
    # readOnlyPort must be set: with --config the default is 0 (disabled).
    cat >"$KUBELET_CONFIG" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: $MANIFESTS
podLogsDir: $STATE_DIR/pod-logs
readOnlyPort: $READ_ONLY_PORT
healthzPort: 10248
# Its own kubepods hierarchy, so that a kubelet the host may run keeps its own.
cgroupRoot: $CGROUP_ROOT
EOF
}

# Runs in the background next to rkubelet: wait for the static pods to be
# Running, then print how to reach them. Quiet once rkubelet ($1) is gone.
report_pods() {
    local kpid="$1" url="http://127.0.0.1:$READ_ONLY_PORT/pods" want json="" deadline
    local -a files=("$MANIFESTS"/*.yaml)
    want=${#files[@]}
    deadline=$((SECONDS + 120))
    while alive "$kpid"; do
        json="$(curl -sf --max-time 2 "$url" 2>/dev/null)" || json='{"items":[]}'
        if jq -e --argjson n "$want" '
            (.items | length) >= $n and all(.items[];
              .status.phase == "Running" and
              all(.status.containerStatuses[]?; .ready) and
              (.status.containerStatuses | length) > 0)' <<<"$json" >/dev/null; then
            break
        fi
        if ((SECONDS > deadline)); then
            log "pods are not all Running after 120 s; current state:"
            jq -r '.items[] | "  \(.metadata.name)\t\(.status.phase)\t\(.status.podIP // "-")"' \
                <<<"$json" >&2 || true
            log "see rkubelet's log above and $STATE_DIR/log/containerd.log"
            return 0
        fi
        sleep 1
    done
    alive "$kpid" || return 0
    {
        echo
        echo "=== static pods are Running ==="
        jq -r '.items[] | "  \(.metadata.name)\tIP \(.status.podIP)"' <<<"$json"
        jq -r '.items[] | select(.metadata.name | startswith("web-"))
            | "  try:  curl http://\(.status.podIP)/"' <<<"$json"
        echo "  client output: tail -f $STATE_DIR/pod-logs/default_two-containers-${NODE_NAME}_*/client/0.log"
        echo "==============================="
        echo
    } >&2
}

cmd_up() {
    need_root
    "$HACK_DIR/install-deps.sh"
    need_cmd cargo curl jq ss
    log "building rkubelet (release)"
    (cd "$REPO_ROOT" && cargo build --release -p rkubelet)

    local pids
    mapfile -t pids < <(rkubelet_pids)
    if [[ ${#pids[@]} -gt 0 ]]; then
        die "rkubelet for $STATE_DIR is already running (pid ${pids[*]}); stop it or run $SELF --down"
    fi
    if ss -Htln "sport = :$READ_ONLY_PORT" | grep -q .; then
        die "port $READ_ONLY_PORT is in use (another kubelet?)"
    fi

    containerd_up
    local sock
    sock="$(env_value CONTAINERD_SOCK)"
    [[ -S "$sock" ]] || die "no containerd socket at '$sock'"
    write_config
    mkdir -p "$STATE_DIR/kubelet"
    # rkubelet sets the kernel tunables upstream's kubelet sets (kernel.panic=10,
    # vm.overcommit_memory=1, ...); --down puts back the values the host had before the first up.
    [[ -s "$STATE_DIR/host-tunables" ]] || save_tunables "$STATE_DIR/host-tunables"

    cat >&2 <<EOF

rkubelet is starting; node name '$NODE_NAME', static pods from $MANIFESTS
  pods:        curl -s 127.0.0.1:$READ_ONLY_PORT/pods | jq -r '.items[] | [.metadata.name, .status.phase, .status.podIP] | @tsv'
  containers:  ctr -a $sock -n k8s.io containers ls
  pod logs:    $STATE_DIR/pod-logs/    containerd log: $(env_value CONTAINERD_LOG)
Ctrl-C stops rkubelet only: the pods and containerd keep running, and the next
$SELF picks them up again. To remove everything: $SELF --down

EOF
    # Double fork so the reporter is not left as a zombie child of rkubelet.
    # (Background jobs of a script ignore SIGINT; the reporter exits with rkubelet.)
    (report_pods "$$" &)
    exec "$RKUBELET" --config "$KUBELET_CONFIG" \
        --container-runtime-endpoint "unix://$sock" \
        --root-dir "$STATE_DIR/kubelet" \
        --hostname-override "$NODE_NAME"
}

case "${1:-}" in
"") cmd_up ;;
--down) cmd_down ;;
-h | --help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0" ;;
*)
    echo "usage: $0 [--down]" >&2
    exit 2
    ;;
esac
