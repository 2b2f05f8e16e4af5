#!/usr/bin/env bash
# Round 27: the tiled GEMM's x through L1. test_engines quick, a re-tune of
# m = 16..256 with the new build, then old build (8f767ea) with the
# committed table, new build with it (t1) and with the re-tuned table (t2),
# alternately, two runs each.
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/r
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v; export LD_LIBRARY_PATH=$B/lib
timeout 120 $B/tests/gpu/test_engines --quick > /tmp/r/te.log 2>&1; echo "test_engines rc=$?"
grep -E 'FAIL|test_engines:' /tmp/r/te.log | head -5
timeout 150 $B/bin/projd-bench --table config/tuning/h200.json --tune-new --tune /tmp/r/t2.json --tune-budget 120 \
   --tune-m 16-256 --out /tmp/r/tune --commit new > /tmp/r/tune.log 2>&1; echo "tune rc=$?"
diff <(python3 -c "import json;[print(e['layer'],e['m'],e['engine'],json.dumps(e.get('knobs')),e.get('us')) for e in json.load(open('config/tuning/h200.json'))['entries']]") \
     <(python3 -c "import json;[print(e['layer'],e['m'],e['engine'],json.dumps(e.get('knobs')),e.get('us')) for e in json.load(open('/tmp/r/t2.json'))['entries']]") | grep '^[<>]'
python3 - <<'PY'
import csv
best={}
for r in csv.DictReader(open('/tmp/r/tune/tune_log.csv')):
    try: us=float(r['us_or_reason'])
    except: continue
    if r['layer']=='router' or r['engine'] not in ('splitk','cublas'): continue
    key=(r['layer'],int(r['m']),r['engine'])
    if key not in best or us<best[key][0]: best[key]=(us,r['knobs'])
for k in sorted(best): print(*k, '%.2f'%best[k][0], best[k][1])
PY
for i in 1 2; do
for b in old t1 t2; do
  X=$B/bin/projd-bench; [ $b = old ] && X=$B/bin/projd-bench-old
  T=config/tuning/h200.json; [ $b = t2 ] && T=/tmp/r/t2.json
  timeout 100 $X --out /tmp/r/$b-$i --reps 300 --table $T --commit $b > /tmp/r/$b-$i.log 2>&1
  echo "$b $i rc=$? $(grep -E '^SCORE' /tmp/r/$b-$i.log)"
  grep -E '^\| (qkv_gate|o|pooler|unpooler|router) \| (16|32|128|256) ' /tmp/r/$b-$i/bench.md | awk -F'|' '$4 ~ /splitk|router/ {printf "%s%s%s;", $2,$3,$7}'; echo
done
done
gzip /tmp/r/tune/tune_log.csv /tmp/r/te.log; tar czf $OUT/r27.tgz -C /tmp/r .
