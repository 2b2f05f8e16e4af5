#!/usr/bin/env bash
# Round 30, visit 1: why the tiled GEMM trails cuBLAS at m = 128 / 256 (a
# measurement): ncu of cuBLAS and of the best bf16 tiled forms on qkv_gate
# m = 128 and the pooler m = 256; then the benchmark of main as it is.
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/r1
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v
export LD_LIBRARY_PATH=$B/lib
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
python3 -c 'import sys; print("python3", sys.version.split()[0])' 2>&1; python3 -c 'import torch; print("torch", torch.__version__)' 2>&1 | tail -1
PJ_DEV=$B NCU_LIST=bench/results/2026-12-01-r30/visit1/ncu.txt OUT=/tmp/r1 timeout 420 bash bench/ncu-deep.sh > /tmp/r1/ncu.log 2>&1
timeout 120 "$B/bin/projd-bench" --out /tmp/r1/bench-1 --reps 300 --table config/tuning/h200.json \
    --commit "$(git rev-parse --short HEAD 2>/dev/null || echo main)" > /tmp/r1/bench-1.log 2>&1
echo "bench exit $?"
gzip -f /tmp/r1/*.csv 2>/dev/null
tar czf "$OUT/r30v1.tgz" -C /tmp/r1 .
grep -E "^=== |Profiling \"|\)x\(|Duration|DRAM Throughput|L2 Cache Throughput|Compute \(SM\)|Executed Ipc A|Achieved Occ|Registers Per|Waves Per SM" /tmp/r1/ncu.log /tmp/r1/deep*-details.txt | sed 's#/tmp/r1/##' | cut -c1-120 | head -90
tail -14 /tmp/r1/bench-1.log
