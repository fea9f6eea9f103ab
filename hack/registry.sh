#!/usr/bin/env bash
# A private plain-HTTP image registry (Debian's docker-registry, distribution 2.x)
# on a free loopback port, for tests that pull real images. No external registry
# is reachable, so images built by hack/images.sh are pushed into it with skopeo.
#
#   hack/registry.sh up DIR [USER:PASSWORD]    start it; prints REGISTRY=127.0.0.1:PORT
#                                              (and more KEY=VALUE lines, also in DIR/env);
#                                              with USER:PASSWORD it requires basic auth
#                                              (htpasswd, bcrypt) for every request, and
#                                              push uses those credentials
#   hack/registry.sh push DIR IMAGE NAME:TAG   push IMAGE (a ref from `images.sh list`)
#                                              as REGISTRY/NAME:TAG; prints DIGEST=sha256:...
#   hack/registry.sh hosts DIR CERTS_D [NAME]  let a containerd whose CRI config_path is
#                                              CERTS_D pull from it over plain HTTP, as
#                                              REGISTRY or as NAME[:PORT] (a name only
#                                              containerd knows: no DNS needed)
#   hack/registry.sh down DIR                  stop it and rm -rf DIR
#
# Requests are logged (access log) to DIR/log/registry.log.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

REGISTRY_BIN=/usr/bin/docker-registry

# alive PID: running and not a zombie.
alive() {
    local st
    st="$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null)" || return 1
    [[ -n "$st" && "${st:0:1}" != Z ]]
}

# A TCP port nothing listens on (not 5000, where a system registry may be).
# The registry may still lose a race for it; cmd_up retries then.
pick_port() {
    local port i
    for ((i = 0; i < 100; i++)); do
        port=$((20000 + RANDOM % 30000))
        if [[ -z "$(ss -Htln "sport = :$port" 2>/dev/null)" ]]; then
            echo "$port"
            return 0
        fi
    done
    die "no free port found"
}

write_config() {
    local dir="$1" port="$2"
    cat >"$dir/config.yml" <<EOF
# Written by hack/registry.sh: filesystem storage under DIR, loopback only.
version: 0.1
log:
  level: info
  formatter: text
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: $dir/storage
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: 127.0.0.1:$port
  # Fixed so the registry does not log a warning about a random one.
  secret: rkubelet-test-registry
EOF
    if [[ -f "$dir/htpasswd" ]]; then
        cat >>"$dir/config.yml" <<EOF
auth:
  htpasswd:
    realm: rkubelet-test
    path: $dir/htpasswd
EOF
    fi
}

# answers PORT: a distribution registry (not some other server) answers on PORT
# (401 when it requires auth, so no -f).
answers() {
    local headers
    headers="$(curl -sS -m 2 -o /dev/null -D - "http://127.0.0.1:$1/v2/" 2>/dev/null)" || return 1
    grep -qi '^docker-distribution-api-version: registry/2.0' <<<"$headers"
}

env_value() { # env_value DIR KEY
    sed -n "s/^$2=//p" "$1/env" 2>/dev/null
}

cmd_up() {
    local dir="${1:?usage: registry.sh up DIR [USER:PASSWORD]}" creds="${2:-}"
    need_cmd "$REGISTRY_BIN" curl ss setsid
    dir="$(realpath -m "$dir")"
    # Plain characters only: DIR goes into YAML and argv matching.
    [[ "$dir" =~ ^[A-Za-z0-9/._+-]+$ ]] || die "DIR may only use [A-Za-z0-9/._+-]: $dir"
    if [[ -f "$dir/registry.pid" ]] && alive "$(cat "$dir/registry.pid")"; then
        die "a registry is already running in $dir (run: $0 down $dir)"
    fi
    mkdir -p "$dir"/{storage,log}
    rm -f "$dir/htpasswd" "$dir/creds"
    if [[ -n "$creds" ]]; then
        [[ "$creds" == *:* ]] || die "credentials must be USER:PASSWORD"
        need_cmd htpasswd
        # -B: bcrypt, the only hash distribution's htpasswd accepts; -i reads the password
        # from stdin so it stays out of argv.
        htpasswd -B -i -c "$dir/htpasswd" "${creds%%:*}" <<<"${creds#*:}" 2>/dev/null ||
            die "htpasswd failed"
        (umask 077 && printf '%s\n' "$creds" >"$dir/creds")
    fi
    local logf="$dir/log/registry.log" port pid attempt deadline
    for attempt in 1 2 3 4 5; do
        port="$(pick_port)"
        write_config "$dir" "$port"
        # setsid: own session, so the caller's terminal/signals never reach it.
        setsid "$REGISTRY_BIN" serve "$dir/config.yml" </dev/null >>"$logf" 2>&1 &
        pid=$!
        echo "$pid" >"$dir/registry.pid"
        deadline=$((SECONDS + 20))
        while ((SECONDS < deadline)) && alive "$pid"; do
            answers "$port" && break
            sleep 0.1
        done
        if alive "$pid" && answers "$port"; then
            {
                echo "REGISTRY=127.0.0.1:$port"
                echo "REGISTRY_PID=$pid"
                echo "REGISTRY_LOG=$logf"
            } | tee "$dir/env"
            log "registry ready at http://127.0.0.1:$port"
            return 0
        fi
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        if grep -q 'address already in use' "$logf"; then
            log "port $port was taken (attempt $attempt), trying another"
            : >"$logf"
            continue
        fi
        break
    done
    log "registry did not become ready; log tail:"
    tail -n 40 "$logf" >&2 || true
    exit 1 # DIR is kept for inspection; `down` removes it
}

