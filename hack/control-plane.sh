#!/usr/bin/env bash
# A real control plane on loopback for integration tests: etcd (Debian etcd-server) and
# kube-apiserver 1.20.2 built from Debian's kubernetes source package, with TLS, client certs,
# Node,RBAC authorization and NodeRestriction, as production runs it.
#
#   hack/control-plane.sh build            build kube-apiserver once, cached under $RK_CACHE
#   hack/control-plane.sh kubelet-bin      the upstream kubelet of the same source (built and cached
#                                          as build does); prints its path. For the swap test
#                                          (upstream kubelet -> rkubelet on the same node).
#   hack/control-plane.sh kubeadm-bins     kubeadm, kube-proxy and kube-scheduler of the same source
#                                          (built and cached as build does); prints their paths, one
#                                          a line. For the kubeadm test (tests/kubeadm.rs).
#   hack/control-plane.sh sample-device-plugin-bin   upstream's test/images/sample-device-plugin of
#                                          the same source (built and cached as build does);
#                                          prints its path. For the device plugin tests.
#   hack/control-plane.sh up DIR           start etcd + apiserver under DIR; prints KEY=VALUE lines
#   hack/control-plane.sh node-cert DIR N  node client cert (system:node:N) + kubeconfig; prints its path
#   hack/control-plane.sh stop-apiserver DIR / start-apiserver DIR   an outage, for tests
#   hack/control-plane.sh controller-manager DIR [FLAG...]  start kube-controller-manager with
#                                          only the controllers TLS bootstrap needs (CSR approving,
#                                          signing with the cluster CA, cleaning; bootstrap tokens)
#   hack/control-plane.sh bootstrap-token DIR   a bootstrap token Secret plus kubeadm's RBAC for
#                                          it; prints the path of a token-only bootstrap kubeconfig
#   hack/control-plane.sh down DIR         stop everything and remove DIR
# RK_APISERVER_AUDIT=1 at `up` writes an audit log (Metadata level) to DIR/log/audit.log, so that
# benchmarks can count the requests a node makes.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SRC_LIST=/etc/apt/sources.list.d/rkubelet-src.list
PACKAGES=(golang-go rsync etcd-server golang-github-modern-go-reflect2-dev openssl dpkg-dev)

# The Debian source version keys the cached binary, so a new upload rebuilds.
source_version() {
    apt-cache showsrc kubernetes 2>/dev/null | sed -n 's/^Version: //p' | head -n 1
}

