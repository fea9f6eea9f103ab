#!/usr/bin/env bash
# Install the Debian packages the hack scripts and integration tests need.
# Idempotent: a fast no-op (one dpkg-query) when everything is present.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PACKAGES=(
    containerd runc containernetworking-plugins busybox-static umoci
    protobuf-compiler iproute2 iptables curl jq procps gcc libc6-dev
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

need_root
log "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Only refresh the package lists when we actually have to install something.
apt-get update -qq
apt-get install -y "${missing[@]}"
log "done"
