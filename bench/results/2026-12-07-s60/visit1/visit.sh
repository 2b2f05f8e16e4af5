#!/usr/bin/env bash
# Session 60, visit 1: the final check of main (the 64-exception window
# rule of round 44, whose GPU suites have not yet run on a GPU, and the
# tables' "rows"); a decode trace against the default layers (the
# unpooler at all its rows) and against max_n 1024; then
# round 44's A/B on the served reference model in one run (main's rule, 64,
# against the earlier 128: projd-bench-t128 / projctl-t128), each tuning
# its own table at m = 1, 8, 12, 16 against cuBLAS measured in the same
# run; then, if time is left, the 8B-shaped layer at m = 16 / 32 under
# main's rule.
. bench/visit-common.sh
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)"
t0=$(date +%s)
pj_final_check
echo "final check done ($(($(date +%s) - t0)) s)"
grep -E "^(decode|verify)|^SCORE" "$OUT/final/bench-1.log" | head -8
pj_served_config || exit 1
pj_rows_trace 90
python3 - "$F" <<'PY'
import json, sys
f = sys.argv[1]
ref = json.load(open(f + "/ref.json"))
ref["shapes"] = {"m": [1, 8, 12, 16]}
json.dump(ref, open(f + "/refab.json", "w"))
l8 = {"model": {"path": "/tmp/l8/l8.safetensors", "layers": [
    {"name": n, "tensor": n + ".weight"} for n in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")]},
    "shapes": {"m": [16, 32]}}
json.dump(l8, open(f + "/l8ab.json", "w"))
PY
runs="ref-main ref-t128"
for tag in ref-main ref-t128 l8-main; do
    # The A/B only whole: its two runs take up to 240 s.
    if [ "$tag" = ref-main ]; then
        [ $(($(date +%s) - t0)) -lt "${PJ_AB_BY:-300}" ] || { echo "A/B skipped: $(($(date +%s) - t0)) s gone"; runs=""; continue; }
    fi
    [ "$tag" = ref-t128 ] && [ -z "$runs" ] && continue
    model=${tag%%-*}
    v=${tag#*-}
    if [ "$model" = l8 ]; then
        [ $(($(date +%s) - t0)) -lt 400 ] || { echo "l8 skipped: $(($(date +%s) - t0)) s gone"; break; }
        pj_l8_model || break
        runs="$runs l8-main"
    fi
    pb=$B/bin/projd-bench
    pc=$B/bin/projctl
    [ "$v" != main ] && pb=$B/bin/projd-bench-$v && pc=$B/bin/projctl-$v
    "$pc" inspect --config "$F/${model}ab.json" >"$F/inspect-$tag.txt" 2>&1
    timeout $((${PJ_TUNE_BUDGET:-60} + 60)) "$pb" --config "$F/${model}ab.json" --tune "$F/$tag.json" --tune-budget "${PJ_TUNE_BUDGET:-60}" \
        --out "$F/$tag" --reps 200 >"$F/$tag.log" 2>&1
    echo "projd-bench $tag rc=$? ($(($(date +%s) - t0)) s)"
    mkdir -p "$OUT/$tag"
    { cat "$F/inspect-$tag.txt"; grep -v 'candidates' "$F/$tag.log" | tail -40; } >"$OUT/$tag/bench.log"
done
for t in $runs; do
    echo "== $t"
    grep 'at most' "$F/inspect-$t.txt" | cut -c1-70
    awk 'NF == 7 && $2 ~ /^[0-9]+$/ && $1 != "router" {print "  " $0}' "$F/$t.log"
    grep -E "^(m |SCORE)" "$F/$t.log" | sed 's/^/  /'
done
echo "--- final check, table (bench 1), then bench 2's score"
grep -E "^(device|decode|verify)|^SCORE|fell back" "$OUT/final/bench-1.log" | head -12
grep -E "^SCORE" "$OUT/final/bench-2.log"
