#!/usr/bin/env python3
"""Where each pod's start and delete time goes, from containerd's log and rkubelet's (issue 20).

    critical_path.py CONTAINERD_LOG [LABEL=RKUBELET_LOG...]

Pods are grouped by name pattern (floor-N, st-N-..., ap-N) and by the rkubelet log that saw them
(its LABEL: the same static pods run standalone and as a node). The floor's phases share names in
pairs (floor-N: bare and with pod cgroups; floor-N-floor: with rkubelet's configs, and with the
API requests too), so each floor row holds two phases.

A phase's wall time against the floor's moves by tens of percent between runs on this machine,
because containerd itself (RunPodSandbox, StopPodSandbox: CNI, shims, bolt) runs slower or faster
minute to minute. This splits each pod's critical path into the time inside the runtime's calls
(from containerd's own request and return lines) and the time between them, which is the caller's
own: for rkubelet its reads, status, volumes, cgroups and scheduling between two CRI calls; for the
floor (bench/cri-floor, pods named floor-*) its client and the ImageStatus call it makes too. The
gap is what a kubelet can remove; the runtime's time is not.

Start: seen (rkubelet's "pod added"; the floor has none) -> RunPodSandbox -> returns -> (ImageStatus,
debug only in containerd's log) -> CreateContainer -> returns -> StartContainer -> returns.
Delete: "terminating pod" (the floor has none) -> StopContainer -> returns -> StopPodSandbox ->
returns -> RemovePodSandbox -> returns -> "pod terminated and cleaned up".
One-container pods only (the benchmark's); a pod whose sequence is incomplete is left out and
counted. Prints, asserts nothing.
"""

import re
import sys
from collections import defaultdict
from datetime import datetime

CD_LINE = re.compile(r'time="\d{4}-\d\d-\d\dT(\d\d:\d\d:\d\d\.\d+)Z" level=(\w+) msg="(.*?)(?<!\\)"')
K_LINE = re.compile(r'^[IWE]\d{4} (\d\d:\d\d:\d\d\.\d+)\s+\d+ [^\]]*\] "([^"]+)"(.*)$')


def secs(hms):
    # Both logs are UTC (rkubelet's klog-style lines carry no date; a run never spans midnight).
    return datetime.strptime(hms[:15], "%H:%M:%S.%f").timestamp()


# Every call a pod's sequence must show, request and return, to be split.
CALLS = ("run", "run_ret", "create", "create_ret", "start", "start_ret",
         "stopc", "stopc_ret", "stopsb", "stopsb_ret", "remove", "remove_ret")


def runtime_calls(path):
    """Per sandbox: its pod name and the moments of each call; per container: its sandbox."""
    sb = defaultdict(dict)  # sandbox id -> {"name", "run", "run_ret", "stop", ...}
    pending_run = defaultdict(list)  # pod name -> request times not yet matched to a return
    ctr_of = {}  # container id -> sandbox id
    ctr = defaultdict(dict)
    q = r'\\"([0-9a-f]{64})\\"'
    for line in open(path, errors="replace"):
        m = CD_LINE.match(line)
        if not m or m.group(2) == "debug":
            continue
        t, msg = secs(m.group(1)), m.group(3)
        if msg.startswith("RunPodSandbox for &PodSandboxMetadata{Name:"):
            name = msg.split("Name:", 1)[1].split(",", 1)[0]
            r = re.search(r"returns sandbox id " + q, msg)
            if r is None:
                pending_run[name].append(t)
            elif pending_run[name]:
                sb[r.group(1)].update(name=name, run=pending_run[name].pop(0), run_ret=t)
        elif msg.startswith("CreateContainer within sandbox"):
            s = re.search(r"within sandbox " + q, msg).group(1)
            r = re.search(r"returns container id " + q, msg)
            if r is None:
                sb[s].setdefault("create", t)
            else:
                ctr_of[r.group(1)] = s
                sb[s].setdefault("create_ret", t)
        else:
            for call, key in (("StartContainer", "start"), ("StopContainer", "stopc"),
                              ("StopPodSandbox", "stopsb"), ("RemovePodSandbox", "remove")):
                if not msg.startswith(call):
                    continue
                r = re.search(q, msg)
                if r is None:
                    break
                ident = r.group(1)
                ret = "returns successfully" in msg
                target = ctr[ident] if key in ("start", "stopc") else sb[ident]
                target.setdefault(key + ("_ret" if ret else ""), t)
                break
    for c, calls in ctr.items():
        if c in ctr_of:
            for k, v in calls.items():
                sb[ctr_of[c]].setdefault(k, v)
    return sb


def kubelet_marks(path):
    """Per pod name: the moments rkubelet saw it, began terminating it, and finished."""
    marks = defaultdict(lambda: defaultdict(list))
    for line in open(path, errors="replace"):
        m = K_LINE.match(line)
        if not m:
            continue
        t, msg, rest = secs(m.group(1)), m.group(2), m.group(3)
        key = {"pod added": "seen", "terminating pod": "term",
               "pod terminated and cleaned up": "clean"}.get(msg)
        if key is None:
            continue
        p = re.search(r'pod="([^"]+)"', rest)
        if not p:
            continue
        name = p.group(1)
        # "default/NAME" or "NAME_default"
        name = name.split("/", 1)[1] if "/" in name else name.rsplit("_", 1)[0]
        marks[name][key].append(t)
    return marks


