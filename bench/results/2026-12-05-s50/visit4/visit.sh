#!/usr/bin/env bash
# Session 50, visit 4: the final check of main (bench/final-check.sh: GPU
# suites under MPS with SGLang's wheels, the fault tests, the GPU's own
# table benchmarked twice), after the read floor's variant 4 on a layer
# under 128 KiB: the small model's o (256 x 192 bf16, 96 KiB) through
# projd-bench --config, with session 50's first pack (d609a9f, before the
# fix: variant 4 read nothing below 128 KiB) and with main. Two calls on
# one machine (the carry's limit): `visit.sh small` with the old binary
# carried, then `visit.sh final` with SGLang's wheels.
. bench/visit-common.sh
if [ "${1:-}" = small ]; then
old=/tmp/old && mkdir -p $old
[ -f .devrun-pack/old.tar.xz ] && tar xJf .devrun-pack/old.tar.xz -C $old
"$B/bin/projctl" mkmodel --out "$F/small.safetensors" --preset small >/dev/null || exit 1
sed "s|@MODEL@|$F/small.safetensors|" bench/results/2026-12-05-s50/visit4/small.json >"$F/small.json"
for w in old new; do
    pb=$B/bin/projd-bench
    [ $w = old ] && pb=$old/projd-bench
    [ -x "$pb" ] || { echo "$w: no binary"; continue; }
    timeout 120 "$pb" --config "$F/small.json" --out "$F/small-$w" --reps 50 --commit "$w" \
        >"$OUT/small-$w.log" 2>&1
    echo "small $w rc=$?"
    python3 - "$F/small-$w/bench.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
for s in j["shapes"]:
    if s["layer"] == "o" and s["m"] in (1, 256):
        print("  o m=%d bytes %d floor %.2f us, variants %s" % (s["m"], s["bytes_read"], s["floor_us"],
              " ".join("%.2f" % v for v in s["floor_variants_us"])))
PY
done
exit 0
fi
pj_site_wheels || exit 1
pj_final_check
