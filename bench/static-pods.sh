#!/usr/bin/env bash
# Static pod benchmark: how fast rkubelet brings N static pods to Running and
# tears them down again, and what it costs in RSS and CPU. Prints figures; it
# asserts nothing.
#
#   bench/static-pods.sh [N...]     default: 10 50
#
# Per N: a fresh private containerd (hack/containerd.sh, INDEX 60, 61, ...), a
# fresh target/release/rkubelet on an empty manifest dir, then N manifests
# written at once, polled via the read-only /pods endpoint every 50 ms, then
# all removed. rkubelet's log is kept in /tmp/rkubelet-bench-N.log, per-pod
# times (UTC, to compare with the log) in /tmp/rkubelet-bench-N.pods.tsv.
# RK_BENCH_FLAGS adds rkubelet flags, e.g. RK_BENCH_FLAGS=--v=4 for a debug log.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

RKUBELET="$REPO_ROOT/target/release/rkubelet"
NODE_NAME=bench
FIRST_INDEX=60
RK_BENCH_FLAGS="${RK_BENCH_FLAGS:-}"

# Set for the run in progress, so the EXIT trap can clean it up.
CUR_DIR=""
CUR_PID=""
RESULTS=""

cleanup() {
    if [[ -n "$CUR_PID" ]] && kill -0 "$CUR_PID" 2>/dev/null; then
        kill -TERM "$CUR_PID" 2>/dev/null || true
        # rkubelet leaves pods running on exit; containerd.sh down removes them.
        timeout 10 tail --pid="$CUR_PID" -f /dev/null || kill -KILL "$CUR_PID" 2>/dev/null || true
    fi
    CUR_PID=""
    if [[ -n "$CUR_DIR" ]]; then
        containerd_down "$CUR_DIR" 2>/dev/null || true
    fi
    CUR_DIR=""
}
bench_traps 'cleanup; rm -f "$RESULTS"'