def first_in(times, lo, hi):
    return next((t for t in sorted(times) if lo <= t <= hi), None)


def last_in(times, lo, hi):
    return next((t for t in sorted(times, reverse=True) if lo <= t <= hi), None)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else None


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sb = runtime_calls(sys.argv[1])
    logs = []
    for arg in sys.argv[2:]:
        label, _, path = arg.partition("=")
        logs.append((label, kubelet_marks(path)))
    rows = defaultdict(lambda: defaultdict(list))
    skipped = defaultdict(int)
    for s in sb.values():
        name = s.get("name")
        if name is None:
            continue
        kind = pattern = re.sub(r"\d{3}", "N", name)
        if not all(k in s for k in CALLS):
            skipped[kind] += 1
            continue
        # The log that saw this pod last before its sandbox was asked for, and its marks.
        marks, seen = None, None
        for label, by_name in logs:
            m = by_name.get(name)
            t = last_in(m["seen"], s["run"] - 60, s["run"]) if m else None
            if t is not None and (seen is None or t > seen):
                marks, seen, kind = m, t, f"{pattern} ({label})"
        gaps = {
            "sandbox->CreateContainer": s["create"] - s["run_ret"],
            "StopContainer->StopPodSandbox": s["stopsb"] - s["stopc_ret"],
            "StopPodSandbox->RemovePodSandbox": s["remove"] - s["stopsb_ret"],
        }
        between_start = gaps["sandbox->CreateContainer"] + (s["start"] - s["create_ret"])
        between_delete = gaps["StopContainer->StopPodSandbox"] + gaps["StopPodSandbox->RemovePodSandbox"]
        if marks is not None and not name.startswith("floor-"):
            term = first_in(marks["term"], s["start_ret"], s["stopc"])
            clean = first_in(marks["clean"], s["remove_ret"], s["remove_ret"] + 60)
            if None in (term, clean):
                skipped[kind] += 1
                continue
            gaps["seen->RunPodSandbox"] = s["run"] - seen
            gaps["terminating->StopContainer"] = s["stopc"] - term
            gaps["RemovePodSandbox->cleaned"] = clean - s["remove_ret"]
            between_start += gaps["seen->RunPodSandbox"]
            between_delete += gaps["terminating->StopContainer"] + gaps["RemovePodSandbox->cleaned"]
        g = rows[kind]
        for key, v in gaps.items():
            g[key].append(v)
        g["runtime start"].append((s["run_ret"] - s["run"]) + (s["create_ret"] - s["create"])
                                  + (s["start_ret"] - s["start"]))
        g["runtime delete"].append((s["stopc_ret"] - s["stopc"]) + (s["stopsb_ret"] - s["stopsb"])
                                   + (s["remove_ret"] - s["remove"]))
        g["caller start"].append(between_start)
        g["caller delete"].append(between_delete)

    print("=== each pod's critical path: the caller's own time between CRI calls vs the time inside "
          "them (containerd's log), ms ===")
    print("  kind                           pods | start: caller p50 p99 | runtime p50 | caller share "
          "| delete: caller p50 p99 | runtime p50 | caller share")
    for kind in sorted(rows):
        g = rows[kind]
        n = len(g["caller start"])
        if n == 0:
            continue

        def ms(key, p):
            v = pct(g[key], p)
            return f"{v * 1000:6.0f}" if v is not None else "     -"

        def share(c, r):
            tot = sum(g[c]) + sum(g[r])
            return f"{sum(g[c]) / tot * 100:5.1f}%" if tot else "    -"

        print(f"  {kind:30s} {n:5d} |      {ms('caller start', 50)} {ms('caller start', 99)} | "
              f"   {ms('runtime start', 50)} |   {share('caller start', 'runtime start')} |"
              f"       {ms('caller delete', 50)} {ms('caller delete', 99)} |    "
              f"{ms('runtime delete', 50)} |   {share('caller delete', 'runtime delete')}")
    print("  rkubelet's gaps, p50 / p99 ms:")
    for kind in sorted(rows):
        g = rows[kind]
        if kind.startswith("floor-") or not g["seen->RunPodSandbox"]:
            continue
        parts = [f"{k} {pct(g[k], 50) * 1000:.0f}/{pct(g[k], 99) * 1000:.0f}"
                 for k in ("seen->RunPodSandbox", "sandbox->CreateContainer",
                           "terminating->StopContainer", "StopContainer->StopPodSandbox",
                           "StopPodSandbox->RemovePodSandbox", "RemovePodSandbox->cleaned")]
        print(f"    {kind}: " + ", ".join(parts))
    if skipped:
        print("  left out (incomplete sequence): "
              + ", ".join(f"{k} {v}" for k, v in sorted(skipped.items())))


if __name__ == "__main__":
    main()
