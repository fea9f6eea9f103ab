#!/usr/bin/env bash
# PVC benchmark: mount and unmount latency per volume of local PVs (issue 18), at N pods each
# with its own claim, on a real control plane whose kube-controller-manager binds the claims.
# Prints figures; it asserts nothing.
#
#   bench/pvc-local.sh [N...]     default: 1 30
#   PVC_PLUGIN=csi bench/pvc-local.sh [N...]
#                                 the same with CSI PVs of the test driver rkt-csi-hostpath
#                                 ($CSI_DRIVER, default next to $RKUBELET; with --stage, so each
#                                 volume is staged and published), CSIDriver attachRequired false
#
# Per N: a fresh control plane + PV binder, a fresh private containerd (INDEX 170, or
# $BENCH_INDEX), rkubelet
# ($RKUBELET, default target/release/rkubelet) with node credentials; N local PVs (directories
# under the containerd dir) and N claims, bound by the binder; then N pods (one claim each,
# fsGroup set) created at once, watched until Running, then deleted and watched until no mount
# is left. Latency per volume: rkubelet's own `storage_operation_duration_seconds` (upstream's
# metric: the bind mount plus the fsGroup walk for volume_mount, the unmount for
# volume_unmount), mean = _sum/_count, read from its read-only port; plus the wall time from
# creating the pods to all Running and from deleting them to no mount left.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

RKUBELET="${RKUBELET:-$REPO_ROOT/target/release/rkubelet}"
PVC_PLUGIN="${PVC_PLUGIN:-local}"
CSI_DRIVER="${CSI_DRIVER:-$(dirname "$RKUBELET")/rkt-csi-hostpath}"
CSI_NAME=hostpath.csi.rkubelet.test
case "$PVC_PLUGIN" in
local) METRIC_PLUGIN=kubernetes.io/local-volume ;;
csi) METRIC_PLUGIN="kubernetes.io/csi:$CSI_NAME" ;;
*) echo "PVC_PLUGIN must be local or csi" >&2; exit 2 ;;
esac
export METRIC_PLUGIN
NODE_NAME=pvcbench
INDEX="${BENCH_INDEX:-170}"
RO_PORT=$((10000 + 4 * INDEX))
CGROUP_ROOT=/rkubelet-pvcbench
IMAGE=rkubelet.local/busybox:1.35

CUR_CD="" CUR_CP="" CUR_PID="" CUR_DRIVER=""

cleanup() {
    if [[ -n "$CUR_DRIVER" ]]; then
        kill -TERM "$CUR_DRIVER" 2>/dev/null || true
        timeout 10 tail --pid="$CUR_DRIVER" -f /dev/null || kill -KILL "$CUR_DRIVER" 2>/dev/null || true
    fi
    CUR_DRIVER=""
    if [[ -n "$CUR_PID" ]] && kill -0 "$CUR_PID" 2>/dev/null; then
        kill -TERM "$CUR_PID" 2>/dev/null || true
        timeout 10 tail --pid="$CUR_PID" -f /dev/null || kill -KILL "$CUR_PID" 2>/dev/null || true
    fi
    CUR_PID=""
    if [[ -n "$CUR_CD" ]]; then
        # Pods left by an interrupted run: their bind mounts go before the directories do.
        awk -v d="$CUR_CD/kubelet/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r |
            while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
        containerd_down "$CUR_CD" 2>/dev/null || true
        rm -rf "$CUR_CD"
    fi
    remove_cgroup_root "$CGROUP_ROOT"
    [[ -z "$CUR_CP" ]] || "$HACK_DIR/control-plane.sh" down "$CUR_CP" 2>/dev/null || true
    CUR_CD="" CUR_CP=""
}
bench_traps 'cleanup'

