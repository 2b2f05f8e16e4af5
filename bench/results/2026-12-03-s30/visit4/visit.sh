#!/usr/bin/env bash
# Session 30, visit 4: test_cuda_backend after its W sections' client set-up
# became one helper (no behaviour change meant): the whole suite, then the
# --w4 probe.
. bench/visit-common.sh
mkdir -p "$OUT"
(cd "$F" && PJ_BUILD=$B timeout 200 "$B/tests/gpu/test_cuda_backend") >"$OUT/suite.log" 2>&1
echo "suite rc=$?"
grep -E "^W[0-9]|== W|test_cuda_backend:" "$OUT/suite.log"
(cd "$F" && PJ_BUILD=$B timeout 120 "$B/tests/gpu/test_cuda_backend" --w4) >"$OUT/w4.log" 2>&1
echo "w4 rc=$?"
grep -E "^W4|test_cuda_backend --w4:" "$OUT/w4.log"