cmd_push() {
    local dir="${1:?usage: registry.sh push DIR IMAGE NAME:TAG}" image="${2:?usage: registry.sh push DIR IMAGE NAME:TAG}"
    local dest="${3:?usage: registry.sh push DIR IMAGE NAME:TAG}" registry slug archive digestf images
    need_cmd skopeo
    dir="$(realpath -m "$dir")"
    registry="$(env_value "$dir" REGISTRY)"
    [[ -n "$registry" ]] || die "no registry in $dir (run: $0 up $dir)"
    # Not `list | grep -q`: grep exiting at the first match may SIGPIPE `list`, and pipefail.
    images="$("$HACK_DIR/images.sh" list)"
    grep -qxF -- "$image" <<<"$images" || die "unknown image $image (see: images.sh list)"
    # Same cache and naming as images.sh (an OCI archive per image, its index
    # naming the full reference); builds only when the cache is stale.
    "$HACK_DIR/images.sh" build >&2
    slug="${image//\//_}"
    slug="${slug//:/_}"
    archive="$RK_CACHE/images/$slug.tar"
    [[ -f "$archive" ]] || die "no OCI archive for $image at $archive"
    digestf="$(mktemp "$dir/digest.XXXXXX")"
    # --insecure-policy: our own local images, no signature policy applies.
    # The archive's ref.name is the full image reference, so name it explicitly.
    local creds=()
    if [[ -f "$dir/creds" ]]; then creds=(--dest-creds "$(cat "$dir/creds")"); fi
    if ! skopeo --insecure-policy copy --quiet --dest-tls-verify=false "${creds[@]}" \
        --digestfile "$digestf" "oci-archive:$archive:$image" "docker://$registry/$dest" >&2; then
        rm -f "$digestf"
        die "push of $image to $registry/$dest failed"
    fi
    echo "DIGEST=$(cat "$digestf")"
    rm -f "$digestf"
    log "pushed $image as $registry/$dest"
}

# hosts.toml for containerd's registry config_path (containerd 1.6+), in the
# host directory named after the registry namespace (host[:port]) that image
# references use. For a NAME, containerd sends every request to the host below
# (adding ?ns=NAME, which the registry ignores): images pulled as NAME/... come
# from this registry without DNS. containerd 1.6 already speaks plain HTTP to a
# loopback REGISTRY on its own; the file makes that explicit for it too.
cmd_hosts() {
    local usage="usage: registry.sh hosts DIR CERTS_D [NAME]"
    local dir="${1:?$usage}" certs="${2:?$usage}" name="${3:-}" registry
    dir="$(realpath -m "$dir")"
    registry="$(env_value "$dir" REGISTRY)"
    [[ -n "$registry" ]] || die "no registry in $dir (run: $0 up $dir)"
    name="${name:-$registry}"
    [[ "$name" =~ ^[A-Za-z0-9.-]+(:[0-9]+)?$ ]] || die "NAME must be host[:port], got '$name'"
    mkdir -p "$certs/$name"
    cat >"$certs/$name/hosts.toml" <<EOF
# Written by hack/registry.sh: $name is the plain-HTTP test registry at $registry.
server = "http://$registry"

[host."http://$registry"]
  capabilities = ["pull", "resolve"]
  skip_verify = true
EOF
    echo "$certs/$name/hosts.toml"
}

# pids_with_args A B: processes whose argv has A immediately followed by B.
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

cmd_down() {
    local dir="${1:?usage: registry.sh down DIR}" p i n
    dir="$(realpath -m "$dir")"
    [[ -d "$dir" ]] || { log "nothing to do: $dir does not exist"; return 0; }
    # The recorded pid may be stale; argv (serve DIR/config.yml) is what counts.
    mapfile -t pids < <(pids_with_args serve "$dir/config.yml")
    if [[ ${#pids[@]} -gt 0 ]]; then
        kill -TERM "${pids[@]}" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do
            n=0
            for p in "${pids[@]}"; do if alive "$p"; then n=1; fi; done
            ((n)) || break
            sleep 0.05
        done
        kill -KILL "${pids[@]}" 2>/dev/null || true
    fi
    rm -rf "$dir"
    log "registry at $dir removed"
}

case "${1:-}" in
up) cmd_up "${2:-}" "${3:-}" ;;
push) cmd_push "${2:-}" "${3:-}" "${4:-}" ;;
hosts) cmd_hosts "${2:-}" "${3:-}" "${4:-}" ;;
down) cmd_down "${2:-}" ;;
*)
    echo "usage: $0 up DIR [USER:PASSWORD] | push DIR IMAGE NAME:TAG | hosts DIR CERTS_D [NAME] | down DIR" >&2
    exit 2
    ;;
esac
