#!/usr/bin/env bash
# Session 45, visit 4: test_cuda_ipc on the session's last code (after the
# final check of visit 2): the loader's host memory check runs in every
# projd start. The pack holds projd, projctl and test_cuda_ipc only.
. bench/visit-common.sh
export PJ_BUILD=$B
timeout 150 "$B/tests/gpu/test_cuda_ipc" >"$OUT/test_cuda_ipc.log" 2>&1
echo "test_cuda_ipc rc=$?" | tee -a "$OUT/test_cuda_ipc.log"
grep -E "checks passed|FAIL|other device|wrong UUID|MemAvailable|host memory" "$OUT/test_cuda_ipc.log" |
    cut -c1-240 | head -12
