#!/usr/bin/env bash
# Round 40, visit 2: pipe 7 with the finisher staging every row block's
# exceptions at the start (three rounds of cp.async for the CTA, instead
# of three dependent rounds per row block). test_engines --quick, then the
# same probe as visit 1.
. bench/visit-common.sh
D=bench/results/2026-12-03-s28-r40/visit2
timeout 200 "$B/tests/gpu/test_engines" --quick >"$OUT/engines.log" 2>&1
echo "test_engines rc=$?"
grep -E "pipe=7|test_engines:|FAIL" "$OUT/engines.log" | grep -v expected | head -30
timeout 300 "$B/bin/projd-bench" --probe "$D/probe.txt" --out "$F/probe" >"$OUT/probe.log" 2>&1
echo "probe rc=$?"
grep -E "^(qkv_gate|pooler|o|unpooler) " "$OUT/probe.log" | grep -v refused | awk '{printf "%-9s %3s %-7s %-52s alone %7s +cub %7s\n",$1,$2,$3,$4,$5,$6}'
