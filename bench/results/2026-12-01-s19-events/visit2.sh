#!/usr/bin/env bash
# The same A/B as visit.sh on the reference model (qkv_gate 4608 x 4096),
# under MPS and without.
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/f
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v
export LD_LIBRARY_PATH=$B/lib
for mps in 1 0; do
    PRESET=reference MPS=$mps timeout 250 bash bench/sglang-apply.sh "$B" .devrun-pack/old client/python \
        -- --reps 1000 --json /tmp/f/ref-mps$mps.json >/tmp/f/ref-mps$mps.log 2>&1
    echo "sglang-apply reference MPS=$mps rc=$?"; cat /tmp/f/ref-mps$mps.log
done
tar czf "$OUT/events2.tgz" -C /tmp/f .
