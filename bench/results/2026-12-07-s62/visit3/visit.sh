#!/usr/bin/env bash
# Session 62, visit 3: bench/final-check.sh on the session's last code
# (host side: projctl/projload read the daemon's layers, status at the
# connection limit, STATS' request counts, and the op check that refuses a
# y sharing bytes with its x, which runs on every request of the GPU
# suites; test_cuda_ipc checks it across two registrations of one
# allocation). Kernels and tables unchanged since session 45.
. bench/visit-common.sh
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)"
t0=$(date +%s)
pj_final_check
echo "final check done ($(($(date +%s) - t0)) s)"
grep -h "y over x through a second registration" /tmp/backend/*.log 2>/dev/null | head -2
echo "--- table (bench 1)"
grep -E "^(decode|verify)|^SCORE" "$OUT/final/bench-1.log" | head -10
