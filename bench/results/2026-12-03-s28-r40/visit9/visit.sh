#!/usr/bin/env bash
# Round 40, visit 9: the final check again after sweep_xreg's fix (it asks a
# pipe 7 variant only where gemvzq.cu compiles one; visit 8's full
# test_engines failed four checks where none exists): GPU suites with the
# committed table, the fatal-error test, the benchmark twice.
. bench/visit-common.sh
timeout 560 bash bench/final-check.sh "$B" "$F/final" "$(cat .devrun-pack/commit)"
grep -E "pipe=7|xreg" "$F/final/backend.log" | head -12
mkdir -p "$OUT/final" && cp -r "$F/final/." "$OUT/final/"
