#!/usr/bin/env bash
# cAdvisor metrics benchmark: what a `/metrics/cadvisor` scrape costs with N pods. Prints
# figures; it asserts nothing (the tests check the series, not how fast they come).
#
#   bench/cadvisor.sh [N...]     default: 30 100     (ROUNDS=30 scrapes each)
#
# For each N: a fresh private containerd (INDEX 88), a fresh target/release/rkubelet with its own
# --cgroup-root and N static sleeper pods, all Running first. Then on the read-only port: one
# scrape (the first), ROUNDS more, each with its wall time and rkubelet's CPU (utime+stime), the
# series and bytes of one answer, rkubelet's RSS before the first scrape and after the last;
# `/metrics/resource` over the same pods for comparison. rkubelet's log: /tmp/rkubelet-cadvisorbench.log.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

RKUBELET="${RKUBELET:-$REPO_ROOT/target/release/rkubelet}" # RKUBELET=target/debug/rkubelet to try it quickly
ROUNDS="${ROUNDS:-30}"
NODE_NAME=cadvisorbench
INDEX=88 # tests use 101.., static-pods.sh 60.., api-pods.sh 70.., probes.sh 80..82, streaming.sh 84, summary.sh 86
DIR=/tmp/rkubelet-cadvisorbench LOGF=/tmp/rkubelet-cadvisorbench.log
CGROUP_ROOT=/rkubelet-cadvisorbench
KPID=""

cleanup() {
    if [[ -n "$KPID" ]] && kill -0 "$KPID" 2>/dev/null; then
        kill -TERM "$KPID" 2>/dev/null || true
        timeout 10 tail --pid="$KPID" -f /dev/null || kill -KILL "$KPID" 2>/dev/null || true
    fi
    KPID=""
    # rkubelet leaves pods running on exit; containerd.sh down removes them, then their cgroups.
    containerd_down "$DIR" 2>/dev/null || true
    remove_cgroup_root "$CGROUP_ROOT"
}
bench_traps 'cleanup'

# free_port START: the first port from START on nobody listens on.
MEASURE_PY=$(
    cat <<'PY'
import os, sys, time, urllib.request

n, rounds, port, pid = (int(x) for x in sys.argv[1:5])
TICK = os.sysconf("SC_CLK_TCK")
base = f"http://127.0.0.1:{port}"

def get(path):
    with urllib.request.urlopen(base + path, timeout=60) as r:
        return r.read()

def cpu():
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK

def rss_mib():
    with open(f"/proc/{pid}/status") as f:
        for l in f:
            if l.startswith("VmRSS:"):
                return int(l.split()[1]) / 1024

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
    print(f"  {title:<26} p50 {pct(ms, 50):7.1f} ms  p90 {pct(ms, 90):7.1f} ms  max {max(ms):7.1f} ms"
          f"   rkubelet {1000 * c / len(xs):6.1f} CPU ms per scrape")

print(f"\n=== /metrics/cadvisor with {n} pods ({rounds} scrapes) ===")
rss0 = rss_mib()
first, c, body = timed("/metrics/cadvisor", 1)
line("first scrape", first, c)
xs, c, body = timed("/metrics/cadvisor", rounds)
line("metrics/cadvisor", xs, c)
text = body.decode()
series = sum(1 for l in text.splitlines() if l and not l.startswith("#"))
pods = len({l.split('pod="', 1)[1].split('"', 1)[0] for l in text.splitlines()
            if l.startswith("container_memory_working_set_bytes{") and 'pod="' in l and 'pod=""' not in l})
print(f"  one answer                 {series} series, {len(body) / 1024:.0f} KiB, {pods} pods named")
xs, c, _ = timed("/metrics/resource", rounds)
line("metrics/resource", xs, c)
print(f"  rkubelet RSS               {rss0:.1f} MiB before the first scrape, {rss_mib():.1f} MiB after the last")
PY
)

one() {
    local n="$1" port i
    cleanup
    "$HACK_DIR/containerd.sh" up "$DIR" "$INDEX" >/dev/null 2>"$LOGF" || { cat "$LOGF" >&2; die "containerd did not start"; }
    port="$(free_port 20950)"
    rm -rf "$DIR/manifests" "$DIR/kubelet"
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
    "$RKUBELET" --config "$DIR/kubelet-config.yaml" \
        --container-runtime-endpoint "unix://$(sed -n 's/^CONTAINERD_SOCK=//p' "$DIR/env")" \
        --root-dir "$DIR/kubelet" --hostname-override "$NODE_NAME" \
        --cgroup-root "$CGROUP_ROOT" >"$LOGF" 2>&1 &
    KPID=$!
    local running=0
    for ((i = 0; i < 3000; i++)); do
        running="$(curl -sf --max-time 2 "http://127.0.0.1:$port/pods" 2>/dev/null |
            python3 -c 'import json,sys; print(sum(1 for p in json.load(sys.stdin)["items"] if (p.get("status") or {}).get("phase") == "Running"))' 2>/dev/null || echo 0)"
        [[ "$running" -ge "$n" ]] && break
        kill -0 "$KPID" 2>/dev/null || { tail -n 20 "$LOGF" >&2; die "rkubelet exited"; }
        sleep 0.1
    done
    [[ "$running" -ge "$n" ]] || die "only $running of $n pods Running"
    log "$n pods Running; rkubelet pid $KPID on port $port, log $LOGF"
    # Let the starts' work settle before measuring.
    sleep 5
    python3 -c "$MEASURE_PY" "$n" "$ROUNDS" "$port" "$KPID"
    echo "  rkubelet log: $(grep -c '^E[0-9]' "$LOGF" || true) error, $(grep -c '^W[0-9]' "$LOGF" || true) warning lines"
}

main() {
    need_root
    need_cmd python3 curl ss containerd
    [[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive integer, got '$ROUNDS'"
    local ns=("$@") n
    [[ ${#ns[@]} -gt 0 ]] || ns=(30 100)
    for n in "${ns[@]}"; do
        [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "N must be a positive integer, got '$n'"
    done
    if [[ ! -x "$RKUBELET" ]]; then
        log "building $RKUBELET"
        (cd "$REPO_ROOT" && cargo build --release -p rkubelet)
    fi
    for n in "${ns[@]}"; do one "$n"; done
}

main "$@"
