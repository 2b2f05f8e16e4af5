#!/usr/bin/env bash
# Round 40, visit 5: ncu of pipe 7 as visit 4 left it (qkv_gate m = 1, 16) and of
# the table's ring GEMV at m = 1 for comparison.
. bench/visit-common.sh
PJ_DEV=$B NCU_LIST=bench/results/2026-12-03-s28-r40/visit5/ncu.txt OUT=$OUT timeout 400 bash bench/ncu-deep.sh 2>&1 | tail -60
# The same probe as visit 4 (the row starts are now found in parallel).
timeout 200 "$B/tests/gpu/test_engines" --quick >"$OUT/engines.log" 2>&1
echo "test_engines rc=$?"
grep -E "pipe=7|test_engines:" "$OUT/engines.log" | grep -v expected | head
timeout 300 "$B/bin/projd-bench" --probe bench/results/2026-12-03-s28-r40/visit4/probe.txt --out "$F/probe" >"$OUT/probe.log" 2>&1
grep -E "^(qkv_gate|pooler|o|unpooler) " "$OUT/probe.log" | grep -v refused | awk '{printf "%-9s %3s %-7s %-52s alone %7s\n",$1,$2,$3,$4,$5}'
