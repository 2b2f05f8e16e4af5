#!/usr/bin/env bash
# Round 34, visit 1: pipe 3's short step. bench/ab-bin.sh: the new build's
# test_engines, then the committed table run alternately by main's
# projd-bench (old) and the new one, three times each.
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT"
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
PJ_DEV=/tmp/v/.devrun-v TABLE=config/tuning/h200.json RUNS=3 OUT=/tmp/ab timeout 500 bash bench/ab-bin.sh > /tmp/ab.log 2>&1
echo "ab-bin rc=$?"; grep -E "test_engines|FAIL|run [0-9] rc|^SCORE" /tmp/ab.log | head -20
cp /tmp/ab.log /tmp/ab/ 2>/dev/null
cp /tmp/ab/r.tar "$OUT/r34v1.tar"
