#!/usr/bin/env bash
# Session 59, visit 1: the z12 window's block threshold at 64 exceptions (the
# GEMV's first staging round) against main's 128, A/B in the same run on the
# served reference model (its qkv_gate holds a block of 117 under base 54;
# at 64 it moves to base 55, at most 44) and on session 58's 8B-shaped layer
# (o_proj holds a block of 124), each tuning its own table and benchmarked
# against cuBLAS measured in the same run. Then,
# if time is left, the final check of main 00be4b6 (the window rule's).
. bench/visit-common.sh
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)"
t0=$(date +%s)
pj_served_config || exit 1
pj_l8_model || exit 1
echo "models ready ($(($(date +%s) - t0)) s)"
python3 - "$F" <<'PY'
import json, sys
f = sys.argv[1]
ref = json.load(open(f + "/ref.json"))
ref["shapes"] = {"m": [1, 8, 12, 16]}
json.dump(ref, open(f + "/refab.json", "w"))
l8 = {"model": {"path": "/tmp/l8/l8.safetensors", "layers": [
    {"name": n, "tensor": n + ".weight"} for n in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")]},
    "shapes": {"m": [1, 8]}}
json.dump(l8, open(f + "/l8ab.json", "w"))
PY
for model in ref l8; do
    for v in main t64; do
        pb=$B/bin/projd-bench
        pc=$B/bin/projctl
        [ $v != main ] && pb=$B/bin/projd-bench-$v && pc=$B/bin/projctl-$v
        tag=$model-$v
        "$pc" inspect --config "$F/${model}ab.json" >"$F/inspect-$tag.txt" 2>&1
        echo "== $tag"
        grep 'at most' "$F/inspect-$tag.txt" | cut -c1-80 | sed 's/^/  /'
        timeout 120 "$pb" --config "$F/${model}ab.json" --tune "$F/$tag.json" --tune-budget 60 \
            --out "$F/$tag" --reps 200 >"$F/$tag.log" 2>&1
        echo "  projd-bench $tag rc=$? ($(($(date +%s) - t0)) s)"
        grep -E "^(m |SCORE)" "$F/$tag.log" | sed 's/^/  /'
        mkdir -p "$OUT/$tag"
        cp "$F/$tag/bench.json" "$F/$tag.json" "$OUT/$tag/" 2>/dev/null
        { cat "$F/inspect-$tag.txt"; grep -v 'candidates' "$F/$tag.log" | tail -40; } >"$OUT/$tag/bench.log"
    done
done
echo "--- per layer (layer m engine base_us ours_us speedup vs_floor)"
for t in ref-main ref-t64 l8-main l8-t64; do
    echo "$t"
    awk 'NF == 7 && $2 ~ /^[0-9]+$/ {print "  " $0}' "$F/$t.log" | head -24
done
el=$(($(date +%s) - t0))
if [ $el -lt 280 ]; then
    pj_final_check
    echo "final check done ($(($(date +%s) - t0)) s)"
    echo "--- table (bench 1)"
    grep -E "^(decode|verify)|^SCORE" "$OUT/final/bench-1.log" | head -10
    grep -E "^SCORE" "$OUT/final/bench-2.log"
else
    echo "final check skipped: $el s gone"
fi