# storage_operation_duration_seconds of the local plugin: "op count mean_ms" lines.
METRIC_PY=$(
    cat <<'PY'
import os, re, sys, urllib.request
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=10).read().decode()
vals = {}
for line in text.splitlines():
    m = re.match(r'storage_operation_duration_seconds_(sum|count)\{(.*)\} (\S+)', line)
    if not m or f'volume_plugin="{os.environ["METRIC_PLUGIN"]}"' not in m.group(2):
        continue
    op = re.search(r'operation_name="([^"]+)"', m.group(2)).group(1)
    st = re.search(r'status="([^"]+)"', m.group(2)).group(1)
    vals.setdefault((op, st), {})[m.group(1)] = float(m.group(3))
for (op, st), v in sorted(vals.items()):
    n = v.get("count", 0)
    print(f"{op} {st} {int(n)} {1000 * v.get('sum', 0) / n if n else 0:.3f}")
PY
)

mounts_left() {
    awk -v d="$1/" 'index($5, d) == 1' /proc/self/mountinfo | wc -l
}

bench_one() {
    local n="$1" cd cp sock kc logf i k t0 t1 t2 t3 host
    cd="/tmp/rkubelet-pvcbench-cd-$n" cp="/tmp/rkubelet-pvcbench-cp-$n" logf="/tmp/rkubelet-pvcbench-$n.log"
    containerd_down "$cd" 2>/dev/null || true
    "$HACK_DIR/control-plane.sh" down "$cp" 2>/dev/null || true
    CUR_CD="$cd" CUR_CP="$cp"
    log "N=$n: control plane in $cp, containerd (INDEX $INDEX) in $cd"
    "$HACK_DIR/control-plane.sh" up "$cp" >/dev/null
    "$HACK_DIR/control-plane.sh" controller-manager "$cp" \
        --controllers persistentvolume-binder --pvclaimbinder-sync-period=1s >/dev/null
    "$HACK_DIR/containerd.sh" up "$cd" "$INDEX" >/dev/null 2>"$logf" || { cat "$logf" >&2; die "containerd did not start"; }
    sock="$(sed -n 's/^CONTAINERD_SOCK=//p' "$cd/env")"
    kc="$("$HACK_DIR/control-plane.sh" node-cert "$cp" "$NODE_NAME")"
    k=(kubectl --kubeconfig "$cp/admin.kubeconfig")
    mkdir -p "$cd/kubelet" "$cd/pvs"
    "$RKUBELET" --kubeconfig "$kc" --node-ip 127.0.0.1 \
        --container-runtime-endpoint "unix://$sock" --read-only-port "$RO_PORT" --healthz-port 0 \
        --root-dir "$cd/kubelet" --hostname-override "$NODE_NAME" \
        --cgroup-root "$CGROUP_ROOT" --image-gc-high-threshold 100 \
        --eviction-hard 'memory.available<100Mi,nodefs.available<1%,imagefs.available<1%' \
        >"$logf" 2>&1 &
    CUR_PID=$!
    for ((i = 0; i < 300; i++)); do
        "${k[@]}" get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' \
            2>/dev/null | grep -qx True && break
        kill -0 "$CUR_PID" 2>/dev/null || { tail -n 20 "$logf" >&2; die "rkubelet exited"; }
        sleep 0.2
    done
    host="$("${k[@]}" get node "$NODE_NAME" -o 'jsonpath={.metadata.labels.kubernetes\.io/hostname}')"
    if [[ "$PVC_PLUGIN" == csi ]]; then
        "$CSI_DRIVER" --endpoint "$cd/kubelet/plugins/$CSI_NAME/csi.sock" \
            --registration "$cd/kubelet/plugins_registry/$CSI_NAME-reg.sock" \
            --node-id "$NODE_NAME" --driver-name "$CSI_NAME" --state-dir "$cd/pvs" --stage \
            2>"$logf.driver" &
        CUR_DRIVER=$!
        "${k[@]}" apply -f - >/dev/null <<EOF
apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata: {name: $CSI_NAME}
spec: {attachRequired: false, volumeLifecycleModes: [Persistent]}
EOF
    fi
    for ((i = 0; i < n; i++)); do
        mkdir -p "$cd/pvs/$i"
        if [[ "$PVC_PLUGIN" == csi ]]; then
            cat <<EOF
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: bench-pv-$i}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  claimRef: {namespace: default, name: bench-$i}
  csi: {driver: $CSI_NAME, volumeHandle: "v$i", fsType: ext4}
