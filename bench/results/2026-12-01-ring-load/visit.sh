#!/usr/bin/env bash
# projload on the H200 (main 2236a4e): the closed-loop concurrency sweep
# (1, 2, 4, 8, 16 clients, CUDA IPC buffers, 5 % checked against the CPU
# reference) over the decode and the verify trace of the reference model,
# once with every client on nng and once with every client on a ring,
# against one projd (cuda backend, the committed table) under MPS.
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT"
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v
export LD_LIBRARY_PATH=$B/lib
BIN=$B/bin TRANSPORTS="nng ring" COMPARE=0 COUNT=600 DURATION=3 OUT=/tmp/load \
    timeout 420 bash bench/run-load-device.sh >/tmp/load-run.log 2>&1
echo "run-load-device rc=$?"
cat /tmp/load/summary.md
cp /tmp/load/load-results.tgz /tmp/load-run.log "$OUT/" 2>/dev/null
