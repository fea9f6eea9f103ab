"""Where the machine's CPU went during a window (issue 20, "where the time goes"): bench/cri-floor.py
takes one reading when the pods are submitted and one when all are Running. On two cores busy with
starting pods, every CPU second a process other than the runtime spends is time the runtime and
CNI wait for a core, so this tells rkubelet's own cost and the API server's apart from
containerd's.

Busy = user + nice + system + irq + softirq of /proc/stat (steal is printed apart: it is the
hypervisor's, not ours). Per process: utime + stime of the processes whose command name is one
of NAMES (the kubelet by its pid, and the reading process itself). What exited within the window (runc, CNI plugins, shim
children) is only in the machine total: "rest" is busy minus the named ones."""
import os

TICK = os.sysconf("SC_CLK_TCK")
NAMES = ("containerd", "containerd-shim", "kube-apiserver", "etcd")


def _proc_cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        s = f.read()
    fields = s[s.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / TICK, s[s.index("(") + 1:s.rindex(")")]


def reading(kubelet_pid=None):
    with open("/proc/stat") as f:
        cpu = [int(x) for x in f.readline().split()[1:]]
    out = {"busy": sum(cpu[i] for i in (0, 1, 2, 5, 6)) / TICK,
           "steal": (cpu[7] if len(cpu) > 7 else 0) / TICK}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            secs, comm = _proc_cpu(pid)
        except (OSError, ValueError, IndexError):
            continue
        key = "rkubelet" if kubelet_pid and pid == str(kubelet_pid) else \
            "bench" if pid == str(os.getpid()) else \
            ("containerd-shim" if comm.startswith("containerd-shim") else comm)
        if key in ("rkubelet", "bench") or key in NAMES:
            # Keyed by pid too: a process that started within the window counts from zero.
            out[(key, pid)] = secs
    return out


def totals(before, after):
    """CPU seconds between two readings: busy, steal, and per group (rk: the kubelet; runtime:
    containerd and its shims; api: kube-apiserver and etcd; bench: the reading process, which
    polls rkubelet's /pods or watches the API; rest: the others, CNI and runc among them)."""
    per = {}
    for k, v in after.items():
        if isinstance(k, tuple):
            per[k[0]] = per.get(k[0], 0.0) + v - before.get(k, 0.0)
    busy = after["busy"] - before["busy"]
    out = {"busy": busy, "steal": after["steal"] - before["steal"],
           "cpu_rk": per.get("rkubelet", 0.0),
           "cpu_runtime": per.get("containerd", 0.0) + per.get("containerd-shim", 0.0),
           "cpu_api": per.get("kube-apiserver", 0.0) + per.get("etcd", 0.0),
           "cpu_bench": per.get("bench", 0.0)}
    out["cpu_rest"] = busy - out["cpu_rk"] - out["cpu_runtime"] - out["cpu_api"] - out["cpu_bench"]
    return out


def line(before, after, window="submit -> all Running"):
    """One line: the machine's busy CPU seconds in the window and who spent them."""
    t = totals(before, after)
    return (f"CPU s, {window}: machine busy {t['busy']:.2f} (steal {t['steal']:.2f}): "
            f"rkubelet {t['cpu_rk']:.2f}, containerd+shims {t['cpu_runtime']:.2f}, "
            f"apiserver+etcd {t['cpu_api']:.2f}, this bench's client {t['cpu_bench']:.2f}, "
            f"rest (runc, CNI, exited shims, ...) {t['cpu_rest']:.2f}")


def api_requests():
    """kube-apiserver's apiserver_request_total by verb and resource (with subresource), summed
    over codes and scopes; empty without $BENCH_APISERVER (https URL) and $BENCH_PKI (a directory
    with ca.crt, admin.crt, admin.key), as bench/cri-floor.sh exports them for the node's phases.
    Watches count once when opened; what a watch then delivers is not a request."""
    import collections, http.client, re, ssl
    url, pki = os.environ.get("BENCH_APISERVER"), os.environ.get("BENCH_PKI")
    by = collections.Counter()
    if not url or not pki:
        return by
    try:
        host, port = url.removeprefix("https://").split(":")
        ctx = ssl.create_default_context(cafile=f"{pki}/ca.crt")
        ctx.load_cert_chain(f"{pki}/admin.crt", f"{pki}/admin.key")
        c = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=10)
        c.request("GET", "/metrics")
        body = c.getresponse().read().decode()
    except (OSError, ValueError):
        return by
    for line in body.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line[: line.rindex("}")]))
        key = f"{labels.get('verb')} {labels.get('resource')}" + (
            f"/{labels['subresource']}" if labels.get("subresource") else "")
        by[key] += int(float(line.rsplit(" ", 1)[1]))
    return by


def api_line(before, after, n, window="submit -> all Running"):
    """'API requests, ...: 150 (5.0/pod): POST pods 30, ...' or '' when there is nothing."""
    d = after - before
    # The bench's own reads of /metrics.
    d.pop("GET /metrics", None)
    if not d:
        return ""
    total = sum(d.values())
    return (f"API requests, {window}: {total} ({total / n:.1f}/pod): "
            + ", ".join(f"{k} {v}" for k, v in d.most_common()))
