#!/usr/bin/env python3
"""Driver of bench/pleg-events.sh (issue 20): container death -> status visible, and rkubelet's
CPU idle and per relist. Prints figures; asserts nothing.

  pleg-events.py run LABEL N RO_PORT MANIFESTS NODE SOCK PID

Writes N static pods (one `sleep` container, restartPolicy Never), waits until all run, reads
rkubelet's CPU over an idle window, then kills each pod's container process in turn (SIGKILL, at
a random moment relative to the 1 s relist) and polls the read-only /pods every 5 ms until the
pod's status shows the container terminated: that delay is "death -> status visible".
"""
import json
import os
import random
import signal
import subprocess
import sys
import time
import urllib.request

IMAGE = "rkubelet.local/busybox:1.35"


def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return r.read().decode()


def pods(port):
    return {p["metadata"]["name"]: p for p in json.loads(get(port, "/pods"))["items"]}


def metric(port, name):
    total = 0.0
    for line in get(port, "/metrics").splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def task_pids(sock):
    out = subprocess.run(
        ["ctr", "-a", sock, "-n", "k8s.io", "task", "ls"],
        check=True, capture_output=True, text=True,
    ).stdout
    pids = {}
    for line in out.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 3 and parts[2] == "RUNNING":
            pids[parts[0]] = int(parts[1])
    return pids


def container(pod):
    for c in (pod.get("status") or {}).get("containerStatuses") or []:
        if c["name"] == "main":
            return c
    return None


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def run(label, n, port, manifests, node, sock, pid):
    n, port, pid = int(n), int(port), int(pid)
    for i in range(n):
        name = f"pe{i}"
        with open(os.path.join(manifests, f".{name}.yaml"), "w") as f:
            f.write(
                f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n"
                f"  restartPolicy: Never\n  terminationGracePeriodSeconds: 1\n"
                f"  containers:\n  - name: main\n    image: {IMAGE}\n"
                f"    command: [sleep, '3600']\n"
            )
        os.rename(os.path.join(manifests, f".{name}.yaml"), os.path.join(manifests, f"{name}.yaml"))
    names = [f"pe{i}-{node}" for i in range(n)]
    deadline = time.time() + 300
    while True:
        ps = pods(port)
        running = [m for m in names if (container(ps.get(m, {})) or {}).get("state", {}).get("running")]
        if len(running) == n:
            break
        if time.time() > deadline:
            sys.exit(f"{label}: only {len(running)}/{n} pods running after 300 s")
        time.sleep(0.2)
    time.sleep(3)
    relists0, cpu0, t0 = metric(port, "kubelet_pleg_relist_duration_seconds_count"), cpu_seconds(pid), time.time()
    time.sleep(20)
    relists1, cpu1, t1 = metric(port, "kubelet_pleg_relist_duration_seconds_count"), cpu_seconds(pid), time.time()
    idle_cpu = (cpu1 - cpu0) / (t1 - t0)
    per_relist = (cpu1 - cpu0) / max(1.0, relists1 - relists0)
    rss = rss_mb(pid)

    tasks = task_pids(sock)
    delays, polls = [], []
    for m in names:
        cid = container(pods(port)[m])["containerID"].split("://", 1)[1]
        time.sleep(random.uniform(0.2, 1.2))
        killed = time.time()
        os.kill(tasks[cid], signal.SIGKILL)
        while True:
            t = time.time()
            ps = pods(port)
            polls.append(time.time() - t)
            st = container(ps[m]) or {}
            if st.get("state", {}).get("terminated"):
                delays.append(time.time() - killed)
                break
            if time.time() - killed > 30:
                sys.exit(f"{label}: {m} not seen terminated 30 s after the kill")
            time.sleep(0.005)
    missed = metric(port, "kubelet_pleg_relist_missed_events_total")
    lat_sum = metric(port, "kubelet_evented_pleg_connection_latency_seconds_sum")
    lat_n = metric(port, "kubelet_evented_pleg_connection_latency_seconds_count")
    exits = 0.0
    for line in get(port, "/metrics").splitlines():
        if line.startswith("kubelet_pleg_runtime_events_total{") and 'topic="/tasks/exit"' in line:
            exits += float(line.rsplit(" ", 1)[1])
    print(
        f"PLEG {label:<12} N={n} death->status p50={pct(delays, 50) * 1000:.0f} ms "
        f"p99={pct(delays, 99) * 1000:.0f} ms max={max(delays) * 1000:.0f} ms | "
        f"idle CPU {idle_cpu * 100:.2f}% ({per_relist * 1000:.2f} ms per relist), RSS {rss:.0f} MB | "
        f"/tasks/exit events {exits:.0f}, relist diffs missed {missed:.0f}"
    )
    print(
        f"  one GET /pods (the poll's resolution) mean {sum(polls) / len(polls) * 1000:.1f} ms; "
        f"event -> rkubelet mean {(lat_sum / lat_n * 1000) if lat_n else 0:.1f} ms over {lat_n:.0f} events"
    )


if __name__ == "__main__":
    if len(sys.argv) != 9 or sys.argv[1] != "run":
        sys.exit(__doc__)
    run(*sys.argv[2:])
