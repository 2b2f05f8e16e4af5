#!/usr/bin/env bash
# Session 62, visit 4: bench/final-check.sh on the session's last code
# (visit 3's, and libprojd's limit on blocking calls from callbacks on
# nng's threads, which every GPU suite's client links; the Python client's
# changes, which python_torch runs). Kernels and tables unchanged since
# session 45.
. bench/visit-common.sh
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)"
t0=$(date +%s)
pj_final_check
echo "final check done ($(($(date +%s) - t0)) s)"
echo "--- table (bench 1)"
grep -E "^(decode|verify)|^SCORE" "$OUT/final/bench-1.log" | head -10
