#!/usr/bin/env bash
# Session 29, visit 11: the final check of main b74e509 (round 40 with r = 0;
# projload's fixes): GPU suites with the committed table, the fatal-error
# test, the benchmark twice.
. bench/visit-common.sh
timeout 560 bash bench/final-check.sh "$B" "$F/final" "$(cat .devrun-pack/commit)"
grep -E "xreg|pipe=7, n" "$F/final/backend.log" | head -8
mkdir -p "$OUT/final" && cp -r "$F/final/." "$OUT/final/"
