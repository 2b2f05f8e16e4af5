#!/usr/bin/env bash
# Final check of main 7dd2176 (round 35's plan caches on top of 0dce959):
# bench/final-check.sh (GPU suites and the fatal-error test with the
# committed table, the latency tables with the ring column, the benchmark
# twice).
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/f
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
bash bench/final-check.sh /tmp/v/.devrun-v /tmp/f 7dd2176
cp /tmp/backend/latency.json /tmp/backend/latency.log /tmp/f/ 2>/dev/null
grep -h "PING round trip" /tmp/backend/*.log
gzip -f /tmp/f/backend.log
tar czf "$OUT/final.tgz" -C /tmp/f .
