#!/usr/bin/env bash
# Session 28, visit 1: main eb0de0c plus the new GPU test of projd_sglang
# after a real restart (tests/python/test_torch_gpu.py RestartedDaemon: a
# cuda daemon of the test's own, SIGKILLed under two methods and started
# again on the same socket). The whole final check: GPU suites with the
# committed table, the fatal-error test, the benchmark twice.
. bench/visit-common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader
timeout 560 bash bench/final-check.sh "$B" "$F/final" "$(cat .devrun-pack/commit)+restart-test"
grep -E "RestartedDaemon|test_apply_goes_on|python_torch" "$F/final/backend.log" | head
mkdir -p "$OUT/final" && cp -r "$F/final/." "$OUT/final/"
