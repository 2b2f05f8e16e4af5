#!/usr/bin/env bash
# Session 24: the tuner's new pass that runs every m in 1..256 on the entry
# that would serve it (vet_served_m), on the H200: a --tune-new of m = 1
# over the committed table (the pass checks the whole table), then the same
# with PJ_BENCH_VET_BREAK=o:20 (one check counted as wrong: the o entry
# that serves m = 20 must be dropped and the pass start over).
. bench/visit-common.sh
for run in plain break; do
    mkdir -p "$OUT/$run"
    if [ "$run" = break ]; then export PJ_BENCH_VET_BREAK=o:20; fi
    /usr/bin/time -f "wall %e s" timeout 280 "$B/bin/projd-bench" --out "$OUT/$run" --table config/tuning/h200.json \
        --tune "$OUT/$run/new.json" --tune-new --tune-m 1-1 --reps 30 >"$OUT/$run/tune.log" 2>&1
    echo "$run rc=$?"
    gzip -f "$OUT/$run/tune_log.csv" 2>/dev/null
    grep -E 'tuner|dropped|wall|SCORE|entries accepted' "$OUT/$run/tune.log" | head -12
done
tar czf "$OUT/vet.tgz" -C "$OUT" plain break && rm -rf "$OUT/plain" "$OUT/break"
