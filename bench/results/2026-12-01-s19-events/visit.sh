#!/usr/bin/env bash
# The SGLang method ordered by CUDA IPC events (WAIT_EVENT, SIGNAL_EVENT,
# ACCEPT_REPLY) instead of a host stream sync and a reply at completion:
# the Python/torch GPU suite (tests/gpu/python_torch.sh), then apply() of
# the previous module (.devrun-pack/old, main 46c9c9f: synchronous) against
# client/python, under MPS and without (bench/sglang-apply.sh).
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/f
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v
export LD_LIBRARY_PATH=$B/lib
timeout 250 bash tests/gpu/python_torch.sh "$B" > /tmp/f/python_torch.log 2>&1
echo "python_torch rc=$?"; grep -E "^test_|^Ran |^OK|FAIL|Error|python_torch:" /tmp/f/python_torch.log | head -30
for mps in 1 0; do
    MPS=$mps timeout 250 bash bench/sglang-apply.sh "$B" .devrun-pack/old client/python \
        -- --json /tmp/f/sglang-apply-mps$mps.json >/tmp/f/sglang-apply-mps$mps.log 2>&1
    echo "sglang-apply MPS=$mps rc=$?"; cat /tmp/f/sglang-apply-mps$mps.log
done
tar czf "$OUT/events.tgz" -C /tmp/f .
