#!/usr/bin/env bash
# Session 31, visit 2: a client killed while its request waits for its
# event is found lost at once (daemon/orphans.c; visit 1 measured that
# recording its event from projd does not release the wait):
# test_cuda_backend --w4 (shm, then CUDA IPC buffers, a daemon each), then
# the final check of main (GPU suites with W4 in test_cuda_backend, the
# fatal-error test, the benchmark twice with the committed table).
# What comes back: w4.log, final.tgz (everything), and the benchmark's
# JSON and markdown (at most 8 files).
. bench/visit-common.sh
(cd "$F" && PJ_BUILD=$B timeout 120 "$B/tests/gpu/test_cuda_backend" --w4) >"$OUT/w4.log" 2>&1
echo "w4 rc=$?"
grep -E "^W4|FAIL|test_cuda_backend --w4:|exited" "$OUT/w4.log" | head -30
timeout 420 bash bench/final-check.sh "$B" "$F/final" "$(cat .devrun-pack/commit)"
grep -E "== W|^W4|FAIL|test_cuda_backend:" "$F/final/backend.log" | head -24
tar czf "$OUT/final.tgz" -C "$F" final
cp "$F/final/backend.log" "$OUT/backend.log"
for i in 1 2; do
    cp "$F/final/bench-$i/bench.json" "$OUT/bench-$i.json" 2>/dev/null
    cp "$F/final/bench-$i/bench.md" "$OUT/bench-$i.md" 2>/dev/null
done
