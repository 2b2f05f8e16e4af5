#!/usr/bin/env bash
# Session 64, visit 1: bench/final-check.sh on main 7425a40: the GPU suites
# (test_cuda_ipc now runs the cuda backend's staged fallback after refused
# graph rebinds, PROJD_CUDA_REFUSE_BINDS) and the benchmark of the
# committed table, cuBLAS measured in the same run. Kernels and tables as
# in session 59.
. bench/visit-common.sh
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)"
t0=$(date +%s)
pj_final_check
echo "final check done ($(($(date +%s) - t0)) s)"
echo "--- refused rebinds (test_cuda_ipc)"
grep -E "refused rebinds|== refused" "$OUT/final/gpu-tests.log" | head -12
echo "--- table (bench 1)"
grep -E "^(decode|verify)|^SCORE" "$OUT/final/bench-1.log" | head -10
grep -E "^SCORE" "$OUT/final/bench-2.log"
