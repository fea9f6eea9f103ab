"""Measurements for bench/cri-floor.sh: N pods through rkubelet (static or API) on the containerd the
floor ran on, and the summary with the ratios rkubelet/floor. Prints figures; asserts nothing.

  cri-floor.py static N PORT MANIFEST_DIR NODE SOCK KLOG RESULTS [KIND]
  cri-floor.py api N URL PKI NODE SOCK KLOG RESULTS PORT
  cri-floor.py summary RESULTS

Per pod, two latencies from its submission (manifest renamed in / POST sent):
  started: rkubelet's `"started container"` log line (what the floor's StartContainer return is);
  running: the pod seen Running+Ready (standalone: polling the read-only /pods; on a node, static
  and API pods alike: a watch on the apiserver, the mirror pods for static pods).
Then where rkubelet's time went: the mean of each stage of its start-up timeline over the phase's
pods (kubelet_pod_start_stage_duration_seconds on the read-only /metrics; builds without it
print nothing), and the CRI calls containerd answered from submission to all Running, by method
(its grpc_server_handled_total, served at $CONTAINERD_METRICS; the floor makes 5 per pod:
RunPodSandbox, PodSandboxStatus, ImageStatus, CreateContainer, StartContainer).
"""
import datetime, json, os, re, ssl, subprocess, sys, threading, time, http.client, urllib.request
import cri_calls  # bench/cri_calls.py, beside this script
import cpu_use  # bench/cpu_use.py

IMAGE = "rkubelet.local/busybox:1.35"
# The kubelet's pid, for its share of the CPU (bench/cri-floor.sh exports it).
KUBELET_PID = os.environ.get("RKUBELET_PID")
COMMAND = ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]


