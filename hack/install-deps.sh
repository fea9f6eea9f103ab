#!/usr/bin/env bash
# Install the Debian packages the hack scripts and integration tests need.
# Idempotent: a fast no-op (one dpkg-query) when everything is present.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PACKAGES=(
    containerd runc containernetworking-plugins busybox-static umoci
    protobuf-compiler iproute2 iptables curl jq procps gcc libc6-dev
    docker-registry skopeo apache2-utils prometheus
    conntrack
    qemu-system-x86 # hack/vm.sh: the cgroup v2 guest
)

# Print the packages dpkg does not report as fully installed.
missing_packages() {
    local p status
    for p in "${PACKAGES[@]}"; do
        status="$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)"
        if [[ "$status" != "installed" ]]; then
            printf '%s\n' "$p"
        fi
    done
}

mapfile -t missing < <(missing_packages)
if [[ ${#missing[@]} -eq 0 ]]; then
    log "all dependencies present"
    exit 0
fi

# docker-registry's postinst starts a system registry on :5000 (init script or
# systemd unit), prometheus's one on :9090 (and node-exporter's on :9100).
# hack/registry.sh runs private registries on free ports and the tests run the
# prometheus binary with their own config, so keep services from starting during the install (invoke-rc.d and deb-systemd-invoke
# both ask policy-rc.d; 101 = action forbidden), unless the admin has a policy.
POLICY=/usr/sbin/policy-rc.d
own_policy=0
restore_policy() {
    if ((own_policy)); then rm -f "$POLICY"; fi
}

# Stop and disable a system service the package may have started anyway (an
# earlier install, or an admin policy that allowed it). Never touches our own
# instances: those are not run from the init script or the unit.
stop_system_service() {
    local svc=$1
    if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null 2>&1; then
        systemctl disable --now "$svc.service" >/dev/null 2>&1 || true
    elif [[ -x /etc/init.d/$svc && -f /run/$svc.pid ]]; then
        "/etc/init.d/$svc" stop >/dev/null 2>&1 || true
        update-rc.d "$svc" disable >/dev/null 2>&1 || true
    fi
}

need_root
log "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
starts_service=0
for p in docker-registry prometheus; do
    if [[ " ${missing[*]} " == *" $p "* ]]; then starts_service=1; fi
done
if ((starts_service)) && [[ ! -e "$POLICY" ]]; then
    trap restore_policy EXIT
    printf '#!/bin/sh\n# hack/install-deps.sh: no services started during install\nexit 101\n' >"$POLICY"
    chmod 0755 "$POLICY"
    own_policy=1
fi
# Only refresh the package lists when we actually have to install something.
apt-get update -qq
apt-get install -y "${missing[@]}"
restore_policy
own_policy=0
for svc in docker-registry prometheus prometheus-node-exporter; do
    if [[ " ${missing[*]} " == *" ${svc%-node-exporter} "* ]]; then
        stop_system_service "$svc"
    fi
done
log "done"
