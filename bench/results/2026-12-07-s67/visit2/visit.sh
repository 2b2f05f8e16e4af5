#!/usr/bin/env bash
# Session 67, visit 2: visit 1 again on the final code, for an H200 figure.
# bench/final-check.sh on whatever card comes, over a build packed at the
# commit it runs on (.devrun-pack/commit): the GPU suites, now with
# tests/helpers/ycheck.h's check (the per-element bound, at most 5 % of a
# block's elements differing from the reference, x outside its rows NaN),
# then the benchmark twice through projd-bench's result code
# (kernels/benchout.c). No kernel or table change since session 45: on an
# H200 the first H200 figure since then; on an H100 the H100 table.
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
grep -E "beyond the bound|differ from the reference|FAIL" "$OUT/final/gpu-tests.log" | head -10
