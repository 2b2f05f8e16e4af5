#!/usr/bin/env bash
# Session 39, visit 3: the committed build (B2 and F3 as fixed after visit
# 2): bench/final-check.sh (GPU suites under MPS, the fault tests without,
# the benchmark of the committed table twice).
. bench/visit-common.sh
bash bench/final-check.sh "$B" "$OUT/final" "$(cat .devrun-pack/commit)"
cp /tmp/backend/gpu-fault.log /tmp/backend/gpu-tests.log "$OUT/final/" 2>/dev/null
grep -E "^B2:|FAIL|warm-up on lane|checks passed|^--- |GPU suites" "$OUT/final/gpu-tests.log" "$OUT/final/gpu-fault.log" | cut -c1-220 | head -30
