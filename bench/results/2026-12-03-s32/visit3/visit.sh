#!/usr/bin/env bash
# Session 32, visit 3: after review. A release holds a mutex against
# WAIT_EVENT submits from its last check until it returns, checks each
# lane's newest WAIT_EVENT job only, and sets the device on the closer's
# thread; a lost lane takes no new connection (stream_lost). test_cuda_backend
# --w4 first (section R: a release parked behind a live client's wait, the
# IPC mapping taken back; W4: four new connections after the loss), then the
# GPU suites with the committed table (the benchmark is not re-run: no
# kernel changed since visit 2's final check).
. bench/visit-common.sh
(cd "$F" && PJ_BUILD=$B timeout 150 "$B/tests/gpu/test_cuda_backend" --w4) >"$OUT/w4.log" 2>&1
echo "w4 rc=$?"
grep -E "^R:|^W4|FAIL|test_cuda_backend --w4:|shutdown|held" "$OUT/w4.log" | head -40
export PROJD_TUNING_DIR=$PWD/config/tuning PJ_TUNE_TABLE=$PWD/config/tuning/h200.json
OUT=/tmp/backend PJ_GPU_TEST_TIMEOUT=300 SUITES_TIMEOUT=300 timeout 330 \
    bash bench/run-backend-device.sh "$B" >"$OUT/backend.log" 2>&1
echo "backend rc=$?"
tar czf "$OUT/backend.tgz" -C /tmp/backend . 2>/dev/null
grep -E "checks passed|test_engines:|GPU suites|^OK|^Ran |FAIL" "$OUT/backend.log" | head -20
