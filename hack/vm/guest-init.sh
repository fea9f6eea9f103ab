#!/bin/bash
# PID 1 of hack/vm.sh's guest, on the host's / (9p): give the guest its own /tmp (with the host
# paths listed in the job's `keep` file bound back in) and /run, a cgroup v2 hierarchy with every
# controller enabled below the root, loopback, on-demand modules from the guest kernel's own
# tree; run the job; record its status; power off.
arg() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" /proc/cmdline; }
job="$(arg rk.job)"
modules="$(arg rk.modules)"
rc=125
run() {
    set -e
    mount -t tmpfs -o mode=755 tmpfs /run
    mkdir -p /run/host-tmp
    mount --bind /tmp /run/host-tmp
    mount -t tmpfs -o mode=1777 tmpfs /tmp
    local keep
    while IFS= read -r keep; do
        mkdir -p "$keep"
        mount --bind "/run/host-tmp/${keep#/tmp/}" "$keep"
    done <"$job/keep"
    mkdir -p /dev/pts /dev/shm
    mount -t devpts devpts /dev/pts
    mount -t tmpfs tmpfs /dev/shm
    ln -sfn /proc/self/fd /dev/fd
    # The host has no /lib/modules for this kernel; the guest kernel asks this wrapper instead.
    printf '#!/bin/sh\nexec /sbin/modprobe -d %s "$@"\n' "$modules" >/run/modprobe
    chmod 0755 /run/modprobe
    echo /run/modprobe >/proc/sys/kernel/modprobe
    mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup
    local c ctl=""
    for c in $(cat /sys/fs/cgroup/cgroup.controllers); do ctl+=" +$c"; done
    echo "$ctl" >/sys/fs/cgroup/cgroup.subtree_control
    ip link set lo up
    hostname rk-v2-guest
    echo "guest: $(uname -r), cgroup2 controllers:$(cat /sys/fs/cgroup/cgroup.subtree_control | sed 's/^/ /')"
    set +e
    # Through a pipe: the console is a terminal, and test harnesses would colour their output.
    bash "$job/cmd.sh" 2>&1 | cat
    rc=${PIPESTATUS[0]}
}
run
echo "$rc" >"$job/rc"
sync
echo o >/proc/sysrq-trigger
sleep 10 2>/dev/null
