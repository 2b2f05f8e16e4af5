#!/usr/bin/env bash
# Final check of main after round 33 (pipe 7's short consumer step kept,
# pipe 8 reverted; the table's kernels unchanged): bench/final-check.sh (the
# GPU suites and the fatal-error test with the committed table loaded, the
# benchmark twice).
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/f
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
bash bench/final-check.sh /tmp/v/.devrun-v /tmp/f "${COMMIT:-final}"
tar czf "$OUT/final.tgz" -C /tmp/f .
