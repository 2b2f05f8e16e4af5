#!/usr/bin/env bash
# Session 47, visit 1: bench/final-check.sh on session 46's code, which never
# ran on a GPU (no device was lent then): the host memory check with the
# memory cgroup, load turns between instances, the ring server's stop and
# may_take order, libprojd's ring fixes, projd_sglang's reconnects; and this
# session's memory.high warning and lockpid module. The kernels and the
# tuning table are session 45's. First, what this host offers for a run of
# deploy/projd@.service (tests/systemd/units.sh): a systemd binary, root,
# unshare, the cgroup mount and this process's memory cgroup.
. bench/visit-common.sh
{
    id
    ls -la /lib/systemd/systemd /usr/lib/systemd/systemd 2>&1
    command -v unshare nsenter systemctl 2>&1
    grep cgroup /proc/self/mountinfo
    cat /proc/self/cgroup
    d=/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup)
    for f in memory.max memory.high memory.current memory.swap.max; do
        echo "$f: $(cat "$d/$f" 2>&1)"
    done
    grep -E 'MemAvailable|SwapFree' /proc/meminfo
} >"$OUT/host-probe.txt" 2>&1
pj_site_wheels || exit 1
pj_final_check
echo "--- host probe"
cat "$OUT/host-probe.txt" | cut -c1-200 | head -30
