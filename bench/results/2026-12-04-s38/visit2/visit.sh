#!/bin/bash
# Session 38, visit 2: which per-job call fills the queue (queue_probe2),
# and test_cuda_backend --q on the default ladder again, with the request
# counts and times.
. bench/visit-common.sh
export PJ_BUILD=$B
cd /tmp
timeout 120 "$B/queue_probe2" 2>&1 | tee "$OUT/queue_probe2.txt"
timeout 200 "$B/tests/gpu/test_cuda_backend" --q "" 2>&1 | tee "$OUT/q.log" | grep -E '^Q:|FAIL|passed|failed'