def pct(xs, q):
    s = sorted(xs)
    return s[max(0, min(len(s) - 1, -(-len(s) * q // 100) - 1))] if s else None


def runtime_containers(sock):
    out = subprocess.run(["ctr", "-a", sock, "-n", "k8s.io", "containers", "ls", "-q"],
                         capture_output=True, text=True, check=True).stdout
    return out.split()


def klog_times(klog, message, prefix, since, offset=0, out=None, keep=lambda line: True):
    """Wall-clock time of each pod's first `message` log line at or after `since` (a wall-clock
    time: earlier rounds' pods had the same names), reading `klog` from byte `offset`; lines
    `keep` refuses are skipped. Returns the times by pod name and the offset of the first byte
    not read (a line still being written is left for the next call). (klog header: local time)."""
    out = {} if out is None else out
    year = datetime.datetime.now().year
    pat = re.compile(r'[IWE](\d\d)(\d\d) (\d\d:\d\d:\d\d\.\d{6}) .*\] "' + re.escape(message)
                     + r'".*pod="\S*?(' + prefix + r'-\d+)')
    with open(klog, "rb") as f:
        f.seek(offset)
        data = f.read()
    end = data.rfind(b"\n") + 1
    for line in data[:end].decode(errors="replace").splitlines():
        m = pat.match(line)
        if m and keep(line):
            t = datetime.datetime.strptime(
                f"{year}{m.group(1)}{m.group(2)} {m.group(3)}", "%Y%m%d %H:%M:%S.%f").timestamp()
            if t >= since:
                out.setdefault(m.group(4), t)
    return out, offset + end


def started_from_log(klog, prefix, since):
    """Each pod's first "started container" line of its first start (restart_count=0)."""
    return klog_times(klog, "started container", prefix, since,
                      keep=lambda line: " restart_count=0" in line)[0]


def wait_cleaned(sock, klog, prefix, names, wall1, t1, n):
    """Delete -> every pod of `names` cleaned up: rkubelet's `"pod terminated and cleaned up"`
    line (its worker logs it once the pod's containers and sandbox are removed, its directory
    and cgroup too). The log is read every 0.1 s from where the delete began: polling the
    runtime with `ctr` (a Go process each time) or /pods would spend on the two cores what the
    teardown needs, and the floor times its own teardown without any. Then the runtime is asked
    once whether any container is left. Returns (seconds from `wall1` to the last pod's line, or
    None when a pod never logged it or containers were left; the CPU reading when all were
    seen)."""
    seen, off = {}, os.path.getsize(klog)
    deadline = t1 + 120 + 3 * n
    while time.monotonic() < deadline:
        seen, off = klog_times(klog, "pod terminated and cleaned up", prefix, wall1, off, seen)
        if all(k in seen for k in names):
            break
        time.sleep(0.1)
    cpu = cpu_use.reading(KUBELET_PID)
    if not all(k in seen for k in names):
        print(f"  ! only {len(seen)} of {len(names)} pods logged \"pod terminated and cleaned up\"")
        return None, cpu
    if left := runtime_containers(sock):
        print(f"  ! {len(left)} containers left in the runtime after every pod was cleaned up")
        return None, cpu
    return max(seen.values()) - wall1, cpu


def stage_totals(port):
    """(sum, count) per stage of kubelet_pod_start_stage_duration_seconds, from /metrics."""
    out = {}
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
            text = r.read().decode()
    except OSError:
        return out
    for line in text.splitlines():
        m = re.match(r'kubelet_pod_start_stage_duration_seconds_(sum|count)\{stage="(\w+)"\} (\S+)', line)
        if m:
            s, c = out.get(m.group(2), (0.0, 0.0))
            out[m.group(2)] = (s + float(m.group(3)), c) if m.group(1) == "sum" else (s, c + float(m.group(3)))
    return out


def print_stages(before, after):
    rows = []
    for stage in ["admission", "volumes", "sandbox", "image_pull", "container_create",
                  "container_start", "readiness"]:
        s1, c1 = after.get(stage, (0.0, 0.0))
        s0, c0 = before.get(stage, (0.0, 0.0))
        if c1 > c0:
            rows.append(f"{stage} {(s1 - s0) / (c1 - c0):.3f}")
    if rows:
        print("  rkubelet's timeline, mean s per stage: " + ", ".join(rows))


def cri_counts():
    """CRI calls containerd has answered so far, by method (empty without $CONTAINERD_METRICS)."""
    return cri_calls.counts(os.environ.get("CONTAINERD_METRICS"))


def print_cri(before, after, n):
    d = after - before
    if not d:
        return
    total = sum(d.values())
    top = ", ".join(f"{k} {v}" for k, v in d.most_common())
    print(f"  CRI calls, submit -> all Running: {total} ({total / n:.1f}/pod; floor 5.0): {top}")


def wait_empty(sock, done, n):
    """Until `done()` and the runtime has no container left; seconds, or None on timeout."""
    t1 = time.monotonic()
    deadline = t1 + 120 + 3 * n
    while time.monotonic() < deadline:
        if done() and not runtime_containers(sock):
            return time.monotonic() - t1
        time.sleep(0.1)
    return None


def record(results, kind, n, sent, running, started, t_all, gone, cpu=None, api=None,
           dcpu=None, dapi=None, gone_api=None):
    wall = time.time() - time.monotonic()
    run = [running[k] - sent[k] for k in running if k in sent]
    st = [started[k] - (sent[k] + wall) for k in started if k in sent]
    row = dict(kind=kind, n=n, p50=pct(run, 50), p99=pct(run, 99), all=t_all,
               s50=pct(st, 50), s99=pct(st, 99), sall=max(st) if len(st) >= n else None, gone=gone,
               gone_api=gone_api)
    if cpu:
        row.update(cpu_use.totals(*cpu))
    if dcpu:
        row.update({"d_" + k: v for k, v in cpu_use.totals(*dcpu).items()})
    f = lambda x: "   -   " if x is None else f"{x:6.2f} s"
    print(f"=== rkubelet, {kind} pods: N = {n} ===" if kind != "standalone"
          else f"=== rkubelet standalone (no API server), static pods: N = {n} ===")
    print(f"  submit -> started container  p50 {f(row['s50'])}   p99 {f(row['s99'])}   all {f(row['sall'])}")
    print(f"  submit -> Running+Ready      p50 {f(row['p50'])}   p99 {f(row['p99'])}   all {f(t_all)}"
          + ("" if len(run) >= n else f"  (only {len(run)} of {n})"))
    print(f"  delete -> all cleaned up     {f(gone)}   (rkubelet's log; then no container left in the runtime)")
    if gone_api is not None:
        print(f"  delete -> objects gone       {f(gone_api)}   (the API's watch)")
    if cpu:
        print("  " + cpu_use.line(*cpu))
    if api and (text := cpu_use.api_line(*api, n)):
        print("  " + text)
    if dcpu:
        print("  " + cpu_use.line(*dcpu, window="delete -> all cleaned up"))
    if dapi and (text := cpu_use.api_line(*dapi, n, window="delete -> all cleaned up")):
        print("  " + text)
    with open(results, "a") as out:
        out.write(json.dumps(row) + "\n")


class ApiPods:
    """A client of the apiserver (admin cert) with a watch on the default namespace's pods: the
    first time each pod is seen Running+Ready and the pods deleted, by name with `strip` removed
    (a mirror pod's name ends in `-<node>`)."""

    def __init__(self, url, pki, strip=""):
        host, port = url.removeprefix("https://").split(":")
        ctx = ssl.create_default_context(cafile=f"{pki}/ca.crt")
        ctx.load_cert_chain(f"{pki}/admin.crt", f"{pki}/admin.key")
        self.conn = lambda: http.client.HTTPSConnection(host, int(port), context=ctx, timeout=30)
        self.strip = strip
        self.running, self.deleted = {}, {}
        self.lock = threading.Lock()
        self.c = self.conn()
        rv = self.request("GET", "/api/v1/namespaces/default/pods")["metadata"]["resourceVersion"]
        threading.Thread(target=self._watch, args=(rv,), daemon=True).start()
        time.sleep(1)

    def request(self, method, path, body=None):
        self.c.request(method, path, body=json.dumps(body) if body else None,
                       headers={"Content-Type": "application/json"})
        r = self.c.getresponse()
        data = r.read()
        if r.status >= 300:
            raise RuntimeError(f"{method} {path}: {r.status} {data[:300]!r}")
        return json.loads(data)

    def _watch(self, rv):
        c = self.conn()
        c.timeout = None
        c.request("GET", f"/api/v1/namespaces/default/pods?watch=1&resourceVersion={rv}")
        r = c.getresponse()
        while line := r.readline():
            ev = json.loads(line)
            p = ev["object"]
            name, now, st = p["metadata"]["name"], time.monotonic(), p.get("status") or {}
            name = name.removesuffix(self.strip) if self.strip else name
            ready = any(x["type"] == "Ready" and x["status"] == "True" for x in st.get("conditions") or [])
            with self.lock:
                if ev["type"] == "DELETED":
                    self.deleted.setdefault(name, now)
                elif st.get("phase") == "Running" and ready:
                    self.running.setdefault(name, now)

    def wait_running(self, names, deadline):
        """When each of `names` was first seen Running+Ready, once all were or at the deadline."""
        while time.monotonic() < deadline:
            with self.lock:
                if all(k in self.running for k in names):
                    break
            time.sleep(0.1)
        with self.lock:
            return {k: v for k, v in self.running.items() if k in names}


def static(n, port, mdir, node, sock, klog, results, kind="static"):
    url = f"http://127.0.0.1:{port}/pods"
    def pods():
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.load(r).get("items") or []
    stages0 = stage_totals(port)
    cri0 = cri_counts()
    staging = os.path.join(os.path.dirname(mdir.rstrip("/")), "staging")
    os.makedirs(staging, exist_ok=True)
    names = [f"st-{i:03d}" for i in range(n)]
    sent, running = {}, {}
    # On a node, Running+Ready is read as a user reads it, from the mirror pods in the API (a
    # watch, as the API phase does). Polling the read-only /pods every 50 ms cost the client
    # 1.2 CPU s and rkubelet the JSON of N pods 20 times a second, on the two cores the pods
    # start on; standalone there is nothing else to read.
    watch = None
    if os.environ.get("BENCH_APISERVER"):
        watch = ApiPods(os.environ["BENCH_APISERVER"], os.environ["BENCH_PKI"], f"-{node}")
    api0, cpu0 = cpu_use.api_requests(), cpu_use.reading(KUBELET_PID)
    t0, wall0 = time.monotonic(), time.time() - 0.5
    for name in names:
        tmp = os.path.join(staging, name + ".yaml")
        with open(tmp, "w") as f:
            json.dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                       "spec": {"terminationGracePeriodSeconds": 5, "containers": [
                           {"name": "sleep", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                            "command": COMMAND}]}}, f)
        os.rename(tmp, os.path.join(mdir, name + ".yaml"))
        sent[name] = time.monotonic()
    deadline = t0 + 120 + 3 * n
    if watch:
        running = watch.wait_running(sent, deadline)
    else:
        while len(running) < n and time.monotonic() < deadline:
            try:
                items = pods()
            except OSError:
                items = []
            now = time.monotonic()
            for p in items:
                nm = p["metadata"]["name"].removesuffix(f"-{node}")
                st = p.get("status") or {}
                cs = st.get("containerStatuses") or []
                if nm in sent and nm not in running and st.get("phase") == "Running" and cs \
                        and all(c.get("ready") for c in cs):
                    running[nm] = now
            time.sleep(0.05)
    t_all = max(running.values()) - t0 if len(running) >= n else None
    cpu1, api1 = cpu_use.reading(KUBELET_PID), cpu_use.api_requests()
    cri1 = cri_counts()
    started = started_from_log(klog, "st", wall0)
    stages1 = stage_totals(port)
    dapi0, dcpu0 = cpu_use.api_requests(), cpu_use.reading(KUBELET_PID)
    t1, wall1 = time.monotonic(), time.time()
    for name in names:
        os.remove(os.path.join(mdir, name + ".yaml"))
    gone, dcpu1 = wait_cleaned(sock, klog, "st", names, wall1, t1, n)
    dapi1 = cpu_use.api_requests()
    def empty():
        try:
            return not any(p["metadata"]["name"].startswith("st-") for p in pods())
        except OSError:
            return False
    # Untimed: the next phase starts pods of the same names.
    wait_empty(sock, empty, n)
    record(results, kind, n, sent, running, started, t_all, gone, (cpu0, cpu1), (api0, api1),
           (dcpu0, dcpu1), (dapi0, dapi1))
    print_stages(stages0, stages1)
    print_cri(cri0, cri1, n)


def api(n, url, pki, node, sock, klog, results, ro_port):
    w = ApiPods(url, pki)
    stages0 = stage_totals(ro_port)
    cri0 = cri_counts()
    names = [f"ap-{i:03d}" for i in range(n)]
    sent = {}
    api0, cpu0 = cpu_use.api_requests(), cpu_use.reading(KUBELET_PID)
    t0, wall0 = time.monotonic(), time.time() - 0.5
    for name in names:
        sent[name] = time.monotonic()
        w.request("POST", "/api/v1/namespaces/default/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "automountServiceAccountToken": False,
                     "terminationGracePeriodSeconds": 5, "containers": [
                         {"name": "sleep", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                          "command": COMMAND}]}})
    run = w.wait_running(sent, t0 + 120 + 3 * n)
    t_all = max(run.values()) - t0 if len(run) >= n else None
    cpu1, api1 = cpu_use.reading(KUBELET_PID), cpu_use.api_requests()
    cri1 = cri_counts()
    started = started_from_log(klog, "ap", wall0)
    stages1 = stage_totals(ro_port)
    dapi0, dcpu0 = cpu_use.api_requests(), cpu_use.reading(KUBELET_PID)
    t1, wall1 = time.monotonic(), time.time()
    for name in names:
        w.request("DELETE", f"/api/v1/namespaces/default/pods/{name}")
    gone, dcpu1 = wait_cleaned(sock, klog, "ap", names, wall1, t1, n)
    dapi1 = cpu_use.api_requests()
    def all_deleted():
        with w.lock:
            return len(w.deleted) >= n
    # The objects go once the kubelet has cleaned the pods up: what `kubectl get` sees.
    wait_empty(sock, all_deleted, n)
    with w.lock:
        objects = max(w.deleted.values()) - t1 if len(w.deleted) >= n else None
    record(results, "API", n, sent, run, started, t_all, gone, (cpu0, cpu1), (api0, api1),
           (dcpu0, dcpu1), (dapi0, dapi1), objects)
    print_stages(stages0, stages1)
    print_cri(cri0, cri1, n)


