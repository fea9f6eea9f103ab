"""CRI calls a containerd has answered, by method: shared by bench/api-pods.sh and
bench/cri-floor.py (what a kubelet asked of the runtime in a window is the difference of two
readings)."""
import collections, http.client, re


def counts(addr):
    """containerd's grpc_server_handled_total per CRI method (v1 and v1alpha2 alike, any status
    code), from its metrics at `addr` (host:port); empty if it does not answer."""
    by = collections.Counter()
    if not addr:
        return by
    try:
        c = http.client.HTTPConnection(addr, timeout=10)
        c.request("GET", "/v1/metrics")
        body = c.getresponse().read().decode()
    except OSError:
        return by
    for line in body.splitlines():
        m = re.match(r'grpc_server_handled_total\{(.*)\} (\S+)', line)
        if m and 'grpc_service="runtime.' in m.group(1):
            method = re.search(r'grpc_method="([^"]+)"', m.group(1)).group(1)
            by[method] += int(float(m.group(2)))
    return by
