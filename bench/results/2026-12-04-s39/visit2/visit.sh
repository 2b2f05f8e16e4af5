#!/usr/bin/env bash
# Session 39, visit 2: after visit 1's two failures (B2 forced the GEMV with
# knobs none of the small model's layers takes; F3's warm-up launch error
# named no CUDA error): test_cuda_backend in full and --m under MPS (the
# GEMV forced with knobs that fit), python_torch (projd_sglang's E_LIMIT
# retry, under the real torch), then --fault without MPS.
. bench/visit-common.sh
export PJ_BUILD=$B
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
timeout 20 nvidia-cuda-mps-control -d && echo "MPS started"
timeout 200 "$B/tests/gpu/test_cuda_backend" >"$OUT/backend.log" 2>&1; echo "test_cuda_backend rc=$?"
grep -E '^(B2|P|M):|== B2|checks passed|FAIL' "$OUT/backend.log" | cut -c1-220 | head -30
timeout 150 "$B/tests/gpu/test_cuda_backend" --m >"$OUT/m.log" 2>&1; echo "M rc=$?"
grep -E '^M:|== M|checks|FAIL' "$OUT/m.log" | cut -c1-200 | head -30
timeout 120 bash tests/gpu/python_torch.sh "$B" >"$OUT/python_torch.log" 2>&1; echo "python_torch rc=$?"
grep -E "^Ran|^OK|FAIL|Error" "$OUT/python_torch.log" | head
echo quit | timeout 20 nvidia-cuda-mps-control >/dev/null 2>&1
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
timeout 90 "$B/tests/gpu/test_cuda_backend" --fault >"$OUT/fault.log" 2>&1; echo "fault rc=$?"
grep -E '== F|warm-up|checks|FAIL' "$OUT/fault.log" | cut -c1-250 | head -20
