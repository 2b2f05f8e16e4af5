#!/usr/bin/env bash
# Session 48, visit 1: session 46-48's host-side code on the GPU host, then
# bench/final-check.sh (the GPU suites under MPS with SGLang's wheels, the
# fault tests, the benchmark of the committed table twice). Sessions 46
# and 47 had no device: the cgroup-aware host memory check, load turns, the
# ring server's stop and may_take order, libprojd's ring fixes,
# projd_sglang's reconnects, memory.high and lockpid never ran on a GPU.
# New this session: the cuda backend passes the load turn on after its
# context, upload and lanes (daemon/DAEMON.md, "Loads take turns"), so two
# cuda starts in one socket directory are timed first: b's turn must come
# after a's upload began ("cuda: the weights will take") and, with the
# capture beside it, before a is ready. Then what the host offers for a run
# of deploy/projd@.service (tests/systemd/units.sh).
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

# Two cuda starts, one socket directory, b 0.1 s after a.
turns() {
    pj_served_config || { echo "turns: no model"; return 1; }
    rm -rf /tmp/turn && mkdir -p /tmp/turn
    local pa pb i ok=0
    "$B/bin/projd" --config "$F/ref.json" --backend cuda --socket ipc:///tmp/turn/a.sock \
        >"$OUT/turn-a.log" 2>&1 &
    pa=$!
    sleep 0.1
    "$B/bin/projd" --config "$F/ref.json" --backend cuda --socket ipc:///tmp/turn/b.sock \
        >"$OUT/turn-b.log" 2>&1 &
    pb=$!
    for i in $(seq 400); do
        if timeout 5 "$B/bin/projctl" --socket ipc:///tmp/turn/a.sock status >/dev/null 2>&1 &&
            timeout 5 "$B/bin/projctl" --socket ipc:///tmp/turn/b.sock status >/dev/null 2>&1; then
            ok=1
            break
        fi
        sleep 0.1
    done
    echo "turns: both ready: $ok"
    timeout 20 "$B/bin/projctl" --socket ipc:///tmp/turn/b.sock project --layer qkv_gate --m 16 \
        --check --model "$F/ref.safetensors" 2>&1 | tail -2
    kill -TERM "$pa" "$pb" 2>/dev/null
    timeout 20 tail --pid="$pa" -f /dev/null
    timeout 20 tail --pid="$pb" -f /dev/null
    # the times, in the order they happened
    { grep -hE "loading model|model loaded in|cuda: the weights will take|cuda: startup:|backend cuda ready" \
        "$OUT/turn-a.log" | sed 's/^/a /'
      grep -hE "waiting for the model load|the load's turn came after|loading model|model loaded in|backend cuda ready" \
        "$OUT/turn-b.log" | sed 's/^/b /'; } | sort -k2 | cut -c1-200
}
timeout 60 bash -c "$(declare -f turns pj_served_config); B=$B F=$F OUT=$OUT turns" 2>&1
pj_site_wheels || exit 1
pj_final_check
echo "--- host probe"
cut -c1-200 "$OUT/host-probe.txt" | head -30
