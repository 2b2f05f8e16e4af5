#!/usr/bin/env bash
# Session 53, visit 2: entries of their own for the m between the table's
# that visit 1 found below 0.98x of their baseline (TUNE_M, e.g. "12 20 24").
# The tuner (--tune-new, its short list) tunes every layer at those m on top
# of the committed table and writes table-new.json (the old entries carried
# over); then the same 16 m as visit 1 with the old and the new table, one
# after the other in this run, and the benchmark's own 30 shapes with the new
# table (its entries there are the old ones: the score must read as before).
. bench/visit-common.sh
tm=${TUNE_M:?TUNE_M: the m to tune, e.g. "12 20 24"}
table=$(bash bench/gpu-table.sh)
commit=$(cat .devrun-pack/commit)
pj_served_config || { echo "visit: no served config"; exit 1; }
python3 - "$F/ref.json" "$F/tune.json" "$F/between.json" "$tm" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["shapes"] = {"m": sorted(int(m) for m in sys.argv[4].split()), "max_m": 256}
json.dump(c, open(sys.argv[2], "w"))
c["shapes"] = {"m": [2, 3, 4, 6, 12, 20, 24, 33, 48, 64, 96, 136, 160, 192, 224, 255], "max_m": 256}
json.dump(c, open(sys.argv[3], "w"))
PY
t0=$(date +%s)
timeout 300 "$B/bin/projd-bench" --config "$F/tune.json" --table "$table" --tune-new \
    --tune "$F/table-new.json" --reps 100 --out "$F/tune" --commit "$commit" >"$F/tune.log" 2>&1
echo "tune rc=$? ($(($(date +%s) - t0)) s) $(grep -E '^SCORE' "$F/tune.log")"
cp "$F/tune.log" "$OUT/"
[ -s "$F/table-new.json" ] || { echo "visit: no new table"; tail -20 "$F/tune.log"; exit 1; }
cp "$F/table-new.json" "$OUT/"
cp "$F/tune/tune_log.csv" "$OUT/" 2>/dev/null
for t in old new; do
    case $t in old) tf=$table ;; new) tf=$F/table-new.json ;; esac
    timeout 150 "$B/bin/projd-bench" --config "$F/between.json" --table "$tf" --reps 100 \
        --out "$F/b-$t" --commit "$commit" >"$F/b-$t.log" 2>&1
    echo "between $t rc=$? $(grep -E '^SCORE' "$F/b-$t.log")"
    cp "$F/b-$t.log" "$OUT/between-$t.log"
done
timeout 100 "$B/bin/projd-bench" --table "$F/table-new.json" --reps 300 --out "$F/ref-new" \
    --commit "$commit" >"$F/ref-new.log" 2>&1
echo "reference shapes, new table rc=$? $(grep -E '^SCORE' "$F/ref-new.log")"
cp "$F/ref-new.log" "$OUT/"
tar czf "$OUT/json.tgz" -C "$F" b-old b-new ref-new tune 2>/dev/null
echo "between m below 0.98x, old | new:"
awk '$1 ~ /^(qkv_gate|o|pooler|unpooler|router)$/ && NF == 7 && $6 < 0.98' "$F/b-old.log"
echo "--"
awk '$1 ~ /^(qkv_gate|o|pooler|unpooler|router)$/ && NF == 7 && $6 < 0.98' "$F/b-new.log"
