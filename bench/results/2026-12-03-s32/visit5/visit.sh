#!/usr/bin/env bash
# Session 32, visit 5: the final commit's cuda backend (one helper for its
# 10 ms condition waits since visit 4): test_cuda_backend in full and
# test_cuda_ipc.
. bench/visit-common.sh
export PROJD_TUNING_DIR=$PWD/config/tuning
(cd "$F" && PJ_BUILD=$B timeout 200 "$B/tests/gpu/test_cuda_backend") >"$OUT/cuda_backend.log" 2>&1
echo "cuda_backend rc=$?"
(cd "$F" && PJ_BUILD=$B timeout 100 "$B/tests/gpu/test_cuda_ipc") >"$OUT/cuda_ipc.log" 2>&1
echo "cuda_ipc rc=$?"
grep -E "^R:|FAIL|test_cuda_backend:|test_cuda_ipc:|W4 .*(new connections|SIGTERM)" "$OUT"/cuda_*.log | head -20
