#!/usr/bin/env bash
# Session 57, visit 1: the final check of main e1c28b2 (session 56's last
# code; kernels and tables unchanged since session 45's score of record):
# the GPU suites and the fatal-error test with the committed table, and
# the benchmark of this GPU's table twice.
. bench/visit-common.sh
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)"
t0=$(date +%s)
pj_final_check
echo "final check done ($(($(date +%s) - t0)) s)"
echo "--- table (bench 1)"
grep -E "^(decode|verify)|^SCORE" "$OUT/final/bench-1.log" | head -10
