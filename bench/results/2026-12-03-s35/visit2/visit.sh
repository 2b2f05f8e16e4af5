#!/usr/bin/env bash
# Session 35, visit 2: the release deferral after its review: a lane is
# taken for stuck (deferral off meanwhile) when it has finished no job for
# 1 s, not when its oldest job is 1 s old; a full lane ring fails the
# request (E_LIMIT) instead of putting it off for good; X twice (the client
# stops passing 200 ms and 10 ms after the UNREGISTER), S asserting that
# waits were put off. test_cuda_backend --x against session 34's projd
# (bin/projd-old) and this one, then the GPU suites and the fatal-error
# test (bench/run-backend-device.sh with the committed table). No kernel
# change: no benchmark.
. bench/visit-common.sh
export PJ_BUILD=$B
old=/tmp/vold
rm -rf "$old" && mkdir -p "$old/bin"
for f in "$B"/*; do [ "$(basename "$f")" = bin ] || ln -s "$f" "$old/"; done
for f in "$B"/bin/*; do ln -s "$f" "$old/bin/"; done
rm -f "$old/bin/projd" && ln -s "$B/bin/projd-old" "$old/bin/projd"
PJ_BUILD=$old timeout 120 "$B/tests/gpu/test_cuda_backend" --x >"$OUT/x-old.txt" 2>&1
echo "X against session 34's projd: rc=$?"
grep -E "^X:|FAIL|checks passed" "$OUT/x-old.txt" | head -10
timeout 120 "$B/tests/gpu/test_cuda_backend" --x >"$OUT/x-new.txt" 2>&1
echo "X against this projd: rc=$?"
grep -E "^X:|FAIL|checks passed" "$OUT/x-new.txt" | head -10
export PROJD_TUNING_DIR=$PWD/config/tuning PJ_TUNE_TABLE=$PWD/config/tuning/h200.json
rm -rf /tmp/backend
OUT=/tmp/backend PJ_GPU_TEST_TIMEOUT=300 SUITES_TIMEOUT=300 timeout 330 \
    bash bench/run-backend-device.sh "$B" >"$F/backend.log" 2>&1
echo "backend rc=$?"
cp "$F/backend.log" "$OUT/"
tar czf "$OUT/backend.tgz" -C /tmp/backend . 2>/dev/null
grep -E "^S:|^X:|^R:" /tmp/backend/gpu-tests.log | head -8
grep -E "checks passed|test_engines:|GPU suites|^OK|^Ran |FAIL" "$F/backend.log" | sort -u | head -16
