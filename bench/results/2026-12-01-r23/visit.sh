#!/usr/bin/env bash
# Round 23: correctness of the new build, then the benchmark (committed
# table) alternately by the old and new builds, then the new build's
# re-tune of m = 1..16 with its benchmark.
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v /tmp/o "$OUT" /tmp/r
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
mkdir -p /tmp/o/.devrun-v/bin; cp /tmp/v/.devrun-v/bin/projd-bench-old /tmp/o/.devrun-v/bin/projd-bench
export LD_LIBRARY_PATH=/tmp/v/.devrun-v/lib
timeout 300 /tmp/v/.devrun-v/tests/gpu/test_engines --quick > /tmp/r/te.log 2>&1; echo "test_engines rc=$?"
grep -E '^B gemvz  |test_engines:' /tmp/r/te.log | tail -6
for i in 1 2; do
  for b in old new; do
    B=/tmp/v/.devrun-v; [ $b = old ] && B=/tmp/o/.devrun-v
    timeout 150 $B/bin/projd-bench --out /tmp/r/$b-$i --reps 300 --table config/tuning/h200.json --commit $b > /tmp/r/$b-$i.log 2>&1
    echo "$b $i rc=$? $(grep -E '^SCORE' /tmp/r/$b-$i.log)"
    grep -E '^\| (qkv_gate|o|pooler) \| (1|8|16) ' /tmp/r/$b-$i/bench.md | awk -F'|' '{printf "  %s %s %s %s\n",$2,$3,$4,$8}'
  done
done
timeout 300 /tmp/v/.devrun-v/bin/projd-bench --table config/tuning/h200.json --tune-new --tune /tmp/r/new.json --tune-budget 100 \
   --tune-m 1-16 --out /tmp/r/tune --commit new > /tmp/r/tune.log 2>&1; echo "tune rc=$?"
grep -E '^tune (qkv_gate|o |pooler)|^SCORE|^(decode|verify) ' /tmp/r/tune.log
gzip /tmp/r/tune/tune_log.csv 2>/dev/null
tar czf $OUT/r23.tgz -C /tmp/r .
