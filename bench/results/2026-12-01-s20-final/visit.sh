#!/usr/bin/env bash
# Final check of main 0dce959 (the ring, the loop spinning for it; kernels
# and table as round 34): bench/final-check.sh (GPU suites and the
# fatal-error test with the committed table, the latency tables with the
# ring column, the benchmark twice), then the SGLang method's apply() with
# an nng client against a ring client under MPS on the reference model,
# with a profile of the ring side's apply() at m = 1.
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/f
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v
bash bench/final-check.sh "$B" /tmp/f 0dce959
cp /tmp/backend/latency.json /tmp/backend/latency.log /tmp/f/ 2>/dev/null
grep -h "PING round trip" /tmp/backend/*.log
export LD_LIBRARY_PATH=$B/lib
MPS=1 PRESET=reference timeout 150 bash bench/sglang-apply.sh "$B" client/python client/python \
    -- --ring B --reps 1000 --json /tmp/f/sglang-apply-ring.json --profile \
    >/tmp/f/sglang-apply-ring.log 2>&1
echo "sglang-apply rc=$?"; head -12 /tmp/f/sglang-apply-ring.log
gzip -f /tmp/f/backend.log
tar czf "$OUT/final.tgz" -C /tmp/f .
