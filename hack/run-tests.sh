#!/usr/bin/env bash
# Builds every test binary of the workspace once, then runs them two at a time, as
# `cargo test --workspace --no-fail-fast` would one at a time: each integration test waits on
# containerd, the apiserver and timers far more than it computes, and each uses its own Env
# index (bridge, ports, dirs, cgroups), so two binaries side by side halve the suite's wall time
# on two cores. A few binaries measure or change the host as a whole and run alone afterwards
# (SERIAL below, with the reason). Every binary runs to the end even when another failed; the
# script fails if any did, and prints each binary's output as it finishes, with its wall time.
#
#   hack/run-tests.sh [LANES]     LANES parallel binaries (default 2; 1 = one at a time)
#   RK_TEST_FILTER=REGEX          only the binaries whose name matches (for a partial run)
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_cmd cargo jq

LANES="${1:-2}"
[[ "$LANES" =~ ^[1-9]$ ]] || die "LANES must be 1..9, got '$LANES'"

# Binaries that must not share the host with another test binary:
# - eviction: thresholds sit just below the machine's real memory.available / disk space;
#   another binary's pods would move them.
# - upstream_swap, csi_upstream: upstream's kubelet logs under the host's /var/log/pods and
#   restores host kernel tunables when done.
# - kernel_tunables: sets host kernel tunables to other values than every kubelet sets.
# - stats, metrics, cadvisor, overhead, oom: read node-wide CPU, memory and cgroup figures.
# - kubeadm: a whole cluster (two nodes, kube-proxy's iptables) and the most CPU of any test.
SERIAL=" eviction upstream_swap csi_upstream kernel_tunables stats metrics cadvisor overhead oom kubeadm "

# Binaries that run a second time on cgroup v2, in hack/vm.sh's guest, when this host's
# /sys/fs/cgroup is cgroup v1 (on a cgroup v2 host their first run is the v2 one). One at a
# time, last, in this order, in one boot (hack/vm/guest-tests.sh): the guest is emulated (TCG)
# and takes both cores, about 8x slower than native, so the tests' waits get six times as long
# (RK_TEST_PATIENCE). Those without a control plane first, so the shared one, once started,
# idles through no other binary's test.
V2_GUEST=" cadvisor cpu_manager overhead cgroups devices oom "
# Tests of those binaries not run again in the guest (binary:test), because nothing in them
# depends on the cgroup version and each would cost the guest a control plane's start (under TCG
# etcd and kube-apiserver take ~2 min to start, ~4 s natively), or start the shared one before
# binaries that need none. cadvisor's Prometheus test checks TLS scraping of the four endpoints;
# the series it reads on cgroup v2 are asserted by the binary's other test, which runs in the
# guest.
V2_GUEST_SKIP=" cadvisor:prometheus_scrapes_every_metrics_endpoint_over_tls "

work="$(mktemp -d /tmp/run-tests.XXXXXX)"
trap 'rm -rf "$work"' EXIT
history="$RK_CACHE/test-durations.tsv" # name<TAB>seconds of the last run, to start the longest first
mkdir -p "$RK_CACHE"
touch "$history"

log "building the test binaries"
cargo test --workspace --locked --no-run --message-format=json-render-diagnostics |
    jq -r 'select(.reason == "compiler-artifact" and .profile.test and .executable != null)
           | [.target.name, .target.kind[0], .executable, (.manifest_path | rtrimstr("/Cargo.toml"))]
           | @tsv' >"$work/all.tsv"
[[ -s "$work/all.tsv" ]] || die "cargo built no test binary"
if [[ -n "${RK_TEST_FILTER:-}" ]]; then
    awk -F'\t' -v re="$RK_TEST_FILTER" '$1 ~ re' "$work/all.tsv" >"$work/filtered.tsv"
    mv "$work/filtered.tsv" "$work/all.tsv"
fi

