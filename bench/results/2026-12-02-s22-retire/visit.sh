#!/usr/bin/env bash
# Session 22: buffers released while the device may still use them retire
# (bufreg's pj_bufreg_reap) instead of making the loop wait in the cuda
# backend's buffer_close. The GPU suites and the fatal-error tests with the
# committed table (bench/run-backend-device.sh), to see nothing else moved.
. bench/visit-common.sh
export PROJD_TUNING_DIR=$PWD/config/tuning PJ_TUNE_TABLE=$PWD/config/tuning/h200.json
rm -rf /tmp/backend
OUT=/tmp/backend PJ_GPU_TEST_TIMEOUT=300 SUITES_TIMEOUT=300 timeout 330 \
    bash bench/run-backend-device.sh "$B" >"$F/backend.log" 2>&1
echo "backend rc=$?"
grep -E "GPU suites|checks passed|test_engines:|python_torch: ok|^Ran |^OK|FAIL" \
    "$F/backend.log" | sort | uniq -c | head -20
gzip -f "$F/backend.log"
cp /tmp/backend/gpu-tests.log /tmp/backend/gpu-fault.log "$F"/ 2>/dev/null
tar czf "$OUT/retire.tgz" -C "$F" .