EOF
        else
            cat <<EOF
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: bench-pv-$i}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  claimRef: {namespace: default, name: bench-$i}
  local: {path: "$cd/pvs/$i"}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: ["$host"]}]
EOF
        fi
        cat <<EOF
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: bench-$i, namespace: default}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  volumeName: bench-pv-$i
  resources: {requests: {storage: 1Gi}}
EOF
    done | "${k[@]}" apply -f - >/dev/null
    for ((i = 0; i < 120; i++)); do
        [[ "$("${k[@]}" get pvc -o 'jsonpath={.items[*].status.phase}' | tr ' ' '\n' | grep -cx Bound)" -ge "$n" ]] && break
        sleep 0.5
    done
    log "N=$n: $n claims bound; creating $n pods"
    t0=$(date +%s.%N)
    for ((i = 0; i < n; i++)); do
        cat <<EOF
---
apiVersion: v1
kind: Pod
metadata: {name: bench-$i, namespace: default}
spec:
  nodeName: $NODE_NAME
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  securityContext: {fsGroup: 2000}
  volumes: [{name: data, persistentVolumeClaim: {claimName: bench-$i}}]
  containers:
  - name: main
    image: $IMAGE
    command: ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]
    volumeMounts: [{name: data, mountPath: /data}]
EOF
    done | "${k[@]}" create -f - >/dev/null
    for ((i = 0; i < 600; i++)); do
        [[ "$("${k[@]}" get pods -o 'jsonpath={.items[*].status.phase}' | tr ' ' '\n' | grep -cx Running)" -ge "$n" ]] && break
        sleep 0.2
    done
    t1=$(date +%s.%N)
    "${k[@]}" delete pods --all --wait=false >/dev/null
    t2=$(date +%s.%N)
    for ((i = 0; i < 600; i++)); do
        [[ "$(mounts_left "$cd/kubelet/pods")" -eq 0 ]] && [[ -z "$("${k[@]}" get pods -o name)" ]] && break
        sleep 0.2
    done
    t3=$(date +%s.%N)
    echo
    echo "=== N = $n pods, one $PVC_PLUGIN PVC each (fsGroup set) ==="
    printf '  create -> all Running        %7.2f s\n' "$(echo "$t1 - $t0" | bc)"
    printf '  delete -> no mount, no pod   %7.2f s\n' "$(echo "$t3 - $t2" | bc)"
    echo "  storage_operation_duration_seconds{volume_plugin=$METRIC_PLUGIN}:"
    python3 -c "$METRIC_PY" "$RO_PORT" | while read -r op st cnt mean; do
        printf '    %-15s %-13s %4d ops   mean %8s ms per volume\n' "$op" "$st" "$cnt" "$mean"
    done
    echo "  mounts left: $(mounts_left "$cd/kubelet")"
    echo "  rkubelet log ($logf): $(grep -c '^E[0-9]' "$logf" || true) error, $(grep -c '^W[0-9]' "$logf" || true) warning lines"
    cleanup
}

main() {
    need_root
    need_cmd python3 kubectl containerd etcd bc
    local -a sizes=("$@")
    [[ ${#sizes[@]} -gt 0 ]] || sizes=(1 30)
    local n
    for n in "${sizes[@]}"; do
        [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "N must be a positive integer, got '$n'"
    done
    if [[ ! -x "$RKUBELET" ]]; then
        log "building $RKUBELET"
        (cd "$REPO_ROOT" && cargo build --release -p rkubelet)
    fi
    [[ "$PVC_PLUGIN" != csi || -x "$CSI_DRIVER" ]] || die "no CSI driver at $CSI_DRIVER (cargo build -p rkubelet --bin rkt-csi-hostpath)"
    for n in "${sizes[@]}"; do
        bench_one "$n"
    done
}

main "$@"
