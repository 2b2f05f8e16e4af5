#!/usr/bin/env bash
# A/B of two tables in one visit: the benchmark alternately with each.
set -u
export LD_LIBRARY_PATH=$PWD/.devrun/lib:${LD_LIBRARY_PATH:-}
mkdir -p /tmp/ab
for i in 1 2 3; do
    for t in t1 t2; do
        timeout 120 .devrun/projd-bench --out /tmp/ab/$t-$i --commit "$(cat .devrun/COMMIT)" --reps 300 \
            --table .devrun/$t.json > /tmp/ab/$t-$i.log 2>&1
        echo "$t run $i rc=$?"
        grep -E '^bench (qkv_gate|pooler) +m=1 |^SCORE|^decode 1 ' /tmp/ab/$t-$i.log
    done
done
tar czf "$OUT/ab.tgz" -C /tmp/ab .
