#!/usr/bin/env bash
# Session 61, visit 1: row classes on the GPU. test_cuda_backend's section
# G alone (graphs at a layer's graph_rows and its table entries' rows; every
# m at n around them checked against the CPU reference, a class's own n
# rebound in place); then the decode trace against the reference model
# with the default layers without row classes (PROJD_CUDA_ROW_CLASSES=0:
# the unpooler computes all 8192 rows, as before), with them (a class at
# 1024 from the shipped table's rows) and with max_n 1024, in one run;
# then the GPU suites and the fatal-error test on the same build in the
# time left (${PJ_SUITES_S:-200} s).
. bench/visit-common.sh
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)"
t0=$(date +%s)
export PROJD_TUNING_DIR=$PWD/config/tuning
mkdir -p "$OUT/g"
PJ_BUILD=$B timeout 120 "$B/tests/gpu/test_cuda_backend" --g >"$OUT/g/g.log" 2>&1
echo "section G rc=$? ($(($(date +%s) - t0)) s)"
pj_served_config || exit 1
rows=$(PJ_ROWS_CONFIGS="noclass default maxn1024" pj_rows_trace 60)
echo "rows done ($(($(date +%s) - t0)) s)"
table=$(bash bench/gpu-table.sh)
export PJ_TUNE_TABLE=$PWD/$table
rm -rf /tmp/backend
OUT=/tmp/backend PJ_GPU_TEST_TIMEOUT=150 SUITES_TIMEOUT=$((${PJ_SUITES_S:-200} - 10)) \
    timeout "${PJ_SUITES_S:-200}" bash bench/run-backend-device.sh "$B" >"$F/backend.log" 2>&1
echo "backend rc=$? ($(($(date +%s) - t0)) s)"
mkdir -p "$OUT/suites"
cp "$F/backend.log" /tmp/backend/gpu-fault.log /tmp/backend/gpu-tests.log "$OUT/suites/" 2>/dev/null
echo "--- suites"
grep -E "^--- |checks passed|GPU suites|fatal|^Ran |^OK" "$F/backend.log" | sort | uniq -c | cut -c1-200 | head -24
echo "--- G"
grep -E "^G:|^FAIL|checks" "$OUT/g/g.log" | head -12 | cut -c1-220
echo "--- rows"
echo "$rows"