# free_port START: the first port from START on nobody listens on.
# The measurement itself: python3 for sub-second polling, JSON and percentiles.
MEASURE_PY=$(
    cat <<'PY'
import json, os, subprocess, sys, time, urllib.request

n, port, mdir, pid, sock, node, outfile, tsv, cpid = sys.argv[1:10]
n, port, pid, cpid = int(n), int(port), int(pid), int(cpid)
TICK = os.sysconf("SC_CLK_TCK")
URL = f"http://127.0.0.1:{port}/pods"

def on_error(kind, e, tb):
    # Ctrl-C reaches rkubelet too: a one-line reason instead of a traceback.
    if issubclass(kind, KeyboardInterrupt):
        print("interrupted", file=sys.stderr)
    elif not os.path.exists(f"/proc/{pid}"):
        print(f"rkubelet (pid {pid}) exited; see its log", file=sys.stderr)
    else:
        sys.__excepthook__(kind, e, tb)
sys.excepthook = on_error
POLL = 0.05

def rss_kib():
    d = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            d[k] = v.split()[0] if v.split() else ""
    return int(d["VmRSS"]), int(d["VmHWM"])

def cpu_s(p=None):
    with open(f"/proc/{p or pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime

def pods():
    with urllib.request.urlopen(URL, timeout=2) as r:
        return json.load(r).get("items") or []

def running(p):
    st = p.get("status") or {}
    cs = st.get("containerStatuses") or []
    return st.get("phase") == "Running" and len(cs) == 1 and all(c.get("ready") for c in cs)

def runtime_containers():
    out = subprocess.run(["ctr", "-a", sock, "-n", "k8s.io", "containers", "ls", "-q"],
                         capture_output=True, text=True, check=True).stdout
    return [l for l in out.split() if l]

def pct(xs, q):
    # nearest-rank percentile
    s = sorted(xs)
    return s[max(0, min(len(s) - 1, -(-len(s) * q // 100) - 1))]

MANIFEST = """apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 5
  containers:
    - name: sleep
      image: rkubelet.local/busybox:1.35
      imagePullPolicy: IfNotPresent
      command: ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]
"""

if pods():
    sys.exit("the manifest dir is not empty")
time.sleep(1)  # let rkubelet settle after start-up
rss0, _ = rss_kib(); cpu0 = cpu_s(); ccpu0 = cpu_s(cpid)

# Write all manifests at once. Each is written next to the dir and renamed in,
# so rkubelet never sees a half-written file.
names = [f"bench-{i:03d}" for i in range(n)]
written = {}
staging = os.path.join(os.path.dirname(mdir.rstrip("/")), "staging")
os.makedirs(staging, exist_ok=True)
t0 = time.monotonic()
for name in names:
    tmp = os.path.join(staging, name + ".yaml")
    with open(tmp, "w") as f:
        f.write(MANIFEST.format(name=name))
    os.rename(tmp, os.path.join(mdir, name + ".yaml"))
    written[f"{name}-{node}"] = time.monotonic()
t_written = time.monotonic() - t0

# Poll until every pod is Running with its container ready.
ready_at = {}
peak_rss = rss0
deadline = time.monotonic() + 120 + 3 * n
last = []
while len(ready_at) < n and time.monotonic() < deadline:
    try:
        last = pods()
    except Exception:
        pass  # a slow answer: keep the previous list
    now = time.monotonic()
    for p in last:
        nm = p["metadata"]["name"]
        if nm in written and nm not in ready_at and running(p):
            ready_at[nm] = now
    peak_rss = max(peak_rss, rss_kib()[0])
    time.sleep(POLL)
t_all = max(ready_at.values()) - t0 if ready_at else None
rss1, hwm1 = rss_kib(); cpu1 = cpu_s(); ccpu1 = cpu_s(cpid)
lat = [ready_at[k] - written[k] for k in ready_at]
# Per-pod times (wall clock, comparable with rkubelet's log) for a closer look.
wall = time.time() - time.monotonic()
with open(tsv, "w") as f:
    f.write("pod\twritten_utc\trunning_utc\tlatency_s\n")
    for k in sorted(written, key=written.get):
        r = ready_at.get(k)
        ts = lambda m: time.strftime("%H:%M:%S", time.gmtime(m + wall)) + f"{(m + wall) % 1:.3f}"[1:]
        f.write(f"{k}\t{ts(written[k])}\t{ts(r) if r else '-'}\t{r - written[k] if r else '-'}\n")
missing = sorted(set(written) - set(ready_at))

# Idle with N pods: what resync/PLEG/status work costs when nothing changes.
IDLE = 10
time.sleep(IDLE)
rss2, _ = rss_kib(); cpu2 = cpu_s(); ccpu2 = cpu_s(cpid)

# Remove all manifests; wait for /pods to empty and the runtime to be clean.
t1 = time.monotonic()
for name in names:
    os.remove(os.path.join(mdir, name + ".yaml"))
t_api_empty = t_rt_empty = None
deadline = time.monotonic() + 120 + 3 * n
while time.monotonic() < deadline:
    try:
        if t_api_empty is None and not pods():
            t_api_empty = time.monotonic() - t1
    except Exception:
        pass
    # ctr is comparatively expensive: only ask once /pods is empty.
    if t_api_empty is not None and not runtime_containers():
        t_rt_empty = time.monotonic() - t1
        break
    peak_rss = max(peak_rss, rss_kib()[0])
    time.sleep(POLL if t_api_empty is None else 0.1)
left = runtime_containers()
rss3, hwm3 = rss_kib(); cpu3 = cpu_s(); ccpu3 = cpu_s(cpid)

def secs(x):
    return "timeout" if x is None else f"{x:7.2f} s"

def mib(k):
    return f"{k / 1024:7.1f} MiB"

print(f"\n=== N = {n} static pods ===")
print(f"  {n} manifests written in          {t_written * 1000:7.1f} ms")
if lat:
    print(f"  written -> Running   p50          {secs(pct(lat, 50))}")
    print(f"                       p90          {secs(pct(lat, 90))}")
    print(f"                       p99          {secs(pct(lat, 99))}")
    print(f"                       max          {secs(max(lat))}")
print(f"  first write -> all Running        {secs(t_all if not missing else None)}")
if missing:
    print(f"  NOT Running ({len(missing)}): {', '.join(missing[:10])}")
    for p in last:
        if p["metadata"]["name"] in missing[:5]:
            print("    ", p["metadata"]["name"], json.dumps(p.get("status", {}))[:300])
print(f"  removed -> /pods empty           {secs(t_api_empty)}")
print(f"  removed -> no containers left     {secs(t_rt_empty)}"
      + (f"  ({len(left)} containers left)" if left else ""))
print(f"  rkubelet            RSS         CPU (utime+stime)")
print(f"    before            {mib(rss0)}   {cpu0:6.2f} s")
print(f"    peak (VmHWM)      {mib(max(peak_rss, hwm1, hwm3))}")
print(f"    all Running       {mib(rss1)}   {cpu1:6.2f} s  (+{cpu1 - cpu0:.2f} s to start {n})")
print(f"    idle {IDLE} s         {mib(rss2)}   {cpu2:6.2f} s  ({100 * (cpu2 - cpu1) / IDLE:.1f}% of a CPU)")
print(f"    after removal     {mib(rss3)}   {cpu3:6.2f} s  (+{cpu3 - cpu2:.2f} s to stop {n})")
print(f"  for scale, containerd's own CPU: +{ccpu1 - ccpu0:.2f} s to start, "
      f"{100 * (ccpu2 - ccpu1) / IDLE:.1f}% idle, +{ccpu3 - ccpu2:.2f} s to stop (shims, runc, CNI not counted)")
sys.stdout.flush()

with open(outfile, "a") as f:
    f.write(json.dumps(dict(
        n=n, p50=pct(lat, 50) if lat else None, p90=pct(lat, 90) if lat else None,
        p99=pct(lat, 99) if lat else None, max=max(lat) if lat else None,
        all=None if missing else t_all, api_empty=t_api_empty, rt_empty=t_rt_empty,
        rss0=rss0, peak=max(peak_rss, hwm1, hwm3), rss1=rss1, rss3=rss3,
        cpu_start=cpu1 - cpu0, idle_pct=100 * (cpu2 - cpu1) / IDLE, cpu_stop=cpu3 - cpu2)) + "\n")
PY
)

SUMMARY_PY=$(
    cat <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
f = lambda x: "  -  " if x is None else f"{x:5.2f}"
m = lambda k: f"{k / 1024:5.1f}"
print("\n=== summary (seconds; RSS in MiB; CPU in s) ===")
print("    N   p50   p90   p99   max   all | rm->api rm->rt |  RSS0  peak  RSS1 RSSend | cpu+start idle% cpu+stop")
for r in rows:
    print(f"{r['n']:5d} {f(r['p50'])} {f(r['p90'])} {f(r['p99'])} {f(r['max'])} {f(r['all'])} |"
          f"  {f(r['api_empty'])}  {f(r['rt_empty'])} | {m(r['rss0'])} {m(r['peak'])} {m(r['rss1'])}  {m(r['rss3'])} |"
          f"     {r['cpu_start']:5.2f} {r['idle_pct']:5.1f}    {r['cpu_stop']:5.2f}")
PY
)

# bench_one N INDEX RESULTS_FILE
bench_one() {
    local n="$1" index="$2" results="$3" dir sock port logf
    dir="/tmp/rkubelet-bench-$n"
    logf="/tmp/rkubelet-bench-$n.log"
    if [[ -e "$dir" ]]; then
        containerd_down "$dir" # a previous interrupted run
    fi
    CUR_DIR="$dir"
    log "N=$n: starting containerd (INDEX $index) in $dir"
    # Its image-import chatter would drown the figures; show it only on failure.
    if ! "$HACK_DIR/containerd.sh" up "$dir" "$index" >/dev/null 2>"$logf"; then
        cat "$logf" >&2
        die "containerd did not start"
    fi
    sock="$(sed -n 's/^CONTAINERD_SOCK=//p' "$dir/env")"
    port="$(free_port $((20000 + n)))"
    mkdir -p "$dir/manifests" "$dir/kubelet"
    cat >"$dir/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: $dir/manifests
podLogsDir: $dir/pod-logs
readOnlyPort: $port
healthzPort: 0
enableServer: false
fileCheckFrequency: 20s
EOF
    local -a extra
    read -ra extra <<<"$RK_BENCH_FLAGS"
    "$RKUBELET" --config "$dir/kubelet-config.yaml" \
        --container-runtime-endpoint "unix://$sock" \
        --root-dir "$dir/kubelet" --hostname-override "$NODE_NAME" "${extra[@]}" >"$logf" 2>&1 &
    CUR_PID=$!
    local i
    for ((i = 0; i < 100; i++)); do
        curl -sf --max-time 1 "http://127.0.0.1:$port/pods" >/dev/null && break
        kill -0 "$CUR_PID" 2>/dev/null || { tail -n 20 "$logf" >&2; die "rkubelet exited"; }
        sleep 0.1
    done
    curl -sf --max-time 1 "http://127.0.0.1:$port/pods" >/dev/null ||
        { tail -n 20 "$logf" >&2; die "rkubelet's /pods did not answer within 10 s"; }
    log "N=$n: rkubelet pid $CUR_PID on port $port, log $logf"
    python3 -c "$MEASURE_PY" "$n" "$port" "$dir/manifests" "$CUR_PID" "$sock" "$NODE_NAME" \
        "$results" "/tmp/rkubelet-bench-$n.pods.tsv" "$(sed -n 's/^CONTAINERD_PID=//p' "$dir/env")"
    # Anything rkubelet complained about is worth a look.
    local errs warns
    errs="$(grep -c '^E[0-9]' "$logf" || true)"
    warns="$(grep -c '^W[0-9]' "$logf" || true)"
    echo "  rkubelet log: $errs error, $warns warning lines ($logf); per-pod times: /tmp/rkubelet-bench-$n.pods.tsv"
    cleanup
}

main() {
    need_root
    need_cmd python3 curl ctr ss containerd
    local -a sizes=("$@")
    [[ ${#sizes[@]} -gt 0 ]] || sizes=(10 50)
    local n
    for n in "${sizes[@]}"; do
        [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "N must be a positive integer, got '$n'"
    done
    if [[ ! -x "$RKUBELET" ]]; then
        log "building $RKUBELET"
        (cd "$REPO_ROOT" && cargo build --release -p rkubelet)
    fi
    local i=0
    RESULTS="$(mktemp)"
    for n in "${sizes[@]}"; do
        bench_one "$n" $((FIRST_INDEX + i)) "$RESULTS"
        i=$((i + 1))
    done
    python3 -c "$SUMMARY_PY" "$RESULTS"
}

main "$@"
