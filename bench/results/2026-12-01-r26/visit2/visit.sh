#!/usr/bin/env bash
# Round 26, visit 2: the kept form (.ca up to 16 tokens). GPU suites, a
# re-tune of m = 1..32 with it, then the old build (e3e043f) with the
# committed table (t1), the new build with t1 and with the re-tuned table
# (t2), alternately, three runs each; the probe of the z12 forms once.
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/r
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v; export LD_LIBRARY_PATH=$B/lib
OUT=/tmp/backend PJ_GPU_TEST_TIMEOUT=300 SUITES_TIMEOUT=300 timeout 320 bash bench/run-backend-device.sh $B > /tmp/r/backend.log 2>&1; echo "backend rc=$?"
grep -E "GPU suites|test_engines:|fatal|F: " /tmp/r/backend.log | tail -6
tar czf /tmp/r/backend.tgz -C /tmp/backend . 2>/dev/null
timeout 150 $B/bin/projd-bench --table config/tuning/h200.json --tune-new --tune /tmp/r/t2.json --tune-budget 120 \
   --tune-m 1-32 --out /tmp/r/tune --commit new > /tmp/r/tune.log 2>&1; echo "tune rc=$?"
diff <(python3 -c "import json;[print(e['layer'],e['m'],e['engine'],json.dumps(e.get('knobs'))) for e in json.load(open('config/tuning/h200.json'))['entries']]") \
     <(python3 -c "import json;[print(e['layer'],e['m'],e['engine'],json.dumps(e.get('knobs'))) for e in json.load(open('/tmp/r/t2.json'))['entries']]") | grep '^[<>]'
for i in 1 2 3; do
for b in old t1 t2; do
  X=$B/bin/projd-bench; [ $b = old ] && X=$B/bin/projd-bench-old
  T=config/tuning/h200.json; [ $b = t2 ] && T=/tmp/r/t2.json
  timeout 100 $X --out /tmp/r/$b-$i --reps 300 --table $T --commit $b > /tmp/r/$b-$i.log 2>&1
  echo "$b $i rc=$? $(grep -E '^SCORE' /tmp/r/$b-$i.log)"
done
done
timeout 60 $B/bin/projd-bench --out /tmp/r/p-new --probe .devrun-pack/probe.txt > /tmp/r/probe-new.log 2>&1
grep -E "^(o|qkv_gate|pooler) " /tmp/r/probe-new.log | awk '{printf "%s %s %s %s; ", $1, $2, $5, $11}'; echo
gzip /tmp/r/tune/tune_log.csv; tar czf $OUT/r26b.tgz -C /tmp/r .
