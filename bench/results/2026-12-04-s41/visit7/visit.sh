#!/usr/bin/env bash
# Session 41, visit 7: test_cuda_backend (whole, under MPS) after the
# clean-up: one shape rule for table entries (pj_tune_entry_fits) and one
# table-file helper in the test (sections T and K).
. bench/visit-common.sh
export PROJD_TUNING_DIR=$PWD/config/tuning PJ_BUILD=$B
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
timeout 20 nvidia-cuda-mps-control -d || echo "no MPS"
timeout 200 "$B/tests/gpu/test_cuda_backend" >"$OUT/backend-full.log" 2>&1
echo "full rc=$?"
grep -E "^== [TK]|^K|FAIL|checks passed" "$OUT/backend-full.log" | cut -c1-240
echo quit | timeout 20 nvidia-cuda-mps-control
