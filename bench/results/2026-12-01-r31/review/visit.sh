#!/usr/bin/env bash
# After the review of this session's change (libprojd's ERROR statuses, op
# flags judged by the daemon's validator, the Python adapter's cache and the
# torch suite's split/evict daemon): the GPU suites and the fatal-error test
# with the committed table loaded, as in final/ (the kernels did not change).
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/f
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v; export LD_LIBRARY_PATH=$B/lib
export PROJD_TUNING_DIR=$PWD/config/tuning PJ_TUNE_TABLE=$PWD/config/tuning/h200.json
OUT=/tmp/backend PJ_GPU_TEST_TIMEOUT=300 SUITES_TIMEOUT=300 timeout 330 bash bench/run-backend-device.sh "$B" > /tmp/f/backend.log 2>&1; echo "backend rc=$?"
grep -E "^--- |GPU suites:|checks passed|test_engines:|^Ran |^OK|FAIL|python_torch:" /tmp/f/backend.log | sort | uniq -c | head -24
tar czf /tmp/f/backend.tgz -C /tmp/backend . 2>/dev/null
tar czf "$OUT/review.tgz" -C /tmp/f .
