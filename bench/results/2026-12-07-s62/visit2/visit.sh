#!/usr/bin/env bash
# Session 62, visit 2: bench/final-check.sh on main 125d93a (the GPU suites
# under MPS with the committed table, the fatal-error test, the benchmark
# of this GPU's table twice). Session 61's last three commits (row classes
# reviewed, the rowclass module, alloc_layers) never ran the full suites on
# a GPU; no kernel or table changed since session 45's score of record.
. bench/visit-common.sh
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)"
t0=$(date +%s)
pj_final_check
echo "final check done ($(($(date +%s) - t0)) s)"
echo "--- table (bench 1)"
grep -E "^(decode|verify)|^SCORE" "$OUT/final/bench-1.log" | head -10
