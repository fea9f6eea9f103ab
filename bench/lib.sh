#!/usr/bin/env bash
# Shared by the bench scripts (source it): hack/lib.sh, a free port, and the host as the bench
# found it. Every kubelet a bench starts sets the host's kernel tunables (upstream
# setupKernelTunables: kernel.panic, vm.overcommit_memory, the key quotas...); bench_traps saves
# their values and writes them back when the bench exits, however it exits.
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/../hack/lib.sh"

BENCH_TUNABLES=""

# bench_traps 'COMMANDS': saves the host's tunables; on exit runs COMMANDS, then restores them.
# Ctrl-C and TERM exit through it too. Call it before any kubelet starts.
bench_traps() {
    BENCH_TUNABLES="$(mktemp /tmp/bench-tunables.XXXXXX)"
    save_tunables "$BENCH_TUNABLES"
    # shellcheck disable=SC2064 # the commands are the caller's, expanded now on purpose
    # set +e: a failing clean-up command must not skip the restore (errexit applies in traps).
    trap "set +e; $1; restore_tunables \"$BENCH_TUNABLES\"; rm -f \"$BENCH_TUNABLES\"" EXIT
    trap 'exit 130' INT TERM
}

# set_kubelet_tunables: upstream kubelet's values for the run (for a run with no kubelet, such as
# the CRI floor: runc gives every container a session keyring, and the host's default
# kernel.keys.root_maxkeys of 200 fails StartContainer past ~100 pods).
set_kubelet_tunables() {
    local kv
    for kv in "${KUBELET_TUNABLES[@]}"; do echo "${kv#*=}" >"/proc/sys/${kv%%=*}"; done
}

# containerd_down DIR: hack/containerd.sh down DIR, keeping containerd's log first as
# /tmp/<DIR's name>.containerd.log (down removes DIR with it; a benchmark that lost its runtime
# could not say why).
containerd_down() {
    local dir="$1"
    [[ ! -f "$dir/log/containerd.log" ]] || cp "$dir/log/containerd.log" "/tmp/${dir##*/}.containerd.log" || true
    "$HACK_DIR/containerd.sh" down "$dir"
}

# free_port PORT: PORT or the next one nothing listens on.
free_port() {
    local p="$1"
    while ss -Htln "sport = :$p" | grep -q .; do p=$((p + 1)); done
    echo "$p"
}
