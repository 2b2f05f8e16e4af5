#!/usr/bin/env bash
# Round 25, visit 1: correctness of the token-group variants (test_engines
# quick), a re-tune of m = 16 / 32 with them, an A/B of the committed table
# (t1) against the re-tuned one (t2), three runs each, and ncu of o m = 16
# (DRAM bytes of tg = 2 against the m = 16 kernel).
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/t
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v; export LD_LIBRARY_PATH=$B/lib
timeout 120 $B/tests/gpu/test_engines --quick > /tmp/t/te.log 2>&1; echo "test_engines rc=$?"
grep -E 'FAIL|test_engines:|tg\)' /tmp/t/te.log | grep -E 'FAIL|test_engines:|gemvz' | head -12
timeout 200 $B/bin/projd-bench --table config/tuning/h200.json --tune-new --tune /tmp/t/t2.json --tune-budget 150 \
   --tune-m 16-32 --out /tmp/t/tune --commit new > /tmp/t/tune.log 2>&1; echo "tune rc=$?"
python3 - <<'PY'
import csv
best={}
for r in csv.DictReader(open('/tmp/t/tune/tune_log.csv')):
    try: us=float(r['us_or_reason'])
    except: continue
    key=(r['layer'],r['m'],'tg' if 'tg=' in r['knobs'] and 'tg=0' not in r['knobs'] else r['engine'])
    if key not in best or us<best[key][0]: best[key]=(us,r['knobs'],r['phase'])
for k in sorted(best): print(*k, '%.2f'%best[k][0], best[k][1], best[k][2])
PY
diff <(python3 -c "import json;[print(e['layer'],e['m'],e['engine'],json.dumps(e.get('knobs')),e.get('us')) for e in json.load(open('config/tuning/h200.json'))['entries']]") \
     <(python3 -c "import json;[print(e['layer'],e['m'],e['engine'],json.dumps(e.get('knobs')),e.get('us')) for e in json.load(open('/tmp/t/t2.json'))['entries']]") | grep '^[<>]'
for i in 1 2 3; do
  for t in t1 t2; do
    T=config/tuning/h200.json; [ $t = t2 ] && T=/tmp/t/t2.json
    timeout 100 $B/bin/projd-bench --out /tmp/t/$t-$i --reps 300 --table $T --commit $t > /tmp/t/$t-$i.log 2>&1
    echo "$t $i rc=$? $(grep -E '^SCORE' /tmp/t/$t-$i.log)"
    grep -E '^\| (qkv_gate|o|pooler) \| (16|32) ' /tmp/t/$t-$i/bench.md | awk -F'|' '{printf "%s%s%s%s;", $2,$3,$4,$8}'; echo
  done
done
if command -v ncu >/dev/null; then
  for k in "tg=2,nw=4,u=1,pipe=5,xs=2,r=1,rb=1,ks=1" "nw=4,u=1,pipe=5,xs=2,r=1,rb=1,ks=1,st=4"; do
    timeout 60 ncu --clock-control none -k regex:gemvz --launch-skip 4 --launch-count 1 \
      --metrics dram__bytes_read.sum,lts__t_bytes.sum,gpu__time_duration.sum,lts__t_sector_hit_rate.pct,sm__warps_active.avg.pct_of_peak_sustained_active \
      $B/bin/projd-bench --out /tmp/t/one --one o 16 gemvz "$k" > /tmp/t/ncu-$(echo $k | cut -c1-4).log 2>&1
    echo "ncu $k"; grep -E "dram__bytes|lts__t_bytes|duration|hit_rate|warps_active" /tmp/t/ncu-$(echo $k | cut -c1-4).log
  done
fi
gzip /tmp/t/tune/tune_log.csv /tmp/t/te.log; tar czf $OUT/r25.tgz -C /tmp/t .