ensure_packages() {
    local missing=() p
    [[ -f "$SRC_LIST" ]] || {
        echo 'deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main' >"$SRC_LIST"
        apt-get update -qq
    }
    for p in "${PACKAGES[@]}"; do
        [[ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)" == installed ]] || missing+=("$p")
    done
    if ((${#missing[@]})); then
        log "installing ${missing[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
    fi
    [[ -n "$(source_version)" ]] || apt-get update -qq
}

apiserver_bin() {
    echo "$RK_CACHE/kubernetes-$(source_version)/kube-apiserver"
}

controller_manager_bin() {
    echo "$RK_CACHE/kubernetes-$(source_version)/kube-controller-manager"
}

kubelet_bin() {
    echo "$RK_CACHE/kubernetes-$(source_version)/kubelet"
}

# Every binary the tests use, all from the one Debian source: a fresh machine extracts it once and
# runs one make for whatever is missing.
BINARIES=(kube-apiserver kube-controller-manager kubelet kubeadm kube-proxy kube-scheduler sample-device-plugin)

sample_device_plugin_bin() {
    echo "$RK_CACHE/kubernetes-$(source_version)/sample-device-plugin"
}

# The Go package each cached binary is built from.
package_of() {
    case "$1" in
    sample-device-plugin) echo test/images/sample-device-plugin ;;
    *) echo "cmd/$1" ;;
    esac
}

# Builds whichever of BINARIES is not cached yet; prints the apiserver's path.
cmd_build() {
    need_root
    ensure_packages
    local work version dir cmd pkgs=() missing=()
    version="$(source_version)"
    [[ -n "$version" ]] || die "no kubernetes source package found (deb-src line in $SRC_LIST?)"
    dir="$RK_CACHE/kubernetes-$version"
    mkdir -p "$RK_CACHE"
    exec 9>"$RK_CACHE/kube-apiserver.lock"
    flock 9 # one build at a time; the second caller then finds the binaries
    for cmd in "${BINARIES[@]}"; do
        [[ -x "$dir/$cmd" ]] || { missing+=("$cmd") && pkgs+=("$(package_of "$cmd")"); }
    done
    if ((${#missing[@]} == 0)); then
        apiserver_bin
        return
    fi
    work="$RK_CACHE/kubernetes-src-$version"
    rm -rf "$work" && mkdir -p "$work"
    log "building ${missing[*]} $version (about 7 minutes each on 2 cores)"
    (cd "$work" && apt-get source --download-only kubernetes >&2 2>/dev/null && dpkg-source -x --skip-patches ./*.dsc src >&2)
    # Go 1.19 crashes at run time with the vendored reflect2 1.0.1; Debian's 1.0.2 works. Replace the
    # directory's Go files (1.0.1 has files 1.0.2 dropped, which would clash).
    rm -f "$work/src/vendor/github.com/modern-go/reflect2/"*.go
    cp /usr/share/gocode/src/github.com/modern-go/reflect2/*.go "$work/src/vendor/github.com/modern-go/reflect2/"
    # No git checkout and no network: version from the package, modules from vendor/.
    (cd "$work/src" && GOPROXY=off GOFLAGS=-mod=vendor CGO_ENABLED=0 KUBE_GIT_VERSION=v1.20.2 \
        KUBE_GIT_TREE_STATE=clean make WHAT="${pkgs[*]}" >&2)
    mkdir -p "$dir"
    for cmd in "${missing[@]}"; do
        cp "$work/src/_output/local/go/bin/$cmd" "$dir/$cmd.tmp" && mv "$dir/$cmd.tmp" "$dir/$cmd"
    done
    rm -rf "$work"
    apiserver_bin
}

# A port nobody listens on, below the kernel's ephemeral range (32768-60999 by default): an
# outgoing connection cannot take it between this check and the server's bind (it did: the
# apiserver once failed with "address already in use"), and above the test Envs' ports
# (10000 + 4 x index + slot, at most 11023).
# free_port [TAKEN...]: also never one of TAKEN, the ports this start-up has already picked
# (nothing listens on them yet: etcd once got the same port for its peer and client URLs).
free_port() {
    local p
    while :; do
        p=$((12000 + RANDOM % 20000))
        [[ " $* " == *" $p "* ]] && continue
        ss -Htln "sport = :$p" | grep -q . || { echo "$p"; return; }
    done
}

# start_etcd: etcd on two fresh ports, up and answering /health. A port can still be taken by
# another control plane starting at the same moment, between free_port's check and etcd's
# bind; etcd then exits at once, and is started again on other ports.
start_etcd() {
    local try i
    for ((try = 1; try <= 3; try++)); do
        etcd_port="$(free_port)" peer_port="$(free_port "$etcd_port")"
        setsid etcd --name default --data-dir "$DIR/etcd" \
            --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
            --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
            --initial-cluster "default=http://127.0.0.1:$peer_port" >"$DIR/log/etcd.log" 2>&1 </dev/null &
        echo $! >"$DIR/etcd.pid"
        for ((i = 0; i < 240; i++)); do
            kill -0 "$(cat "$DIR/etcd.pid")" 2>/dev/null || break
            curl -sf --max-time 5 "http://127.0.0.1:$etcd_port/health" >/dev/null 2>&1 && return
            sleep 0.25
        done
        tail -n 5 "$DIR/log/etcd.log" >&2
        kill "$(cat "$DIR/etcd.pid")" 2>/dev/null || true
        wait "$(cat "$DIR/etcd.pid")" 2>/dev/null || true
        rm -rf "$DIR/etcd"
        echo "[control-plane.sh] etcd did not start (try $try of 3)" >&2
    done
    die "etcd did not start on 127.0.0.1 (log: $DIR/log/etcd.log)"
}

# sign NAME SUBJECT [EXT]: a key and a cert signed by the CA in $PKI.
sign() {
    local name="$1" subj="$2" ext="${3:-}"
    openssl req -new -newkey rsa:2048 -nodes -keyout "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
    if [[ -n "$ext" ]]; then
        openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
            -days 30 -extfile <(printf '%s\n' "$ext") -out "$PKI/$name.crt" 2>/dev/null
    else
        openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
            -days 30 -extfile <(printf 'extendedKeyUsage=clientAuth\n') -out "$PKI/$name.crt" 2>/dev/null
    fi
}

# kubeconfig FILE NAME: embedded CA, client cert and key for $PKI/NAME.
kubeconfig() {
    local file="$1" name="$2" url
    url="$(sed -n 's/^APISERVER_URL=//p' "$DIR/env")"
    cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: rkubelet-test
  cluster:
    server: $url
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $name
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$name.crt")
    client-key-data: $(base64 -w0 "$PKI/$name.key")
contexts:
- name: default
  context: {cluster: rkubelet-test, user: $name}
current-context: default
EOF
}

cmd_up() {
    DIR="$(realpath -m "${1:?usage: control-plane.sh up DIR}")"
    need_root
    need_cmd openssl etcd kubectl ss curl
    local bin
    bin="$(cmd_build)"
    mkdir -p "$DIR"/{pki,etcd,log,nodes}
    PKI="$DIR/pki"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$PKI/ca.key" -out "$PKI/ca.crt" -days 30 \
        -subj "/CN=rkubelet-test-ca" 2>/dev/null
    sign apiserver "/CN=kube-apiserver" "$(printf '%s\n' \
        'subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local' \
        'extendedKeyUsage=serverAuth')"
    sign admin "/O=system:masters/CN=kubernetes-admin"
    # The apiserver's identity towards kubelets (logs, exec, proxy). Not in system:masters: its
    # rights come from RBAC (system:kubelet-api-admin, bound after start), so the kubelet's
    # SubjectAccessReviews are decided by a real rule.
    sign apiserver-kubelet-client "/CN=kube-apiserver-kubelet-client"
    openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
    openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null

    local etcd_port peer_port api_port
    start_etcd
    api_port="$(free_port "$etcd_port" "$peer_port")"
    # ServiceAccount admission with BoundServiceAccountTokenVolume injects the kube-api-access-*
    # projected volume (TokenRequest token, kube-root-ca.crt, namespace) into pods, as clusters
    # do from 1.21 on; it needs no token controller. The controller-manager is not run, so the
    # two objects it would publish (the `default` ServiceAccount and the kube-root-ca.crt
    # ConfigMap) are created below for the `default` namespace.
    local args=(--etcd-servers "http://127.0.0.1:$etcd_port"
        --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" --insecure-port 0
        --client-ca-file "$PKI/ca.crt" --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key"
        --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction,ServiceAccount
        --enable-bootstrap-token-auth
        --service-account-issuer https://kubernetes.default.svc.cluster.local
        --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key"
        --service-cluster-ip-range 10.96.0.0/12 --allow-privileged=true
        --feature-gates EphemeralContainers=true,BoundServiceAccountTokenVolume=true,GenericEphemeralVolume=true
        --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt"
        --kubelet-client-key "$PKI/apiserver-kubelet-client.key"
        --kubelet-preferred-address-types InternalIP,Hostname)
    if [[ "${RK_APISERVER_AUDIT:-}" == 1 ]]; then
        printf '%s\n' 'apiVersion: audit.k8s.io/v1' 'kind: Policy' 'omitStages: [RequestReceived]' \
            'rules:' '- level: Metadata' >"$DIR/audit-policy.yaml"
        args+=(--audit-policy-file "$DIR/audit-policy.yaml" --audit-log-path "$DIR/log/audit.log"
            --audit-log-maxsize 0)
    fi
    # Kept so that start-apiserver can bring the same apiserver back (outage tests).
    printf '%q ' "$bin" "${args[@]}" >"$DIR/apiserver.cmd"
    start_apiserver
    cat >"$DIR/env" <<EOF
APISERVER_URL=https://127.0.0.1:$api_port
ADMIN_KUBECONFIG=$DIR/admin.kubeconfig
CA_CERT=$PKI/ca.crt
CA_KEY=$PKI/ca.key
KUBELET_CLIENT_CERT=$PKI/apiserver-kubelet-client.crt
KUBELET_CLIENT_KEY=$PKI/apiserver-kubelet-client.key
ETCD_PID=$(cat "$DIR/etcd.pid")
APISERVER_LOG=$DIR/log/kube-apiserver.log
EOF
    kubeconfig "$DIR/admin.kubeconfig" admin
    wait_ready
    # kubelets authorize the apiserver's requests (kubectl logs/exec, nodes/proxy) through
    # SubjectAccessReview: nodes/proxy, log, stats, metrics and spec via the bootstrap role.
    kubectl --kubeconfig "$DIR/admin.kubeconfig" create clusterrolebinding kube-apiserver-kubelet-api-admin \
        --clusterrole=system:kubelet-api-admin --user=kube-apiserver-kubelet-client >/dev/null
    service_account_objects default
    # Last: a control plane shared between test binaries (tests/common ControlPlane) is used only
    # once its start finished.
    : >"$DIR/ready"
    cat "$DIR/env"
}

# service_account_objects NS: what the controller-manager's service account and root CA
# publisher controllers create in every namespace.
service_account_objects() {
    local ns="$1"
    kubectl --kubeconfig "$DIR/admin.kubeconfig" -n "$ns" create serviceaccount default >/dev/null
    kubectl --kubeconfig "$DIR/admin.kubeconfig" -n "$ns" create configmap kube-root-ca.crt \
        --from-file=ca.crt="$PKI/ca.crt" >/dev/null
}

start_apiserver() {
    setsid bash -c "exec $(cat "$DIR/apiserver.cmd")" >>"$DIR/log/kube-apiserver.log" 2>&1 </dev/null &
    echo $! >"$DIR/apiserver.pid"
}

# Polls /readyz with curl, not kubectl: a kubectl process costs several times curl's CPU, and in
# the emulated cgroup v2 guest (hack/vm.sh) that CPU is taken from the apiserver starting up.
wait_ready() {
    local i url
    url="$(sed -n 's/^APISERVER_URL=//p' "$DIR/env")"
    for ((i = 0; i < 120; i++)); do
        if [[ "$(curl -sf --max-time 5 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
            "$url/readyz" 2>/dev/null)" == ok ]]; then
            return
        fi
        sleep 0.5
    done
    tail -n 30 "$DIR/log/etcd.log" "$DIR/log/kube-apiserver.log" >&2
    die "kube-apiserver did not become ready in 60 s"
}

# An API server outage, for tests: stop-apiserver, later start-apiserver (same flags and port).
cmd_stop_apiserver() {
    DIR="$(realpath -m "${1:?usage: control-plane.sh stop-apiserver DIR}")"
    local pid i
    pid="$(cat "$DIR/apiserver.pid")"
    kill "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
}

cmd_start_apiserver() {
    DIR="$(realpath -m "${1:?usage: control-plane.sh start-apiserver DIR}")"
    PKI="$DIR/pki"
    start_apiserver
    wait_ready
}

cmd_node_cert() {
    DIR="$(realpath -m "${1:?usage: control-plane.sh node-cert DIR NODE}")"
    local node="${2:?usage: control-plane.sh node-cert DIR NODE}"
    PKI="$DIR/pki"
    sign "node-$node" "/O=system:nodes/CN=system:node:$node"
    kubeconfig "$DIR/nodes/$node.kubeconfig" "node-$node"
    echo "$DIR/nodes/$node.kubeconfig"
}

# The controllers `kubeadm join` relies on for TLS bootstrap, nothing else (no pods are scheduled
# or garbage collected behind the tests' backs). Each controller acts with its own service account
# (--use-service-account-credentials, as kubeadm): the system:kube-controller-manager role alone
# cannot approve or sign CSRs, so serviceaccount-token must run to mint those accounts' tokens.
cmd_controller_manager() {
    DIR="$(realpath -m "${1:?usage: control-plane.sh controller-manager DIR [FLAG...]}")"
    shift
    PKI="$DIR/pki"
    local bin
    bin="$(controller_manager_bin)"
    [[ -x "$bin" ]] || cmd_build >/dev/null
    sign controller-manager "/CN=system:kube-controller-manager"
    kubeconfig "$DIR/controller-manager.kubeconfig" controller-manager
    # --port 0 and --secure-port 0: no listeners, so several control planes can share the host.
    setsid "$bin" --kubeconfig "$DIR/controller-manager.kubeconfig" \
        --controllers serviceaccount-token,csrapproving,csrsigning,csrcleaner,tokencleaner,bootstrapsigner \
        --use-service-account-credentials=true --leader-elect=false --port 0 --secure-port 0 \
        --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
        --root-ca-file "$PKI/ca.crt" --service-account-private-key-file "$PKI/sa.key" \
        "$@" >>"$DIR/log/kube-controller-manager.log" 2>&1 </dev/null &
    echo $! >"$DIR/controller-manager.pid"
    echo "CONTROLLER_MANAGER_LOG=$DIR/log/kube-controller-manager.log"
}

# kubeadm's bootstrap token and the three ClusterRoleBindings `kubeadm init` creates for it.
cmd_bootstrap_token() {
    DIR="$(realpath -m "${1:?usage: control-plane.sh bootstrap-token DIR}")"
    PKI="$DIR/pki"
    local id secret url k=(kubectl --kubeconfig "$DIR/admin.kubeconfig")
    local group=system:bootstrappers:kubeadm:default-node-token
    id="$(openssl rand -hex 3)"
    secret="$(openssl rand -hex 8)"
    url="$(sed -n 's/^APISERVER_URL=//p' "$DIR/env")"
    "${k[@]}" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Secret
metadata: {name: bootstrap-token-$id, namespace: kube-system}
type: bootstrap.kubernetes.io/token
stringData:
  token-id: "$id"
  token-secret: "$secret"
  usage-bootstrap-authentication: "true"
  usage-bootstrap-signing: "true"
  auth-extra-groups: $group
EOF
    "${k[@]}" get clusterrolebinding kubeadm:kubelet-bootstrap >/dev/null 2>&1 || {
        "${k[@]}" create clusterrolebinding kubeadm:kubelet-bootstrap \
            --clusterrole=system:node-bootstrapper --group="$group" >/dev/null
        "${k[@]}" create clusterrolebinding kubeadm:node-autoapprove-bootstrap \
            --clusterrole=system:certificates.k8s.io:certificatesigningrequests:nodeclient --group="$group" >/dev/null
        "${k[@]}" create clusterrolebinding kubeadm:node-autoapprove-certificate-rotation \
            --clusterrole=system:certificates.k8s.io:certificatesigningrequests:selfnodeclient \
            --group=system:nodes >/dev/null
    }
    cat >"$DIR/bootstrap-kubelet.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: rkubelet-test
  cluster:
    server: $url
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: tls-bootstrap-token-user
  user:
    token: $id.$secret
contexts:
- name: tls-bootstrap-token-user@rkubelet-test
  context: {cluster: rkubelet-test, user: tls-bootstrap-token-user}
current-context: tls-bootstrap-token-user@rkubelet-test
EOF
    echo "$DIR/bootstrap-kubelet.kubeconfig"
}

cmd_down() {
    local dir
    dir="$(realpath -m "${1:?usage: control-plane.sh down DIR}")"
    [[ -d "$dir" ]] || return 0
    local f pid
    for f in controller-manager apiserver etcd; do
        pid="$(cat "$dir/$f.pid" 2>/dev/null || true)"
        if [[ -n "$pid" ]]; then kill "$pid" 2>/dev/null || true; fi
    done
    # Also anything still holding DIR in its command line (pid files can be lost).
    pkill -f -- "$dir/pki/ca.crt" 2>/dev/null || true
    pkill -f -- "--data-dir $dir/etcd" 2>/dev/null || true
    for _ in $(seq 50); do
        pgrep -f -- "$dir/" >/dev/null || break
        sleep 0.1
    done
    pkill -9 -f -- "$dir/" 2>/dev/null || true
    rm -rf "$dir"
}

cmd_kubelet_bin() {
    cmd_build >/dev/null
    kubelet_bin
}

cmd_kubeadm_bins() {
    cmd_build >/dev/null
    local dir cmd
    dir="$(dirname "$(kubelet_bin)")"
    for cmd in kubeadm kube-proxy kube-scheduler; do echo "$dir/$cmd"; done
}

cmd_sample_device_plugin_bin() {
    cmd_build >/dev/null
    sample_device_plugin_bin
}

case "${1:-}" in
build) cmd_build ;;
kubelet-bin) cmd_kubelet_bin ;;
kubeadm-bins) cmd_kubeadm_bins ;;
sample-device-plugin-bin) cmd_sample_device_plugin_bin ;;
up) cmd_up "${2:-}" ;;
node-cert) cmd_node_cert "${2:-}" "${3:-}" ;;
controller-manager) cmd_controller_manager "${@:2}" ;;
bootstrap-token) cmd_bootstrap_token "${2:-}" ;;
down) cmd_down "${2:-}" ;;
stop-apiserver) cmd_stop_apiserver "${2:-}" ;;
start-apiserver) cmd_start_apiserver "${2:-}" ;;
*) die "usage: $0 build | kubelet-bin | kubeadm-bins | sample-device-plugin-bin | up DIR | node-cert DIR NODE | controller-manager DIR [FLAG...] | bootstrap-token DIR | stop-apiserver DIR | start-apiserver DIR | down DIR" ;;
esac
