#!/usr/bin/env bash
# Session 54, visit 1: the final check of main (bench/final-check.sh: the GPU
# suites with python_sglang, the fault tests, the benchmark of the committed
# table twice), the first on an H200 since session 45 if the pool lends one;
# then, when the final check left time in the call, the 16 m between the
# table's entries (session 52's method), which no H200 has timed.
. bench/visit-common.sh
t0=$(date +%s)
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)"
pj_site_wheels || echo "visit: the SGLang wheels did not install"
pj_final_check
echo "final check took $(($(date +%s) - t0)) s"
left=$((570 - ($(date +%s) - t0)))
if [ "$left" -lt 150 ]; then
    echo "visit: ${left} s left in the call, the between-m run is left out"
    exit 0
fi
table=$(bash bench/gpu-table.sh)
pj_served_config || { echo "visit: no served config"; exit 1; }
python3 - "$F/ref.json" "$F/between.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["shapes"] = {"m": [2, 3, 4, 6, 12, 20, 24, 33, 48, 64, 96, 136, 160, 192, 224, 255], "max_m": 256}
json.dump(c, open(sys.argv[2], "w"))
PY
t1=$(date +%s)
timeout $((left - 10)) "$B/bin/projd-bench" --config "$F/between.json" --table "$table" --reps 100 \
    --out "$F/between" --commit "$(cat .devrun-pack/commit)" >"$F/between.log" 2>&1
echo "between rc=$? $(grep -E '^SCORE' "$F/between.log") ($(($(date +%s) - t1)) s)"
cp "$F/between.log" "$OUT/"
tar czf "$OUT/between-json.tgz" -C "$F" between 2>/dev/null
echo "shapes below 0.98x:"
awk '$1 ~ /^(qkv_gate|o|pooler|unpooler|router)$/ && NF == 7 && $6 < 0.98' "$F/between.log"
