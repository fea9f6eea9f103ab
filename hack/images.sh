#!/usr/bin/env bash
# Build the test images locally with umoci (no registry is reachable) and
# import them into a containerd instance.
#
#   hack/images.sh build          build OCI archives into $RK_CACHE/images/ (cached)
#   hack/images.sh import SOCKET  build if needed, import into namespace k8s.io
#   hack/images.sh list           print the image references, one a line
#
# To add an image: write a populate_* function (or reuse one) and add a
# build_image line to build_all. Editing this file invalidates the cache.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

IMAGES_DIR="$RK_CACHE/images"
DEFAULT_PATH="PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Every image built by build_all, in build order.
IMAGES=(
    rkubelet.local/pause:3.9
    rkubelet.local/busybox:1.35
    rkubelet.local/busybox-entrypoint:1.35
    rkubelet.local/busybox-nonroot:1.35
)

build_all() {
    build_image rkubelet.local/pause:3.9 populate_pause \
        --entrypoint /pause --workdir /
    build_image rkubelet.local/busybox:1.35 populate_busybox \
        --cmd sh --env "$DEFAULT_PATH" --workdir /
    build_image rkubelet.local/busybox-entrypoint:1.35 populate_busybox \
        --entrypoint /bin/echo --entrypoint from-entrypoint --cmd default-cmd \
        --env "$DEFAULT_PATH" --workdir /
    build_image rkubelet.local/busybox-nonroot:1.35 populate_busybox \
        --cmd sh --user 1000:1000 --env "$DEFAULT_PATH" --workdir /
}

# ---- rootfs populators: called with the (empty) rootfs directory ----

populate_pause() {
    local rootfs="$1"
    # Static so the image needs no libc; -s strips it to keep the layer small.
    gcc -static -Os -s -DVERSION=rkubelet-3.9 -o "$rootfs/pause" "$HACK_DIR/images/pause.c"
}

populate_busybox() {
    local rootfs="$1" applet
    mkdir -p "$rootfs"/{bin,sbin,usr/bin,usr/sbin,etc,root,home/app,tmp,var,proc,sys,dev}
    cp /bin/busybox "$rootfs/bin/busybox"
    # Every applet at the path busybox itself reports (bin/sh, usr/bin/wget, ...).
    while read -r applet; do
        [[ "$applet" == bin/busybox ]] && continue
        mkdir -p "$rootfs/$(dirname "$applet")"
        ln -sf /bin/busybox "$rootfs/$applet"
    done < <(/bin/busybox --list-full)
    printf '%s\n' \
        'root:x:0:0:root:/root:/bin/sh' \
        'app:x:1000:1000:app:/home/app:/bin/sh' \
        'nobody:x:65534:65534:nobody:/nonexistent:/bin/false' >"$rootfs/etc/passwd"
    printf '%s\n' 'root:x:0:' 'app:x:1000:' 'nobody:x:65534:' >"$rootfs/etc/group"
    chmod 1777 "$rootfs/tmp"
    chmod 0700 "$rootfs/root"
    chown 1000:1000 "$rootfs/home/app"
}

