#!/usr/bin/env bash
# Session 53, visit 5: visit 2 again (the tuner at m = 12 on top of the GPU's
# table, then the 16 m between the entries with the old and the new table in
# one run) after 4167d82, which puts the entry that serves a new m among its
# candidates. Expectation: unpooler m = 12 keeps the m = 16 splitk (or
# something at least as fast) instead of visit 2's slower gemv, and the new
# table reads at least the old one's score over the 80 shapes.
. bench/visit-common.sh
table=$(bash bench/gpu-table.sh)
commit=$(cat .devrun-pack/commit)
pj_served_config || { echo "visit: no served config"; exit 1; }
python3 - "$F/ref.json" "$F/tune.json" "$F/between.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["shapes"] = {"m": [12], "max_m": 256}
json.dump(c, open(sys.argv[2], "w"))
c["shapes"] = {"m": [2, 3, 4, 6, 12, 20, 24, 33, 48, 64, 96, 136, 160, 192, 224, 255], "max_m": 256}
json.dump(c, open(sys.argv[3], "w"))
PY
timeout 200 "$B/bin/projd-bench" --config "$F/tune.json" --table "$table" --tune-new \
    --tune "$F/table-new.json" --reps 100 --out "$F/tune" --commit "$commit" >"$F/tune.log" 2>&1
echo "tune rc=$?"
cp "$F/tune.log" "$F/table-new.json" "$OUT/" 2>/dev/null
cp "$F/tune/tune_log.csv" "$OUT/" 2>/dev/null
for t in old new; do
    case $t in old) tf=$table ;; new) tf=$F/table-new.json ;; esac
    timeout 100 "$B/bin/projd-bench" --config "$F/between.json" --table "$tf" --reps 100 \
        --out "$F/b-$t" --commit "$commit" >"$F/b-$t.log" 2>&1
    echo "between $t rc=$? $(grep -E '^SCORE' "$F/b-$t.log")"
    cp "$F/b-$t.log" "$OUT/between-$t.log"
done
grep -E '^(qkv_gate|o|pooler|unpooler|router) +12 ' "$F/b-old.log" "$F/b-new.log"
