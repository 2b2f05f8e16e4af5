#!/usr/bin/env bash
# Session 38, visit 10 (after a review): does a client's BlockingSync IPC
# event count against the 56 records (queue_probe4)? How many launches
# does a direct op of four take (Q's "direct x4" forms, budget off)? Then
# test_cuda_backend in full and --m on the final code.
. bench/visit-common.sh
export PJ_BUILD=$B
timeout 30 "$B/queue_probe4" 2>&1 | tee "$OUT/queue_probe4.txt"
PJ_Q_ONLY="direct x4" timeout 90 "$B/tests/gpu/test_cuda_backend" --q "" cublas >"$OUT/q.log" 2>&1; echo "Q rc=$?"
grep -E '^Q:|checks|FAIL' "$OUT/q.log" | head -14
timeout 90 "$B/tests/gpu/test_cuda_backend" --m >"$OUT/m.log" 2>&1; echo "M rc=$?"
grep -E '^M:|checks|FAIL' "$OUT/m.log" | head -30
timeout 200 "$B/tests/gpu/test_cuda_backend" >"$OUT/backend.log" 2>&1; echo "test_cuda_backend rc=$?"
grep -E '^(L|M): |checks passed|FAIL|startup:' "$OUT/backend.log" | cut -c1-250 | head -24
