#!/usr/bin/env bash
# The SGLang method's apply() under MPS (as deployed), A/B of the previous
# module (.devrun-pack/old, the copy at 8c4368e) against client/python, with
# the bare project() round trip beside it; then the same without MPS.
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/f
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v
for mps in 1 0; do
    MPS=$mps LD_LIBRARY_PATH=$B/lib timeout 250 bash bench/sglang-apply.sh "$B" .devrun-pack/old client/python \
        -- --json /tmp/f/sglang-apply-mps$mps.json >/tmp/f/sglang-apply-mps$mps.log 2>&1
    echo "sglang-apply MPS=$mps rc=$?"; cat /tmp/f/sglang-apply-mps$mps.log
done
tar czf "$OUT/mps.tgz" -C /tmp/f .
