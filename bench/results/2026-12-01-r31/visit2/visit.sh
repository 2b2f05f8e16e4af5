#!/usr/bin/env bash
# Round 31, visit 2 (same build): ncu of pipe 8 on qkv_gate m = 128 with
# tiles 4 (80 x 64), 1 (40 x 128) and 5 (96 x 64, cuBLAS's shape).
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/r2
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v
PJ_DEV=$B NCU_LIST=bench/results/2026-12-01-r31/visit2/ncu.txt OUT=/tmp/r2 timeout 300 bash bench/ncu-deep.sh > /tmp/r2/ncu.log 2>&1
grep -E "^=== |\)x\(|Duration|DRAM Throughput|L2 Cache Throughput|Compute \(SM\)|Achieved Occ|Warp Cycles Per Issued|Stall (Long|Barrier|Wait|Short|Math|MIO|Sleep|LG)|Registers Per" /tmp/r2/ncu.log /tmp/r2/deep*-details.txt | sed 's#/tmp/r2/##' | cut -c1-120 | head -60
gzip -f /tmp/r2/*.csv; tar czf "$OUT/r31v2.tgz" -C /tmp/r2 .
