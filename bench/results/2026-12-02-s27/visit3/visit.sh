#!/usr/bin/env bash
# Session 27, visit 3: the review's fixes on the GPU (main 5239070): a z12
# layer without a bf16 copy served by gemvz at every m (test_engines
# part_b_z12_only, test_cuda_backend section Z), the daemon's layers with
# the exception slot tables the tuner times gemvz with, the dispatcher's
# exact-shape preference; the server's unread-replies rule. Then
# bench/final-check.sh (GPU suites, fatal-error test, the benchmark twice).
. bench/visit-common.sh
timeout 330 bash bench/final-check.sh "$B" "$F/final" "$(cat .devrun-pack/commit 2>/dev/null || echo work)" 2>&1
grep -h "^B z12\|z12-only\|== Z\|^Z:\|Z layer\|Z: " "$F/final/backend.log" | head -20
tar czf "$OUT/final.tgz" -C "$F/final" .
