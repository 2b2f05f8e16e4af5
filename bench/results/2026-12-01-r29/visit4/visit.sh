#!/usr/bin/env bash
# Round 29, visit 4: pipe 8 (KA = 2) with rings of up to 12 slots (tile 9:
# 8 instead of 6). test_engines --quick, a re-tune of m = 16..32, the best
# pipe 8 per shape; the A/B only if the re-tune chose pipe 8 somewhere;
# ncu of pipe 8 on qkv_gate m = 16 with ks 4 and 2.
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/r
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v; export LD_LIBRARY_PATH=$B/lib
timeout 200 $B/tests/gpu/test_engines --quick > /tmp/r/engines.log 2>&1; echo "test_engines rc=$?"
grep -E "splitk on o|^test_engines" /tmp/r/engines.log | tail -3
timeout 200 $B/bin/projd-bench --table config/tuning/h200.json --tune-new --tune /tmp/r/t2.json --tune-budget 150 \
   --tune-m 16-32 --out /tmp/r/tune --commit r29v4 > /tmp/r/tune.log 2>&1; echo "tune rc=$?"
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
if grep -q '"pipe": 8' /tmp/r/t2.json; then
for i in 1 2; do
for b in t1 t2; do
  T=config/tuning/h200.json; [ $b = t2 ] && T=/tmp/r/t2.json
  timeout 100 $B/bin/projd-bench --out /tmp/r/$b-$i --reps 300 --table $T --commit $b > /tmp/r/$b-$i.log 2>&1
  echo "$b $i rc=$? $(grep -E '^SCORE' /tmp/r/$b-$i.log)"
done
done
fi
gzip /tmp/r/tune/tune_log.csv; tar czf $OUT/r29v4.tgz -C /tmp/r .
PJ_DEV=$B NCU_LIST=bench/results/2026-12-01-r29/visit4/ncu.txt OUT=/tmp/r4n bash bench/ncu-deep.sh > /tmp/r4n.log 2>&1
grep -E "===|Duration|Warp Cycles Per Issued|DRAM Throughput|Achieved Occ|Stall (Long|Barrier|Wait|Short)|Instructions Executed  " /tmp/r4n.log /tmp/r4n/deep*-details.txt | cut -c1-130 | head -30
gzip /tmp/r4n/*.csv; cp /tmp/r4n.log /tmp/r4n/; tar czf $OUT/r29v4n.tgz -C /tmp/r4n .
