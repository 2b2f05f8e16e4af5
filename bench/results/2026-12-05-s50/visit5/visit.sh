#!/usr/bin/env bash
# Session 50, visit 5: projd-bench of fb02895 (the review's fixes: variant
# 4's tail only when a granule is left, the after-replay reason's text)
# on the small model (o under 128 KiB) and on the reference shapes with
# the GPU's own table. The pack is 1b68f54's; projd-bench rides in
# .devrun-pack/x.tar.xz.
. bench/visit-common.sh
mkdir -p /tmp/x && tar xJf .devrun-pack/x.tar.xz -C /tmp/x
X=/tmp/x/.devrun-x
"$B/bin/projctl" mkmodel --out "$F/small.safetensors" --preset small >/dev/null || exit 1
sed "s|@MODEL@|$F/small.safetensors|" bench/results/2026-12-05-s50/visit4/small.json >"$F/small.json"
timeout 120 "$X/projd-bench" --config "$F/small.json" --out "$F/small" --reps 50 --commit fb02895 \
    >"$OUT/small.log" 2>&1
echo "small rc=$?"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)
slug=$(printf '%s' "$gpu" | tr 'A-Z' 'a-z' | tr -c 'a-z0-9' '-')
table=config/tuning/h200.json
[ -f "config/tuning/${slug#nvidia-}.json" ] && table=config/tuning/${slug#nvidia-}.json
timeout 120 "$X/projd-bench" --out "$F/ref" --reps 300 --table "$table" --commit fb02895 \
    >"$OUT/ref.log" 2>&1
echo "ref rc=$? ($gpu, $table) $(grep -E '^SCORE' "$OUT/ref.log")"
cp "$F/ref/bench.json" "$OUT/bench.json"
python3 - "$F/small/bench.json" "$F/ref/bench.json" <<'PY'
import json, sys
for p in sys.argv[1:]:
    j = json.load(open(p))
    bad = [s for s in j["shapes"] if not s.get("correct_after_replays")]
    print("%s: timing=%r, %d of %d correct after replays" % (p.split("/")[-2], j["timing"], len(j["shapes"]) - len(bad), len(j["shapes"])))
    for s in j["shapes"]:
        if s["layer"] == "o" and s["m"] in (1, 256):
            print("  o m=%d bytes %d floor %.2f variants %s" % (s["m"], s["bytes_read"], s["floor_us"],
                  " ".join("%.2f" % v for v in s["floor_variants_us"])))
PY
