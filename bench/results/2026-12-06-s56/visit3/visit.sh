#!/usr/bin/env bash
# Session 56, visit 3: the final check of the session's last code (host
# side only since visit 1: libprojd's HELLO through closes of its pipe,
# metrics at a refusal, config and model files required to be regular
# files, options given twice; kernels and tables unchanged): the GPU suites
# (python_torch runs libprojd's connect) and the fatal-error test with the
# committed table, and the benchmark of this GPU's table twice.
. bench/visit-common.sh
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)"
t0=$(date +%s)
pj_final_check
echo "final check done ($(($(date +%s) - t0)) s)"
echo "--- table (bench 1)"
grep -E "^(decode|verify)|^SCORE" "$OUT/final/bench-1.log" | head -10
