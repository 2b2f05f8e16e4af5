#!/usr/bin/env bash
# Session 21, visit 4: the ring round trip and apply() after 0-1000 µs of
# host work, without and with a PM QoS request of 0 µs (every core kept in
# its shallowest idle state), alternating, twice each; reference model
# under MPS, main c7c5df7's build.
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/f
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v
export LD_LIBRARY_PATH=$B/lib
ls -l /dev/cpu_dma_latency; id -u
cat /sys/devices/system/cpu/cpuidle/current_driver 2>/dev/null
for s in /sys/devices/system/cpu/cpu0/cpuidle/state*; do
    [ -d "$s" ] && echo "$(cat "$s/name") latency $(cat "$s/latency") us, disabled $(cat "$s/disable")"
done
bd() { # bd TAG [wrapper...]
    local tag=$1; shift
    "$@" env MPS=1 PRESET=reference timeout 150 bash bench/sglang-apply.sh "$B" client/python \
        -- --ring A --reps 300 --breakdown --no-table --gaps 0,100,200,500,1000 \
        --json /tmp/f/bd-$tag.json >/tmp/f/bd-$tag.log 2>&1
    echo "breakdown $tag rc=$?"
}
for r in 1 2; do
    bd plain-$r
    bd qos0-$r python3 bench/hold-cpu-latency.py 0
done
tar czf "$OUT/pmqos.tgz" -C /tmp/f .
for f in /tmp/f/bd-*.log; do
    echo "== $f"; grep -E '^(hold|round trip \+ events, reply at launch|apply)' "$f"
done
