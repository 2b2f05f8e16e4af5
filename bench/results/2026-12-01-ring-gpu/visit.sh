#!/usr/bin/env bash
# The shared-memory ring on the GPU host (main 557b453): the GPU suites and
# the latency tables with the committed table loaded (bench/run-backend-device.sh
# via the first half of bench/final-check.sh: cuda_latency now times the CUDA
# IPC path through a ring beside nng), projctl bench-ipc (cpu backend, both
# transports, 16 cores so both ends spin), the SGLang method's apply() with
# an nng client against a ring client under MPS on the reference model.
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/f
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v
export LD_LIBRARY_PATH=$B/lib
export PROJD_TUNING_DIR=$PWD/config/tuning PJ_TUNE_TABLE=$PWD/config/tuning/h200.json
rm -rf /tmp/backend
OUT=/tmp/backend PJ_GPU_TEST_TIMEOUT=240 SUITES_TIMEOUT=250 REPS=300 timeout 320 \
    bash bench/run-backend-device.sh "$B" >/tmp/f/backend.log 2>&1
echo "backend rc=$?"
grep -E "GPU suites|checks passed|test_engines:|fatal|python_torch|^Ran |^OK|PING round trip" \
    /tmp/f/backend.log | sort | uniq -c | head -20
cp /tmp/backend/latency.json /tmp/f/ 2>/dev/null
tar czf /tmp/f/backend.tgz -C /tmp/backend . 2>/dev/null
timeout 60 bash bench/bench-ipc.sh "$B" 5000 /tmp/f/bench-ipc.json >/tmp/f/bench-ipc.txt 2>&1
echo "bench-ipc rc=$?"; tail -8 /tmp/f/bench-ipc.txt
MPS=1 PRESET=reference timeout 140 bash bench/sglang-apply.sh "$B" client/python client/python \
    -- --ring B --reps 1000 --json /tmp/f/sglang-apply-ring.json >/tmp/f/sglang-apply-ring.log 2>&1
echo "sglang-apply rc=$?"; tail -14 /tmp/f/sglang-apply-ring.log
gzip -f /tmp/f/backend.log
tar czf "$OUT/ring.tgz" -C /tmp/f .
