#!/usr/bin/env bash
# Session 58, visit 5: the final check of main 4ddb270 (the z12 window that
# avoids heavy exception blocks; the reference model's and the benchmark's
# windows are as before, so the kernels and the table run what they ran):
# the GPU suites and the fatal-error test with the committed table, and the
# benchmark of this GPU's table twice.
. bench/visit-common.sh
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)"
t0=$(date +%s)
pj_final_check
echo "final check done ($(($(date +%s) - t0)) s)"
echo "--- table (bench 1)"
grep -E "^(decode|verify)|^SCORE" "$OUT/final/bench-1.log" | head -10
grep -E "^SCORE" "$OUT/final/bench-2.log"
