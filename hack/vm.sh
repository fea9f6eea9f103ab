#!/usr/bin/env bash
# A cgroup v2 guest, for what a cgroup v1 host cannot run: Debian's own kernel under qemu, with
# this host's / as the guest's root over 9p, its own /tmp (where the job's own checkout or
# target dir under the host's /tmp is bound back in), /run, /proc, /sys and network stack,
# and only cgroup2 mounted on /sys/fs/cgroup (every controller enabled below the root), as on a
# node booted with the unified hierarchy. Binaries, images and caches are the host's; the guest
# starts its own containerd, control plane and kubelets as the tests do on the host.
#
#   hack/vm.sh prepare            Debian's kernel (apt-get download, unpacked, not installed) and
#                                 an initramfs of busybox-static and the virtio/9p modules, built
#                                 once into $RK_CACHE/vm/
#   hack/vm.sh run DIR CMD [ARG]  boot, run CMD in DIR as root with this environment's RK_* and
#                                 RUST_* variables and PATH; exit with CMD's status (125: the
#                                 guest never reported one: boot failure, crash or timeout;
#                                 123: a CPU of the guest locked up and it was stopped, see
#                                 watch_console)
#
# RK_VM_ACCEL (default tcg): qemu's accelerator. This host's /dev/kvm is nested and never gets
# past the kernel's decompression, so the default is TCG (about 8x slower than native here).
# RK_VM_CPU (default qemu64): the guest's CPU model. Not `max`: with it the guest sees AES-NI and
# AVX2, which TCG emulates slowly, and Go's runtime uses them everywhere (AES map hashing, AVX2
# memmove); kube-apiserver took 512 s of CPU to start under `max` and 167 s under qemu64 (etcd
# 127 s and 37 s), in the same hour. Nothing the tests check depends on those instructions.
# RK_VM_MEM (MiB, default 4096), RK_VM_TIMEOUT (s, default 1200), RK_VM_KEEP (more host dirs
# under /tmp the job needs, space-separated, e.g. the test binaries' when CMD is a runner). The guest's console (kernel
# messages and CMD's output) is this script's stdout.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

VM_DIR="$RK_CACHE/vm"
# The initramfs loads these, in this order, to reach the 9p root; everything else (overlay,
# bridge, veth, netfilter) the guest's kernel loads on demand through the modprobe wrapper.
BOOT_MODULES=(virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci
    netfs fscache 9pnet 9pnet_virtio 9p)

kernel_package() {
    apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}'
}

cmd_prepare() {
    need_root
    need_cmd qemu-system-x86_64 apt-get dpkg-deb depmod modprobe busybox gzip
    local pkg kver tmp m f
    pkg="$(kernel_package)"
    [[ -n "$pkg" ]] || die "apt-cache names no linux-image package for linux-image-amd64"
    kver="${pkg#linux-image-}"
    if [[ -f "$VM_DIR/$kver/initrd.gz" ]]; then
        ln -sfn "$kver" "$VM_DIR/current"
        return 0
    fi
    log "preparing the cgroup v2 guest: $pkg"
    mkdir -p "$VM_DIR"
    tmp="$(mktemp -d "$VM_DIR/prepare.XXXXXX")"
    # shellcheck disable=SC2064
    trap "rm -rf '$tmp'" RETURN
    (cd "$tmp" && apt-get download "$pkg" >/dev/null 2>&1) || {
        apt-get update -qq && (cd "$tmp" && apt-get download "$pkg" >/dev/null)
    } || die "cannot download $pkg"
    dpkg-deb -x "$tmp"/"$pkg"_*.deb "$tmp/root"
    depmod -b "$tmp/root" "$kver"
    mkdir -p "$tmp/initrd/"{bin,dev,proc,sys,newroot,mods}
    cp "$(command -v busybox)" "$tmp/initrd/bin/busybox"
    for m in "${BOOT_MODULES[@]}"; do
        f="$(find "$tmp/root/lib/modules/$kver" -name "$m.ko" -print -quit)"
        [[ -n "$f" ]] || die "$pkg has no module $m"
        cp "$f" "$tmp/initrd/mods/"
    done
    sed "s|@MODULES@|${BOOT_MODULES[*]}|" "$HACK_DIR/vm/initramfs-init" >"$tmp/initrd/init"
    chmod 0755 "$tmp/initrd/init"
    (cd "$tmp/initrd" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1 >"$tmp/initrd.gz")
    rm -rf "${VM_DIR:?}/$kver"
    mkdir -p "$VM_DIR/$kver"
    cp "$tmp/root/boot/vmlinuz-$kver" "$VM_DIR/$kver/vmlinuz"
    mv "$tmp/root" "$VM_DIR/$kver/root"
    mv "$tmp/initrd.gz" "$VM_DIR/$kver/initrd.gz" # last: its presence means "prepared"
    ln -sfn "$kver" "$VM_DIR/current"
    log "guest kernel $kver ready in $VM_DIR/$kver"
    prune_kernels "$kver"
}

