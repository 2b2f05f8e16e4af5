#!/usr/bin/env bash
# Session 38, visit 6: the launch budget by jobs and launches (L, 1-op and
# 4-op jobs), every engine's direct shapes warmed (M, with and without the
# warm-up), Q with the budget off, then the GPU suites under MPS with the
# committed table.
. bench/visit-common.sh
export PJ_BUILD=$B
export PROJD_TUNING_DIR=$PWD/config/tuning PJ_TUNE_TABLE=$PWD/config/tuning/h200.json
timeout 120 "$B/tests/gpu/test_cuda_backend" --m >"$OUT/m.log" 2>&1; echo "M rc=$?"
grep -E '^M:|checks|FAIL' "$OUT/m.log" | head -30
timeout 60 "$B/tests/gpu/test_cuda_backend" --l >"$OUT/l.log" 2>&1; echo "L rc=$?"
grep -E '^L:|checks|FAIL' "$OUT/l.log" | head -12
timeout 80 "$B/tests/gpu/test_cuda_backend" --q "" >"$OUT/q.log" 2>&1; echo "Q rc=$?"
grep -E '^Q:|checks|FAIL' "$OUT/q.log" | head -20
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
timeout 20 nvidia-cuda-mps-control -d && echo "MPS started"
PJ_GPU_TEST_TIMEOUT=200 timeout 300 bash tests/run-gpu-tests.sh "$B" >"$OUT/gpu-tests.log" 2>&1
echo "suites rc=$?"
echo quit | timeout 20 nvidia-cuda-mps-control >/dev/null 2>&1
grep -E "^(L|M): " "$OUT/gpu-tests.log" | head -12
grep -E "startup:" "$OUT/gpu-tests.log" | head -2 | cut -c1-300
grep -E "FAIL|checks passed|test_engines:|check_config:|GPU suites|^OK|^Ran " "$OUT/gpu-tests.log" | head -20
