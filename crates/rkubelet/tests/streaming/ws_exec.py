# A bare websocket client for the kubelet's /exec (v4.channel.k8s.io), so the tests exercise the
# websocket protocol end to end without a websocket library: TLS with the apiserver's kubelet
# client cert, the upgrade, then the server's frames gathered per channel (1 stdout, 2 stderr,
# 3 status). Usage: ws_exec.py PORT CERT KEY PATH [PROTOCOLS]; PROTOCOLS (the
# Sec-WebSocket-Protocol offer) defaults to v4.channel.k8s.io. A refused upgrade prints its
# status line, then "body=" and the body.
import base64, os, socket, ssl, sys

port, cert, key, path = sys.argv[1:5]
protocols = sys.argv[5] if len(sys.argv) > 5 else "v4.channel.k8s.io"
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
ctx.set_alpn_protocols(["http/1.1"])
ctx.load_cert_chain(cert, key)
s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", int(port)), timeout=20))
k = base64.b64encode(os.urandom(16)).decode()
s.sendall(
    (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
     f"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {k}\r\n"
     f"Sec-WebSocket-Protocol: {protocols}\r\n\r\n").encode())
f = s.makefile("rb")
status = f.readline().decode().strip()
print(status)
headers = {}
while True:
    line = f.readline().decode().strip()
    if not line:
        break
    name, value = line.split(":", 1)
    headers[name.lower()] = value.strip()
if " 101 " not in status + " ":
    n = int(headers.get("content-length", "0"))
    print("body=" + f.read(n).decode(errors="replace"))
    sys.exit(0)
print("protocol=" + headers.get("sec-websocket-protocol", ""))
out = {}
while True:
    h = f.read(2)
    if len(h) < 2:
        break
    op, n = h[0] & 0x0F, h[1] & 0x7F
    if n == 126:
        n = int.from_bytes(f.read(2), "big")
    elif n == 127:
        n = int.from_bytes(f.read(8), "big")
    data = f.read(n)
    if op == 8:
        break
    if op in (1, 2) and data:
        out[data[0]] = out.get(data[0], b"") + data[1:]
for ch in sorted(out):
    print(f"ch{ch}={out[ch].decode(errors='replace')!r}")
