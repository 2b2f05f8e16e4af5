#!/usr/bin/env bash
# Session 64, visit 3: main 2e01bb3, the session's last code (visit 2's,
# with the metrics' exact summary sums, the Python client's count and a
# test_cuda_ipc helper). On an H200, bench/final-check.sh (the GPU suites
# and the benchmark: the first H200 figure since session 45); on an H100,
# whose benchmark visit 1 ran, the GPU suites and the fatal-error test.
. bench/visit-common.sh
dev=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)
echo "device: $dev"
t0=$(date +%s)
case $dev in
*H200*) pj_final_check ;;
*)
    table=$(bash bench/gpu-table.sh)
    export PROJD_TUNING_DIR=$PWD/config/tuning PJ_TUNE_TABLE=$PWD/$table
    rm -rf /tmp/backend
    OUT=/tmp/backend PJ_GPU_TEST_TIMEOUT=300 SUITES_TIMEOUT=380 timeout 450 \
        bash bench/run-backend-device.sh "$B" >"$F/backend.log" 2>&1
    echo "backend rc=$?"
    mkdir -p "$OUT/final"
    cp "$F/backend.log" "$OUT/final/" 2>/dev/null
    cp /tmp/backend/gpu-fault.log /tmp/backend/gpu-tests.log "$OUT/final/" 2>/dev/null
    grep -E "python_sglang|FAIL|checks passed|^--- |GPU suites|^Ran |^OK" \
        "$OUT/final/gpu-tests.log" "$OUT/final/gpu-fault.log" | cut -c1-200 | head -40
    ;;
esac
echo "done ($(($(date +%s) - t0)) s)"
echo "--- R2"
grep -E "^R2|== R2|REGISTER" "$OUT/final/gpu-tests.log" | cut -c1-300 | head -12
if [ -f "$OUT/final/bench-1.log" ]; then
    echo "--- table (bench 1)"
    grep -E "^(decode|verify)|^SCORE" "$OUT/final/bench-1.log" | head -10
    grep -E "^SCORE" "$OUT/final/bench-2.log"
fi
