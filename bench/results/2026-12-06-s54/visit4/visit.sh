#!/usr/bin/env bash
# Session 54, visit 4: round 42 again with a 32-byte slot (seven entries
# inline instead of three; visit 3 found the three-entry slot 10-15 %
# slower, its fourth entries loaded on the streaming warp). The z12 GEMV with its exceptions patched
# into the fragments (gemvz zp = 1). First test_engines (every zp variant
# against the CPU reference, one-hot exception columns exact, the o-heavy
# layer's tiles of more than three exceptions), then the same table with
# and without zp on its gemvz entries, paired against cuBLAS in each run:
# on the benchmark's generated weights (the score's shapes) and on the
# served model (m = 1, 8, 12, 16, where visit 2 found the heavy block).
. bench/visit-common.sh
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)"
t0=$(date +%s)
[ -n "${SKIP_ENGINES:-}" ] && echo "visit: test_engines left out (SKIP_ENGINES)" > "$F/engines.log" || timeout 300 "$B/tests/gpu/test_engines" >"$F/engines.log" 2>&1
echo "test_engines rc=$? ($(($(date +%s) - t0)) s)"
grep -E "^B gemvz|checks|FAIL|fail" "$F/engines.log" | grep -v "^ok" | cut -c1-200 | head -30
cp "$F/engines.log" "$OUT/"
table=$(bash bench/gpu-table.sh)
python3 - "$table" "$F/zp.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
n = 0
for e in t["entries"]:
    k = e["knobs"]
    if (e["engine"] == "gemvz" and k.get("pipe") == 5 and k.get("xs") == 2 and k.get("rb", 1) <= 1
            and k.get("u") == 1 and not k.get("cl") and k.get("nw") in (4, 8)
            and not (k.get("st") == 2 and k.get("ts", 0) > 1)):
        k["zp"] = 1
        n += 1
json.dump(t, open(sys.argv[2], "w"))
print("zp on %d entries" % n)
PY
pj_served_config || { echo "visit: no served config"; exit 1; }
python3 - "$F/ref.json" "$F/srv.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["shapes"] = {"m": [1, 8, 12, 16], "max_m": 256}
json.dump(c, open(sys.argv[2], "w"))
PY
run() { # tag, extra args...
    local tag=$1 t1
    shift
    t1=$(date +%s)
    timeout 150 "$B/bin/projd-bench" "$@" --reps 100 --out "$F/$tag" \
        --commit "$(cat .devrun-pack/commit)" >"$F/$tag.log" 2>&1
    echo "$tag rc=$? $(grep -E '^SCORE' "$F/$tag.log") ($(($(date +%s) - t1)) s)"
    cp "$F/$tag.log" "$OUT/"
}
run gen-base --table "$table"
run gen-zp --table "$F/zp.json"
run srv-base --config "$F/srv.json" --table "$table"
run srv-zp --config "$F/srv.json" --table "$F/zp.json"
run gen-zp2 --table "$F/zp.json"
run gen-base2 --table "$table"
for v in gen-base gen-zp gen-base2 gen-zp2 srv-base srv-zp; do
    echo "== $v"
    awk '$1 ~ /^(qkv_gate|o|pooler)$/ && NF == 7 && $2 <= 16' "$F/$v.log"
    grep -E "^(decode|verify)" "$F/$v.log"
done
