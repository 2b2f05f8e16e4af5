#!/usr/bin/env bash
# Session 27, visit 1: the check owed since session 26 ended. Main b19367e
# (engine.cu's round-38 helpers refactored, test_engines' new ladder case
# for a configuration cuBLASLt refuses at one shape): bench/final-check.sh
# (GPU suites, test_engines with the committed table, the fatal-error test,
# the benchmark twice).
. bench/visit-common.sh
timeout 330 bash bench/final-check.sh "$B" "$F/final" "$(cat .devrun-pack/commit 2>/dev/null || echo work)" 2>&1
grep -h 'lt configurations\|cuBLASLt conf\|refus' "$F/final/backend.log" | head -12
tar czf "$OUT/final.tgz" -C "$F/final" .
