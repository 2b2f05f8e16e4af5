#!/usr/bin/env bash
# Round 22, visit 2: test_engines (quick) with the 3- and 6-stage rings,
# then a re-tune of m = 1..32 and the benchmark with the new table.
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT"
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v; export LD_LIBRARY_PATH=$B/lib
timeout 300 $B/tests/gpu/test_engines --quick > /tmp/te.log 2>&1; echo "test_engines rc=$?"
grep -E '^B gemvz|FAIL|failed' /tmp/te.log | tail -12; cp /tmp/te.log $OUT/
timeout 420 $B/bin/projd-bench --table config/tuning/h200.json --tune-new --tune /tmp/new.json --tune-budget 150 \
   --tune-m 1-32 --out /tmp/tune --commit "$(cat .devrun-pack/COMMIT)" > /tmp/tune.log 2>&1; echo "tune rc=$?"
cp /tmp/new.json $OUT/; gzip -c /tmp/tune/tune_log.csv > $OUT/tune_log.csv.gz; cp /tmp/tune/bench.md /tmp/tune/bench.json $OUT/ 2>/dev/null
gzip -c /tmp/tune.log > $OUT/tune.log.gz
grep -E '^SCORE|^(decode|verify) ' /tmp/tune.log
diff <(python3 -c "import json;[print(e['layer'],e['m'],e['engine'],json.dumps(e.get('knobs'))) for e in json.load(open('config/tuning/h200.json'))['entries']]") \
     <(python3 -c "import json;[print(e['layer'],e['m'],e['engine'],json.dumps(e.get('knobs'))) for e in json.load(open('/tmp/new.json'))['entries']]")
zcat $OUT/tune_log.csv.gz | grep -E 'st=[36]' | grep -E ',(final|coarse),' | sort -t, -k1,2 | awk -F'"' '{print $1 $2 $3}' | sort -t, -k6 -g | head -5
