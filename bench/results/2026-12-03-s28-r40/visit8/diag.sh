#!/usr/bin/env bash
# Round 40, visit 8 (first call): where pipe 7's time goes. The same probe
# run by a diagnostic build of 06118bd (diag.patch.txt, never committed:
# PJ_GZQ_DIAG=1 skips the x loads at the start, 2 skips the finish's sums
# and exceptions; wrong results, so validation is waived for it) in three
# processes: 0 (as committed), 1, 2.
. bench/visit-common.sh
D=bench/results/2026-12-03-s28-r40/visit8
mkdir -p /tmp/d && tar xJf .devrun-pack/d.tar.xz -C /tmp/d
for mode in 0 1 2; do
    PJ_GZQ_DIAG=$mode PJ_DIAG_NOVALIDATE=1 timeout 150 /tmp/d/.devrun-d/projd-bench-diag \
        --probe "$D/probe.txt" --out "$F/probe-$mode" >"$OUT/probe-diag$mode.log" 2>&1
    echo "diag $mode rc=$?"
done
for mode in 0 1 2; do
    grep -E "^(qkv_gate|pooler|o) " "$OUT/probe-diag$mode.log" | awk -v d=$mode '{printf "diag%s %-9s %3s %-7s %-52s alone %7s\n",d,$1,$2,$3,$4,$5}'
done
