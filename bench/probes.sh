#!/usr/bin/env bash
# Probe overhead benchmark: what N pods with an exec liveness probe and an http readiness probe,
# both every second, cost rkubelet (CPU, RSS) and the runtime (containerd, shims, runc), and how
# late probes run after they are due. Prints figures; it asserts nothing.
#
#   bench/probes.sh [N] [WINDOW_S]     default: 100 60
#
# Three runs of the same N pods (busybox httpd serving /www/ok on port 8080), each on a fresh
# private containerd (INDEX 80, 81, 82) and a fresh target/release/rkubelet:
#   probes       livenessProbe exec ["cat", "/www/ok"] and readinessProbe httpGet /ok, periodSeconds 1,
#                with the prober's per-probe debug line on (--vmodule=prober/worker=4):
#                "probe ran" delay_ms=.. took_ms=.. result=".."; delay_ms = probe start minus the time
#                it was due (its period tick), which gives the delay percentiles and the probe count;
#   probes-quiet the same without that debug line, so the CPU figure has no logging in it;
#   no-probes    the same pods without probes: the baseline the probe overhead is measured against.
# Each run waits until all pods are Running and Ready (read-only /pods), lets them settle for
# SETTLE s, then measures over WINDOW_S without touching rkubelet: CPU from /proc/PID/stat
# (utime+stime) of rkubelet, containerd and the containerd shims (shims with their reaped children:
# runc, the exec'd probe processes, and the containers' httpd), RSS (VmRSS, VmHWM). rkubelet's log
# is kept in /tmp/rkubelet-probebench-RUN.log.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

RKUBELET="$REPO_ROOT/target/release/rkubelet"
NODE_NAME=probebench
FIRST_INDEX=80 # 80..82; tests use 101.., static-pods.sh 60.., api-pods.sh 70..
SETTLE=10      # seconds between all Ready and the window (jittered first probes, status churn)

CUR_DIR="" CUR_PID="" RESULTS=""

cleanup() {
    if [[ -n "$CUR_PID" ]] && kill -0 "$CUR_PID" 2>/dev/null; then
        kill -TERM "$CUR_PID" 2>/dev/null || true
        # rkubelet leaves pods running on exit; containerd.sh down removes them.
        timeout 10 tail --pid="$CUR_PID" -f /dev/null || kill -KILL "$CUR_PID" 2>/dev/null || true
    fi
    CUR_PID=""
    [[ -z "$CUR_DIR" ]] || containerd_down "$CUR_DIR" 2>/dev/null || true
    CUR_DIR=""
}
bench_traps 'cleanup; rm -f "$RESULTS"'