def median(xs):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2


def summary(results):
    """Ratios against the floor (bare: each sandbox where the runtime puts it by default), against
    the floor whose pods have their own pod cgroups as a kubelet's do (floor+cg), and against the
    floor that also sends rkubelet's sandbox and container configs (floor+shape). Each figure is
    the median over the rounds of its phase."""
    raw = [json.loads(l) for l in open(results) if l.strip()]
    groups = {}
    for r in raw:
        kind = r.get("kind") or ("floor+cg" if r.get("cgroups") else "floor")
        groups.setdefault((r["n"], kind), []).append(r)
    rows = []
    for (n, kind), rs in groups.items():
        row = {"n": n, "kind": kind, "rounds": len(rs)}
        for k in ("p50", "p99", "all", "s50", "s99", "sall", "gone", "gone_api",
                  "busy", "cpu_rk", "cpu_runtime", "cpu_api", "cpu_bench", "cpu_rest",
                  "d_busy", "d_cpu_rk", "d_cpu_runtime", "d_cpu_api", "d_cpu_bench", "d_cpu_rest"):
            row[k] = median([r.get(k) for r in rs])
        rows.append(row)
    floor = {r["n"]: r for r in rows if r["kind"] == "floor"}
    floor_cg = {r["n"]: r for r in rows if r["kind"] == "floor+cg"}
    floor_sh = {r["n"]: r for r in rows if r["kind"] == "floor+shape"}
    f = lambda x: "  -  " if x is None else f"{x:5.2f}"
    ratio = lambda a, b: "  -  " if a is None or not b else f"{a / b:5.2f}"
    print("\n=== summary: seconds from submission, median over rounds; ratio = rkubelet / floor ===")
    print("  floor+cg: the floor with each pod in its own pod cgroup (the sandbox's cgroup parent);"
          " floor+sh(ape): and with the configs rkubelet sends;\n  floor+ap(i): and making the"
          " API requests a node makes for them (mirror, status, events; node credentials);\n"
          "  floor+us(er): the same for API pods a user POSTs and DELETEs one at a time (no mirror)")
    print("  standalone: static pods, rkubelet without an API server; static: the same as a node")
    print("     N kind     rounds |  p50   p99   all  | started: p50  p99   all  | ratio started: p50  p99   all"
          " | ratio Running: p50  p99   all | vs floor+cg started: p50  all | vs floor+shape: p50  all | gone")
    for r in rows:
        head = f"  {r['n']:4d} {r['kind'][:8]:8s} {r['rounds']:4d}   |"
        if r["kind"].startswith("floor"):
            # A floor's "started" is its StartContainer return: its p50/p99/all columns.
            print(f"{head}                     |        {f(r['p50'])} {f(r['p99'])} {f(r['all'])} |"
                  f"                        |                      |                         |"
                  f"                         | {f(r['gone'])}")
            continue
        fl, fc, fs = floor.get(r["n"], {}), floor_cg.get(r["n"], {}), floor_sh.get(r["n"], {})
        print(f"{head} {f(r['p50'])} {f(r['p99'])} {f(r['all'])} |"
              f"        {f(r['s50'])} {f(r['s99'])} {f(r['sall'])} |"
              f"          {ratio(r['s50'], fl.get('p50'))} {ratio(r['s99'], fl.get('p99'))} {ratio(r['sall'], fl.get('all'))} |"
              f"        {ratio(r['p50'], fl.get('p50'))} {ratio(r['p99'], fl.get('p99'))} {ratio(r['all'], fl.get('all'))} |"
              f"                 {ratio(r['s50'], fc.get('p50'))} {ratio(r['sall'], fc.get('all'))} |"
              f"            {ratio(r['s50'], fs.get('p50'))} {ratio(r['sall'], fs.get('all'))} |"
              f" {f(r['gone'])}")
    # Paired: round k's figure over round k's floor (rows of a kind are appended in round order).
    print("\n=== paired ratios: median over rounds of (rkubelet's started figure / the same round's floor) ===")
    print("     N kind     rounds | vs floor started: p50   all | vs floor+cg started: p50   all"
          " | vs floor+shape: p50   all | each round's p50 vs floor+cg; vs floor+shape")
    gone_rows = []
    each = lambda xs: " ".join(f"{x:4.2f}" for x in xs) or "-"
    for (n, kind), rs in groups.items():
        if kind.startswith("floor"):
            continue
        fl, fc = groups.get((n, "floor"), []), groups.get((n, "floor+cg"), [])
        fs = groups.get((n, "floor+shape"), [])

        def paired(key, base, base_key):
            # One row per phase per round (cri-floor.sh stops at the first failed phase).
            assert len(rs) == len(base), f"N={n} {kind}: {len(rs)} rounds, its floor {len(base)}"
            return [r.get(key) / b.get(base_key) for r, b in zip(rs, base)
                    if r.get(key) is not None and b.get(base_key)]
        # Runs from before the shaped floor existed have none: its columns stay empty.
        fl50, flall = paired("s50", fl, "p50"), paired("sall", fl, "all")
        fc50, fcall = paired("s50", fc, "p50"), paired("sall", fc, "all")
        fs50, fsall = (paired("s50", fs, "p50"), paired("sall", fs, "all")) if fs else ([], [])
        # Delete: rkubelet's "gone" (first DELETE sent or manifest removed -> the last pod's
        # "pod terminated and cleaned up", the runtime then empty) over the floor's teardown
        # (StopContainer, StopPodSandbox, RemovePodSandbox, pod cgroup removed, all pods at once).
        gone = (paired("gone", fs, "gone") if fs else []) or paired("gone", fc, "gone")
        gone_rows.append((n, kind, len(rs), "floor+shape" if fs else "floor+cg", gone))
        print(f"  {n:4d} {kind[:8]:8s} {len(rs):4d}   |"
              f"                {f(median(fl50))} {f(median(flall))} |"
              f"                   {f(median(fc50))} {f(median(fcall))} |"
              f"              {f(median(fs50))} {f(median(fsall))} | {each(fc50)}; {each(fs50)}")
    print("\n=== paired delete: median over rounds of (rkubelet's delete -> all cleaned up"
          " / the same round's floor teardown) ===")
    for n, kind, k, base, gone in gone_rows:
        print(f"  {n:4d} {kind[:8]:8s} {k:4d}   | vs {base}: {f(median(gone))} | each round: {each(gone)}")
    # The node's phases against the floor that makes the node's API requests too: what rkubelet
    # adds over the runtime plus the API server work any kubelet asks for. API pods go against
    # floor+user when the run has it: their windows also hold the user's POSTs and DELETEs, one
    # at a time, and each pod's work waits for its own; static pods have neither.
    print("\n=== the node's phases, paired against floor+api (static pods) and floor+user (API pods):"
          " the runtime and a node's API requests, no kubelet ===")
    print("     N kind     rounds | start p50   all | delete | each round: start p50; delete | floor")
    for (n, kind), rs in groups.items():
        base = "floor+user" if kind == "API" and (n, "floor+user") in groups else "floor+api"
        fa = groups.get((n, base), [])
        if kind.startswith("floor") or kind == "standalone" or len(fa) != len(rs):
            continue
        pair = lambda key, base_key: [r.get(key) / b.get(base_key) for r, b in zip(rs, fa)
                                      if r.get(key) is not None and b.get(base_key)]
        s50, sall, gone = pair("s50", "p50"), pair("sall", "all"), pair("gone", "gone")
        print(f"  {n:4d} {kind[:8]:8s} {len(rs):4d}   |    {f(median(s50))} {f(median(sall))} |"
              f"  {f(median(gone))} | {each(s50)}; {each(gone)} | {base}")
    cpu_table("CPU seconds from submission to all running (median over rounds): the machine's busy time"
              " and who spent it;\n  'rest' is what no long-lived process is charged with (runc, CNI plugins,"
              " the floor's own client)", rows, "")
    cpu_table("CPU seconds from delete to all cleaned up (the floor: its teardown), median over rounds",
              rows, "d_")


