#!/usr/bin/env bash
# Where apply() of the SGLang method spends its time beyond the bare
# project(): the reference model under MPS, client/python alone, then
# cProfile of 2000 applies at m = 1.
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/f
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v
export LD_LIBRARY_PATH=$B/lib
PRESET=reference MPS=1 timeout 250 bash bench/sglang-apply.sh "$B" client/python \
    -- --profile --json /tmp/f/profile.json >/tmp/f/profile.log 2>&1
echo "rc=$?"; head -60 /tmp/f/profile.log
tar czf "$OUT/profile.tgz" -C /tmp/f .
