#!/usr/bin/env bash
# Final check of main after round 32 (multicast reverted; kernels and table
# as round 26 left them; libprojd's exports cut to its API; the SGLang
# method's registrations cached by allocation id): bench/final-check.sh
# (the GPU suites, the fatal-error test, the benchmark twice), and apply()
# of the SGLang method timed against the previous module
# (.devrun-pack/old, the copy at 8c4368e) in the same run.
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/f
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v
LD_LIBRARY_PATH=$B/lib timeout 200 bash bench/sglang-apply.sh "$B" .devrun-pack/old client/python \
    -- --json /tmp/f/sglang-apply.json >/tmp/f/sglang-apply.log 2>&1
echo "sglang-apply rc=$?"; cat /tmp/f/sglang-apply.log
bash bench/final-check.sh "$B" /tmp/f "${COMMIT:-final}"
grep -E "address|test_a_freed" /tmp/f/backend.log | head -4
tar czf "$OUT/final.tgz" -C /tmp/f .
