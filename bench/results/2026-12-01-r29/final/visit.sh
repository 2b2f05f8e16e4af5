#!/usr/bin/env bash
# Final check of main after round 29 (pipe 8 reverted; kernels and table as round 26 left
# them): the GPU suites and the fatal-error test with the daemons finding
# the committed table (PROJD_TUNING_DIR) and test_engines checking the
# dispatcher's choices from it (PJ_TUNE_TABLE); the benchmark twice.
set -u
COMMIT=${COMMIT:-final}
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/f
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v; export LD_LIBRARY_PATH=$B/lib
export PROJD_TUNING_DIR=$PWD/config/tuning PJ_TUNE_TABLE=$PWD/config/tuning/h200.json
OUT=/tmp/backend PJ_GPU_TEST_TIMEOUT=300 SUITES_TIMEOUT=300 timeout 330 bash bench/run-backend-device.sh $B > /tmp/f/backend.log 2>&1; echo "backend rc=$?"
grep -E "GPU suites|checks passed|test_engines:|tuning table: .*entries|fatal" /tmp/f/backend.log | sort | uniq -c | head -12
tar czf /tmp/f/backend.tgz -C /tmp/backend . 2>/dev/null
for i in 1 2; do
  timeout 100 $B/bin/projd-bench --out /tmp/f/bench-$i --reps 300 --table config/tuning/h200.json --commit $COMMIT > /tmp/f/bench-$i.log 2>&1
  echo "bench $i rc=$? $(grep -E '^SCORE' /tmp/f/bench-$i.log)"
done
grep -c "falling back" /tmp/f/bench-*.log
tar czf $OUT/final.tgz -C /tmp/f .
