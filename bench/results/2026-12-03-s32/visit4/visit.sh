#!/usr/bin/env bash
# Session 32, visit 4: visit 3's one failure was section R's own (y not
# poisoned before the held request); test_cuda_backend in full again.
. bench/visit-common.sh
export PROJD_TUNING_DIR=$PWD/config/tuning
(cd "$F" && PJ_BUILD=$B timeout 200 "$B/tests/gpu/test_cuda_backend") >"$OUT/cuda_backend.log" 2>&1
echo "rc=$?"
grep -E "^R:|FAIL|test_cuda_backend:|W4 .*(new connections|SIGTERM)" "$OUT/cuda_backend.log" | head -20
