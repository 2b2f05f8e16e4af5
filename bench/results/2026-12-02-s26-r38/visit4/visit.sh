#!/usr/bin/env bash
# Round 38, visit 4: the survey as the tuner's step. projd-bench
# --lt-survey 16-256 --table (round 26's table, config/tuning/h200.json of
# the tree) --tune lt.json; then lt.json against round 26's table (the
# benchmark alternating three times each, the served model once each), and
# bench/final-check.sh with lt.json as config/tuning/h200.json (GPU suites
# with the new loader and configuration checks; the benchmark twice).
. bench/visit-common.sh
pj_served_config || exit 1
old=$F/old.json
cp config/tuning/h200.json "$old"
mkdir -p "$OUT/lts"
PJ_LT_BUDGET=8 timeout 400 "$B/bin/projd-bench" --out "$OUT/lts" --lt-survey 16-256 \
    --table "$old" --tune "$OUT/lt.json" --commit "r38 lt-survey of round 26's table" \
    >"$OUT/lts/survey.log" 2>&1
echo "survey rc $?"
gzip -f "$OUT/lts/lt_survey.csv"
sed -n '/^lt-survey/,$p' "$OUT/lts/survey.log" | cut -c1-200
[ -s "$OUT/lt.json" ] || exit 1
cp "$OUT/lt.json" config/tuning/h200.json
for i in 1 2 3; do
    for t in old new; do
        tab=$old
        [ "$t" = new ] && tab=config/tuning/h200.json
        mkdir -p "$F/ab/$t-$i"
        timeout 100 "$B/bin/projd-bench" --out "$F/ab/$t-$i" --reps 300 --table "$tab" \
            >"$F/ab/$t-$i/bench.log" 2>&1
        echo "ab $t-$i rc=$? $(grep -E '^SCORE' "$F/ab/$t-$i/bench.log")"
    done
done
for t in old new; do
    tab=$old
    [ "$t" = new ] && tab=config/tuning/h200.json
    mkdir -p "$F/ab/ref-$t"
    timeout 150 "$B/bin/projd-bench" --config "$F/ref.json" --out "$F/ab/ref-$t" --table "$tab" \
        --reps 300 >"$F/ab/ref-$t/bench.log" 2>&1
    echo "ref $t rc=$? $(grep -E '^SCORE' "$F/ab/ref-$t/bench.log")"
done
grep -h 'rejected' "$F"/ab/new-1/bench.log
tar czf "$OUT/ab.tgz" -C "$F/ab" .
timeout 330 bash bench/final-check.sh "$B" "$F/final" "$(cat .devrun-pack/commit 2>/dev/null || echo work)" 2>&1 |
    grep -E 'backend rc|test_engines:|checks passed|^Ran|bench [12]|fell back'
grep -h 'lt configurations\|C table loader, cuBLASLt conf' "$F/final/backend.log" | head -8
tar czf "$OUT/final.tgz" -C "$F/final" .
