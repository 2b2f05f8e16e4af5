#!/usr/bin/env bash
# Session 24: test_cuda_backend after its sections share one start-and-
# connect helper (start_open) and one layer-0 shape; the log comes back as
# test_cuda_backend.log.
. bench/visit-common.sh
export PJ_BUILD=$B PROJD_TUNING_DIR=$PWD/config/tuning
timeout 150 "$B/tests/gpu/test_cuda_backend" >"$OUT/test_cuda_backend.log" 2>&1
echo "test_cuda_backend rc=$?"
timeout 60 "$B/tests/gpu/test_cuda_backend" --fault >"$OUT/test_cuda_backend_fault.log" 2>&1
echo "test_cuda_backend --fault rc=$?"
grep -hE '^== |checks passed|FAIL' "$OUT"/test_cuda_backend*.log | head -20
