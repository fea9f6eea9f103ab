#!/usr/bin/env bash
# Shared helpers for hack/*.sh. Source it; it does not run anything on its own.
# shellcheck disable=SC2034  # variables here are used by the scripts that source this file

# Directory holding the hack scripts, so callers work from any cwd.
HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HACK_DIR/.." && pwd)"

# Per-user cache for built artefacts (images); override with RK_CACHE.
RK_CACHE="${RK_CACHE:-${HOME:-/root}/.cache/rkubelet}"

# All diagnostics go to stderr so stdout stays machine-readable.
# Each line carries the UTC time: CI's log then says when each step began and how long it took.
log() {
    printf '[%s %s] %s\n' "$(basename "$0")" "$(date -u +%T)" "$*" >&2
}

die() {
    log "ERROR: $*"
    exit 1
}

# containerd, mounts, cgroups and netlink all need root.
need_root() {
    if [[ "$(id -u)" -ne 0 ]]; then
        die "must run as root"
    fi
}

need_cmd() {
    local c
    for c in "$@"; do
        command -v "$c" >/dev/null 2>&1 || die "missing command '$c' (run hack/install-deps.sh)"
    done
}

# remove_cgroup_root ROOT: the pod cgroups a kubelet made under --cgroup-root ROOT (kubelets leave
# them on exit, as upstream does), removed deepest first in every hierarchy once their processes
# are gone (containerd.sh down kills them).
remove_cgroup_root() {
    local root="$1" d
    for d in /sys/fs/cgroup/*"$root" /sys/fs/cgroup"$root"; do
        [[ -d "$d" ]] || continue
        find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || log "warning: cgroups left under $d"
    done
}

# unmount_tree DIR: every mount at or under DIR, deepest first. Up to three passes, since a lazy
# unmount of a parent can leave its children for the next one. Returns 1 when mounts are left.
unmount_tree() {
    local dir="${1%/}" pass m
    local -a mounts
    for pass in 1 2 3 4; do
        mapfile -t mounts < <(awk -v d="$dir" '$5 == d || index($5, d "/") == 1 {print $5}' /proc/self/mountinfo | sort -r)
        [[ ${#mounts[@]} -gt 0 ]] || return 0
        [[ $pass -lt 4 ]] || return 1
        for m in "${mounts[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
    done
}

# The host sysctls every kubelet sets at start, relative to /proc/sys, with the values it sets
# (upstream setupKernelTunables; rkubelet's cm::kernel_tunables). Tests and benches save the
# host's values and put them back.
KUBELET_TUNABLES=(vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1
    kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000)

# save_tunables FILE: the host's values now, as key=value lines.
save_tunables() {
    local kv k
    for kv in "${KUBELET_TUNABLES[@]}"; do
        k="${kv%%=*}"
        echo "$k=$(cat "/proc/sys/$k")"
    done >"$1.tmp"
    mv "$1.tmp" "$1"
}

# restore_tunables FILE: writes back the values FILE holds that differ from the host's now (only
# lines of the key=value form, keys of /proc/sys).
restore_tunables() {
    local k v
    [[ -f "$1" ]] || return 0
    while IFS='=' read -r k v; do
        [[ "$k" =~ ^[a-z0-9_/]+$ && -n "$v" && -f "/proc/sys/$k" ]] || continue
        [[ "$(cat "/proc/sys/$k")" == "$v" ]] && continue
        if echo "$v" >"/proc/sys/$k"; then log "restored /proc/sys/$k=$v"; else log "warning: cannot restore /proc/sys/$k=$v"; fi
    done <"$1"
}
