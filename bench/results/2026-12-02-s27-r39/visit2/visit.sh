#!/usr/bin/env bash
# Round 39, visit 2: one projection's rows split between the z12 GEMV
# (rows [0, n1)) and cuBLAS or the bf16 tiled GEMM (rows [n1, n)), the two
# side by side in one graph (projd-bench --pair pair.txt): checked against
# the reference, then timed beside each engine alone and the baselines.
. bench/visit-common.sh
d=bench/results/2026-12-02-s27-r39/visit2
timeout 300 "$B/bin/projd-bench" --out "$OUT/pair" --pair "$d/pair.txt" >"$OUT/pair.log" 2>&1
echo "pair rc $?"
sed -n '/^pair:/,$p' "$OUT/pair.log" | cut -c1-140