# build_image REF POPULATE_FN [--entrypoint ARG]... [--cmd ARG]... [--user U]
#             [--workdir DIR] [--env K=V]...
# --entrypoint/--cmd are repeated once per argv element. Writes
# $OUT_DIR/<slug>.tar, an OCI archive whose index names the full REF.
build_image() {
    local ref="$1" populate="$2"
    shift 2
    local tag="${ref##*:}" slug work
    slug="$(image_slug "$ref")"
    work="$TMP_DIR/$slug"
    local layout="$work/layout" bundle="$work/bundle"
    local -a cfg=()
    while [[ $# -gt 0 ]]; do
        case "$1" in
        --entrypoint) cfg+=(--config.entrypoint "$2") ;;
        --cmd) cfg+=(--config.cmd "$2") ;;
        --user) cfg+=(--config.user "$2") ;;
        --workdir) cfg+=(--config.workingdir "$2") ;;
        --env) cfg+=(--config.env "$2") ;;
        *) die "build_image: unknown option $1" ;;
        esac
        shift 2
    done
    log "building $ref"
    mkdir -p "$work"
    umoci init --layout "$layout"
    umoci new --image "$layout:$tag"
    umoci unpack --image "$layout:$tag" "$bundle" >/dev/null
    "$populate" "$bundle/rootfs"
    umoci repack --image "$layout:$tag" "$bundle"
    umoci config --image "$layout:$tag" --architecture amd64 --os linux \
        --author rkubelet-hack "${cfg[@]}"
    umoci gc --layout "$layout"
    # umoci only accepts a bare tag, but the OCI ref.name grammar allows a full
    # reference and containerd's importer uses io.containerd.image.name as-is,
    # so rename both; ctr then needs no --base-name.
    jq --arg ref "$ref" '.manifests |= map(.annotations = {
            "org.opencontainers.image.ref.name": $ref,
            "io.containerd.image.name": $ref})' \
        "$layout/index.json" >"$work/index.json"
    mv "$work/index.json" "$layout/index.json"
    tar -C "$layout" -cf "$OUT_DIR/$slug.tar" oci-layout index.json blobs
}

# rkubelet.local/busybox:1.35 -> rkubelet.local_busybox_1.35
image_slug() {
    local s="${1//\//_}"
    printf '%s\n' "${s//:/_}"
}

# Changes to this script, the pause source, busybox or umoci rebuild the images.
cache_key() {
    {
        cat "${BASH_SOURCE[0]}" "$HACK_DIR/images/pause.c"
        dpkg-query -W -f='${Version}\n' busybox-static umoci gcc 2>/dev/null || true
        sha256sum /bin/busybox
    } | sha256sum | cut -d' ' -f1
}

cmd_build() {
    need_cmd umoci jq gcc tar flock sha256sum
    mkdir -p "$IMAGES_DIR"
    # Parallel `containerd.sh up` calls share the cache: serialise builds.
    exec 9>"$IMAGES_DIR/.lock"
    flock 9
    local key
    key="$(cache_key)"
    if [[ -f "$IMAGES_DIR/.key" && "$(cat "$IMAGES_DIR/.key")" == "$key" ]]; then
        log "images up to date in $IMAGES_DIR"
        return 0
    fi
    TMP_DIR="$(mktemp -d)"
    OUT_DIR="$TMP_DIR/out"
    mkdir -p "$OUT_DIR"
    # shellcheck disable=SC2064  # expand TMP_DIR now, it is local to this call
    trap "rm -rf '$TMP_DIR'" EXIT
    build_all
    rm -f "$IMAGES_DIR"/*.tar "$IMAGES_DIR/.key"
    mv "$OUT_DIR"/*.tar "$IMAGES_DIR/"
    printf '%s\n' "$key" >"$IMAGES_DIR/.key"
    log "built ${#IMAGES[@]} images into $IMAGES_DIR"
}

cmd_import() {
    local sock="${1:?usage: images.sh import SOCKET}" ref
    need_root
    need_cmd ctr
    cmd_build
    for ref in "${IMAGES[@]}"; do
        # Default platform only: our images are single-platform linux/amd64,
        # and import unpacks into the default (overlayfs) snapshotter.
        ctr -a "$sock" -n k8s.io images import "$IMAGES_DIR/$(image_slug "$ref").tar" >&2
    done
    log "imported ${#IMAGES[@]} images into $sock (namespace k8s.io)"
}

case "${1:-}" in
build) cmd_build ;;
import) cmd_import "${2:-}" ;;
list) printf '%s\n' "${IMAGES[@]}" ;;
*)
    echo "usage: $0 build | import SOCKET | list" >&2
    exit 2
    ;;
esac
