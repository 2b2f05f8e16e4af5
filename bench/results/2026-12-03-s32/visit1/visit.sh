#!/usr/bin/env bash
# Session 32, visit 1: buffer releases on the closer thread (daemon/closer.h).
# test_cuda_backend --w4 first: the shm and the CUDA IPC client killed while
# their request waits for their event; then a new connection registers, runs
# and closes; the loop must still answer; SIGTERM must end projd (exit 0)
# without closing the held device. Then the final check of the commit.
. bench/visit-common.sh
(cd "$F" && PJ_BUILD=$B timeout 200 "$B/tests/gpu/test_cuda_backend" --w4) >"$OUT/w4.log" 2>&1
echo "w4 rc=$?"
grep -E "^W4|FAIL|test_cuda_backend --w4:|exited|shutdown" "$OUT/w4.log" | head -40
timeout 420 bash bench/final-check.sh "$B" "$F/final" "$(cat .devrun-pack/commit)"
cp "$F"/final/bench-1/*.json "$OUT/" 2>/dev/null
tar czf "$OUT/final.tgz" -C "$F" final
grep -E "W4|test_cuda_backend:|passed|failed" "$F/final/backend.log" | grep -E "W4|summary|checks" | head -20
