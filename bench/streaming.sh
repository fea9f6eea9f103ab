#!/usr/bin/env bash
# Kubelet API benchmark: what the operator verbs cost through a real kube-apiserver 1.20 and
# rkubelet's 10250 server. Prints figures; it asserts nothing.
#
#   bench/streaming.sh [ROUNDS]     default: 30
#
# One control plane, one private containerd (INDEX 84), target/release/rkubelet as node
# "streambench", one busybox httpd pod. Then, each with rkubelet's CPU (utime+stime) and RSS:
#   exec latency      ROUNDS x `kubectl exec bench -- true` (wall time of the kubectl process,
#                     so kubectl's own start-up is in it; the same loop against `kubectl get pod`
#                     is printed as the floor);
#   exec throughput   `kubectl exec bench -- dd if=/dev/zero bs=1M count=256` read to the end;
#   port-forward      `kubectl port-forward` to the pod's httpd: ROUNDS small GETs (latency) and
#                     3 x a 256 MiB file (throughput);
#   stats/summary     ROUNDS x GET /api/v1/nodes/streambench/proxy/stats/summary.
# rkubelet's log: /tmp/rkubelet-streambench.log.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

RKUBELET="$REPO_ROOT/target/release/rkubelet"
NODE_NAME=streambench
INDEX=84 # tests use 101.., static-pods.sh 60.., api-pods.sh 70.., probes.sh 80..82
CD=/tmp/rkubelet-streambench-cd CP=/tmp/rkubelet-streambench-cp LOGF=/tmp/rkubelet-streambench.log
KPID=""

cleanup() {
    if [[ -n "$KPID" ]] && kill -0 "$KPID" 2>/dev/null; then
        kill -TERM "$KPID" 2>/dev/null || true
        timeout 10 tail --pid="$KPID" -f /dev/null || kill -KILL "$KPID" 2>/dev/null || true
    fi
    containerd_down "$CD" 2>/dev/null || true
    "$HACK_DIR/control-plane.sh" down "$CP" 2>/dev/null || true
}
bench_traps 'cleanup'