# name kind exe dir -> "seconds<TAB>id<TAB>exe<TAB>dir", longest (by the last run) first.
order() {
    local name kind exe dir id secs
    while IFS=$'\t' read -r name kind exe dir; do
        id="$name"
        [[ "$kind" == test ]] || id="$name ($kind unit tests)"
        secs="$(awk -F'\t' -v n="$id" '$1 == n {print $2}' "$history" | tail -1)"
        printf '%s\t%s\t%s\t%s\n' "${secs:-0}" "$id" "$exe" "$dir"
    done | sort -t$'\t' -k1,1nr | cut -f2-
}
awk -F'\t' -v s="$SERIAL" 'index(s, " " $1 " ") == 0' "$work/all.tsv" | order >"$work/parallel.tsv"
awk -F'\t' -v s="$SERIAL" 'index(s, " " $1 " ") != 0' "$work/all.tsv" | order >"$work/serial.tsv"
: >"$work/guest.tsv"
if [[ ! -e /sys/fs/cgroup/cgroup.controllers ]]; then
    for b in $V2_GUEST; do
        awk -F'\t' -v b="$b" '$2 == "test" && $1 == b {print $1 " (cgroup v2 guest)\t" $3 "\t" $4}' "$work/all.tsv"
    done >"$work/guest.tsv"
fi

# run_one ID EXE DIR: runs one binary in its package dir (as cargo does), then prints its whole
# output at once (under a lock, so two outputs never interleave) and records its result.
run_one() {
    local id="$1" exe="$2" dir="$3" out rc start secs
    out="$work/out.$RANDOM$RANDOM"
    start=$SECONDS
    rc=0
    (cd "$dir" && "$exe") >"$out" 2>&1 </dev/null || rc=$?
    secs=$((SECONDS - start))
    {
        flock 8
        printf '\n     Running %s (%s), %ss, exit %s\n' "$id" "${exe#"$REPO_ROOT"/}" "$secs" "$rc"
        cat "$out"
        printf '%s\t%s\t%s\n' "$id" "$secs" "$rc" >>"$work/results.tsv"
    } 8>"$work/print.lock"
    rm -f "$out"
}

run_list() {
    local lanes="$1" list="$2" id exe dir
    while IFS=$'\t' read -r id exe dir; do
        while (($(jobs -rp | wc -l) >= lanes)); do wait -n || true; done
        run_one "$id" "$exe" "$dir" &
    done <"$list"
    wait
}

