#!/usr/bin/env bash
# Session 56, visit 1: the final check of main fffdf46 (the last code of
# session 55; kernels and tables unchanged since session 54's revert of
# round 42): the GPU suites and the fatal-error test with the committed
# table, then the benchmark of this GPU's table twice (bench/final-check.sh).
# Named nvidia-h200: if the pool lends one, this is the H200 figure of this
# code; on an H100 it is the H100 table's.
. bench/visit-common.sh
t0=$(date +%s)
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)"
pj_final_check
echo "final check done ($(($(date +%s) - t0)) s)"
echo "--- table (bench 1)"
grep -E "^(decode|verify)|^SCORE" "$OUT/final/bench-1.log" | head -10
