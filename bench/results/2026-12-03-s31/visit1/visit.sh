#!/usr/bin/env bash
# Session 31, visit 1: clients killed while their request waits for their
# event are released once their process has exited (daemon/orphans.c,
# stream_release_waits). test_cuda_backend --w4 (shm and CUDA IPC
# buffers), then the whole test_cuda_backend (W4 is in it now) and
# test_cuda_ipc (cc_register_dev moved to cuda_common.h).
. bench/visit-common.sh
mkdir -p "$OUT"
(cd "$F" && PJ_BUILD=$B timeout 120 "$B/tests/gpu/test_cuda_backend" --w4) >"$OUT/w4.log" 2>&1
echo "w4 rc=$?"
grep -E "^W4|FAIL|test_cuda_backend --w4:" "$OUT/w4.log" | head -40
(cd "$F" && PJ_BUILD=$B timeout 300 "$B/tests/gpu/test_cuda_backend") >"$OUT/suite.log" 2>&1
echo "suite rc=$?"
grep -E "^W[0-9]|FAIL|test_cuda_backend:" "$OUT/suite.log" | head -40
(cd "$F" && PJ_BUILD=$B timeout 200 "$B/tests/gpu/test_cuda_ipc") >"$OUT/ipc.log" 2>&1
echo "ipc rc=$?"
grep -E "FAIL|test_cuda_ipc" "$OUT/ipc.log" | tail -5
# The watchdog's wait marker (one more cudaEventRecord per WAIT_EVENT
# request, only while a watchdog asks; session 30 did not measure it):
# apply() of the SGLang method, daemon without and with WATCHDOG_USEC,
# alternating twice.
for i in 1 2; do
    for wd in off on; do
        if [ $wd = on ]; then export WATCHDOG_USEC=30000000; else unset WATCHDOG_USEC; fi
        timeout 280 bash bench/sglang-apply.sh "$B" client/python -- --reps 3000 \
            --json "$OUT/apply-$wd-$i.json" >"$OUT/apply-$wd-$i.txt" 2>&1
        echo "apply watchdog $wd run $i rc=$?"
    done
done
unset WATCHDOG_USEC
for f in "$OUT"/apply-*.txt; do echo "== $f"; tail -12 "$f"; done
