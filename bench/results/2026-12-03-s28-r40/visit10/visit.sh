#!/usr/bin/env bash
# Round 40, visit 10: pipe 7 with a CTA per row block (r = 0: no
# persistence, no ring across units) beside the persistent grid, to tell
# the grid's shape from the stream's rate (visit 8 left those two).
# test_engines --quick (sweep_xreg now with r = 0), then the probe.
. bench/visit-common.sh
D=bench/results/2026-12-03-s28-r40/visit10
timeout 200 "$B/tests/gpu/test_engines" --quick >"$OUT/engines.log" 2>&1
echo "test_engines rc=$?"
grep -E "pipe=7|test_engines:" "$OUT/engines.log" | grep -v expected | head
timeout 200 "$B/bin/projd-bench" --probe "$D/probe.txt" --out "$F/probe" >"$OUT/probe.log" 2>&1
echo "probe rc=$?"
grep -E "^(qkv_gate|pooler|o) " "$OUT/probe.log" | grep -v refused | awk '{printf "%-9s %3s %-7s %-52s alone %7s\n",$1,$2,$3,$4,$5}'
grep -E "refused" "$OUT/probe.log" | head -5
