#!/usr/bin/env bash
# Recovery benchmark (issue 22): rkubelet as a node of a real control plane, the apiserver stopped
# for 30 s, 2 min and 5 min, then: how long until a pod created right after its return is Running
# in the API, until a pod status that changed during the outage lands, until the Lease is renewed
# and the node is Ready; and how many connection attempts per second the node made while the
# apiserver was down (an iptables counter on SYNs to its port). Prints figures.
#
#   bench/recovery.sh [OUTAGE_SECS...]     default: 30 120 300
#
# Each outage runs the integration test `back_to_work_within_seconds_after_a_long_apiserver_outage`
# (crates/rkubelet/tests/recovery.rs, Env 175) with RK_RECOVERY_OUTAGE_SECS, under the shared
# integration-test lock, and keeps its `RECOVERY ...` line. The test also asserts the targets
# (with margins), so an outage that misses them prints FAILED beside its figures.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need_root
bench_traps ':'
outages=("$@")
((${#outages[@]})) || outages=(30 120 300)
LOCK=${RK_ITEST_LOCK:-/work/logs/itest.lock}

cd "$REPO_ROOT"
cargo test -p rkubelet --test recovery --no-run >&2
results=()
for secs in "${outages[@]}"; do
    log "outage of ${secs}s"
    out="$(mktemp)"
    status=ok
    RK_RECOVERY_OUTAGE_SECS="$secs" flock "$LOCK" cargo test -q -p rkubelet --test recovery -- \
        --nocapture --exact back_to_work_within_seconds_after_a_long_apiserver_outage >"$out" 2>&1 || status=FAILED
    line="$(grep -o 'RECOVERY .*' "$out" || echo "RECOVERY outage=${secs}s (no figures; see $out)")"
    results+=("$line [$status]")
    [[ $status == ok ]] && rm -f "$out"
done
printf '%s\n' "${results[@]}"
