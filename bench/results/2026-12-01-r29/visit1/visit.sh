#!/usr/bin/env bash
# Round 29, visit 1: the z12 tiled GEMM with a copy warp (splitk pipe = 8).
# test_engines --quick (its pipe = 8 sweeps on o, o with 5 % zeros and the
# unpooler's slice), a re-tune of m = 16..128 with pipe 8 among the
# candidates, the best pipe 8 per shape from the tuner's log, then the
# committed table (t1) and the re-tuned one (t2), alternately, two runs each.
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/r
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v; export LD_LIBRARY_PATH=$B/lib
timeout 200 $B/tests/gpu/test_engines --quick > /tmp/r/engines.log 2>&1; echo "test_engines rc=$?"
grep -E "FAIL|fail" /tmp/r/engines.log | grep -v ' 0 failed' | head -20
grep -E "splitk|^test_engines|checks" /tmp/r/engines.log | tail -8
timeout 260 $B/bin/projd-bench --table config/tuning/h200.json --tune-new --tune /tmp/r/t2.json --tune-budget 200 \
   --tune-m 16-128 --out /tmp/r/tune --commit r29 > /tmp/r/tune.log 2>&1; echo "tune rc=$?"
grep -E "^tune .*m=(16|32|128) " /tmp/r/tune.log | cut -c6- | head -20
diff <(python3 -c "import json;[print(e['layer'],e['m'],e['engine'],json.dumps(e.get('knobs'))) for e in json.load(open('config/tuning/h200.json'))['entries']]") \
     <(python3 -c "import json;[print(e['layer'],e['m'],e['engine'],json.dumps(e.get('knobs'))) for e in json.load(open('/tmp/r/t2.json'))['entries']]") | grep '^[<>]'
python3 - <<'PY'
import csv
best = {}
for r in csv.DictReader(open('/tmp/r/tune/tune_log.csv')):
    try: v = float(r['us_or_reason'])
    except ValueError: continue
    e = r['engine']
    if e == 'splitk': e += '/p8' if 'pipe=8' in r['knobs'] else '/px'
    k = (r['layer'], int(r['m']), e)
    if k not in best or v < best[k][0]: best[k] = (v, r['knobs'])
for k in sorted(best): print('best', k[0], k[1], k[2], '%.2f' % best[k][0], best[k][1])
PY
for i in 1 2; do
for b in t1 t2; do
  T=config/tuning/h200.json; [ $b = t2 ] && T=/tmp/r/t2.json
  timeout 100 $B/bin/projd-bench --out /tmp/r/$b-$i --reps 300 --table $T --commit $b > /tmp/r/$b-$i.log 2>&1
  echo "$b $i rc=$? $(grep -E '^SCORE' /tmp/r/$b-$i.log)"
done
done
grep -hE "^bench (qkv_gate|o|pooler) +m=(16|32|128) " /tmp/r/t2-1.log | cut -c7-
gzip /tmp/r/tune/tune_log.csv; tar czf $OUT/r29v1.tgz -C /tmp/r .
