#!/usr/bin/env bash
# Session 41, visit 5: test_cuda_backend after section S's assertion was
# corrected (visit 4: a release that came back at its first poll had no
# wait to move, and S wanted some), under MPS as the suites run it: the
# whole suite once, then its --w4 sections (R, S strict and not, X, W4)
# twice more, for S.
. bench/visit-common.sh
export PROJD_TUNING_DIR=$PWD/config/tuning
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
timeout 20 nvidia-cuda-mps-control -d || echo "no MPS"
export PJ_BUILD=$B
timeout 200 "$B/tests/gpu/test_cuda_backend" >"$OUT/backend-full.log" 2>&1
echo "full rc=$?"
grep -E "^== K|^S:|FAIL|checks passed" "$OUT/backend-full.log" | cut -c1-240
for i in 1 2; do
    timeout 100 "$B/tests/gpu/test_cuda_backend" --w4 >"$OUT/backend-w4-$i.log" 2>&1
    echo "w4 $i rc=$?"
    grep -E "^S:|FAIL|checks passed" "$OUT/backend-w4-$i.log" | cut -c1-240
done
echo quit | timeout 20 nvidia-cuda-mps-control
