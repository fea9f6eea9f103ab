#!/usr/bin/env bash
# hack/run-tests.sh's cgroup v2 binaries, all in one boot of hack/vm.sh's guest:
#
#   hack/vm.sh run OUT hack/vm/guest-tests.sh OUT
#
# OUT/list.tsv has one binary per line: id, executable, package dir, tests to skip (a list).
# Binary N's output goes to OUT/N.out and "SECONDS EXIT" to OUT/N.rc, so the host sees each
# result even if the guest dies later. Each binary has RK_GUEST_BINARY_TIMEOUT seconds
# (default 1200, what one boot per binary had).
#
# Why one boot: under emulation (TCG) a boot costs ~15 s, and a control plane ~3 min of CPU to
# start (kube-apiserver alone ~170 s, etcd ~40 s). The binaries' tests that need an apiserver
# share one (RK_TEST_SHARED_CONTROL_PLANE, tests/common ControlPlane): the first test that asks
# starts it, and between binaries this script force-deletes the pods and nodes the last one
# left, as each binary's own control plane used to start empty of them.
set -uo pipefail
out="${1:?usage: guest-tests.sh OUT}"
hack="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cp_dir=/tmp/rkt-cp-guest-shared
export RK_TEST_SHARED_CONTROL_PLANE="$cp_dir"

# The API objects a binary's tests leave: their kubelets are gone, so nothing would ever
# finish deleting their pods; --force removes the objects at once. A control plane that does not
# answer (or never finished starting) is taken down, so the next binary's tests start a new one.
clean_api() {
    [[ -d "$cp_dir" ]] || return 0
    local k=(timeout 300 kubectl --kubeconfig "$cp_dir/admin.kubeconfig" --request-timeout=120s)
    if [[ ! -e "$cp_dir/ready" ]] ||
        ! "${k[@]}" delete pods --all --all-namespaces --force --grace-period=0 >/dev/null 2>&1 </dev/null ||
        ! "${k[@]}" delete nodes --all >/dev/null 2>&1 </dev/null; then
        echo "guest: the shared control plane does not answer; stopping it"
        "$hack/control-plane.sh" down "$cp_dir" >/dev/null 2>&1
    fi
}

n=0
failed=0
while IFS=$'\t' read -r id exe dir skip; do
    n=$((n + 1))
    args=()
    for t in $skip; do args+=(--skip "$t"); done
    start=$SECONDS
    echo "guest: $id: started at $(date +%T) (uptime $(cut -d' ' -f1 /proc/uptime)s)"
    (cd "$dir" && exec timeout --kill-after=10 "${RK_GUEST_BINARY_TIMEOUT:-1200}" "$exe" "${args[@]}") \
        >"$out/$n.out" 2>&1 </dev/null
    rc=$?
    echo "$((SECONDS - start)) $rc" >"$out/$n.rc"
    # On the host at once: 9p may cache writes, and the guest may die in a later binary.
    sync "$out/$n.out" "$out/$n.rc"
    echo "guest: $id: exit $rc in $((SECONDS - start))s"
    [[ $rc -eq 0 ]] || failed=1
    clean_api
done <"$out/list.tsv"
"$hack/control-plane.sh" down "$cp_dir" >/dev/null 2>&1
exit "$failed"
