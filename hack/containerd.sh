#!/usr/bin/env bash
# A private containerd (CRI enabled) per test/benchmark, so runs never collide
# with each other or with a system containerd.
#
#   hack/containerd.sh up DIR INDEX   INDEX in 1..255 picks bridge rkbrINDEX and
#                                     subnet 10.88.INDEX.0/24; prints KEY=VALUE lines
#   hack/containerd.sh down DIR       kill everything the instance started, rm -rf DIR
#
# CONTAINERD_METRICS=ADDR (host:port) serves containerd's Prometheus metrics there, among them
# grpc_server_handled_total per CRI method: what a kubelet asked of the runtime (benchmarks).
#
# Registries: the CRI plugin reads DIR/certs.d/<host:port>/hosts.toml (config_path)
# on every pull, so a registry can be added while it runs (hack/registry.sh hosts).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

TASK_STATE=io.containerd.runtime.v2.task # bundles live in DIR/state/$TASK_STATE/NS/ID

# Render the templates in hack/containerd/. The CNI network is named
# rkubelet-INDEX so `down` can find this instance's portmap iptables rules.
write_config() {
    local dir="$1" index="$2"
    render() { sed -e "s|@DIR@|$dir|g" -e "s|@INDEX@|$index|g" "$HACK_DIR/containerd/$1.in" >"$2"; }
    render config.toml "$dir/config.toml"
    if [[ -n "${CONTAINERD_METRICS:-}" ]]; then
        sed -i "/^\[metrics\]/,/^ *address/ s|address = \"\"|address = \"$CONTAINERD_METRICS\"|" "$dir/config.toml"
    fi
    render 10-rkubelet.conflist "$dir/cni/net.d/10-rkubelet.conflist"
}

# cri_ready SOCK: daemon answers and the CRI plugin loaded. ctr otherwise waits
# 10 s for a socket that is not there yet.
cri_ready() {
    [[ -S "$1" ]] || return 1
    ctr -a "$1" --connect-timeout 1s version >/dev/null 2>&1 &&
        ctr -a "$1" --connect-timeout 1s plugins ls 2>/dev/null |
        awk '$1 == "io.containerd.grpc.v1" && $2 == "cri" && $NF == "ok" {f=1} END {exit !f}'
}

# alive PID: running and not a zombie (PID 1 here may be slow to reap orphans).
alive() {
    local st
    st="$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null)" || return 1
    [[ -n "$st" && "${st:0:1}" != Z ]]
}