# free_port START: the first port from START on nobody listens on.
MEASURE_PY=$(
    cat <<'PY'
import json, os, re, sys, time, urllib.request

mode, n, window, settle, port, mdir, pid, cpid, sock, logf, outfile, node = sys.argv[1:13]
n, window, settle, pid, cpid = int(n), int(window), int(settle), int(pid), int(cpid)
TICK = os.sysconf("SC_CLK_TCK")
URL = f"http://127.0.0.1:{port}/pods"

def on_error(kind, e, tb):
    if issubclass(kind, KeyboardInterrupt):
        print("interrupted", file=sys.stderr)
    elif not os.path.exists(f"/proc/{pid}"):
        print(f"rkubelet (pid {pid}) exited; see {logf}", file=sys.stderr)
    else:
        sys.__excepthook__(kind, e, tb)
sys.excepthook = on_error

def status(p):
    d = {}
    with open(f"/proc/{p}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            d[k] = v.split()[0] if v.split() else ""
    return int(d["VmRSS"]), int(d["VmHWM"])

def stat(p):
    with open(f"/proc/{p}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return rest  # rest[0] is field 3 (state)

def cpu_s(p, children=False):
    f = stat(p)  # utime, stime, cutime, cstime are fields 14..17
    return sum(int(x) for x in f[11:15 if children else 13]) / TICK

def shims():
    # containerd-shim-runc-v2 ... -address SOCK: this instance's shims.
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            args = open(f"/proc/{d}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if any(a == b"-address" and b == sock.encode() for a, b in zip(args, args[1:])):
            out.append(int(d))
    return out

def runtime_cpu(shim_pids):
    # Each shim with its reaped children (runc, exec'd probe processes), plus its live children
    # (the containers' init, here httpd with its reaped request handlers).
    total = 0.0
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                kids.setdefault(int(stat(d)[1]), []).append(int(d))
            except (OSError, IndexError):
                pass
    for s in shim_pids:
        for p in [s] + kids.get(s, []):
            try:
                total += cpu_s(p, children=True)
            except OSError:
                pass
    return total

def machine():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v), v[3] + v[4]  # total, idle + iowait

def pods():
    with urllib.request.urlopen(URL, timeout=5) as r:
        return json.load(r).get("items") or []

def ready(p):
    st = p.get("status") or {}
    cs = st.get("containerStatuses") or []
    return st.get("phase") == "Running" and len(cs) == 1 and all(c.get("ready") for c in cs)

def restarts(ps):
    return sum(c.get("restartCount", 0) for p in ps for c in (p.get("status") or {}).get("containerStatuses") or [])

def pct(xs, q):
    s = sorted(xs)  # nearest rank
    return s[max(0, min(len(s) - 1, -(-len(s) * q // 100) - 1))]

PROBES = """      ports:
        - {name: http, containerPort: 8080}
      livenessProbe:
        exec: {command: ["cat", "/www/ok"]}
        periodSeconds: 1
      readinessProbe:
        httpGet: {path: /ok, port: 8080}
        periodSeconds: 1
"""
MANIFEST = """apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 5
  containers:
    - name: web
      image: rkubelet.local/busybox:1.35
      imagePullPolicy: IfNotPresent
      command: ["sh", "-c", "mkdir -p /www && echo ok > /www/ok && exec httpd -f -p 8080 -h /www"]
"""

names = [f"probes-{i:03d}" for i in range(n)]
staging = os.path.join(os.path.dirname(mdir.rstrip("/")), "staging")
os.makedirs(staging, exist_ok=True)
t0 = time.monotonic()
for name in names:
    tmp = os.path.join(staging, name + ".yaml")
    with open(tmp, "w") as f:
        f.write(MANIFEST.format(name=name) + ("" if mode == "no-probes" else PROBES))
    os.rename(tmp, os.path.join(mdir, name + ".yaml"))
want = {f"{x}-{node}" for x in names}

deadline = t0 + 120 + 3 * n
last = []
while time.monotonic() < deadline:
    try:
        last = pods()
    except Exception:
        pass
    if sum(1 for p in last if p["metadata"]["name"] in want and ready(p)) == n:
        break
    time.sleep(0.5)
t_ready = time.monotonic() - t0
nready = sum(1 for p in last if p["metadata"]["name"] in want and ready(p))
if nready < n:
    print(f"  only {nready} of {n} pods Running and Ready after {t_ready:.0f} s; measuring anyway", file=sys.stderr)
restarts0 = restarts(last)
time.sleep(settle)

# The window: nothing but /proc reads, so rkubelet sees no extra work. Each sample keeps its
# own time: on a saturated machine a /proc scan can take seconds, so rates use the real elapsed
# time between a figure's two samples, not the nominal window.
def sample(f):
    a = time.monotonic()
    v = f()
    return v, (a + time.monotonic()) / 2

shim0 = shims()
load0 = open("/proc/loadavg").read().split()[:3]
log0 = os.path.getsize(logf)
rss0, _ = status(pid)
m0, cpu0, ccpu0 = sample(machine), sample(lambda: cpu_s(pid)), sample(lambda: cpu_s(cpid))
scpu0 = sample(lambda: runtime_cpu(shim0))
time.sleep(window)
cpu1, ccpu1 = sample(lambda: cpu_s(pid)), sample(lambda: cpu_s(cpid))
scpu1 = sample(lambda: runtime_cpu([s for s in shims() if s in shim0]))
m1 = sample(machine)
rss1, hwm1 = status(pid)
log1 = os.path.getsize(logf)
load1 = open("/proc/loadavg").read().split()[:3]
rate = lambda a, b: 60 * (b[0] - a[0]) / (b[1] - a[1])  # CPU s per minute
try:
    after = pods()
except Exception:
    after = last
restarts1 = restarts(after)
nready1 = sum(1 for p in after if p["metadata"]["name"] in want and ready(p))

with open(logf, "rb") as f:
    f.seek(log0)
    chunk = f.read(log1 - log0).decode(errors="replace")
# klog's InfoS form; the span's probe="Liveness" follows the event's fields.
LINE = re.compile(r'\] "probe ran"(?: delay_ms=([\d.]+))? took_ms=([\d.]+) result="([^"]*)".* probe="(\w+)"')
runs = {}  # kind -> [(delay_ms or None, took_ms, result)]
for line in chunk.splitlines():
    m = LINE.search(line)
    if m:
        runs.setdefault(m[4], []).append((float(m[1]) if m[1] else None, float(m[2]), m[3]))
busy = 100 * (1 - (m1[0][1] - m0[0][1]) / max(1, m1[0][0] - m0[0][0]))

print(f"\n=== {mode}: N = {n} pods, window {window} s ===")
print(f"  written -> all Running and Ready  {t_ready:7.1f} s ({nready} of {n}), then {settle} s settle")
print(f"  CPU seconds per minute  rkubelet {rate(cpu0, cpu1):6.2f}   containerd {rate(ccpu0, ccpu1):6.2f}"
      f"   shims+runc+containers {rate(scpu0, scpu1):6.2f}  ({len(shim0)} shims)")
print(f"  rkubelet RSS  start {rss0 / 1024:6.1f} MiB   end {rss1 / 1024:6.1f} MiB   VmHWM {hwm1 / 1024:6.1f} MiB")
print(f"  restarts in the window {restarts1 - restarts0}; Ready at the end {nready1} of {n}")
print(f"  machine: {busy:.0f}% busy over the window ({os.cpu_count()} CPUs, all processes); "
      f"loadavg {' '.join(load0)} -> {' '.join(load1)}")
row = dict(mode=mode, n=n, window=window, t_ready=t_ready, rk=rate(cpu0, cpu1),
           cd=rate(ccpu0, ccpu1), shim=rate(scpu0, scpu1), rss0=rss0, rss1=rss1,
           hwm=hwm1, busy=busy, load=load1[0], probes=None)
if runs:
    total = sum(len(v) for v in runs.values())
    delays = [d for v in runs.values() for d, _, _ in v if d is not None]
    print(f"  probes run in the window: {total} (expected ~2*N*window = {2 * n * window}): "
          + ", ".join(f"{k} {len(v)}" for k, v in sorted(runs.items())))
    for k, v in sorted(runs.items()):
        bad = {r: sum(1 for _, _, x in v if x == r) for r in ("Some(Failure)", "None")}
        if any(bad.values()):
            print(f"    {k} runs not Success: {bad['Some(Failure)']} failed, {bad['None']} errored (thrown away)")
    if delays:
        print(f"  due -> run delay (ms)   p50 {pct(delays, 50):8.3f}   p99 {pct(delays, 99):8.3f}   max {max(delays):8.3f}")
    for k, v in sorted(runs.items()):
        d = [x for x, _, _ in v if x is not None]
        t = [x for _, x, _ in v]
        if not d:
            continue
        print(f"    {k:10s} delay p50 {pct(d, 50):8.3f}   p99 {pct(d, 99):8.3f}   max {max(d):8.3f}"
              f"   | probe took p50 {pct(t, 50):7.2f}   p99 {pct(t, 99):7.2f}   max {max(t):7.2f}")
    row.update(probes=total, d50=pct(delays, 50), d99=pct(delays, 99), dmax=max(delays))
sys.stdout.flush()
with open(outfile, "a") as f:
    f.write(json.dumps(row) + "\n")
PY
)

SUMMARY_PY=$(
    cat <<'PY'
import json, sys
rows = {r["mode"]: r for r in (json.loads(l) for l in open(sys.argv[1]) if l.strip())}
print("\n=== summary (CPU s per minute; RSS MiB; delay ms) ===")
print("  run            rkubelet containerd shims+ |  RSS0  RSS1 VmHWM | probes   p50      p99      max   | busy% load")
for r in rows.values():
    d = (f"{r['probes']:6d} {r['d50']:8.3f} {r['d99']:8.3f} {r['dmax']:8.3f}" if r.get("d50") is not None
         else "     -        -        -        -  ")
    print(f"  {r['mode']:13s}  {r['rk']:7.2f}  {r['cd']:7.2f}   {r['shim']:6.2f} | {r['rss0'] / 1024:5.1f} {r['rss1'] / 1024:5.1f}"
          f" {r['hwm'] / 1024:5.1f} | {d} | {r['busy']:4.0f}  {r['load']}")
base = rows.get("no-probes")
if base:
    for m in ("probes-quiet", "probes"):
        if m in rows:
            r = rows[m]
            print(f"  probe overhead ({m}): rkubelet {r['rk'] - base['rk']:+.2f}, containerd {r['cd'] - base['cd']:+.2f},"
                  f" shims+runc+containers {r['shim'] - base['shim']:+.2f} CPU s/min; RSS {(r['rss1'] - base['rss1']) / 1024:+.1f} MiB")
PY
)

# bench_one MODE N WINDOW INDEX RESULTS_FILE
bench_one() {
    local mode="$1" n="$2" window="$3" index="$4" results="$5" dir sock port logf rust_log i
    dir="/tmp/rkubelet-probebench-$mode"
    logf="/tmp/rkubelet-probebench-$mode.log"
    [[ ! -e "$dir" ]] || containerd_down "$dir" # a previous interrupted run
    CUR_DIR="$dir"
    log "$mode: starting containerd (INDEX $index) in $dir"
    if ! "$HACK_DIR/containerd.sh" up "$dir" "$index" >/dev/null 2>"$logf"; then
        cat "$logf" >&2
        die "containerd did not start"
    fi
    sock="$(sed -n 's/^CONTAINERD_SOCK=//p' "$dir/env")"
    port="$(free_port 20500)"
    mkdir -p "$dir/manifests" "$dir/kubelet"
    cat >"$dir/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: $dir/manifests
podLogsDir: $dir/pod-logs
readOnlyPort: $port
healthzPort: 0
fileCheckFrequency: 20s
EOF
    # The same filter for every run; only "probes" adds the prober worker's per-probe debug line.
    vmodule=
    [[ "$mode" != probes ]] || vmodule=prober/worker=4
    "$RKUBELET" --config "$dir/kubelet-config.yaml" --v=0 --vmodule="$vmodule" \
        --container-runtime-endpoint "unix://$sock" \
        --root-dir "$dir/kubelet" --hostname-override "$NODE_NAME" >"$logf" 2>&1 &
    CUR_PID=$!
    for ((i = 0; i < 100; i++)); do
        curl -sf --max-time 1 "http://127.0.0.1:$port/pods" >/dev/null && break
        kill -0 "$CUR_PID" 2>/dev/null || { tail -n 20 "$logf" >&2; die "rkubelet exited"; }
        sleep 0.1
    done
    curl -sf --max-time 1 "http://127.0.0.1:$port/pods" >/dev/null ||
        { tail -n 20 "$logf" >&2; die "rkubelet's /pods did not answer within 10 s"; }
    log "$mode: rkubelet pid $CUR_PID on port $port, log $logf"
    # Niced up so its /proc samples are on time even when the probes saturate the machine.
    nice -n -5 python3 -c "$MEASURE_PY" "$mode" "$n" "$window" "$SETTLE" "$port" "$dir/manifests" "$CUR_PID" \
        "$(sed -n 's/^CONTAINERD_PID=//p' "$dir/env")" "$sock" "$logf" "$results" "$NODE_NAME"
    echo "  rkubelet log: $(grep -c '^E[0-9]' "$logf" || true) error, $(grep -c '^W[0-9]' "$logf" || true) warning lines ($logf)"
    cleanup
}

main() {
    need_root
    need_cmd python3 curl ss containerd ctr
    local n="${1:-100}" window="${2:-60}"
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "N must be a positive integer, got '$n'"
    [[ "$window" =~ ^[1-9][0-9]*$ ]] || die "WINDOW_S must be a positive integer, got '$window'"
    if [[ ! -x "$RKUBELET" ]]; then
        log "building $RKUBELET"
        (cd "$REPO_ROOT" && cargo build --release -p rkubelet)
    fi
    RESULTS="$(mktemp)"
    local mode i=0
    for mode in probes probes-quiet no-probes; do
        bench_one "$mode" "$n" "$window" $((FIRST_INDEX + i)) "$RESULTS"
        i=$((i + 1))
    done
    python3 -c "$SUMMARY_PY" "$RESULTS"
}

main "$@"
