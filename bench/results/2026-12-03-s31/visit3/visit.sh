#!/usr/bin/env bash
# Session 31, visit 3: test_cuda_backend --w4 after the child's fix (its
# CUDA IPC buffers made before the event is held: in visit 2 the child's
# cudaDeviceSynchronize waited out the 10 s hold, so the ipc case sent a
# done event and was rightly not lost).
. bench/visit-common.sh
(cd "$F" && PJ_BUILD=$B timeout 100 "$B/tests/gpu/test_cuda_backend" --w4) >"$OUT/w4.log" 2>&1
echo "w4 rc=$?"
grep -E "^W4|FAIL|test_cuda_backend --w4:|exited" "$OUT/w4.log" | head -30
