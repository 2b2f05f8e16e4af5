#!/usr/bin/env bash
# Round 33, visit 1: pipe 7's consumer step made short, pipe 8 (two groups
# in flight). bench/ab-bin.sh: the new build's test_engines, then table t7
# (the committed one with the dense layers at m = 128 / 256 on pipe 7, the
# knobs of round 32's tune) run alternately by main's projd-bench (old) and
# the new one; then t8 (the same on pipe 8) by the new one; then a re-tune of
# m = 128 / 256 with pipe 7 and 8 among the candidates.
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/r
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v
PJ_DEV=$B TABLE=.devrun-pack/t7.json RUNS=2 OUT=/tmp/ab timeout 400 bash bench/ab-bin.sh > /tmp/r/ab.log 2>&1
echo "ab-bin rc=$?"; grep -E "test_engines|pipe=8|FAIL|run [0-9] rc|^SCORE|^verify" /tmp/r/ab.log | head -30
export LD_LIBRARY_PATH=$B/lib
for i in 1 2; do
    timeout 100 "$B/bin/projd-bench" --out /tmp/r/t8-$i --reps 300 --table .devrun-pack/t8.json --commit t8 > /tmp/r/t8-$i.log 2>&1
    echo "t8 $i rc=$? $(grep -E '^SCORE' /tmp/r/t8-$i.log)"; grep -E "^verify" /tmp/r/t8-$i.log
done
timeout 300 "$B/bin/projd-bench" --table config/tuning/h200.json --tune-new --tune /tmp/r/t2.json --tune-budget 250 \
   --tune-m 128-256 --out /tmp/r/tune --commit r33v1 > /tmp/r/tune.log 2>&1; echo "tune rc=$?"
zcat -f /tmp/r/tune/tune_log.csv | python3 -c "
import csv, sys
best = {}
for r in csv.DictReader(sys.stdin):
    try: v = float(r['us_or_reason'])
    except ValueError: continue
    e = r['engine']
    if e in ('splitk', 'router'):
        p = [x for x in r['knobs'].split(',') if x.startswith('pipe=')]
        e += '/' + (p[0] if p else '?')
    k = (r['layer'], int(r['m']), e)
    if k not in best or v < best[k][0]: best[k] = (v, r['knobs'])
for k in sorted(best):
    if k[2].endswith(('pipe=7', 'pipe=8')) or k[2] == 'cublas': print('best', *k, '%.2f' % best[k][0], best[k][1])
" | tee /tmp/r/best.txt
grep -c '"pipe": [78]' /tmp/r/t2.json
gzip /tmp/r/tune/tune_log.csv 2>/dev/null
cp /tmp/ab/r.tar /tmp/r/ab.tar 2>/dev/null
tar czf "$OUT/r33v1.tgz" -C /tmp/r .