cmd_up() {
    local dir="${1:?usage: containerd.sh up DIR INDEX}" index="${2:?usage: containerd.sh up DIR INDEX}"
    need_root
    need_cmd containerd ctr runc ip
    if ! [[ "$index" =~ ^[0-9]+$ ]] || ((index < 1 || index > 255)); then
        die "INDEX must be 1..255, got '$index'"
    fi
    dir="$(realpath -m "$dir")"
    # Plain characters only: DIR goes through sed, TOML strings and mountinfo parsing.
    [[ "$dir" =~ ^[A-Za-z0-9/._+-]+$ ]] || die "DIR may only use [A-Za-z0-9/._+-]: $dir"
    local sock="$dir/containerd.sock" logf="$dir/log/containerd.log" pid
    # sun_path is 108 bytes; the ttrpc socket has the longest name.
    ((${#sock} + 6 < 108)) || die "DIR too long for a unix socket path: $dir"
    if [[ -f "$dir/containerd.pid" ]] && alive "$(cat "$dir/containerd.pid")"; then
        die "an instance is already running in $dir (run: $0 down $dir)"
    fi
    if ip link show "rkbr$index" >/dev/null 2>&1; then
        log "warning: bridge rkbr$index exists; is INDEX $index in use by another instance?"
    fi
    mkdir -p "$dir"/{root,state,cni/net.d,cni/ipam,opt,log,runc,certs.d}
    echo "$index" >"$dir/index"
    write_config "$dir" "$index"

    # setsid: own session, so the caller's terminal/signals never reach it.
    setsid containerd --config "$dir/config.toml" </dev/null >>"$logf" 2>&1 &
    pid=$!
    echo "$pid" >"$dir/containerd.pid"
    local deadline=$((SECONDS + 30))
    while ((SECONDS < deadline)) && alive "$pid"; do
        cri_ready "$sock" && break
        sleep 0.1
    done
    if ! cri_ready "$sock"; then
        log "containerd did not become ready; log tail:"
        tail -n 40 "$logf" >&2 || true
        kill -KILL "$pid" 2>/dev/null || true # DIR is kept for inspection; `down` removes it
        exit 1
    fi
    if ! "$HACK_DIR/images.sh" import "$sock"; then
        tail -n 20 "$logf" >&2 || true
        die "image import failed"
    fi
    {
        echo "CONTAINERD_SOCK=$sock"
        echo "CONTAINERD_PID=$pid"
        echo "CONTAINERD_LOG=$logf"
        echo "POD_SUBNET=10.88.$index.0/24"
        echo "CNI_BRIDGE=rkbr$index"
        echo "CONTAINERD_CERTS_D=$dir/certs.d"
    } | tee "$dir/env"
    log "containerd ready at $sock"
}

# pids_with_args FLAG VALUE: processes whose argv has FLAG immediately followed by VALUE.
pids_with_args() {
    local p prev arg
    for p in /proc/[0-9]*; do
        prev=""
        while IFS= read -r -d '' arg; do
            if [[ "$prev" == "$1" && "$arg" == "$2" ]]; then
                echo "${p#/proc/}"
                break
            fi
            prev="$arg"
        done <"$p/cmdline" 2>/dev/null || true
    done
}

kill_wait() { # kill_wait SIGNAL PID...: signal, then wait up to 5s for all to exit
    local sig="$1" p i n
    shift
    [[ $# -gt 0 ]] || return 0
    kill "-$sig" "$@" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        n=0
        for p in "$@"; do if alive "$p"; then n=1; fi; done
        ((n)) || return 0
        sleep 0.05
    done
}

cmd_down() {
    local dir="${1:?usage: containerd.sh down DIR}"
    need_root
    dir="$(realpath -m "$dir")"
    [[ -d "$dir" ]] || { log "nothing to do: $dir does not exist"; return 0; }
    local sock="$dir/containerd.sock" index="" b ns id addr m pass
    [[ -f "$dir/index" ]] && index="$(cat "$dir/index")"

    # 1. containerd itself (it leaves shims and containers running on exit).
    mapfile -t pids < <(pids_with_args --config "$dir/config.toml")
    kill_wait TERM "${pids[@]}"
    kill_wait KILL "${pids[@]}"

    # 2. Containers: runc delete --force kills every process in the container's
    #    cgroup and removes the cgroup; then the shim and its socket in /run/containerd/s.
    local -a ids=()
    for b in "$dir/state/$TASK_STATE"/*/*/; do
        [[ -d "$b" ]] || continue
        b="${b%/}" id="${b##*/}" ns="$(basename "$(dirname "$b")")"
        ids+=("$id")
        # CRI containers use our private runc root; `ctr run` ones the default.
        # (delete --force of an unknown id "succeeds", so test for the state dir.)
        for m in "$dir/runc/$ns" "/run/containerd/runc/$ns"; do
            if [[ -d "$m/$id" ]]; then runc --root "$m" delete --force "$id" >/dev/null 2>&1 || true; fi
        done
        if [[ -f "$b/shim.pid" ]]; then kill -KILL "$(cat "$b/shim.pid")" 2>/dev/null || true; fi
        if [[ -f "$b/address" ]]; then
            addr="$(cat "$b/address")"
            [[ "$addr" == unix:///run/containerd/s/* ]] && rm -f "${addr#unix://}"
        fi
    done
    # Any shim whose bundle is already gone.
    mapfile -t pids < <(pids_with_args -address "$sock")
    kill_wait KILL "${pids[@]}"

    # 3. Every mount under DIR (rootfs overlays, sandbox shm, netns), deepest first.
    unmount_tree "$dir" || log "warning: mounts left under $dir"

    # 4. Leftover cgroups of this instance's containers and sandboxes (any controller,
    #    any parent, since rkubelet may set cgroup_parent). Kill stragglers first.
    for m in "$dir/root/io.containerd.grpc.v1.cri/"{containers,sandboxes}/*; do
        [[ -e "$m" ]] && ids+=("${m##*/}")
    done
    for id in $(printf '%s\n' "${ids[@]}" | sort -u); do
        while IFS= read -r m; do
            xargs -r kill -KILL <"$m/cgroup.procs" 2>/dev/null || true
            rmdir "$m" 2>/dev/null || { sleep 0.2; rmdir "$m" 2>/dev/null || log "warning: cannot remove cgroup $m"; }
        done < <(find /sys/fs/cgroup -mindepth 2 -depth -type d -name "$id" 2>/dev/null)
    done

    # 5. Network: portmap rules tagged with this instance's network, then the bridge.
    if [[ -n "$index" ]]; then
        local -a rules=()
        local i chain
        mapfile -t rules < <(iptables -t nat -S CNI-HOSTPORT-DNAT 2>/dev/null | grep '^-A' || true)
        for ((i = ${#rules[@]}; i >= 1; i--)); do
            [[ "${rules[i - 1]}" == *"dnat name: \\\"rkubelet-$index\\\""* ]] || continue
            chain="$(grep -o -- '-j CNI-DN-[0-9a-f]*' <<<"${rules[i - 1]}" | cut -d' ' -f2)"
            iptables -t nat -D CNI-HOSTPORT-DNAT "$i"
            if [[ -n "$chain" ]]; then iptables -t nat -F "$chain" && iptables -t nat -X "$chain"; fi
        done
        ip link del "rkbr$index" 2>/dev/null || true
    fi

    # 6. State, IPAM data (host-local dataDir), images: all under DIR.
    rm -rf "$dir"
    log "instance at $dir removed"
}

case "${1:-}" in
up) cmd_up "${2:-}" "${3:-}" ;;
down) cmd_down "${2:-}" ;;
*)
    echo "usage: $0 up DIR INDEX | down DIR" >&2
    exit 2
    ;;
esac
