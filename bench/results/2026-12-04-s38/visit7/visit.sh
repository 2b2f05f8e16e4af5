#!/usr/bin/env bash
# Session 38, visit 7: the benchmark of the committed table (no kernel or
# table change this session), twice, on the session's build.
. bench/visit-common.sh
for i in 1 2; do
    timeout 140 "$B/bin/projd-bench" --out "$OUT/bench-$i" --reps 300 --table config/tuning/h200.json \
        --commit "$(cat .devrun-pack/commit)" >"$OUT/bench-$i.log" 2>&1
    echo "bench $i rc=$? $(grep -E '^SCORE' "$OUT/bench-$i.log")"
done
echo "entries that fell back: $(cat "$OUT"/bench-*.log | grep -c "falling back")"
grep -E '^(decode|verify)' "$OUT/bench-1.log" | head -8
