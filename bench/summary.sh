#!/usr/bin/env bash
# Stats benchmark: what `/stats/summary` and `/metrics/resource` cost with N pods, and how much
# CPU the runtime credits a busy container per second of wall time. Prints figures; it asserts
# nothing (the tests check what these endpoints say, not how fast they say it: a loaded machine
# would make any bound there either flaky or meaningless).
#
#   bench/summary.sh [N] [ROUNDS]     default: 8 20
#
# A fresh private containerd (INDEX 86), a fresh target/release/rkubelet with N static sleeper
# pods, one host-network pod and one pod running a shell busy loop, all Running first. Then on the
# read-only port: the first summary (cold: every pod's storage walked), ROUNDS more (warm: from
# the cache), ROUNDS of /metrics/resource, each with its wall time and rkubelet's CPU
# (utime+stime); then the busy container's container_cpu_usage_seconds_total over 5 s of wall
# time (about 1.0 on an idle core; less when the machine is busy). rkubelet's log:
# /tmp/rkubelet-summarybench.log.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

RKUBELET="${RKUBELET:-$REPO_ROOT/target/release/rkubelet}" # RKUBELET=target/debug/rkubelet to try it quickly
NODE_NAME=summarybench
INDEX=86 # tests use 101.., static-pods.sh 60.., api-pods.sh 70.., probes.sh 80..82, streaming.sh 84
DIR=/tmp/rkubelet-summarybench LOGF=/tmp/rkubelet-summarybench.log
KPID=""

cleanup() {
    if [[ -n "$KPID" ]] && kill -0 "$KPID" 2>/dev/null; then
        kill -TERM "$KPID" 2>/dev/null || true
        timeout 10 tail --pid="$KPID" -f /dev/null || kill -KILL "$KPID" 2>/dev/null || true
    fi
    # rkubelet leaves pods running on exit; containerd.sh down removes them.
    containerd_down "$DIR" 2>/dev/null || true
}
bench_traps 'cleanup'

# free_port START: the first port from START on nobody listens on.
MEASURE_PY=$(
    cat <<'PY'
import json, os, sys, time, urllib.request

n, rounds, port, pid = (int(x) for x in sys.argv[1:5])
node = sys.argv[5]
TICK = os.sysconf("SC_CLK_TCK")
base = f"http://127.0.0.1:{port}"

def get(path):
    with urllib.request.urlopen(base + path, timeout=60) as r:
        return r.read()

def cpu():
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK

def pct(xs, q):
    s = sorted(xs)
    return s[max(0, min(len(s) - 1, -(-len(s) * q // 100) - 1))]

def timed(path, k):
    out, c0 = [], cpu()
    for _ in range(k):
        t = time.monotonic(); body = get(path); out.append(time.monotonic() - t)
    return out, cpu() - c0, body

def line(title, xs, c):
    ms = [x * 1000 for x in xs]
    print(f"  {title:<28} p50 {pct(ms, 50):8.1f} ms  p90 {pct(ms, 90):8.1f} ms  max {max(ms):8.1f} ms"
          f"   rkubelet {1000 * c / len(xs):6.1f} CPU ms each")

print(f"\n=== /stats/summary with {n} pods + hostnet + busy ({rounds} rounds) ===")
cold, c, body = timed("/stats/summary", 1)
pods = len(json.loads(body)["pods"])
line(f"summary, cold ({pods} pods)", cold, c)
warm, c, _ = timed("/stats/summary", rounds)
line("summary, warm", warm, c)
res, c, body = timed("/metrics/resource", rounds)
line("metrics/resource", res, c)

def busy_cpu():
    for l in get("/metrics/resource").decode().splitlines():
        if l.startswith("container_cpu_usage_seconds_total{") and f'pod="busy-{node}"' in l:
            return float(l.split()[1])
    raise SystemExit("no busy container in /metrics/resource")
c0, t0 = busy_cpu(), time.monotonic()
time.sleep(5)
c1, t1 = busy_cpu(), time.monotonic()
print(f"  busy container credited      {(c1 - c0) / (t1 - t0):8.2f} CPU-s per wall second")
PY
)

main() {
    need_root
    need_cmd python3 curl ss containerd
    local n="${1:-8}" rounds="${2:-20}" port i
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "N must be a positive integer, got '$n'"
    [[ "$rounds" =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive integer, got '$rounds'"
    if [[ ! -x "$RKUBELET" ]]; then
        log "building $RKUBELET"
        (cd "$REPO_ROOT" && cargo build --release -p rkubelet)
    fi
    cleanup
    "$HACK_DIR/containerd.sh" up "$DIR" "$INDEX" >/dev/null 2>"$LOGF" || { cat "$LOGF" >&2; die "containerd did not start"; }
    port="$(free_port 20900)"
    mkdir -p "$DIR/manifests" "$DIR/kubelet"
    cat >"$DIR/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: $DIR/manifests
podLogsDir: $DIR/pod-logs
readOnlyPort: $port
healthzPort: 0
enableServer: false
EOF
    pod() { # pod NAME SCRIPT [SPEC_LINE]
        cat >"$DIR/manifests/$1.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1}
spec:
  terminationGracePeriodSeconds: 1
  ${3:-restartPolicy: Always}
  containers:
  - {name: main, image: rkubelet.local/busybox:1.35, command: ["sh", "-c", "$2"]}
EOF
    }
    local sleeper="trap 'exit 0' TERM; while true; do sleep 1; done"
    for ((i = 0; i < n; i++)); do pod "p$i" "$sleeper"; done
    pod hostnet "$sleeper" "hostNetwork: true"
    pod busy "while true; do :; done"
    "$RKUBELET" --config "$DIR/kubelet-config.yaml" \
        --container-runtime-endpoint "unix://$(sed -n 's/^CONTAINERD_SOCK=//p' "$DIR/env")" \
        --root-dir "$DIR/kubelet" --hostname-override "$NODE_NAME" >"$LOGF" 2>&1 &
    KPID=$!
    local want=$((n + 2)) running=0
    for ((i = 0; i < 1200; i++)); do
        running="$(curl -sf --max-time 2 "http://127.0.0.1:$port/pods" 2>/dev/null |
            python3 -c 'import json,sys; print(sum(1 for p in json.load(sys.stdin)["items"] if (p.get("status") or {}).get("phase") == "Running"))' 2>/dev/null || echo 0)"
        [[ "$running" -ge "$want" ]] && break
        kill -0 "$KPID" 2>/dev/null || { tail -n 20 "$LOGF" >&2; die "rkubelet exited"; }
        sleep 0.1
    done
    [[ "$running" -ge "$want" ]] || die "only $running of $want pods Running"
    log "$want pods Running; rkubelet pid $KPID on port $port, log $LOGF"
    python3 -c "$MEASURE_PY" "$n" "$rounds" "$port" "$KPID" "$NODE_NAME"
    echo "  rkubelet log: $(grep -c '^E[0-9]' "$LOGF" || true) error, $(grep -c '^W[0-9]' "$LOGF" || true) warning lines"
}

main "$@"
