#!/usr/bin/env bash
# Round 26: x's pieces through L1 (cp.async.ca). test_engines quick, then
# the z12 forms probed by the old (e3e043f) and new build alternately, then
# the benchmark (committed table) old / new alternately, two runs each.
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/r
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v; export LD_LIBRARY_PATH=$B/lib
timeout 120 $B/tests/gpu/test_engines --quick > /tmp/r/te.log 2>&1; echo "test_engines rc=$?"
grep -E 'FAIL|test_engines:' /tmp/r/te.log | head -5
for i in 1 2; do
for b in old new; do
  X=$B/bin/projd-bench; [ $b = old ] && X=$B/bin/projd-bench-old
  timeout 120 $X --out /tmp/r/p-$b-$i --probe .devrun-pack/probe.txt > /tmp/r/probe-$b-$i.log 2>&1; echo "probe $b $i rc=$?"
  grep -E "^(o|qkv_gate|pooler) " /tmp/r/probe-$b-$i.log | awk '{printf "%s %s %s %s; ", $1, $2, $5, $11}'; echo
done
done
for i in 1 2; do
for b in old new; do
  X=$B/bin/projd-bench; [ $b = old ] && X=$B/bin/projd-bench-old
  timeout 120 $X --out /tmp/r/$b-$i --reps 300 --table config/tuning/h200.json --commit $b > /tmp/r/$b-$i.log 2>&1
  echo "$b $i rc=$? $(grep -E '^SCORE' /tmp/r/$b-$i.log)"
  grep -E '^\| (qkv_gate|o|pooler) \| (1|8|16) ' /tmp/r/$b-$i/bench.md | awk -F'|' '{printf "%s%s%s;", $2,$3,$7}'; echo
done
done
gzip /tmp/r/te.log; tar czf $OUT/r26.tgz -C /tmp/r .
