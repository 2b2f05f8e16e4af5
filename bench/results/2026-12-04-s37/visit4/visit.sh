#!/usr/bin/env bash
# Session 37, visit 4: the GPU suites (tests/run-gpu-tests.sh, under MPS)
# on the session's last code (the review's fixes: the launch budget only
# behind a client wait, gemvz pipe=4 back in the engine's check), with the
# committed table. No kernel change: no benchmark.
. bench/visit-common.sh
export PJ_BUILD=$B
export PROJD_TUNING_DIR=$PWD/config/tuning PJ_TUNE_TABLE=$PWD/config/tuning/h200.json
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
timeout 20 nvidia-cuda-mps-control -d && echo "MPS started"
PJ_GPU_TEST_TIMEOUT=200 timeout 280 bash tests/run-gpu-tests.sh "$B" >"$OUT/gpu-tests.log" 2>&1
echo "suites rc=$?"
echo quit | timeout 20 nvidia-cuda-mps-control >/dev/null 2>&1
grep -E "^(L|P|S|X): " "$OUT/gpu-tests.log" | head -12
grep -E "FAIL|checks passed|test_engines:|check_config:|GPU suites|^OK|^Ran " "$OUT/gpu-tests.log" | head -20
