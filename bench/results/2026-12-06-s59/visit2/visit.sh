#!/usr/bin/env bash
# Session 59, visit 2: visit 1's A/B on the served reference model again
# (visit 1's output lost the main rule's table to the tail's cut): the
# window's block threshold at 128 (main) and at 64, each tuning its own
# table at m = 1, 8, 12, 16 and benchmarked against cuBLAS in the same run.
. bench/visit-common.sh
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)"
t0=$(date +%s)
pj_served_config || exit 1
python3 - "$F" <<'PY'
import json, sys
f = sys.argv[1]
ref = json.load(open(f + "/ref.json"))
ref["shapes"] = {"m": [1, 8, 12, 16]}
json.dump(ref, open(f + "/refab.json", "w"))
PY
for v in main t64; do
    pb=$B/bin/projd-bench
    pc=$B/bin/projctl
    [ $v != main ] && pb=$B/bin/projd-bench-$v && pc=$B/bin/projctl-$v
    tag=ref-$v
    "$pc" inspect --config "$F/refab.json" >"$F/inspect-$tag.txt" 2>&1
    timeout 120 "$pb" --config "$F/refab.json" --tune "$F/$tag.json" --tune-budget 60 \
        --out "$F/$tag" --reps 200 >"$F/$tag.log" 2>&1
    echo "projd-bench $tag rc=$? ($(($(date +%s) - t0)) s)"
    mkdir -p "$OUT/$tag"
    { cat "$F/inspect-$tag.txt"; grep -v 'candidates' "$F/$tag.log" | tail -40; } >"$OUT/$tag/bench.log"
done
for t in ref-main ref-t64; do
    echo "== $t"
    grep 'qkv_gate: at most' "$F/inspect-$t.txt" | cut -c1-70
    awk 'NF == 7 && $2 ~ /^[0-9]+$/ && $1 != "router" {print "  " $0}' "$F/$t.log"
    grep -E "^(m |SCORE)" "$F/$t.log" | sed 's/^/  /'
done
