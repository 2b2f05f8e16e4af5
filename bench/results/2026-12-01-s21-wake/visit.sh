#!/usr/bin/env bash
# Session 21, visit 5: the ring's wake FIFO (new: this build's daemon and
# libprojd) against main f6a88ff's (old/), the breakdown of
# sglang_apply.py after 0-1000 µs of host work, alternating, three runs
# each; first bench/final-check.sh of the new build (GPU suites with the
# new daemon, the fatal-error test, the benchmark).
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/f
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v
bash bench/final-check.sh "$B" /tmp/f "${COMMIT:-wake}"
cp /tmp/backend/latency.json /tmp/backend/latency.log /tmp/f/ 2>/dev/null
grep -h "PING round trip" /tmp/backend/*.log
export LD_LIBRARY_PATH=$B/lib
# The FIFO in use on this host: libprojd writes it, the loop wakes from it.
CK_RUN_CASE=ring_wake_fifo PJ_BUILD=$B timeout 60 "$B/tests/test_daemon_ring" 2>&1 | tail -2
for r in 1 2 3; do
    for side in old new; do
        build=$B; [ $side = old ] && build=$B/old
        MPS=1 PRESET=reference timeout 120 bash bench/sglang-apply.sh "$build" client/python \
            -- --ring A --reps 300 --breakdown --no-table --gaps 0,100,200,500,1000 \
            --json /tmp/f/bd-$side-$r.json >/tmp/f/bd-$side-$r.log 2>&1
        echo "breakdown $side $r rc=$?"
    done
done
gzip -f /tmp/f/backend.log
tar czf "$OUT/wake.tgz" -C /tmp/f .
for f in /tmp/f/bd-*.log; do
    echo "== $f"; grep -E '^(round trip \+ events, reply at launch|apply)' "$f"
done
