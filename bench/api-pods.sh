#!/usr/bin/env bash
# API pod benchmark: a kubelet as a node of a real control plane (etcd + kube-apiserver 1.20 with
# TLS, Node,RBAC and NodeRestriction). How fast pods created through the API are Running *in the
# API* (the end-to-end figure an operator sees with kubectl), how fast deleted pods disappear,
# how many API requests the node makes for it, and what the kubelet costs in RSS and CPU. Prints
# figures; it asserts nothing.
#
#   bench/api-pods.sh [N...]     default: 30 100
#
#   KUBELETS="rkubelet upstream"  which kubelets to run (default: rkubelet). `upstream` is the
#                                 kubelet 1.20.2 built from the same Debian source as the
#                                 apiserver (hack/control-plane.sh kubelet-bin); with both, the
#                                 summary prints the ratios rkubelet/upstream (issue 20 item 6).
#   QPS="50 5"                    kubeAPIQPS values to run each kubelet with (default: 50, the
#                                 upstream default since 1.27); kubeAPIBurst is 2 x QPS, as
#                                 upstream's defaults (50/100, 5/10 in 1.20). eventRecordQPS and
#                                 eventBurst get the same pair, as upstream's defaults do in each
#                                 version: left unset, the 1.20 kubelet would send events at 5/s
#                                 and rkubelet at its 50/s default, so upstream's start phase
#                                 would hold a fifth of its events and defer the rest to idle.
#   RKUBELET=path                 the rkubelet binary (default target/release/rkubelet).
#   VERBOSITY=n                   both kubelets' `--v` (default 2; at 0 rkubelet logs no
#                                 "started container" line and the status lag is not shown).
#   PERF=prefix                   perf record (cpu-clock, DWARF stacks) the kubelet while it starts
#                                 the pods (prefix-start.data), idles with them (prefix-idle.data)
#                                 and stops them (prefix-stop.data). PERF_FREQ=hz sets
#                                 perf's sampling frequency (default 997).
#
# Per N, kubelet and QPS: a fresh control plane (audit log on, to count the node's requests), a
# fresh private containerd (INDEX 70, 71, ...), the kubelet with node credentials, then N pods
# POSTed as fast as one client can, watched until Running and Ready, then all deleted (grace 5 s)
# and watched until gone. Latency per pod = watch event showing it Running+Ready minus the time
# its POST was sent. Both kubelets get the same config file (only fields 1.20 knows) and the same
# command line, with `--v=2` unless VERBOSITY says otherwise (the usual production verbosity;
# rkubelet's "started container" line, read for the status lag, is V(2)); the kubelet's log:
# /tmp/<kubelet>-apibench-N-qQPS.log.
# Upstream's kubelet changes kernel tunables (setupKernelTunables) and logs under /var/log/pods:
# the script puts both back.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# RKUBELET=path overrides the binary (e.g. to compare two builds in one session).
RKUBELET="${RKUBELET:-$REPO_ROOT/target/release/rkubelet}"
KUBELETS="${KUBELETS:-rkubelet}"
QPS="${QPS:-50}"
VERBOSITY="${VERBOSITY:-2}"
NODE_NAME=apibench
FIRST_INDEX=70
CGROUP_ROOT=/rkubelet-apibench # its own kubepods; builds without pod cgroups ignore the flag

CUR_CD="" CUR_CP="" CUR_PID="" RESULTS=""

cleanup() {
    if [[ -n "$CUR_PID" ]] && kill -0 "$CUR_PID" 2>/dev/null; then
        kill -TERM "$CUR_PID" 2>/dev/null || true
        timeout 10 tail --pid="$CUR_PID" -f /dev/null || kill -KILL "$CUR_PID" 2>/dev/null || true
    fi
    CUR_PID=""
    if [[ -n "$CUR_CD" ]]; then
        containerd_down "$CUR_CD" 2>/dev/null || true
        unmount_tree "$CUR_CD" 2>/dev/null || true
    fi
    remove_cgroup_root "$CGROUP_ROOT"
    restore_host
    [[ -z "$CUR_CP" ]] || "$HACK_DIR/control-plane.sh" down "$CUR_CP" 2>/dev/null || true
    CUR_CD="" CUR_CP=""
}
# Upstream's tunables back as the host had them; the bench pods' logs under /var/log (both
# kubelets, podLogsDir's default) removed.
restore_host() {
    restore_tunables "$BENCH_TUNABLES"
    rm -rf /var/log/pods/default_bench-[0-9][0-9][0-9]_* 2>/dev/null || true
    find /var/log/containers -maxdepth 1 -name 'bench-[0-9][0-9][0-9]_default_*' -delete 2>/dev/null || true
}
bench_traps 'cleanup; rm -f "$RESULTS"'

