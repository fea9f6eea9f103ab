#!/usr/bin/env bash
# kubeadm 1.20.2 nodes on this one host, for tests/kubeadm.rs (issue 14; plan in docs/plans/kubeadm.md).
# A node is a network namespace plus a mount namespace (private /etc/kubernetes, /var/lib/kubelet,
# /var/lib/etcd, /var/lib/cni, /var/log/pods, /var/log/containers bind-mounted from NODEDIR) with
# its own containerd; kubeadm runs inside it with stand-ins for the two tools this host lacks.
#
#   hack/kubeadm.sh images                    OCI images of the control plane under the names kubeadm
#                                             1.20.2 expects (k8s.gcr.io/...), cached in
#                                             $RK_CACHE/kubeadm-images (NOT in images.sh's IMAGES:
#                                             ~400 MB that only this test needs)
#   hack/kubeadm.sh import SOCK [REF...]      import them (default all) into a containerd
#   hack/kubeadm.sh node-up NODEDIR INDEX [NAME]  netns rkt-kadm-INDEX (node IP 10.99.INDEX.2, default
#                                             route via the host's 10.99.INDEX.1), containerd with
#                                             bridge rkbrINDEX (pods 10.88.INDEX.0/24, routed from
#                                             the host); RKUBELET_BIN names the kubelet; prints
#                                             KEY=VALUE lines
#   hack/kubeadm.sh run NODEDIR CMD...        CMD inside the node, with NODEDIR/bin first in PATH
#   hack/kubeadm.sh node-down NODEDIR         stop everything of the node and remove NODEDIR; take
#                                             nodes down in the reverse order of node-up (the first
#                                             node made the host's mount points)
#   hack/kubeadm.sh systemctl|crictl NODEDIR ARG...   the stand-ins (NODEDIR/bin/* call these)
#
# The stand-ins: no systemd runs here, so `systemctl restart kubelet` starts rkubelet with the
# command line of deploy/10-kubeadm.conf; crictl is not packaged in Debian, and kubeadm's preflight
# cannot run without it (RunPullImagesCheck fails before any check can be ignored), so `crictl`
# answers kubeadm's commands (info, inspecti, pull, pods -q, stopp, rmp) through ctr.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# build_image, image_slug, DEFAULT_PATH: images.sh's definitions without its command dispatch
# (images.sh itself stays unchanged, as its text keys the shared image cache).
# shellcheck disable=SC1090
source <(sed -e '/^source .*lib.sh"$/d' -e '/^case "\${1:-}" in$/,$d' "$HACK_DIR/images.sh")

KUBE_VERSION=v1.20.2
KADM_IMAGES_DIR="$RK_CACHE/kubeadm-images"
KADM_IMAGES=(
    k8s.gcr.io/kube-apiserver:$KUBE_VERSION
    k8s.gcr.io/kube-controller-manager:$KUBE_VERSION
    k8s.gcr.io/kube-scheduler:$KUBE_VERSION
    k8s.gcr.io/kube-proxy:$KUBE_VERSION
    k8s.gcr.io/etcd:3.4.23
)
# Mount points inside a node's mount namespace (kubeadm fixes /etc/kubernetes and /var/lib/kubelet;
# reset cleans /var/lib/cni; both kubelets' log dirs must not meet).
NODE_BINDS=(/etc/kubernetes /var/lib/kubelet /var/lib/etcd /var/lib/cni /var/log/pods /var/log/containers)

bin_dir() { dirname "$("$HACK_DIR/control-plane.sh" kubelet-bin)"; }

# ---- images ----

# Upstream's images are go-runner plus /usr/local/bin/<bin> (build/common.sh); the manifests'
# commands are bare names, hence PATH. A few /etc files Go's resolver and user lookups read.
populate_base() {
    local rootfs="$1"
    mkdir -p "$rootfs"/{usr/local/bin,etc,tmp,var/run}
    chmod 1777 "$rootfs/tmp"
    printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/:/sbin/nologin\n' >"$rootfs/etc/passwd"
    printf 'root:x:0:\nnobody:x:65534:\n' >"$rootfs/etc/group"
    printf 'hosts: files dns\n' >"$rootfs/etc/nsswitch.conf"
}

