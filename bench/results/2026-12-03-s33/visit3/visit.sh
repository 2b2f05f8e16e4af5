#!/usr/bin/env bash
# Session 33, visit 3: the final check of the session's last code (the
# review's fixes: a synchronous dial, instances by who listens, an IPC
# mapping that failed never listed): test_cuda_backend --w4 (R, S before and
# after, W4), then bench/final-check.sh (GPU suites, the fatal-error test,
# the benchmark twice).
. bench/visit-common.sh
export PJ_BUILD=$B
timeout 200 "$B/tests/gpu/test_cuda_backend" --w4 >"$OUT/w4s.txt" 2>&1
echo "test_cuda_backend --w4 rc=$?"
grep -E "^S:|^R:|FAIL" "$OUT/w4s.txt" | head -12
timeout 450 bash bench/final-check.sh "$B" "$F/final" "$(cat .devrun-pack/commit)"
cp "$F"/final/bench-1/*.json "$OUT/" 2>/dev/null
tar czf "$OUT/final.tgz" -C "$F" final
grep -E "checks passed|test_engines:|GPU suites|^OK|^Ran |FAIL" "$F/final/backend.log" | sort -u | head -16
