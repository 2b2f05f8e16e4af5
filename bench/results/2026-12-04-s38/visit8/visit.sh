#!/usr/bin/env bash
# Session 38, visit 8: only warmed shapes reach the device (fewer rows,
# strides and unaligned pointers staged at the warmed shape): M with its
# odd shapes, Q's strided forms, then the GPU suites under MPS.
. bench/visit-common.sh
export PJ_BUILD=$B
export PROJD_TUNING_DIR=$PWD/config/tuning PJ_TUNE_TABLE=$PWD/config/tuning/h200.json
timeout 150 "$B/tests/gpu/test_cuda_backend" --m >"$OUT/m.log" 2>&1; echo "M rc=$?"
grep -E '^M:|checks|FAIL' "$OUT/m.log" | head -40
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
timeout 20 nvidia-cuda-mps-control -d && echo "MPS started"
PJ_GPU_TEST_TIMEOUT=200 timeout 300 bash tests/run-gpu-tests.sh "$B" >"$OUT/gpu-tests.log" 2>&1
echo "suites rc=$?"
echo quit | timeout 20 nvidia-cuda-mps-control >/dev/null 2>&1
grep -E "^(L|M): " "$OUT/gpu-tests.log" | head -16
grep -E "FAIL|checks passed|test_engines:|check_config:|GPU suites|^OK|^Ran " "$OUT/gpu-tests.log" | head -20