# copy_with_libs ROOTFS FILE...: FILEs at their host paths plus every library ldd names.
copy_with_libs() {
    local rootfs="$1" f
    shift
    for f in "$@"; do
        cp -P --parents "$f" "$rootfs/"
        if [[ -L "$f" ]]; then cp --parents "$(readlink -f "$f")" "$rootfs/"; fi
        ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' |
            while read -r lib; do
                [[ -e "$rootfs$lib" ]] || cp -L --parents "$lib" "$rootfs/"
            done
    done
}

populate_static_bin() { # the Go binaries are static (CGO_ENABLED=0)
    populate_base "$1"
    cp "$(bin_dir)/$KADM_BIN" "$1/usr/local/bin/$KADM_BIN"
}

populate_etcd() { # Debian's etcd-server 3.4.23, linked against libc
    populate_base "$1"
    copy_with_libs "$1" /usr/bin/etcd
    ln -s /usr/bin/etcd "$1/usr/local/bin/etcd"
}

# kube-proxy in iptables mode execs iptables{,-save,-restore} and conntrack. nft only, as the host
# and CNI's portmap use: mixing backends would split the rules.
populate_kube_proxy() {
    local rootfs="$1" n
    populate_base "$rootfs"
    cp "$(bin_dir)/kube-proxy" "$rootfs/usr/local/bin/kube-proxy"
    copy_with_libs "$rootfs" /usr/sbin/xtables-nft-multi /usr/sbin/conntrack \
        /usr/lib/x86_64-linux-gnu/xtables/*.so
    for n in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
        ln -sf xtables-nft-multi "$rootfs/usr/sbin/$n"
    done
    cp /etc/protocols "$rootfs/etc/protocols"
    cp -a /etc/ld.so.conf /etc/ld.so.conf.d "$rootfs/etc/"
    ldconfig -r "$rootfs"
}

kadm_build_all() {
    local cmd
    for cmd in kube-apiserver kube-controller-manager kube-scheduler; do
        KADM_BIN=$cmd build_image "k8s.gcr.io/$cmd:$KUBE_VERSION" populate_static_bin --env "$DEFAULT_PATH"
    done
    build_image "k8s.gcr.io/kube-proxy:$KUBE_VERSION" populate_kube_proxy --env "$DEFAULT_PATH"
    build_image k8s.gcr.io/etcd:3.4.23 populate_etcd --env "$DEFAULT_PATH"
}

kadm_cache_key() {
    {
        cat "${BASH_SOURCE[0]}" "$HACK_DIR/images.sh"
        dpkg-query -W -f='${Version}\n' etcd-server iptables conntrack libc6 umoci 2>/dev/null || true
        sha256sum "$(bin_dir)"/kube-{apiserver,controller-manager,scheduler,proxy}
    } | sha256sum | cut -d' ' -f1
}

cmd_images() {
    need_cmd umoci jq tar flock sha256sum ldd ldconfig
    mkdir -p "$KADM_IMAGES_DIR"
    exec 8>"$KADM_IMAGES_DIR/.lock"
    flock 8
    local key
    key="$(kadm_cache_key)"
    if [[ -f "$KADM_IMAGES_DIR/.key" && "$(cat "$KADM_IMAGES_DIR/.key")" == "$key" ]]; then
        return 0
    fi
    TMP_DIR="$(mktemp -d)"
    OUT_DIR="$TMP_DIR/out"
    mkdir -p "$OUT_DIR"
    # shellcheck disable=SC2064  # expand TMP_DIR now
    trap "rm -rf '$TMP_DIR'" EXIT
    kadm_build_all
    rm -f "$KADM_IMAGES_DIR"/*.tar "$KADM_IMAGES_DIR/.key"
    mv "$OUT_DIR"/*.tar "$KADM_IMAGES_DIR/"
    printf '%s\n' "$key" >"$KADM_IMAGES_DIR/.key"
    rm -rf "$TMP_DIR"
    trap - EXIT
    log "built ${#KADM_IMAGES[@]} images into $KADM_IMAGES_DIR"
}

cmd_import() {
    local sock="${1:?usage: kubeadm.sh import SOCK [REF...]}" ref
    shift
    local refs=("$@")
    ((${#refs[@]})) || refs=("${KADM_IMAGES[@]}")
    cmd_images
    for ref in "${refs[@]}"; do
        ctr -a "$sock" -n k8s.io images import "$KADM_IMAGES_DIR/$(image_slug "$ref").tar" >/dev/null
    done
    # kubeadm's ImagePull list names pause:3.2; for a CRI runtime it passes no
    # --pod-infra-container-image, so the sandboxes use containerd's own pause image.
    ctr -a "$sock" -n k8s.io images tag --force rkubelet.local/pause:3.9 k8s.gcr.io/pause:3.2 >/dev/null
}

# ---- nodes ----

holder_pid() { cat "$1/holder.pid"; }

cmd_run() {
    local nodedir="${1:?usage: kubeadm.sh run NODEDIR CMD...}"
    shift
    nodedir="$(realpath -m "$nodedir")"
    # --net and --mount only: `ip netns exec` would remount /sys and hide /sys/fs/cgroup.
    nsenter -t "$(holder_pid "$nodedir")" -m -n -- env PATH="$nodedir/bin:$PATH" "$@"
}

cmd_node_up() {
    local nodedir="${1:?usage: kubeadm.sh node-up NODEDIR INDEX [NAME]}" index="${2:?usage: kubeadm.sh node-up NODEDIR INDEX [NAME]}"
    local name="${3:-}"
    need_root
    need_cmd ip nsenter unshare containerd ctr
    [[ -x "${RKUBELET_BIN:-}" ]] || die "RKUBELET_BIN must name the rkubelet binary"
    nodedir="$(realpath -m "$nodedir")"
    local ns="rkt-kadm-$index" h="kadm${index}h" c="kadm${index}c" d
    mkdir -p "$nodedir"/{bin,log}
    echo "$index" >"$nodedir/index"
    ip netns add "$ns"
    ip link add "$h" type veth peer name "$c"
    ip link set "$c" netns "$ns"
    ip addr add "10.99.$index.1/24" dev "$h"
    ip link set "$h" up
    ip -n "$ns" addr add "10.99.$index.2/24" dev "$c"
    ip -n "$ns" link set "$c" up
    ip -n "$ns" link set lo up
    ip -n "$ns" route add default via "10.99.$index.1"
    ip route add "10.88.$index.0/24" via "10.99.$index.2"
    nsenter --net="/run/netns/$ns" sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1

    # Host mount points that did not exist: made here, removed by node-down. Likewise the host
    # files kube-proxy's DaemonSet makes through hostPath FileOrCreate (/run is not private).
    for d in "${NODE_BINDS[@]}" /lib/modules; do
        if [[ ! -e "$d" ]]; then
            mkdir -p "$d"
            echo "$d" >>"$nodedir/created-dirs"
        fi
    done
    for d in /run/xtables.lock; do
        [[ -e "$d" ]] || echo "$d" >>"$nodedir/absent-files"
    done
    local script="set -e"
    for d in "${NODE_BINDS[@]}"; do
        mkdir -p "$nodedir/root$d"
        script+="; mount --bind $nodedir/root$d $d"
    done
    # The node's name resolves to its IP, as on a real node (kubeadm's Hostname check otherwise
    # waits for a DNS timeout).
    if [[ -n "$name" ]]; then
        { cat /etc/hosts && echo "10.99.$index.2 $name"; } >"$nodedir/root/hosts"
        script+="; mount --bind $nodedir/root/hosts /etc/hosts"
    fi
    # The holder owns the mount namespace; everything of the node nsenters into it.
    setsid nsenter --net="/run/netns/$ns" unshare --mount --propagation private \
        sh -c "$script; touch $nodedir/ns-ready; exec sleep infinity" </dev/null >"$nodedir/log/holder.log" 2>&1 &
    echo $! >"$nodedir/holder.pid"
    for _ in $(seq 100); do
        [[ -e "$nodedir/ns-ready" ]] && break
        sleep 0.1
    done
    [[ -e "$nodedir/ns-ready" ]] || die "node namespace did not come up: $(cat "$nodedir/log/holder.log")"

    # The tools kubeadm calls, first in its PATH.
    ln -sf "$RKUBELET_BIN" "$nodedir/bin/kubelet"
    for d in systemctl crictl; do
        printf '#!/bin/sh\nexec %q %s %q "$@"\n' "$HACK_DIR/kubeadm.sh" "$d" "$nodedir" >"$nodedir/bin/$d"
        chmod +x "$nodedir/bin/$d"
    done

    # containerd inside the node: the kubelet's mounts under /var/lib/kubelet must be the ones runc
    # sees, and host-network pods get the node's netns.
    cmd_run "$nodedir" "$HACK_DIR/containerd.sh" up "$nodedir/ctd" "$index" >/dev/null
    echo "NODE_IP=10.99.$index.2"
    echo "NETNS=$ns"
    echo "HOLDER_PID=$(holder_pid "$nodedir")"
    echo "CONTAINERD_SOCK=$nodedir/ctd/containerd.sock"
}

cmd_node_down() {
    local nodedir="${1:?usage: kubeadm.sh node-down NODEDIR}"
    need_root
    nodedir="$(realpath -m "$nodedir")"
    [[ -d "$nodedir" ]] || return 0
    local index="" ns d pid
    index="$(cat "$nodedir/index" 2>/dev/null || true)"
    ns="rkt-kadm-$index"
    stop_kubelet "$nodedir"
    if [[ -f "$nodedir/holder.pid" ]] && kill -0 "$(holder_pid "$nodedir")" 2>/dev/null; then
        cmd_run "$nodedir" "$HACK_DIR/containerd.sh" down "$nodedir/ctd" || true
        # Whatever else runs in the node's mount namespace (kubeadm, stray shims).
        local mnt
        mnt="$(readlink "/proc/$(holder_pid "$nodedir")/ns/mnt")"
        for pid in /proc/[0-9]*; do
            [[ "$(readlink "$pid/ns/mnt" 2>/dev/null)" == "$mnt" ]] && kill -KILL "${pid#/proc/}" 2>/dev/null
        done
    fi
    # Killing the namespace's processes drops its mounts; the netns takes the veth pair, the
    # host route through it, the bridge and every iptables rule kube-proxy wrote there.
    if [[ -n "$index" ]]; then
        ip netns del "$ns" 2>/dev/null || true
        ip link del "kadm${index}h" 2>/dev/null || true
        ip route del "10.88.$index.0/24" 2>/dev/null || true
    fi
    # The kubelet's pod cgroups (--cgroup-root from kubeletExtraArgs).
    if [[ -f "$nodedir/cgroup-root" ]]; then remove_cgroup_root "$(cat "$nodedir/cgroup-root")"; fi
    if [[ -f "$nodedir/absent-files" ]]; then
        while read -r d; do if [[ -f "$d" && ! -s "$d" ]]; then rm -f "$d"; fi; done <"$nodedir/absent-files"
    fi
    if [[ -f "$nodedir/created-dirs" ]]; then
        tac "$nodedir/created-dirs" | while read -r d; do rmdir "$d" 2>/dev/null || log "warning: $d not removed"; done
    fi
    rm -rf "$nodedir"
}

# ---- stand-ins ----

kubelet_pid() { cat "$1/kubelet.pid" 2>/dev/null || true; }

stop_kubelet() {
    local nodedir="$1" pid
    pid="$(kubelet_pid "$nodedir")"
    [[ -n "$pid" ]] || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$nodedir/kubelet.pid"
}

# The kubelet as systemd would start it from deploy/10-kubeadm.conf: its Environment= lines, its
# EnvironmentFile=s (kubeadm-flags.env, /etc/default/kubelet), its ExecStart with $VARs split on
# whitespace; /usr/local/bin/rkubelet is NODEDIR/bin/kubelet.
start_kubelet() {
    local nodedir="$1" unit="$REPO_ROOT/deploy/10-kubeadm.conf" line exec="" w name
    local -a argv=()
    (
        set -a
        while IFS= read -r line; do
            case "$line" in
            Environment=*) eval "export ${line#Environment=}" ;;
            EnvironmentFile=*)
                line="${line#EnvironmentFile=}"
                line="${line#-}"
                # shellcheck disable=SC1090
                if [[ -f "$line" ]]; then source "$line"; fi
                ;;
            ExecStart=?*) exec="${line#ExecStart=}" ;;
            esac
        done <"$unit"
        for w in $exec; do
            if [[ "$w" == \$* ]]; then
                name="${w#\$}"
                # shellcheck disable=SC2206  # systemd splits unquoted $VAR on whitespace
                argv+=(${!name:-})
            else
                argv+=("$w")
            fi
        done
        argv[0]="$nodedir/bin/kubelet"
        for w in "${argv[@]}"; do
            if [[ "$w" == --cgroup-root=* ]]; then echo "${w#--cgroup-root=}" >"$nodedir/cgroup-root"; fi
        done
        printf '%q ' "${argv[@]}" >"$nodedir/kubelet.cmd"
        setsid "${argv[@]}" </dev/null >>"$nodedir/log/kubelet.log" 2>&1 &
        echo $! >"$nodedir/kubelet.pid"
    )
}

cmd_systemctl() {
    local nodedir="$1" verb="${2:-}" unit="${3:-}" pid
    unit="${unit%.service}"
    case "$verb" in
    daemon-reload) return 0 ;;
    start | restart | stop)
        [[ "$unit" == kubelet ]] || die "systemctl stand-in: only the kubelet unit, not '$unit'"
        stop_kubelet "$nodedir"
        [[ "$verb" == stop ]] || start_kubelet "$nodedir"
        ;;
    status | is-active | is-enabled)
        if [[ "$unit" != kubelet ]]; then
            [[ "$verb" != status ]] || printf 'Unit %s.service could not be found.\n   Loaded: not-found\n' "$unit"
            return 4
        fi
        pid="$(kubelet_pid "$nodedir")"
        case "$verb" in
        is-enabled) echo enabled ;;
        is-active)
            if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then echo active; else echo inactive && return 3; fi
            ;;
        status)
            printf '   Loaded: loaded (%s; enabled)\n' "$REPO_ROOT/deploy/10-kubeadm.conf"
            if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then echo '   Active: active (running)'; else echo '   Active: inactive (dead)' && return 3; fi
            ;;
        esac
        ;;
    *) die "systemctl stand-in: unsupported: $*" ;;
    esac
}

cmd_crictl() {
    local nodedir="$1" sock=""
    shift
    while [[ "${1:-}" == -* ]]; do
        case "$1" in
        -r | --runtime-endpoint) sock="${2#unix://}" && shift 2 ;;
        *) die "crictl stand-in: unsupported option $1" ;;
        esac
    done
    [[ -n "$sock" ]] || sock="$nodedir/ctd/containerd.sock"
    local c=(ctr -a "$sock" -n k8s.io)
    case "${1:-}" in
    info) "${c[@]}" version ;;
    inspecti)
        local refs
        refs="$("${c[@]}" images ls -q)" # not piped into grep -q: pipefail would see ctr's SIGPIPE
        grep -qxF -- "${2:?image}" <<<"$refs" || { echo "no such image: $2" >&2 && return 1; }
        ;;
    pull) echo "crictl stand-in: no registry is reachable here, cannot pull ${2:-}" >&2 && return 1 ;;
    pods)
        [[ "${2:-}" == -q ]] || die "crictl stand-in: only 'pods -q'"
        "${c[@]}" containers ls -q 'labels."io.cri-containerd.kind"==sandbox'
        ;;
    stopp | rmp)
        # ctr has no CRI sandbox calls; node-down removes what the runtime holds.
        echo "crictl stand-in: $1 is not supported (no CRI client); ${2:-}" >&2
        return 1
        ;;
    *) die "crictl stand-in: unsupported: $*" ;;
    esac
}

case "${1:-}" in
images) cmd_images ;;
import) cmd_import "${@:2}" ;;
node-up) cmd_node_up "${2:-}" "${3:-}" "${4:-}" ;;
node-down) cmd_node_down "${2:-}" ;;
run) cmd_run "${@:2}" ;;
systemctl) cmd_systemctl "${@:2}" ;;
crictl) cmd_crictl "${@:2}" ;;
*) die "usage: $0 images | import SOCK [REF...] | node-up NODEDIR INDEX [NAME] | run NODEDIR CMD... | node-down NODEDIR" ;;
esac
