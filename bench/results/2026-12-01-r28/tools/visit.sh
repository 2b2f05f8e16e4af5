#!/usr/bin/env bash
# The bench tools with a pack folder (PJ_DEV): ab-bin.sh with the same
# build as old and new (one run each, test_engines first) and ncu-deep.sh
# on one kernel.
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT"
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
V=/tmp/v/.devrun-v; cp $V/bin/projd-bench $V/bin/projd-bench-old
PJ_DEV=$V TABLE=config/tuning/h200.json RUNS=1 TEST_TIMEOUT=150 OUT=/tmp/ab bash bench/ab-bin.sh 2>&1 | tail -12
PJ_DEV=$V NCU_LIST=bench/results/2026-12-01-r28/tools/ncu.txt OUT=/tmp/nc bash bench/ncu-deep.sh 2>&1 | grep -E "===|exit|Duration|DRAM Through" | head
cp /tmp/ab/r.tar $OUT/ab.tar; tar czf $OUT/nc.tgz -C /tmp/nc .
