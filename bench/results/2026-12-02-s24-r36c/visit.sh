#!/usr/bin/env bash
# Session 24, round 36c: the z12 GEMV's overflow slot table (entries 64..127
# of a block, read only by the CTAs of blocks that hold that many), on the
# H200: bench/final-check.sh of the build (GPU suites with the committed
# table, test_engines with its new o-heavy layer; the benchmark twice on
# the generated weights), then the served reference model through --config.
. bench/visit-common.sh
R=$PWD/bench/results/2026-12-02-s24-config
"$B/bin/projctl" mkmodel --out "$F/ref.safetensors" >/dev/null
sed "s|@MODEL@|$F/ref.safetensors|" "$R/ref.json" >"$F/ref.json"
timeout 400 bash bench/final-check.sh "$B" "$F/final" "$(cat .devrun-pack/commit 2>/dev/null || echo work)" 2>&1 |
    grep -E 'backend rc|GPU suites|test_engines:|bench [12]|fell back'
grep -h -E 'o-heavy' "$F/final/backend.log" | head -5
mkdir -p "$F/final/ref"
timeout 150 "$B/bin/projd-bench" --config "$F/ref.json" --out "$F/final/ref" --table config/tuning/h200.json \
    --reps 300 >"$F/final/ref/bench.log" 2>&1
echo "ref rc=$? $(grep -E '^SCORE' "$F/final/ref/bench.log")"
grep -h -E '^bench (qkv_gate|o) +m=(1|8) ' "$F/final/bench-1.log" "$F/final/ref/bench.log" | cut -c1-160
tar czf "$OUT/out.tgz" -C "$F/final" .