started=$SECONDS
log "running $(wc -l <"$work/parallel.tsv") test binaries, $LANES at a time"
run_list "$LANES" "$work/parallel.tsv"
log "running $(wc -l <"$work/serial.tsv") test binaries alone:$SERIAL"
run_list 1 "$work/serial.tsv"
if [[ -s "$work/guest.tsv" ]]; then
    log "running $(wc -l <"$work/guest.tsv") test binaries in one boot of the cgroup v2 guest (hack/vm.sh):$V2_GUEST"
    # One boot for all, sharing one control plane (hack/vm/guest-tests.sh says why), each
    # binary with the boot's former timeout; results are read back per binary.
    guest="$work/guest"
    mkdir -p "$guest"
    while IFS=$'\t' read -r id exe dir; do
        skip="$(tr ' ' '\n' <<<"$V2_GUEST_SKIP" | awk -F: -v b="${id%% *}" '$1 == b {print $2}' | xargs)"
        [[ -z "$skip" ]] || log "$id: not run in the guest: $skip"
        printf '%s\t%s\t%s\t%s\n' "$id" "$exe" "$dir" "$skip"
    done <"$work/guest.tsv" >"$guest/list.tsv"
    # The guest's time is what is left of the suite's budget (test.sh's RK_CI_DEADLINE), so a
    # guest that runs slow or hangs ends in this script's own report of each binary, not in
    # CI's kill with nothing printed (stop 43's CI: killed at 5400 s inside the guest, and no
    # line said where). Its console goes to this log as it comes, for the same reason.
    # boot_guest DIR: one boot for the binaries in DIR/list.tsv; sets guest_rc.
    boot_guest() {
        local d="$1" vm_timeout left
        vm_timeout="${RK_VM_TIMEOUT:-$((1260 * $(wc -l <"$d/list.tsv")))}"
        if [[ -n "${RK_CI_DEADLINE:-}" ]]; then
            left=$((RK_CI_DEADLINE - $(date +%s)))
            ((left >= 60)) || left=60
            if ((left < vm_timeout)); then
                log "the guest gets the ${left}s left before RK_CI_DEADLINE (not ${vm_timeout}s)"
                vm_timeout=$left
            fi
        fi
        {
            rc=0
            env RK_TEST_PATIENCE=6 RK_GUEST_BINARY_TIMEOUT=1200 \
                RK_VM_KEEP="$(cut -f2 "$d/list.tsv" | xargs -n1 dirname | sort -u | xargs)" \
                RK_VM_TIMEOUT="$vm_timeout" \
                "$HACK_DIR/vm.sh" run "$d" "$HACK_DIR/vm/guest-tests.sh" "$d" </dev/null 2>&1 || rc=$?
            echo "$rc" >"$d/vm.rc"
        } | tee "$d/console" | sed -u 's/^/     [guest] /' >&2
        read -r guest_rc <"$d/vm.rc"
    }
    boot_guest "$guest"
    # A guest whose kernel locked up (vm.sh's exit 123: a CPU stuck for minutes under TCG, seen
    # once in the first binary of a cold run and not again in the same binary's reruns) is booted
    # once more for the binaries it had not finished; those it finished keep their results. Each
    # binary's result is then that of its last run, and this log says which were run again.
    if [[ "$guest_rc" -eq 123 ]]; then
        mkdir -p "$guest/again"
        n=0
        while IFS= read -r line; do
            n=$((n + 1))
            [[ -s "$guest/$n.rc" ]] || printf '%s\t%s\n' "$n" "$line"
        done <"$guest/list.tsv" >"$guest/again/index.tsv"
        cut -f2- "$guest/again/index.tsv" >"$guest/again/list.tsv"
        log "the guest's kernel locked up; booting it again for the binaries it had not finished: $(cut -f1 "$guest/again/list.tsv" | xargs)"
        first_rc=$guest_rc
        boot_guest "$guest/again"
        m=0
        while IFS=$'\t' read -r n _; do
            m=$((m + 1))
            [[ ! -e "$guest/$n.out" ]] || mv "$guest/$n.out" "$guest/$n.first.out"
            [[ ! -e "$guest/again/$m.out" ]] || mv "$guest/again/$m.out" "$guest/$n.out"
            [[ ! -e "$guest/again/$m.rc" ]] || mv "$guest/again/$m.rc" "$guest/$n.rc"
        done <"$guest/again/index.tsv"
        guest_rc="$first_rc, then $guest_rc on its second boot"
    fi
    n=0
    while IFS=$'\t' read -r id exe _ _; do
        n=$((n + 1))
        secs=0 rc=125 # no result: the guest died or timed out before this binary finished
        [[ ! -s "$guest/$n.rc" ]] || read -r secs rc <"$guest/$n.rc"
        if [[ -e "$guest/$n.first.out" ]]; then
            printf '\n     %s: its run in the first boot, cut off when the guest locked up:\n' "$id"
            cat "$guest/$n.first.out"
        fi
        printf '\n     Running %s (%s), %ss, exit %s\n' "$id" "${exe#"$REPO_ROOT"/}" "$secs" "$rc"
        cat "$guest/$n.out" 2>/dev/null
        printf '%s\t%s\t%s\n' "$id" "$secs" "$rc" >>"$work/results.tsv"
    done <"$guest/list.tsv"
    printf '\n     The guest exited %s; its console is above, lines marked [guest].\n' "$guest_rc"
fi
doc_rc=0
if [[ -z "${RK_TEST_FILTER:-}" ]]; then
    log "doc tests"
    cargo test --workspace --locked --doc || doc_rc=$?
fi

# Remember this run's durations for the next run's order (a partial run updates its own).
awk -F'\t' 'NR == FNR {new[$1] = $2; next} !($1 in new) {print} END {for (n in new) print n "\t" new[n]}' \
    "$work/results.tsv" "$history" >"$work/history.tsv" && cp "$work/history.tsv" "$history"

failed="$(awk -F'\t' '$3 != 0 {print "  " $1 " (exit " $3 ")"}' "$work/results.tsv")"
log "test binaries: $(wc -l <"$work/results.tsv") run in $((SECONDS - started))s; slowest:"
sort -t$'\t' -k2,2nr "$work/results.tsv" | head -8 | awk -F'\t' '{printf "  %5ss  %s\n", $2, $1}' >&2
if [[ -n "$failed" || "$doc_rc" -ne 0 ]]; then
    [[ -z "$failed" ]] || log "FAILED:"$'\n'"$failed"
    [[ "$doc_rc" -eq 0 ]] || log "FAILED: doc tests (exit $doc_rc)"
    exit 1
fi
log "every test binary passed"
