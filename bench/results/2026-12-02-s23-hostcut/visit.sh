#!/usr/bin/env bash
# Session 23: test_cuda_backend with its new section H (a host shm buffer
# truncated by its client while registered with the cuda backend), on the
# H200; the log comes back as test_cuda_backend.log.
. bench/visit-common.sh
export PJ_BUILD=$B PROJD_TUNING_DIR=$PWD/config/tuning
timeout 120 "$B/tests/gpu/test_cuda_backend" >"$OUT/test_cuda_backend.log" 2>&1
echo "test_cuda_backend rc=$?"
grep -E '^== |^H:|checks passed|FAIL' "$OUT/test_cuda_backend.log" | head -20
