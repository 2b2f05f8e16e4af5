#!/usr/bin/env bash
# Session 63, visit 1: bench/final-check.sh on main (the session's first
# host-side fixes: a span's bytes counted once in validate, libprojd's
# lost-connection message, the Python client's wait timeout; kernels and
# tables as in session 59), then the 8B-shaped decoder layer (session 58's,
# pj_l8_model) at m = 16 and 32, tuned and benchmarked against cuBLAS in
# the same run: sessions 42 and 59 measured it at m = 1 / 8 only.
. bench/visit-common.sh
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)"
t0=$(date +%s)
pj_final_check
echo "final check done ($(($(date +%s) - t0)) s)"
el=$(($(date +%s) - t0))
if [ $el -lt 380 ] && pj_l8_model; then
    python3 - "$F" <<'PY'
import json, sys
l8 = {"model": {"path": "/tmp/l8/l8.safetensors", "layers": [
    {"name": n, "tensor": n + ".weight"} for n in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")]},
    "shapes": {"m": [16, 32]}}
json.dump(l8, open(sys.argv[1] + "/l8m.json", "w"))
PY
    timeout 150 "$B/bin/projd-bench" --config "$F/l8m.json" --tune "$F/l8m-table.json" --tune-budget 60 \
        --out "$F/l8m" --reps 200 >"$F/l8m.log" 2>&1
    echo "projd-bench l8 m=16/32 rc=$? ($(($(date +%s) - t0)) s)"
    mkdir -p "$OUT/l8m"
    cp "$F/l8m/bench.json" "$F/l8m-table.json" "$OUT/l8m/" 2>/dev/null
    grep -v 'candidates' "$F/l8m.log" | tail -40 >"$OUT/l8m/bench.log"
    echo "--- l8 (layer m engine base_us ours_us speedup vs_floor)"
    awk 'NF == 7 && $2 ~ /^[0-9]+$/ {print "  " $0}' "$F/l8m.log" | head -10
    grep -E "^(m |SCORE)" "$F/l8m.log"
else
    echo "l8 skipped: $el s gone"
fi
echo "--- table (bench 1)"
grep -E "^(decode|verify)|^SCORE" "$OUT/final/bench-1.log" | head -10
grep -E "^SCORE" "$OUT/final/bench-2.log"
