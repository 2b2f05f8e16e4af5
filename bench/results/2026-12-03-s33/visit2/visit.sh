#!/usr/bin/env bash
# Session 33, visit 2: a release under constant WAIT_EVENT traffic
# (test_cuda_backend S): before (the strict policy, by
# PROJD_CUDA_RELEASE_PATIENCE_MS) and after (lanes that are moving no longer
# hold a release after 250 ms), with R and W4 (releases behind a live and a
# dead client's wait) in the same run; then the GPU suites in full. No
# kernel changed since visit 1, so no benchmark.
. bench/visit-common.sh
export PJ_BUILD=$B
timeout 200 "$B/tests/gpu/test_cuda_backend" --w4 >"$OUT/w4s.txt" 2>&1
echo "test_cuda_backend --w4 rc=$?"
grep -E "^== |^S:|^R:|^W4|FAIL" "$OUT/w4s.txt" | head -40
rm -rf /tmp/backend
OUT=/tmp/backend PJ_GPU_TEST_TIMEOUT=300 SUITES_TIMEOUT=300 timeout 330 \
    bash bench/run-backend-device.sh "$B" >"$F/backend.log" 2>&1
echo "backend rc=$?"
tar czf "$OUT/backend.tgz" -C /tmp/backend . "$F/backend.log" 2>/dev/null
grep -E "checks passed|test_engines:|GPU suites|^OK|^Ran |FAIL|^S:" "$F/backend.log" | head -20