def cpu_table(title, rows, prefix):
    """One CPU table of the summary: the figures keyed `prefix` + busy, cpu_rk, ... per row."""
    f = lambda x: "  -  " if x is None else f"{x:5.2f}"
    # The floor has no kubelet, apiserver or bench client: those print as 0.
    g = lambda r, k: r.get(prefix + k) if k in ("busy", "cpu_runtime", "cpu_rest") \
        else r.get(prefix + k) or 0.0
    print("\n  " + title)
    print("     N kind      busy | rkubelet  containerd+shims  apiserver+etcd  bench client  rest")
    for r in rows:
        if r.get(prefix + "busy") is None:
            continue
        print(f"  {r['n']:4d} {r['kind'][:8]:8s} {f(g(r, 'busy'))} |    {f(g(r, 'cpu_rk'))}"
              f"             {f(g(r, 'cpu_runtime'))}           {f(g(r, 'cpu_api'))}"
              f"         {f(g(r, 'cpu_bench'))}  {f(g(r, 'cpu_rest'))}")

if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "static":
        static(int(args[0]), int(args[1]), *args[2:])
    elif cmd == "api":
        api(int(args[0]), *args[1:])
    elif cmd == "summary":
        summary(args[0])
    else:
        sys.exit(f"unknown command {cmd!r}")
