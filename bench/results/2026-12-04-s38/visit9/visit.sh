#!/usr/bin/env bash
# Session 38, visit 9: does rebinding a graph to new addresses wait for
# its earlier replays queued behind a held wait? (Q's "rebound each"
# forms, with the budget off; the SGLang method passes new tensors at
# every call.)
. bench/visit-common.sh
export PJ_BUILD=$B
timeout 120 "$B/tests/gpu/test_cuda_backend" --q "" >"$OUT/q.log" 2>&1; echo "Q rc=$?"
grep -E '^Q:|checks|FAIL' "$OUT/q.log" | head -24
