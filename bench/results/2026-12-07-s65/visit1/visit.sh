#!/usr/bin/env bash
# Session 65, visit 1: main 7b4aa5c (no kernel or table change since
# session 45). bench/final-check.sh on whatever card comes: the GPU suites
# with cc_verify's new per-element bound (was the block's L2 error), and
# the benchmark twice through projd-bench's new result code
# (kernels/benchout.c: files written whole, exit 3 for a wrong shape). On an
# H200 the first H200 figure since session 45; on an H100 the H100 table.
. bench/visit-common.sh
dev=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)
echo "device: $dev"
t0=$(date +%s)
pj_final_check
echo "done ($(($(date +%s) - t0)) s)"
ls -la /tmp/fc/bench-1 2>/dev/null | head
cp /tmp/fc/bench-1/bench.md "$OUT/final/bench-1.md" 2>/dev/null
cp /tmp/fc/bench-2/bench.json "$OUT/final/bench-2.json" 2>/dev/null
for b in 1 2; do
    [ -f "$OUT/final/bench-$b.log" ] || continue
    echo "--- bench $b"
    grep -E "^(decode|verify)|^SCORE|^projd-bench" "$OUT/final/bench-$b.log" | head -10
done
grep -E "beyond the bound|FAIL" "$OUT/final/gpu-tests.log" | head -10
