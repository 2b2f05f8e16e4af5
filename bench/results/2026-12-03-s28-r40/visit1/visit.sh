#!/usr/bin/env bash
# Round 40, visit 1: the x-register z12 GEMV (gemvz pipe = 7). test_engines
# --quick (the new sweep_xreg on o, o cut to 1000 rows, the unpooler's
# slice, o with 5 % zeros, K = 3072: every variant against the reference,
# one-hot exception columns bit-exact), then --probe of pipe 7 beside the
# table's entries at m = 1 / 8 / 16 / 32 (each against GemmEx).
. bench/visit-common.sh
D=bench/results/2026-12-03-s28-r40/visit1
timeout 200 "$B/tests/gpu/test_engines" --quick >"$OUT/engines.log" 2>&1
echo "test_engines rc=$?"
grep -E "pipe=7|test_engines:|FAIL" "$OUT/engines.log" | head -30
timeout 300 "$B/bin/projd-bench" --probe "$D/probe.txt" --out "$F/probe" >"$OUT/probe.log" 2>&1
echo "probe rc=$?"
grep -E "^(qkv_gate|pooler|o|unpooler) " "$OUT/probe.log" | awk '{printf "%-9s %3s %-7s %-40s alone %7s +cub %7s | cublas %7s\n",$1,$2,$3,$4,$5,$6,$10}'
