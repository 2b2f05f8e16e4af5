#!/usr/bin/env bash
# Session 37, visit 3: the GPU suites, the latency table and the
# fatal-error test (bench/run-backend-device.sh) with the committed table,
# on main with the lane launch budget (test_cuda_backend L) and the
# dispatcher's fixes (test_engines). No kernel change since visit 1's
# benchmark: no benchmark.
. bench/visit-common.sh
export PJ_BUILD=$B
export PROJD_TUNING_DIR=$PWD/config/tuning PJ_TUNE_TABLE=$PWD/config/tuning/h200.json
rm -rf /tmp/backend
OUT=/tmp/backend PJ_GPU_TEST_TIMEOUT=300 SUITES_TIMEOUT=330 timeout 400 \
    bash bench/run-backend-device.sh "$B" >"$F/backend.log" 2>&1
echo "backend rc=$?"
cp "$F/backend.log" "$OUT/"
tar czf "$OUT/backend.tgz" -C /tmp/backend . 2>/dev/null
grep -E "^(L|P): |FAIL" /tmp/backend/gpu-tests.log | head -20
grep -E "checks passed|test_engines:|check_config:|GPU suites|^OK|^Ran " "$F/backend.log" | sort -u | head -16
