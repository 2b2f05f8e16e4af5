#!/usr/bin/env bash
# Round 40, visit 1 (second call on the warm machine): the probe again with
# pipe 7's knobs named in full (the probe starts from the engine's default
# knobs, whose xs = 2 the first call left in place: every line refused).
. bench/visit-common.sh
D=bench/results/2026-12-03-s28-r40/visit1
timeout 300 "$B/bin/projd-bench" --probe "$D/probe.txt" --out "$F/probe" >"$OUT/probe.log" 2>&1
echo "probe rc=$?"
grep -E "^(qkv_gate|pooler|o|unpooler) " "$OUT/probe.log" | awk '{printf "%-9s %3s %-7s %-52s alone %7s +cub %7s | cublas %7s\n",$1,$2,$3,$4,$5,$6,$10}'
