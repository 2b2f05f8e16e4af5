#!/usr/bin/env bash
# Session 33, visit 5: the GPU suites after the final read of the change (the
# start's socket check shared with --check-config, one logger for the
# release calls, test helpers), python_torch among them. No kernel
# change since visit 3, so no benchmark.
. bench/visit-common.sh
rm -rf /tmp/backend
OUT=/tmp/backend PJ_GPU_TEST_TIMEOUT=300 SUITES_TIMEOUT=300 timeout 330 \
    bash bench/run-backend-device.sh "$B" >"$F/backend.log" 2>&1
echo "backend rc=$?"
cp "$F/backend.log" "$OUT/"
grep -E "checks passed|test_engines:|GPU suites|^OK|^Ran |FAIL|^S:" "$F/backend.log" | sort -u | head -20
