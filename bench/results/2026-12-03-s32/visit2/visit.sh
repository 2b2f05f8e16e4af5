#!/usr/bin/env bash
# Session 32, visit 2: a release starts only when no client wait is pending
# (backend_cuda.c release_when_no_client_waits), after visit 1 found that a
# cudaHostUnregister behind a dead client's wait, on the closer thread,
# held the loop's next launch. The final check (test_cuda_backend's W4 with
# the shm and the ipc client among the GPU suites), W4's lines printed.
. bench/visit-common.sh
timeout 450 bash bench/final-check.sh "$B" "$F/final" "$(cat .devrun-pack/commit)"
cp "$F"/final/bench-1/*.json "$OUT/" 2>/dev/null
grep -E "^W4|FAIL|exited|shutdown|stopped" "$F/final/backend.log" >"$OUT/w4.txt"
tar czf "$OUT/final.tgz" -C "$F" final
head -40 "$OUT/w4.txt"
grep -E "checks passed|test_engines:|GPU suites|^OK|^Ran " "$F/final/backend.log" | head -12