MEASURE_PY=$(
    cat <<'PY'
import datetime, json, os, re, ssl, sys, threading, time, collections, http.client, subprocess
import cri_calls  # bench/cri_calls.py, on PYTHONPATH

n, url, pki, node, pid, sock, audit, outfile, cpid, klog, kubelet, qps, cmetrics = sys.argv[1:14]
n, pid, cpid = int(n), int(pid), int(cpid)
host, port = url.removeprefix("https://").split(":")
TICK = os.sysconf("SC_CLK_TCK")
IMAGE = "rkubelet.local/busybox:1.35"

ctx = ssl.create_default_context(cafile=f"{pki}/ca.crt")
ctx.load_cert_chain(f"{pki}/admin.crt", f"{pki}/admin.key")

def conn():
    return http.client.HTTPSConnection(host, int(port), context=ctx, timeout=30)

def request(c, method, path, body=None):
    c.request(method, path, body=json.dumps(body) if body else None,
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    if r.status >= 300:
        raise RuntimeError(f"{method} {path}: {r.status} {data[:300]!r}")
    return json.loads(data)

def rss_kib():
    with open(f"/proc/{pid}/status") as f:
        d = dict(l.split(":", 1) for l in f if ":" in l)
    return int(d["VmRSS"].split()[0]), int(d["VmHWM"].split()[0])

def rss_split():
    """RssAnon (heap, stacks) and RssFile (the binary's pages mapped from the page cache), MiB."""
    with open(f"/proc/{pid}/status") as f:
        d = dict(l.split(":", 1) for l in f if ":" in l)
    return int(d["RssAnon"].split()[0]) / 1024, int(d["RssFile"].split()[0]) / 1024

def cpu_us(p=None):
    """(utime, stime) in seconds: user space, and the kernel working for the process."""
    with open(f"/proc/{p or pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK

def cpu_s(p=None):
    return sum(cpu_us(p))

# PERF=prefix: perf record (cpu-clock, DWARF stacks) of the kubelet while it starts the pods
# (prefix-start.data), while it idles with them (prefix-idle.data) and while it stops them
# (prefix-stop.data). For finding where CPU goes;
# perf's own overhead inflates the CPU figures of that run.
PERF = os.environ.get("PERF")
def perf_start(phase):
    if not PERF:
        return None
    return subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-F", os.environ.get("PERF_FREQ", "997"), "-g",
                             "--call-graph", "dwarf,16384", "-p", str(pid),
                             "-o", f"{PERF}-{phase}.data"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
def perf_stop(p):
    if p:
        p.send_signal(2)
        p.wait()

def pct(xs, q):
    s = sorted(xs)
    return s[max(0, min(len(s) - 1, -(-len(s) * q // 100) - 1))]

def runtime_containers():
    out = subprocess.run(["ctr", "-a", sock, "-n", "k8s.io", "containers", "ls", "-q"],
                         capture_output=True, text=True, check=True).stdout
    return out.split()

def cri_counts():
    return cri_calls.counts(cmetrics)

def audit_counts():
    """Requests made with this node's credentials, by verb and resource (one per auditID)."""
    seen, by = set(), collections.Counter()
    with open(audit) as f:
        for line in f:
            e = json.loads(line)
            if e["user"]["username"] != f"system:node:{node}" or e["auditID"] in seen:
                continue
            seen.add(e["auditID"])
            o = e.get("objectRef") or {}
            res = o.get("resource", "?") + ("/" + o["subresource"] if o.get("subresource") else "")
            by[f"{e['verb']} {res}"] += 1
    return by

# Watch pods: the time each first shows Running+Ready, and when each is deleted.
running_at, deleted_at = {}, {}
lock = threading.Lock()
def watch(rv):
    c = conn()
    c.timeout = None
    c.request("GET", f"/api/v1/namespaces/default/pods?watch=1&resourceVersion={rv}")
    r = c.getresponse()
    while True:
        line = r.readline()
        if not line:
            return
        ev = json.loads(line)
        p = ev["object"]
        name, now = p["metadata"]["name"], time.monotonic()
        st = p.get("status") or {}
        ready = any(x["type"] == "Ready" and x["status"] == "True" for x in st.get("conditions") or [])
        with lock:
            if ev["type"] == "DELETED":
                deleted_at.setdefault(name, now)
            elif st.get("phase") == "Running" and ready:
                running_at.setdefault(name, now)

c = conn()
rv = request(c, "GET", "/api/v1/namespaces/default/pods")["metadata"]["resourceVersion"]
threading.Thread(target=watch, args=(rv,), daemon=True).start()
time.sleep(1)
audit0 = audit_counts(); cri0 = cri_counts()
rss0, _ = rss_kib(); cpu0 = cpu_s(); ccpu0 = cpu_s(cpid); us0 = cpu_us()
perf = perf_start("start")

sent = {}
t0 = time.monotonic()
for i in range(n):
    name = f"bench-{i:03d}"
    sent[name] = time.monotonic()
    request(c, "POST", "/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"nodeName": node, "automountServiceAccountToken": False,
                 "terminationGracePeriodSeconds": 5,
                 "containers": [{"name": "sleep", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                                 "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]}]}})
t_posted = time.monotonic() - t0
peak = rss0
deadline = time.monotonic() + 120 + 3 * n
while time.monotonic() < deadline:
    with lock:
        if len(running_at) >= n:
            break
    peak = max(peak, rss_kib()[0])
    time.sleep(0.1)
with lock:
    lat = [running_at[k] - sent[k] for k in running_at if k in sent]
    t_all = max(running_at.values()) - t0 if len(running_at) >= n else None
perf_stop(perf)
rss1, hwm1 = rss_kib(); cpu1 = cpu_s(); ccpu1 = cpu_s(cpid); us1 = cpu_us(); split1 = rss_split()
audit1 = audit_counts(); cri1 = cri_counts()

# Status lag: rkubelet's "started container" log line (its wall clock) -> the watch seeing the pod
# Running+Ready in the API. Same host, same clock.
wall = time.time() - time.monotonic()
started = {}
with open(klog) as f:
    for line in f:
        # klog's header: month, day and local time (no year); then InfoS's fields.
        m = re.match(r'[IWE](\d\d)(\d\d) (\d\d:\d\d:\d\d\.\d{6}) .*\] "started container".*'
                     r'pod="\S*?(bench-\d+)"', line)
        if m and " restart_count=0" in line:
            year = datetime.datetime.now().year
            started.setdefault(m.group(4), datetime.datetime.strptime(
                f"{year}{m.group(1)}{m.group(2)} {m.group(3)}", "%Y%m%d %H:%M:%S.%f").timestamp())
with lock:
    lag = [running_at[k] + wall - started[k] for k in running_at if k in started]

IDLE = 20
perf = perf_start("idle")
time.sleep(IDLE)
perf_stop(perf)
rss2, _ = rss_kib(); cpu2 = cpu_s(); ccpu2 = cpu_s(cpid); us2 = cpu_us()
perf = perf_start("stop")
audit2 = audit_counts(); cri2 = cri_counts()

t1 = time.monotonic()
# Each pod's delete is timed from its own DELETE, as its start from its POST: the object's
# deletion is the node's answer to it (what `kubectl delete` waits for).
del_sent = {}
for name in sent:
    del_sent[name] = time.monotonic()
    request(c, "DELETE", f"/api/v1/namespaces/default/pods/{name}")
deadline = time.monotonic() + 120 + 3 * n
t_gone = t_rt = None
while time.monotonic() < deadline:
    with lock:
        if t_gone is None and len(deleted_at) >= n:
            t_gone = max(deleted_at.values()) - t1
    if t_gone is not None and not runtime_containers():
        t_rt = time.monotonic() - t1
        break
    peak = max(peak, rss_kib()[0])
    time.sleep(0.1)
perf_stop(perf)
with lock:
    dlat = [deleted_at[k] - del_sent[k] for k in deleted_at if k in del_sent]
rss3, hwm3 = rss_kib(); cpu3 = cpu_s(); ccpu3 = cpu_s(cpid); us3 = cpu_us(); split3 = rss_split()
time.sleep(1)
audit3 = audit_counts(); cri3 = cri_counts()

def delta(a, b):
    return {k: b[k] - a.get(k, 0) for k in b if b[k] - a.get(k, 0)}
def total(d):
    return sum(d.values())
secs = lambda x: "timeout" if x is None else f"{x:7.2f} s"
mib = lambda k: f"{k / 1024:7.1f} MiB"
start_req, idle_req, stop_req = delta(audit0, audit1), delta(audit1, audit2), delta(audit2, audit3)

print(f"\n=== N = {n} pods through the API: {kubelet}, kubeAPIQPS and eventRecordQPS {qps} ===")
print(f"  {n} POSTs sent in                  {t_posted:7.2f} s")
if lat:
    print(f"  POST -> Running+Ready in the API  p50 {secs(pct(lat, 50))}   p90 {secs(pct(lat, 90))}"
          f"   p99 {secs(pct(lat, 99))}   max {secs(max(lat))}")
if lag:
    print(f"  container started -> Running in the API (status lag)  p50 {secs(pct(lag, 50))}"
          f"   p99 {secs(pct(lag, 99))}   max {secs(max(lag))}   ({len(lag)} pods)")
print(f"  first POST -> all Running         {secs(t_all)}" + ("" if t_all else f"  ({len(lat)} of {n})"))
print(f"  DELETE -> all objects gone        {secs(t_gone)}")
if dlat:
    print(f"  DELETE -> its object gone         p50 {secs(pct(dlat, 50))}   p90 {secs(pct(dlat, 90))}"
          f"   p99 {secs(pct(dlat, 99))}")
print(f"  DELETE -> no containers left      {secs(t_rt)}")
print(f"  node's API requests: {total(start_req)} to start {n} ({total(start_req) / n:.1f}/pod), "
      f"{total(idle_req)} in {IDLE} s idle, {total(stop_req)} to delete {n}")
for title, d in (("start", start_req), ("idle", idle_req), ("delete", stop_req)):
    print(f"    {title:6s} " + ", ".join(f"{k} {v}" for k, v in sorted(d.items(), key=lambda kv: -kv[1])))
start_cri, idle_cri, stop_cri = delta(cri0, cri1), delta(cri1, cri2), delta(cri2, cri3)
print(f"  CRI calls (containerd's count): {total(start_cri)} to start {n} ({total(start_cri) / n:.1f}/pod), "
      f"{total(idle_cri)} in {IDLE} s idle, {total(stop_cri)} to delete {n}")
for title, d in (("start", start_cri), ("idle", idle_cri), ("delete", stop_cri)):
    print(f"    {title:6s} " + ", ".join(f"{k} {v}" for k, v in sorted(d.items(), key=lambda kv: -kv[1])))
print(f"  {kubelet:19s} RSS         CPU (utime+stime)")
print(f"    before            {mib(rss0)}   {cpu0:6.2f} s")
print(f"    peak (VmHWM)      {mib(max(peak, hwm1, hwm3))}")
print(f"    all Running       {mib(rss1)}   {cpu1:6.2f} s  (+{cpu1 - cpu0:.2f} s to start {n}: "
      f"user {us1[0] - us0[0]:.2f} s, kernel {us1[1] - us0[1]:.2f} s)")
print(f"      of which anon {split1[0]:.1f} MiB, file {split1[1]:.1f} MiB")
print(f"    idle {IDLE} s         {mib(rss2)}   {cpu2:6.2f} s  ({100 * (cpu2 - cpu1) / IDLE:.1f}% of a CPU)")
print(f"    after deletion    {mib(rss3)}   {cpu3:6.2f} s  (+{cpu3 - cpu2:.2f} s to stop {n}: "
      f"user {us3[0] - us2[0]:.2f} s, kernel {us3[1] - us2[1]:.2f} s)")
print(f"      of which anon {split3[0]:.1f} MiB, file {split3[1]:.1f} MiB")
print(f"  for scale, containerd's own CPU: +{ccpu1 - ccpu0:.2f} s to start, +{ccpu3 - ccpu2:.2f} s to stop")
sys.stdout.flush()
with open(outfile, "a") as f:
    f.write(json.dumps(dict(n=n, kubelet=kubelet, qps=int(qps), p50=pct(lat, 50) if lat else None, p90=pct(lat, 90) if lat else None,
        p99=pct(lat, 99) if lat else None, all=t_all,
        lag50=pct(lag, 50) if lag else None, lag99=pct(lag, 99) if lag else None, gone=t_gone, rt=t_rt,
        del50=pct(dlat, 50) if dlat else None, del90=pct(dlat, 90) if dlat else None,
        req_start=total(start_req), req_idle=total(idle_req), req_stop=total(stop_req),
        cri_start=total(start_cri), cri_idle=total(idle_cri), cri_stop=total(stop_cri),
        rss0=rss0, peak=max(peak, hwm1, hwm3), rss3=rss3, cpu_start=cpu1 - cpu0,
        idle_pct=100 * (cpu2 - cpu1) / IDLE, cpu_stop=cpu3 - cpu2)) + "\n")
PY
)

SUMMARY_PY=$(
    cat <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
f = lambda x: "  -  " if x is None else f"{x:5.2f}"
m = lambda k: f"{k / 1024:5.1f}"
print("\n=== summary (seconds; requests; RSS in MiB; CPU in s) ===")
print("    N kubelet  qps   p50   p90   p99   all | lag50 lag99 | del50 del90  gone  rt-empty | req start idle stop |  RSS0  peak RSSend | cpu+start idle% cpu+stop")
for r in rows:
    print(f"{r['n']:5d} {r['kubelet']:8s} {r['qps']:3d} {f(r['p50'])} {f(r['p90'])} {f(r['p99'])} {f(r['all'])} | {f(r['lag50'])} {f(r['lag99'])} | {f(r.get('del50'))} {f(r.get('del90'))} {f(r['gone'])} {f(r['rt'])} |"
          f"     {r['req_start']:5d} {r['req_idle']:4d} {r['req_stop']:4d} | {m(r['rss0'])} {m(r['peak'])} {m(r['rss3'])} |"
          f"     {r['cpu_start']:5.2f} {r['idle_pct']:5.1f}    {r['cpu_stop']:5.2f}")
# Same run, same N and QPS: rkubelet / upstream (below 1: rkubelet cheaper or faster).
by = {(r["n"], r["qps"], r["kubelet"]): r for r in rows}
pairs = [(k[0], k[1]) for k in by if k[2] == "rkubelet" and (k[0], k[1], "upstream") in by]
if pairs:
    print("\n=== ratio rkubelet / upstream (same run) ===")
    print("    N  qps   p50   p99   all del50  gone rt-empty  peak-RSS  cpu+start  cpu+stop  CPU ms/pod start,stop")
    q = lambda a, b: "  -  " if a is None or not b else f"{a / b:5.2f}"
    for n, qps in sorted(pairs):
        a, b = by[(n, qps, "rkubelet")], by[(n, qps, "upstream")]
        print(f"{n:5d} {qps:4d} {q(a['p50'], b['p50'])} {q(a['p99'], b['p99'])} {q(a['all'], b['all'])}"
              f" {q(a.get('del50'), b.get('del50'))} {q(a['gone'], b['gone'])}    {q(a['rt'], b['rt'])}     {q(a['peak'], b['peak'])}"
              f"      {q(a['cpu_start'], b['cpu_start'])}     {q(a['cpu_stop'], b['cpu_stop'])}"
              f"    {1000 * a['cpu_start'] / n:.0f},{1000 * a['cpu_stop'] / n:.0f} vs "
              f"{1000 * b['cpu_start'] / n:.0f},{1000 * b['cpu_stop'] / n:.0f}")
PY
)

# The config file both kubelets read: only fields upstream 1.20 knows, the bench's API and event
# rates.
write_config() {
    local file="$1" qps="$2"
    cat >"$file" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
readOnlyPort: 0
healthzPort: 0
kubeAPIQPS: $qps
kubeAPIBurst: $((2 * qps))
eventRecordQPS: $qps
eventBurst: $((2 * qps))
makeIPTablesUtilChains: false
# As the tests: upstream's disk thresholds put a shared host more than 85% full under DiskPressure.
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%}
imageGCHighThresholdPercent: 100
EOF
}

bench_one() {
    local n="$1" index="$2" results="$3" kubelet="$4" qps="$5" bin cd cp sock kc logf url i kv cmetrics
    cd="/tmp/rkubelet-apibench-cd-$n" cp="/tmp/rkubelet-apibench-cp-$n"
    logf="/tmp/$kubelet-apibench-$n-q$qps.log"
    case "$kubelet" in
    rkubelet) bin="$RKUBELET" ;;
    upstream)
        bin="$("$HACK_DIR/control-plane.sh" kubelet-bin)"
        # Upstream refuses a --cgroup-root missing in any hierarchy (rkubelet creates it).
        for i in /sys/fs/cgroup/*/; do
            [[ -e "$i/tasks" || -e "$i/cgroup.procs" ]] && mkdir -p "$i${CGROUP_ROOT#/}"
        done
        ;;
    *) die "KUBELETS: unknown kubelet '$kubelet' (rkubelet, upstream)" ;;
    esac
    containerd_down "$cd" 2>/dev/null || true
    "$HACK_DIR/control-plane.sh" down "$cp" 2>/dev/null || true
    CUR_CD="$cd" CUR_CP="$cp"
    log "N=$n $kubelet QPS $qps: control plane in $cp, containerd (INDEX $index) in $cd"
    RK_APISERVER_AUDIT=1 "$HACK_DIR/control-plane.sh" up "$cp" >/dev/null
    cmetrics="127.0.0.1:$((13000 + index))"
    CONTAINERD_METRICS="$cmetrics" "$HACK_DIR/containerd.sh" up "$cd" "$index" >/dev/null 2>"$logf" ||
        { cat "$logf" >&2; die "containerd did not start"; }
    sock="$(sed -n 's/^CONTAINERD_SOCK=//p' "$cd/env")"
    url="$(sed -n 's/^APISERVER_URL=//p' "$cp/env")"
    kc="$("$HACK_DIR/control-plane.sh" node-cert "$cp" "$NODE_NAME")"
    mkdir -p "$cd/kubelet"
    write_config "$cd/kubelet-config.yaml" "$qps"
    "$bin" --config "$cd/kubelet-config.yaml" --kubeconfig "$kc" --node-ip 127.0.0.1 \
        --container-runtime=remote --container-runtime-endpoint "unix://$sock" \
        --root-dir "$cd/kubelet" --hostname-override "$NODE_NAME" \
        --cgroup-root "$CGROUP_ROOT" --v="$VERBOSITY" >"$logf" 2>&1 &
    CUR_PID=$!
    for ((i = 0; i < 300; i++)); do
        kubectl --kubeconfig "$cp/admin.kubeconfig" get node "$NODE_NAME" \
            -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -qx True && break
        kill -0 "$CUR_PID" 2>/dev/null || { tail -n 20 "$logf" >&2; die "$kubelet exited"; }
        sleep 0.2
    done
    log "N=$n: node Ready; $kubelet pid $CUR_PID, log $logf"
    # Both settle first (upstream's cadvisor and image manager start in its first seconds).
    sleep 5
    PYTHONPATH="$REPO_ROOT/bench" python3 -c "$MEASURE_PY" "$n" "$url" "$cp/pki" "$NODE_NAME" "$CUR_PID" "$sock" \
        "$cp/log/audit.log" "$results" "$(sed -n 's/^CONTAINERD_PID=//p' "$cd/env")" "$logf" \
        "$kubelet" "$qps" "$cmetrics"
    echo "  $kubelet log: $(grep -c '^E[0-9]' "$logf" || true) error, $(grep -c '^W[0-9]' "$logf" || true) warning lines"
    cleanup
}

main() {
    need_root
    need_cmd python3 ctr kubectl containerd etcd
    local -a sizes=("$@")
    [[ ${#sizes[@]} -gt 0 ]] || sizes=(30 100)
    local n q k i=0
    for n in "${sizes[@]}"; do
        [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "N must be a positive integer, got '$n'"
    done
    for q in $QPS; do
        [[ "$q" =~ ^[1-9][0-9]*$ ]] || die "QPS must hold positive integers, got '$q'"
    done
    if [[ " $KUBELETS " == *" rkubelet "* && ! -x "$RKUBELET" ]]; then
        log "building $RKUBELET"
        (cd "$REPO_ROOT" && cargo build --release -p rkubelet)
    fi
    RESULTS="$(mktemp)"
    for n in "${sizes[@]}"; do
        for q in $QPS; do
            for k in $KUBELETS; do
                bench_one "$n" $((FIRST_INDEX + i)) "$RESULTS" "$k" "$q"
                i=$((i + 1))
            done
        done
    done
    python3 -c "$SUMMARY_PY" "$RESULTS"
}

main "$@"
