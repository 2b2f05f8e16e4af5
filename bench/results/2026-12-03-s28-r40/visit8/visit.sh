#!/usr/bin/env bash
# Round 40, visit 8 (second call): the final check of main 06118bd (round
# 40 committed, pipe 7 chosen nowhere): GPU suites with the committed
# table (test_engines in full, sweep_xreg among them), the fatal-error
# test, the benchmark twice.
. bench/visit-common.sh
timeout 560 bash bench/final-check.sh "$B" "$F/final" "$(cat .devrun-pack/commit)"
grep -E "pipe=7" "$F/final/backend.log" | head -8
mkdir -p "$OUT/final" && cp -r "$F/final/." "$OUT/final/"
