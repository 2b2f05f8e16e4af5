#!/usr/bin/env bash
# Round 24: correctness of the new build (test_engines quick: every cl = 1
# variant), then the benchmark (committed table) by the old build (67abe80)
# and the new one alternately, three runs each.
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v /tmp/o/.devrun-v/bin "$OUT" /tmp/r
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
cp /tmp/v/.devrun-v/bin/projd-bench-old /tmp/o/.devrun-v/bin/projd-bench
export LD_LIBRARY_PATH=/tmp/v/.devrun-v/lib
timeout 300 /tmp/v/.devrun-v/tests/gpu/test_engines --quick > /tmp/r/te.log 2>&1; echo "test_engines rc=$?"
grep -E 'cl=1|test_engines:|FAIL' /tmp/r/te.log | grep -E 'FAIL|test_engines:|router|splitk  on (o|qkv)' | tail -8
for i in 1 2 3; do
  for b in old new; do
    B=/tmp/v/.devrun-v; [ $b = old ] && B=/tmp/o/.devrun-v
    timeout 150 $B/bin/projd-bench --out /tmp/r/$b-$i --reps 300 --table config/tuning/h200.json --commit $b > /tmp/r/$b-$i.log 2>&1
    echo "$b $i rc=$? $(grep -E '^SCORE' /tmp/r/$b-$i.log)"
    grep -E '^\| (router|unpooler \| (16|32)|qkv_gate \| 16) ' /tmp/r/$b-$i/bench.md | awk -F'|' '{printf "%s%s%s;", $2,$3,$7}'; echo
  done
done
gzip /tmp/r/te.log; tar czf $OUT/r24.tgz -C /tmp/r .
