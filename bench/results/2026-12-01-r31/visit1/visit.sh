#!/usr/bin/env bash
# Round 31, visit 1: pipe 8 (the weights as wgmma's B operand). test_engines
# --quick, the Python/torch GPU suite, a re-tune of m = 16..256 with the best
# pipe 8 per shape, and the A/B of the re-tuned table if it took pipe 8.
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/r
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v; export LD_LIBRARY_PATH=$B/lib
timeout 240 "$B/tests/gpu/test_engines" --quick > /tmp/r/engines.log 2>&1; echo "test_engines rc=$?"
grep -E "^B splitk|FAIL|^test_engines" /tmp/r/engines.log | head -12; tail -2 /tmp/r/engines.log
timeout 200 bash tests/gpu/python_torch.sh "$B" > /tmp/r/python_torch.log 2>&1; echo "python_torch rc=$?"
grep -E "^(test_|Ran |OK|FAILED)|python_torch:|Error|error" /tmp/r/python_torch.log | head -20
timeout 330 "$B/bin/projd-bench" --table config/tuning/h200.json --tune-new --tune /tmp/r/t2.json --tune-budget 250 \
   --tune-m 16-256 --out /tmp/r/tune --commit r31v1 > /tmp/r/tune.log 2>&1; echo "tune rc=$?"
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
for k in sorted(best):
    if k[0] != 'router': print('best', k[0], k[1], k[2], '%.2f' % best[k][0], best[k][1])
PY
grep -c '"pipe": 8' /tmp/r/t2.json
if grep -q '"pipe": 8' /tmp/r/t2.json; then
for i in 1 2; do
for b in t1 t2; do
  T=config/tuning/h200.json; [ $b = t2 ] && T=/tmp/r/t2.json
  timeout 100 "$B/bin/projd-bench" --out /tmp/r/$b-$i --reps 300 --table $T --commit $b > /tmp/r/$b-$i.log 2>&1
  echo "$b $i rc=$? $(grep -E '^SCORE' /tmp/r/$b-$i.log)"
done
done
fi
gzip /tmp/r/tune/tune_log.csv 2>/dev/null; tar czf "$OUT/r31v1.tgz" -C /tmp/r .
