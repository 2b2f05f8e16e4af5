#!/usr/bin/env bash
# Session 25's final check on the H200: bench/final-check.sh of the build
# of main with round 37 (GPU suites with the committed table, the
# benchmark twice on the generated weights), then the served reference
# model through --config, twice.
. bench/visit-common.sh
pj_served_config || exit 1
timeout 400 bash bench/final-check.sh "$B" "$F/final" "$(cat .devrun-pack/commit 2>/dev/null || echo work)" 2>&1 |
    grep -E 'backend rc|GPU suites|test_engines:|checks passed|python_torch|^Ran|bench [12]|fell back'
for i in 1 2; do
    mkdir -p "$F/final/ref-$i"
    timeout 150 "$B/bin/projd-bench" --config "$F/ref.json" --out "$F/final/ref-$i" \
        --table config/tuning/h200.json --reps 300 >"$F/final/ref-$i/bench.log" 2>&1
    echo "ref $i rc=$? $(grep -E '^SCORE' "$F/final/ref-$i/bench.log")"
done
grep -h -E '^bench (qkv_gate|o) +m=(1|8) ' "$F/final/bench-1.log" "$F/final/ref-1/bench.log" | cut -c1-160
tar czf "$OUT/out.tgz" -C "$F/final" .