MEASURE_PY=$(
    cat <<'PY'
import os, re, socket, subprocess, sys, time, urllib.request

rounds, kubeconfig, node, pid = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
rounds = int(rounds)
TICK = os.sysconf("SC_CLK_TCK")

def kubectl(*args, **kw):
    return subprocess.run(["kubectl", "--kubeconfig", kubeconfig, *args], check=True, **kw)

def cpu():
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK

def mem():
    with open(f"/proc/{pid}/status") as f:
        d = dict(l.split(":", 1) for l in f if ":" in l)
    return int(d["VmRSS"].split()[0]) / 1024, int(d["VmHWM"].split()[0]) / 1024

def pct(xs, q):
    s = sorted(xs)
    return s[max(0, min(len(s) - 1, -(-len(s) * q // 100) - 1))]

def timed(n, f):
    out = []
    for _ in range(n):
        t = time.monotonic(); f(); out.append(time.monotonic() - t)
    return out

def line(title, xs, c0):
    ms = [x * 1000 for x in xs]
    print(f"  {title:<34} p50 {pct(ms, 50):7.1f} ms  p99 {pct(ms, 99):7.1f} ms  max {max(ms):7.1f} ms"
          f"   rkubelet +{cpu() - c0:.2f} CPU s")

rss0, _ = mem()
print(f"\n=== kubelet API through kube-apiserver 1.20 ({rounds} rounds) ===")
print(f"  rkubelet RSS at start              {rss0:6.1f} MiB")

c = cpu(); line("kubectl get pod (floor)", timed(rounds, lambda: kubectl("get", "pod", "bench", capture_output=True)), c)
c = cpu(); line("kubectl exec -- true", timed(rounds, lambda: kubectl("exec", "bench", "--", "true", capture_output=True)), c)

c = cpu(); t = time.monotonic()
p = subprocess.Popen(["kubectl", "--kubeconfig", kubeconfig, "exec", "bench", "--", "dd", "if=/dev/zero", "bs=1048576", "count=256"],
                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
got = 0
while True:
    b = p.stdout.read(1 << 20)
    if not b: break
    got += len(b)
p.wait(); dt = time.monotonic() - t
print(f"  exec stdout throughput             {got / dt / 1e6:7.1f} MB/s ({got >> 20} MiB in {dt:.2f} s)   rkubelet +{cpu() - c:.2f} CPU s")

s = socket.socket(); s.bind(("127.0.0.1", 0)); lport = s.getsockname()[1]; s.close()
pf = subprocess.Popen(["kubectl", "--kubeconfig", kubeconfig, "port-forward", "pod/bench", f"{lport}:8080"],
                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
try:
    pf.stdout.readline()  # "Forwarding from 127.0.0.1:PORT -> 8080"
    get = lambda path: urllib.request.urlopen(f"http://127.0.0.1:{lport}{path}", timeout=60).read()
    get("/ok")
    c = cpu(); line("port-forward GET /ok", timed(rounds, lambda: get("/ok")), c)
    c = cpu(); t = time.monotonic(); total = sum(len(get("/big")) for _ in range(3)); dt = time.monotonic() - t
    print(f"  port-forward throughput            {total / dt / 1e6:7.1f} MB/s ({total >> 20} MiB in {dt:.2f} s)   rkubelet +{cpu() - c:.2f} CPU s")
finally:
    pf.terminate(); pf.wait()

c = cpu(); line("GET .../proxy/stats/summary", timed(rounds, lambda: kubectl("get", "--raw", f"/api/v1/nodes/{node}/proxy/stats/summary", capture_output=True)), c)
rss1, hwm = mem()
print(f"  rkubelet RSS at end                {rss1:6.1f} MiB (peak VmHWM {hwm:.1f} MiB)")
PY
)

main() {
    need_root
    need_cmd python3 kubectl containerd etcd
    local rounds="${1:-30}" sock kc i
    [[ "$rounds" =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive integer, got '$rounds'"
    if [[ ! -x "$RKUBELET" ]]; then
        log "building $RKUBELET"
        (cd "$REPO_ROOT" && cargo build --release -p rkubelet)
    fi
    cleanup
    "$HACK_DIR/control-plane.sh" up "$CP" >/dev/null
    "$HACK_DIR/containerd.sh" up "$CD" "$INDEX" >/dev/null 2>"$LOGF" || { cat "$LOGF" >&2; die "containerd did not start"; }
    sock="$(sed -n 's/^CONTAINERD_SOCK=//p' "$CD/env")"
    kc="$("$HACK_DIR/control-plane.sh" node-cert "$CP" "$NODE_NAME")"
    mkdir -p "$CD/kubelet"
    # The config file turns on what a kubeadm node has: webhook authn/authz on 10250.
    cat >"$CD/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
healthzPort: 0
readOnlyPort: 0
port: $(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
authentication:
  x509:
    clientCAFile: $CP/pki/ca.crt
EOF
    "$RKUBELET" --config "$CD/kubelet.yaml" --kubeconfig "$kc" --node-ip 127.0.0.1 \
        --container-runtime-endpoint "unix://$sock" --root-dir "$CD/kubelet" \
        --hostname-override "$NODE_NAME" >"$LOGF" 2>&1 &
    KPID=$!
    export KUBECONFIG="$CP/admin.kubeconfig"
    kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: bench, namespace: default}
spec:
  nodeName: $NODE_NAME
  automountServiceAccountToken: false
  containers:
  - name: web
    image: rkubelet.local/busybox:1.35
    imagePullPolicy: Never
    command: ["sh", "-c", "mkdir -p /www && echo ok > /www/ok && dd if=/dev/zero of=/www/big bs=1048576 count=256 2>/dev/null && exec httpd -f -p 8080 -h /www"]
    readinessProbe: {httpGet: {path: /ok, port: 8080}, periodSeconds: 1}
EOF
    for ((i = 0; i < 600; i++)); do
        kubectl get pod bench -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -qx True && break
        kill -0 "$KPID" 2>/dev/null || { tail -n 20 "$LOGF" >&2; die "rkubelet exited"; }
        sleep 0.2
    done
    log "pod Ready; rkubelet pid $KPID, log $LOGF"
    python3 -c "$MEASURE_PY" "$rounds" "$CP/admin.kubeconfig" "$NODE_NAME" "$KPID"
    echo "  rkubelet log: $(grep -c ' ERROR ' "$LOGF" || true) ERROR, $(grep -c ' WARN ' "$LOGF" || true) WARN lines"
}

main "$@"
