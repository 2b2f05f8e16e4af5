#!/usr/bin/env bash
# Round 24, visit 2: re-tune every shape with the new build (the cluster
# forms are cheaper now), then an A/B of the committed table (t1) and the
# re-tuned one (t2), two runs each.
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/t
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v; export LD_LIBRARY_PATH=$B/lib
timeout 330 $B/bin/projd-bench --table config/tuning/h200.json --tune-new --tune /tmp/t/t2.json --tune-budget 200 \
   --out /tmp/t/tune --commit new > /tmp/t/tune.log 2>&1; echo "tune rc=$?"
grep -E '^SCORE' /tmp/t/tune.log
diff <(python3 -c "import json;[print(e['layer'],e['m'],e['engine'],json.dumps(e.get('knobs'))) for e in json.load(open('config/tuning/h200.json'))['entries']]") \
     <(python3 -c "import json;[print(e['layer'],e['m'],e['engine'],json.dumps(e.get('knobs'))) for e in json.load(open('/tmp/t/t2.json'))['entries']]") | grep '^[<>]'
for i in 1 2; do
  for t in t1 t2; do
    T=config/tuning/h200.json; [ $t = t2 ] && T=/tmp/t/t2.json
    timeout 150 $B/bin/projd-bench --out /tmp/t/$t-$i --reps 300 --table $T --commit new > /tmp/t/$t-$i.log 2>&1
    echo "$t $i rc=$? $(grep -E '^SCORE' /tmp/t/$t-$i.log)"
  done
done
gzip /tmp/t/tune/tune_log.csv; tar czf $OUT/r24t.tgz -C /tmp/t .
