#!/usr/bin/env bash
# Session 50, visit 6: projd-bench's samples.csv (every paired round) on
# the reference shapes with the GPU's own table; each shape's medians from
# the CSV must equal bench.json's base_us and ours_us, and the rounds must
# alternate which ran first. projd-bench of the working tree rides in
# .devrun-pack/x.tar.xz beside 1b68f54's pack.
. bench/visit-common.sh
mkdir -p /tmp/x && tar xJf .devrun-pack/x.tar.xz -C /tmp/x
X=/tmp/x/.devrun-x
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)
slug=$(printf '%s' "$gpu" | tr 'A-Z' 'a-z' | tr -c 'a-z0-9' '-')
table=config/tuning/h200.json
[ -f "config/tuning/${slug#nvidia-}.json" ] && table=config/tuning/${slug#nvidia-}.json
timeout 120 "$X/projd-bench" --out "$F/ref" --reps 300 --table "$table" --commit "$(git log -1 --format=%h 2>/dev/null || echo s50v6)" \
    >"$OUT/ref.log" 2>&1
echo "ref rc=$? ($gpu, $table) $(grep -E '^SCORE' "$OUT/ref.log")"
cp "$F/ref/bench.json" "$OUT/bench.json"
gzip -c "$F/ref/samples.csv" >"$OUT/samples.csv.gz"
python3 - "$F/ref/bench.json" "$F/ref/samples.csv" <<'PY'
import csv, json, statistics, sys
j = json.load(open(sys.argv[1]))
rows = list(csv.DictReader(open(sys.argv[2])))
by = {}
for r in rows:
    by.setdefault((r["layer"], int(r["m"])), []).append(r)
bad = 0
for s in j["shapes"]:
    rs = by.get((s["layer"], s["m"]), [])
    # the median as projd-bench takes it (the mean of the middle two), of the values as printed
    mb = statistics.median(float(r["base_us"]) for r in rs)
    mo = statistics.median(float(r["ours_us"]) for r in rs)
    alt = all(r["first"] == ("base" if int(r["round"]) % 2 == 0 else "ours") for r in rs)
    ok = len(rs) == j["reps"] and abs(mb - s["base_us"]) < 0.06 and abs(mo - s["ours_us"]) < 0.06 and alt
    bad += not ok
    if not ok or (s["layer"], s["m"]) == ("qkv_gate", 1):
        print("  %s m=%d: %d rounds, median base %.3f (json %.3f), ours %.3f (json %.3f), alternating %s"
              % (s["layer"], s["m"], len(rs), mb, s["base_us"], mo, s["ours_us"], alt))
print("samples.csv: %d rows, %d shapes; %d shapes disagree with bench.json" % (len(rows), len(by), bad))
PY
