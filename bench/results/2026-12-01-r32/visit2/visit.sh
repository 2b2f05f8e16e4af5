#!/usr/bin/env bash
# Round 32, visit 2: pipe 7 with the operands multicast over a cluster (cw,
# cx), after visit 1: remote arrivals without the cluster-scope release. test_engines --quick, a re-tune of m = 128 / 256 with the multicast
# candidates, the best multicast form per shape against the best other
# tiled form and cuBLAS, ncu of the best multicast forms of qkv_gate m = 128
# and the pooler m = 256 (and tile 1 cx = 4, tile 0 cw = 2 there), and the A/B of the re-tuned table if it took one.
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/r
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v; export LD_LIBRARY_PATH=$B/lib
timeout 300 "$B/tests/gpu/test_engines" --quick > /tmp/r/engines.log 2>&1; echo "test_engines rc=$?"
grep -E "^B splitk|^B router|FAIL|multicast|^test_engines" /tmp/r/engines.log | head -16; tail -2 /tmp/r/engines.log
timeout 420 "$B/bin/projd-bench" --table config/tuning/h200.json --tune-new --tune /tmp/r/t2.json --tune-budget 250 \
   --tune-m 128-256 --out /tmp/r/tune --commit r32v2 > /tmp/r/tune.log 2>&1; echo "tune rc=$?"
python3 - <<'PY' > /tmp/r/best.txt
import csv
best = {}
for r in csv.DictReader(open('/tmp/r/tune/tune_log.csv')):
    try: v = float(r['us_or_reason'])
    except ValueError: continue
    e = r['engine']
    if e in ('splitk', 'router'): e += '/mc' if 'cw=' in r['knobs'] or 'cx=' in r['knobs'] else '/px'
    k = (r['layer'], int(r['m']), e)
    if k not in best or v < best[k][0]: best[k] = (v, r['knobs'])
for k in sorted(best):
    print('best', k[0], k[1], k[2], '%.2f' % best[k][0], best[k][1])
PY
cat /tmp/r/best.txt
# ncu of the best multicast forms and their plain pipe 7 / cuBLAS neighbours.
: > /tmp/r/ncu.txt
for s in "qkv_gate 128" "pooler 256"; do
  kn=$(awk -v l="${s% *}" -v m="${s#* }" '$2==l && $3==m && $4=="splitk/mc" {print $6}' /tmp/r/best.txt)
  [ -n "$kn" ] && echo "$s splitk $kn tgemm_ws" >> /tmp/r/ncu.txt
done
echo "qkv_gate 128 splitk ks=1,pipe=7,tile=1,cl=0,cx=4 tgemm_ws" >> /tmp/r/ncu.txt
echo "pooler 256 splitk ks=1,pipe=7,tile=0,cl=0,cw=2 tgemm_ws" >> /tmp/r/ncu.txt
cat /tmp/r/ncu.txt
[ -s /tmp/r/ncu.txt ] && PJ_DEV=$B NCU_LIST=/tmp/r/ncu.txt OUT=/tmp/r/ncu timeout 400 bash bench/ncu-deep.sh > /tmp/r/ncu.log 2>&1
echo "ncu rc=$?"; grep -E "^===|Duration" /tmp/r/ncu.log | head
grep -c '"cw"\|"cx"' /tmp/r/t2.json
if grep -q '"cw"\|"cx"' /tmp/r/t2.json; then
for i in 1 2; do
for b in t1 t2; do
  T=config/tuning/h200.json; [ $b = t2 ] && T=/tmp/r/t2.json
  timeout 100 "$B/bin/projd-bench" --out /tmp/r/$b-$i --reps 300 --table $T --commit $b > /tmp/r/$b-$i.log 2>&1
  echo "$b $i rc=$? $(grep -E '^SCORE' /tmp/r/$b-$i.log)"
done
done
fi
gzip /tmp/r/tune/tune_log.csv /tmp/r/engines.log 2>/dev/null
rm -f /tmp/r/ncu/*-sass.csv
gzip /tmp/r/ncu/* 2>/dev/null
tar czf "$OUT/r32v2.tgz" -C /tmp/r .
