#!/usr/bin/env bash
# Session 63, visit 3: visit 2's check without the benchmark (kernels and
# tables are unchanged since visit 1's, which ran it), for the device time
# left after four starts that found no machine: the GPU suites and the
# fatal-error test (bench/run-backend-device.sh) on the session's last
# code, the committed table found as final-check.sh finds it.
. bench/visit-common.sh
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)"
t0=$(date +%s)
table=$(bash bench/gpu-table.sh)
export PROJD_TUNING_DIR=$PWD/config/tuning PJ_TUNE_TABLE=$PWD/$table
rm -rf /tmp/backend
OUT=/tmp/backend PJ_GPU_TEST_TIMEOUT=300 SUITES_TIMEOUT=380 timeout 450 \
    bash bench/run-backend-device.sh "$B" >"$F/backend.log" 2>&1
echo "backend rc=$? ($(($(date +%s) - t0)) s)"
mkdir -p "$OUT/final"
cp "$F/backend.log" "$OUT/final/" 2>/dev/null
cp /tmp/backend/gpu-fault.log /tmp/backend/gpu-tests.log "$OUT/final/" 2>/dev/null
grep -E "python_sglang|FAIL|checks passed|^--- |GPU suites|^Ran |^OK|test_weight_updates" \
    "$OUT/final/gpu-tests.log" "$OUT/final/gpu-fault.log" | cut -c1-200 | head -40
