#!/usr/bin/env bash
# Round 28, visit 2: ncu of the K-slice GEMV (pooler m = 1, ks = 1; m = 32,
# ks = 4) beside the ring GEMV the table runs at m = 1 (bench/ncu-deep.sh).
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT"
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
mkdir -p .devrun && ln -sf /tmp/v/.devrun-v/bin/projd-bench .devrun/projd-bench && ln -sfn /tmp/v/.devrun-v/lib .devrun/lib
cp bench/results/2026-12-01-r28/visit2/ncu.txt .devrun/ncu-deep.txt
bash bench/ncu-deep.sh 2>&1 | tail -80
