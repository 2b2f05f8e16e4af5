#!/usr/bin/env bash
# Round 25's diagnostic: the table's z12 GEMV forms (xs = 2) timed by this
# build and by a build that copies x only for the first S batches (wrong
# sums, not validated: timing only), two probes each, alternating.
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/f
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v; export LD_LIBRARY_PATH=$B/lib
for i in 1 2; do
for b in projd-bench projd-bench-diag; do
  PJ_DIAG_NOVALIDATE=1 timeout 120 $B/bin/$b --out /tmp/f/p-$b-$i --probe .devrun-pack/probe.txt > /tmp/f/probe-$b-$i.log 2>&1; echo "$b $i probe rc=$?"
  grep -E "^(o|qkv_gate|pooler) " /tmp/f/probe-$b-$i.log | awk '{printf "%s %s %s %s; ", $1, $2, $5, $11}'; echo
done
done
tar czf $OUT/diag.tgz -C /tmp/f .