# Removes the kernels unpacked before KVER (about 400 MB each) once KVER is ready: Debian's
# linux-image-amd64 moves on with each point release, and nothing boots the old ones.
prune_kernels() {
    local keep="$1" d
    for d in "$VM_DIR"/*/; do
        d="${d%/}"
        case "${d##*/}" in
        "$keep" | current | jobs) ;;
        prepare.*) ;; # another prepare's work in progress
        *) if [[ -f "$d/vmlinuz" || -d "$d/root" ]]; then
            log "removing the older guest kernel ${d##*/}"
            rm -rf "$d"
        fi ;;
        esac
    done
}

# watch_console JOB: copies the guest's console to stdout and stops the guest (qemu's pid in
# JOB/qemu.pid) once its kernel says a CPU has been stuck for RK_VM_LOCKUP_LIMIT seconds
# (default 120), recording why in JOB/locked-up. The kernel repeats "soft lockup - CPU#N stuck
# for Ks!" while a CPU stays stuck in it; a CPU stuck that long under TCG never comes back (seen
# from a cold cache: 290 s and more, in the guest's first binary, with no test progressing), and
# without this the guest would hold CI until its whole timeout ran out.
watch_console() {
    local job="$1" limit="${RK_VM_LOCKUP_LIMIT:-120}" line re='soft lockup - (CPU#[0-9]+) stuck for ([0-9]+)s'
    while IFS= read -r line; do
        printf '%s\n' "$line"
        if [[ ! -e "$job/locked-up" && "$line" =~ $re ]] && ((BASH_REMATCH[2] >= limit)); then
            echo "its kernel reports ${BASH_REMATCH[1]} stuck for ${BASH_REMATCH[2]}s (limit ${limit}s, RK_VM_LOCKUP_LIMIT)" >"$job/locked-up"
            kill "$(cat "$job/qemu.pid" 2>/dev/null)" 2>/dev/null || true
        fi
    done
}

cmd_run() {
    need_root
    need_cmd qemu-system-x86_64 timeout
    local dir="${1:?usage: vm.sh run DIR CMD [ARG...]}"
    shift
    [[ $# -gt 0 ]] || die "usage: vm.sh run DIR CMD [ARG...]"
    dir="$(realpath "$dir")"
    cmd_prepare
    local cur="$VM_DIR/current" job rc v
    # The job directory must be outside /tmp and /run, which are the guest's own.
    mkdir -p "$VM_DIR/jobs"
    job="$(mktemp -d "$VM_DIR/jobs/job.XXXXXX")"
    # shellcheck disable=SC2064
    trap "rm -rf '$job'" EXIT
    # The guest's /tmp is its own; host paths there that the job needs (a checkout under /tmp,
    # as CI's clean clone may be) are bound back in at the same place.
    local keep
    # shellcheck disable=SC2086 # RK_VM_KEEP: a list
    for keep in "$REPO_ROOT" "$dir" "$(dirname "$(realpath "$1" 2>/dev/null || echo /)")" \
        "${CARGO_TARGET_DIR:-/}" ${RK_VM_KEEP:-}; do
        [[ "$keep" != /tmp/* ]] || echo "$keep"
    done | sort -u >"$job/keep"
    {
        echo "cd $(printf '%q' "$dir")"
        echo "export PATH=$(printf '%q' "$PATH") HOME=$(printf '%q' "${HOME:-/root}")"
        while IFS= read -r v; do
            echo "export $v=$(printf '%q' "${!v}")"
        done < <(compgen -e | grep -E '^(RK_|RUST_)' || true)
        printf 'exec'
        printf ' %q' "$@"
        echo
    } >"$job/cmd.sh"
    local accel="${RK_VM_ACCEL:-tcg}"
    [[ "$accel" != tcg ]] || accel="tcg,thread=multi"
    # loglevel=5: warnings reach the console, among them the stacks a soft lockup prints (shown at
    # the default level 4), with every CPU's stack (softlockup_all_cpu_backtrace): stop 43's CI
    # hung in the guest with only "soft lockup ... [tokio-rt-worker]" lines and no stack to read.
    rc=0
    timeout --kill-after=10 "${RK_VM_TIMEOUT:-1200}" qemu-system-x86_64 \
        -accel "$accel" -cpu "${RK_VM_CPU:-qemu64}" -smp "$(nproc)" -m "${RK_VM_MEM:-4096}" \
        -bios /usr/share/qemu/qboot.rom -display none -monitor none -serial stdio \
        -no-reboot -nic none -pidfile "$job/qemu.pid" \
        -kernel "$cur/vmlinuz" -initrd "$cur/initrd.gz" \
        -append "console=ttyS0 quiet loglevel=5 softlockup_all_cpu_backtrace=1 panic=-1 rk.init=$HACK_DIR/vm/guest-init.sh rk.job=$job rk.modules=$(realpath "$cur/root")" \
        -virtfs local,path=/,mount_tag=hostroot,security_model=passthrough,multidevs=remap </dev/null |
        watch_console "$job" || rc=$?
    if [[ -e "$job/locked-up" ]]; then
        log "stopped the guest: $(cat "$job/locked-up")"
        exit 123
    fi
    if [[ ! -s "$job/rc" ]]; then
        log "the guest reported no exit status (qemu exit $rc)"
        exit 125
    fi
    exit "$(cat "$job/rc")"
}

case "${1:-}" in
prepare) cmd_prepare ;;
run)
    shift
    cmd_run "$@"
    ;;
*)
    echo "usage: $0 prepare | run DIR CMD [ARG...]" >&2
    exit 2
    ;;
esac
