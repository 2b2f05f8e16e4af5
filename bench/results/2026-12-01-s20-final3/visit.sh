#!/usr/bin/env bash
# Final check of main e57a802 (round 35b: the warm-up of the direct shapes):
# bench/final-check.sh (GPU suites and the fatal-error test with the
# committed table, the latency tables with the ring column, the benchmark
# twice).
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/f
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
bash bench/final-check.sh /tmp/v/.devrun-v /tmp/f e57a802
cp /tmp/backend/latency.json /tmp/backend/latency.log /tmp/f/ 2>/dev/null
grep -h "PING round trip" /tmp/backend/*.log
gzip -f /tmp/f/backend.log
tar czf "$OUT/final.tgz" -C /tmp/f .
