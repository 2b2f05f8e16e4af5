#!/usr/bin/env bash
# Round 38, visit 3: the table with four explicit cuBLASLt configurations picked by hand
# from visit 2 (table-hand.json; config/tuning/h200.json during the visit) against round 26's (../table-r26.json):
# the benchmark alternating three times each on the generated weights and
# once each on the served model; then bench/final-check.sh with the new
# table (GPU suites: test_engines full with the new lt configuration
# checks, the daemon suites; the benchmark twice).
. bench/visit-common.sh
pj_served_config || exit 1
old=bench/results/2026-12-02-s26-r38/table-r26.json
new=bench/results/2026-12-02-s26-r38/visit3/table-hand.json
for i in 1 2 3; do
    for t in old new; do
        tab=$old
        [ "$t" = new ] && tab=$new
        mkdir -p "$F/ab/$t-$i"
        timeout 100 "$B/bin/projd-bench" --out "$F/ab/$t-$i" --reps 300 --table "$tab" \
            >"$F/ab/$t-$i/bench.log" 2>&1
        echo "ab $t-$i rc=$? $(grep -E '^SCORE' "$F/ab/$t-$i/bench.log")"
    done
done
for t in old new; do
    tab=$old
    [ "$t" = new ] && tab=$new
    mkdir -p "$F/ab/ref-$t"
    timeout 150 "$B/bin/projd-bench" --config "$F/ref.json" --out "$F/ab/ref-$t" --table "$tab" \
        --reps 300 >"$F/ab/ref-$t/bench.log" 2>&1
    echo "ref $t rc=$? $(grep -E '^SCORE' "$F/ab/ref-$t/bench.log")"
done
grep -h -E '^bench (qkv_gate|o|unpooler) +m=(128|256) ' "$F"/ab/old-1/bench.log "$F"/ab/new-1/bench.log | cut -c1-150
tar czf "$OUT/ab.tgz" -C "$F/ab" .
timeout 400 bash bench/final-check.sh "$B" "$F/final" "$(cat .devrun-pack/commit 2>/dev/null || echo work)" 2>&1 |
    grep -E 'backend rc|GPU suites|test_engines:|checks passed|python_torch|^Ran|bench [12]|fell back'
grep -h 'lt configurations' "$F/final/backend.log" | head -8
tar czf "$OUT/final.tgz" -C "$F/final" .
