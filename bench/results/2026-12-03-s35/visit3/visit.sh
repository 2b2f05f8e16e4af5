#!/usr/bin/env bash
# Session 35, visit 3: the GPU suites and the fatal-error test on the
# session's last code (main d8b5ad5: visit 2's backend, the stricter JSON
# readers, the e2e tests' order probe), with the committed table. No kernel
# change: no benchmark.
. bench/visit-common.sh
export PJ_BUILD=$B
export PROJD_TUNING_DIR=$PWD/config/tuning PJ_TUNE_TABLE=$PWD/config/tuning/h200.json
rm -rf /tmp/backend
OUT=/tmp/backend PJ_GPU_TEST_TIMEOUT=300 SUITES_TIMEOUT=300 timeout 330 \
    bash bench/run-backend-device.sh "$B" >"$F/backend.log" 2>&1
echo "backend rc=$?"
cp "$F/backend.log" "$OUT/"
tar czf "$OUT/backend.tgz" -C /tmp/backend . 2>/dev/null
grep -E "^S:|^X:|^R:" /tmp/backend/gpu-tests.log | head -8
grep -E "checks passed|test_engines:|GPU suites|^OK|^Ran |FAIL" "$F/backend.log" | sort -u | head -16
