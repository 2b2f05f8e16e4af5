#!/usr/bin/env bash
# Round 29, visit 2 (same machine as visit 1): ncu of pipe 8 against the
# bf16 tiled form with the same tile and split on qkv_gate m = 16.
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/r2
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
PJ_DEV=/tmp/v/.devrun-v NCU_LIST=bench/results/2026-12-01-r29/visit2/ncu.txt OUT=/tmp/r2 bash bench/ncu-deep.sh > /tmp/r2/ncu.log 2>&1
grep -E "===|Duration|Warp Cycles Per Issued|DRAM Throughput|Achieved Occ|Registers|Executed Ipc|Stall (Long|Barrier|Wait|Short|Math|Not Sel|Selected|MIO|Sleep|Branch|LG)" /tmp/r2/ncu.log /tmp/r2/deep*-details.txt | cut -c1-130 | head -60
gzip /tmp/r2/*.csv; tar czf $OUT/r29v2.tgz -C /tmp/r2 .
