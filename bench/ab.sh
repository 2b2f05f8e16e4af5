#!/usr/bin/env bash
# ab.sh — A/B of two tuning tables in one device visit: the benchmark run
# alternately with .devrun/t1.json and .devrun/t2.json, RUNS times each, so
# that drift of the machine during the visit falls on both. Prints the
# lines of each run that match $PATTERN (default: the score and the loads)
# and leaves every run's log and JSON in $OUT/ab.tgz.
# Runs from the device copy's root with .devrun/projd-bench and .devrun/lib.
set -u
RUNS=${RUNS:-3}
PATTERN=${PATTERN:-'^SCORE|^(decode|verify) '}
OUT=${OUT:-/tmp/pj-out}
export LD_LIBRARY_PATH=$PWD/.devrun/lib:${LD_LIBRARY_PATH:-}
mkdir -p /tmp/ab "$OUT"
for i in $(seq 1 "$RUNS"); do
    for t in t1 t2; do
        timeout 120 .devrun/projd-bench --out /tmp/ab/$t-$i --commit "$(cat .devrun/COMMIT)" \
            --reps 300 --table .devrun/$t.json > /tmp/ab/$t-$i.log 2>&1
        echo "$t run $i rc=$?"
        grep -E "$PATTERN" /tmp/ab/$t-$i.log
    done
done
cp .devrun/t1.json .devrun/t2.json /tmp/ab/
tar czf "$OUT/ab.tgz" -C /tmp/ab .
