#!/usr/bin/env bash
# Session 52, visit 3: the rule visit 1 asked for, checked on the GPU. A
# cublas entry's algo of 2 or more now runs as algo 0 at the other m
# routed to the entry (kernels/dispatch.c pj_tune_entry_knobs). Three
# things: test_engines with the GPU's committed table (PJ_TUNE_TABLE; its
# table checks and the dispatcher's choices) and visit 1's 16 m between
# entries with the committed table, which should now read as visit 1's
# algo0 table did. (The benchmark's own 30 shapes, where no knob changed,
# were left out: the session's device time was nearly spent.)
. bench/visit-common.sh
table=$(bash bench/gpu-table.sh)
commit=$(cat .devrun-pack/commit)
PJ_TUNE_TABLE=$PWD/$table timeout 200 "$B/tests/gpu/test_engines" >"$F/test_engines.log" 2>&1
echo "test_engines rc=$? $(grep -E 'test_engines:' "$F/test_engines.log" | tail -1)"
grep -E "FAIL" "$F/test_engines.log" | head -10
cp "$F/test_engines.log" "$OUT/"
pj_served_config || { echo "visit: no served config"; exit 1; }
python3 - "$F/ref.json" "$F/between.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["shapes"] = {"m": [2, 3, 4, 6, 12, 20, 24, 33, 48, 64, 96, 136, 160, 192, 224, 255], "max_m": 256}
json.dump(c, open(sys.argv[2], "w"))
PY
timeout 150 "$B/bin/projd-bench" --config "$F/between.json" --table "$table" --reps 100 \
    --out "$F/between" --commit "$commit" >"$F/between.log" 2>&1
echo "between rc=$? $(grep -E '^SCORE' "$F/between.log")"
cp "$F/between.log" "$OUT/"
tar czf "$OUT/json.tgz" -C "$F" between 2>/dev/null
awk '$1 ~ /^(qkv_gate|o|pooler|unpooler|router)$/ && NF == 7 && $6 < 0.98' "$F/between.log"
