#!/usr/bin/env bash
# Removes what integration-test processes that no longer exist left behind: a test run that was
# killed half-way (a session cut off, a CI job cancelled) never ran its clean-up, and test.sh's
# leftover check would then blame the next run for it.
#
# Every test names what it makes after its own pid: /tmp/rkt-<tag>-<pid> (Env dirs, control
# planes rkt-cp-*, registries rkt-reg-*) and cgroups /rkt-<index>-<pid>. Only things whose pid is
# no longer a live process are removed, so tests running at the same time are never touched.
# Prints one line per thing removed (on stderr), so a run says what it inherited.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_root

# owner NAME: the pid at the end of rkt-<tag>-<pid>, or nothing.
owner() {
    [[ "$1" =~ ^rkt-.+-([0-9]+)$ ]] && echo "${BASH_REMATCH[1]}"
}

dead() {
    local pid="$1"
    [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null
}

# Kill every process in a cgroup subtree, then remove the subtree deepest first.
remove_cgroup_dir() {
    local top="$1" d
    while IFS= read -r d; do
        xargs -r kill -KILL <"$d/cgroup.procs" 2>/dev/null || true
    done < <(find "$top" -type d 2>/dev/null)
    sleep 0.2
    find "$top" -depth -type d -exec rmdir {} + 2>/dev/null || log "warning: cannot remove cgroup $top"
}

for dir in /tmp/rkt-*; do
    [[ -d "$dir" ]] || continue
    pid="$(owner "$(basename "$dir")")" || true
    dead "$pid" || continue
    log "stale: $dir (pid $pid is gone)"
    # Tests that change the host's kernel tunables (kernel.panic, vm.overcommit_memory, ...;
    # upstream_swap, csi_upstream, kernel_tunables) save them first; put them back.
    restore_tunables "$dir/host-tunables"
    case "$(basename "$dir")" in
    rkt-cp-*) "$HACK_DIR/control-plane.sh" down "$dir" || true ;;
    rkt-reg-*) "$HACK_DIR/registry.sh" down "$dir" || true ;;
    rkt-kadm-*)
        # The kubeadm test's nodes, last made first down (the first made the host's mount
        # points): node-down removes each node's netns, veth, route, containerd and host dirs.
        for node in $(find "$dir" -mindepth 1 -maxdepth 1 -type d -name 'n*' | sort -r); do
            "$HACK_DIR/kubeadm.sh" node-down "$node" || true
        done
        ;;
    *)
        # Env dirs hold their containerd instance in ctd/; down kills its shims, containers,
        # mounts, cgroups, portmap rules and bridge.
        if [[ -d "$dir/ctd" ]]; then "$HACK_DIR/containerd.sh" down "$dir/ctd" || true; fi
        ;;
    esac
    # Whatever still runs from the dir (a kubelet, a plugin), then what is still mounted under it
    # (a kubelet's root dir bound onto itself, volumes), deepest first.
    pkill -KILL -f -- "$dir/" 2>/dev/null || true
    unmount_tree "$dir" || log "warning: mounts left under $dir"
    rm -rf "$dir" 2>/dev/null || log "warning: cannot remove $dir"
done

for cg in /sys/fs/cgroup/*/rkt-* /sys/fs/cgroup/rkt-*; do
    [[ -d "$cg" ]] || continue
    pid="$(owner "$(basename "$cg")")" || true
    dead "$pid" || continue
    log "stale: cgroup $cg (pid $pid is gone)"
    remove_cgroup_dir "$cg"
done

# A bridge rkbr<index> belongs to a live instance while some containerd dir under /tmp/rkt-* still
# records that index (containerd.sh up writes DIR/index); the stale ones were removed above.
mapfile -t in_use < <(find /tmp -maxdepth 5 -path '/tmp/rkt-*' -name index -type f -exec cat {} + 2>/dev/null || true)
while IFS= read -r br; do
    index="${br#rkbr}"
    if ! printf '%s\n' "${in_use[@]}" | grep -qx -- "$index"; then
        log "stale: bridge $br"
        ip link del "$br" 2>/dev/null || true
    fi
done < <(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E '^rkbr[0-9]+$' || true)
