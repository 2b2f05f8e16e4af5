#!/usr/bin/env bash
# Session 43, visit 2 — PLANNED, NOT RUN (no device was lent in session 43).
# bench/final-check.sh on the session's last code: the GPU suites under MPS
# (with SGLang's wheels, so python_sglang runs too), the fault tests, and
# the benchmark of the committed table twice. The kernels are unchanged;
# what the suites check anew is the host side of the format (the z12 pack
# that every gemvz engine's weights come from, and the unpack of the bf16
# copies) and the session's daemon changes. At most 8 files come back.
. bench/visit-common.sh
pj_site_wheels || exit 1
FC=/tmp/fc
bash bench/final-check.sh "$B" "$FC" "$(cat .devrun-pack/commit)"
mkdir -p "$OUT/final"
cp "$FC/backend.log" "$FC/bench-1.log" "$FC/bench-2.log" "$OUT/final/"
cp /tmp/backend/gpu-fault.log /tmp/backend/gpu-tests.log "$OUT/final/" 2>/dev/null
cp "$FC/bench-1/bench.json" "$OUT/final/bench.json"
grep -E "python_sglang|FAIL|checks passed|^--- |GPU suites|^Ran |^OK" "$OUT/final/gpu-tests.log" \
    "$OUT/final/gpu-fault.log" | cut -c1-220 | head -50
