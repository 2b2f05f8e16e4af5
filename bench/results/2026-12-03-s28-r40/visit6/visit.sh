#!/usr/bin/env bash
# Round 40, visit 6: pipe 7 with x loaded by 16-byte pieces and a
# transpose within each quad (16 loads per lane instead of 64). test_engines
# --quick, the probe (st = 4, r = 1), ncu of qkv_gate m = 16.
. bench/visit-common.sh
D=bench/results/2026-12-03-s28-r40/visit6
timeout 200 "$B/tests/gpu/test_engines" --quick >"$OUT/engines.log" 2>&1
echo "test_engines rc=$?"
grep -E "pipe=7|test_engines:" "$OUT/engines.log" | grep -v expected | head
timeout 300 "$B/bin/projd-bench" --probe "$D/probe.txt" --out "$F/probe" >"$OUT/probe.log" 2>&1
grep -E "^(qkv_gate|pooler|o|unpooler) " "$OUT/probe.log" | grep -v refused | awk '{printf "%-9s %3s %-7s %-52s alone %7s\n",$1,$2,$3,$4,$5}'
echo "qkv_gate 16 gemvz nw=16,ks=1,u=1,pipe=7,xs=0,rb=1,ts=0,cl=0,r=1,st=4 gemvzq_kernel" >"$F/ncu.txt"
PJ_DEV=$B NCU_LIST=$F/ncu.txt OUT=$OUT timeout 200 bash bench/ncu-deep.sh 2>&1 | grep -E "Duration|Cycles Per Issued|Stall (LG|Long|MIO|Wait|Short)"
