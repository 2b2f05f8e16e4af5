#!/usr/bin/env bash
# Session 30, visit 2: the final check of main after the review of the
# watchdog (a client's wait is not a stall until 2 x WatchdogSec; section W
# of test_cuda_backend: a client wait, a lost lane, a stream held by
# PROJD_CUDA_STALL_AFTER): GPU suites, the fatal-error test, the benchmark
# twice with the committed table.
. bench/visit-common.sh
timeout 560 bash bench/final-check.sh "$B" "$F/final" "$(cat .devrun-pack/commit)"
grep -E "== W|^W[0-9]?:|watchdog|test_cuda_backend:" "$F/final/backend.log" | head -24
mkdir -p "$OUT/final" && cp -r "$F/final/." "$OUT/final/"
