#!/usr/bin/env bash
# Session 42, visit 2: test_cuda_backend, whole (section N among its
# sections), under MPS, on the build with one workspace per lane.
. bench/visit-common.sh
export PROJD_TUNING_DIR=$PWD/config/tuning PJ_BUILD=$B
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
timeout 20 nvidia-cuda-mps-control -d || echo "no MPS"
timeout 400 "$B/tests/gpu/test_cuda_backend" >"$OUT/backend-full.log" 2>&1
echo "full rc=$?"
grep -E "FAIL|checks passed|checks,|^N:" "$OUT/backend-full.log" | cut -c1-240 | head -30
echo quit | timeout 20 nvidia-cuda-mps-control
