#!/bin/bash
# Session 38, visit 1: queue entries per job (test_cuda_backend --q), by
# engine, with the launch budget off; then L with the budget on.
. bench/visit-common.sh
export PJ_BUILD=$B
cd /tmp
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 420 "$B/tests/gpu/test_cuda_backend" --q "" cublas gemvz splitk router 2>&1 | tee "$OUT/q.log" | grep -E '^Q:|FAIL|passed|failed'
timeout 60 "$B/tests/gpu/test_cuda_backend" --l >"$OUT/l.log" 2>&1; echo "L exit $?"
grep -E '^L:|checks' "$OUT/l.log" | tail -6
