#!/usr/bin/env bash
# Session 24, round 36b: PJ_GEMVZ_XCAP 64 -> 128 (the z12 GEMV's per-block
# exception slots), on the H200: test_engines --quick with the committed
# table (the dispatcher's choices still valid and correct), the built-in
# benchmark and the served reference model through --config, both with the
# committed table.
. bench/visit-common.sh
export PJ_BUILD=$B PJ_TUNE_TABLE=$PWD/config/tuning/h200.json
R=$PWD/bench/results/2026-12-02-s24-config
"$B/bin/projctl" mkmodel --out "$F/ref.safetensors" >/dev/null
sed "s|@MODEL@|$F/ref.safetensors|" "$R/ref.json" >"$F/ref.json"
timeout 200 "$B/tests/gpu/test_engines" --quick >"$OUT/te.log" 2>&1
echo "test_engines rc=$? $(grep -E 'checks' "$OUT/te.log" | tail -1)"
mkdir -p "$OUT/gen" "$OUT/ref"
timeout 150 "$B/bin/projd-bench" --out "$OUT/gen" --table config/tuning/h200.json --reps 300 >"$OUT/gen/bench.log" 2>&1
echo "gen rc=$? $(grep -E '^SCORE' "$OUT/gen/bench.log") fell back: $(grep -c 'falling back' "$OUT/gen/bench.log")"
timeout 150 "$B/bin/projd-bench" --config "$F/ref.json" --out "$OUT/ref" --table config/tuning/h200.json \
    --reps 300 >"$OUT/ref/bench.log" 2>&1
echo "ref rc=$? $(grep -E '^SCORE' "$OUT/ref/bench.log") fell back: $(grep -c 'falling back' "$OUT/ref/bench.log")"
grep -E '^bench qkv_gate  m=(1|8) ' "$OUT/gen/bench.log" "$OUT/ref/bench.log" | cut -c1-200
tar czf "$OUT/r36.tgz" -C "$OUT" gen ref te.log && rm -rf "$OUT/gen" "$OUT/ref" "$OUT/te.log"
