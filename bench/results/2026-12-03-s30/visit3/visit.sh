#!/usr/bin/env bash
# Session 30, visit 3: what happens to the daemon's lane when a client is
# killed while its request waits for its (unreached) IPC event
# (test_cuda_backend --w4, WatchdogSec = 1 s): does the lane drain, does
# the watchdog take it for a lost lane, does SIGTERM still end projd.
. bench/visit-common.sh
mkdir -p "$OUT"
(cd "$F" && PJ_BUILD=$B timeout 120 "$B/tests/gpu/test_cuda_backend" --w4) 2>&1 | tee "$OUT/w4.log" | tail -30
