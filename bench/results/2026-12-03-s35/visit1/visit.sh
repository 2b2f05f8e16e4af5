#!/usr/bin/env bash
# Session 35, visit 1: releases no longer let client waits be (the cuda
# backend takes WAIT_EVENT waits on the host while a release waits to
# start). First test_cuda_backend --x, the live client that stops passing
# its waits once a release could start, against session 34's projd
# (bin/projd-old, main 317687a: expected to fail, the other connection's
# request held behind the release) and against this build's; then --w4
# (R, S with the waits left on the lanes and as shipped, X, W4); then
# bench/final-check.sh (GPU suites, the fatal-error test, the benchmark
# twice).
. bench/visit-common.sh
export PJ_BUILD=$B
old=/tmp/vold
rm -rf "$old" && mkdir -p "$old/bin"
for f in "$B"/*; do [ "$(basename "$f")" = bin ] || ln -s "$f" "$old/"; done
for f in "$B"/bin/*; do ln -s "$f" "$old/bin/"; done
rm -f "$old/bin/projd" && ln -s "$B/bin/projd-old" "$old/bin/projd"
PJ_BUILD=$old timeout 120 "$B/tests/gpu/test_cuda_backend" --x >"$OUT/x-old.txt" 2>&1
echo "X against session 34's projd: rc=$?"
grep -E "^X:|FAIL" "$OUT/x-old.txt" | head -8
timeout 120 "$B/tests/gpu/test_cuda_backend" --x >"$OUT/x-new.txt" 2>&1
echo "X against this projd: rc=$?"
grep -E "^X:|FAIL" "$OUT/x-new.txt" | head -8
timeout 240 "$B/tests/gpu/test_cuda_backend" --w4 >"$OUT/w4s.txt" 2>&1
echo "test_cuda_backend --w4 rc=$?"
grep -E "^S:|^R:|^X:|FAIL" "$OUT/w4s.txt" | head -12
timeout 450 bash bench/final-check.sh "$B" "$F/final" "$(cat .devrun-pack/commit)"
cp "$F"/final/bench-1/*.json "$OUT/" 2>/dev/null
tar czf "$OUT/final.tgz" -C "$F" final
grep -E "checks passed|test_engines:|GPU suites|^OK|^Ran |FAIL" "$F/final/backend.log" | sort -u | head -16
