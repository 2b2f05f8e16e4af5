#!/usr/bin/env bash
# Session 53, visit 1: the final check of main on the H200 (the first GPU run
# of session 52's dispatch rule, kernels/dispatch.c pj_tune_entry_knobs: a
# cublas entry's algo of 2 or more runs as algo 0 at the other m routed to
# it), then session 52's 16 m between the table's entries on the H200, which
# no run has timed (visit 1 of session 52 timed them on an H100).
. bench/visit-common.sh
t0=$(date +%s)
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)"
pj_final_check
echo "final check took $(($(date +%s) - t0)) s"
table=$(bash bench/gpu-table.sh)
pj_served_config || { echo "visit: no served config"; exit 1; }
python3 - "$F/ref.json" "$F/between.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["shapes"] = {"m": [2, 3, 4, 6, 12, 20, 24, 33, 48, 64, 96, 136, 160, 192, 224, 255], "max_m": 256}
json.dump(c, open(sys.argv[2], "w"))
PY
t1=$(date +%s)
timeout 200 "$B/bin/projd-bench" --config "$F/between.json" --table "$table" --reps 100 \
    --out "$F/between" --commit "$(cat .devrun-pack/commit)" >"$F/between.log" 2>&1
echo "between rc=$? $(grep -E '^SCORE' "$F/between.log") ($(($(date +%s) - t1)) s)"
cp "$F/between.log" "$OUT/"
tar czf "$OUT/between-json.tgz" -C "$F" between 2>/dev/null
echo "shapes below 0.98x:"
awk '$1 ~ /^(qkv_gate|o|pooler|unpooler|router)$/ && NF == 7 && $6 < 0.98' "$F/between.log"
