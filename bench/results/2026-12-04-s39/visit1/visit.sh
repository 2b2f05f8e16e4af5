#!/usr/bin/env bash
# Session 39, visit 1: run_op's staged paths merged into one, pj_eng_choose's
# notes (test_cuda_backend B2), section P in CUDA memory too, F3 (a fault in
# the warm-up stops the start), and session 38's untested test refactor:
# test_cuda_backend --m (every staged form behind another lane's held
# wait), then bench/final-check.sh (GPU suites under MPS, the fault tests,
# the benchmark twice).
. bench/visit-common.sh
export PJ_BUILD=$B
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
timeout 20 nvidia-cuda-mps-control -d && echo "MPS started"
timeout 150 "$B/tests/gpu/test_cuda_backend" --m >"$OUT/m.log" 2>&1; echo "M rc=$?"
grep -E '^M:|checks|FAIL' "$OUT/m.log" | cut -c1-200 | head -20
echo quit | timeout 20 nvidia-cuda-mps-control >/dev/null 2>&1
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
bash bench/final-check.sh "$B" "$OUT/final" "$(cat .devrun-pack/commit)+s39"
grep -E "^(B2|P|F3):|== (B2|P|F3)|FAIL" "$OUT/final/backend.log" /tmp/backend/gpu-fault.log 2>/dev/null | cut -c1-220 | head -30
cp /tmp/backend/gpu-fault.log "$OUT/final/" 2>/dev/null
tar xzf "$OUT/final/backend.tgz" -O ./gpu-tests.log 2>/dev/null | grep -E "^(B2|P|F3):|== (B2|P)|FAIL|--- " | cut -c1-220 | head -30
