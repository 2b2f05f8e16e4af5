#!/usr/bin/env bash
# After the final read of the change: test_engines --quick (pipe 3's z12
# form with its stage address moved into its branch) and the Python/torch
# GPU suite (the SGLang method's request loop moved into ProjdLinearMethod._run,
# the model made by tests/daemons.sh's pjd_mkmodel).
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/f
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v
export LD_LIBRARY_PATH=$B/lib
timeout 240 "$B/tests/gpu/test_engines" --quick > /tmp/f/engines.log 2>&1; echo "test_engines rc=$?"
grep -E "^test_engines|FAIL" /tmp/f/engines.log | head -5
timeout 250 bash tests/gpu/python_torch.sh "$B" > /tmp/f/python_torch.log 2>&1
echo "python_torch rc=$?"; grep -E "^Ran |^OK|FAIL|Error|python_torch:" /tmp/f/python_torch.log | head -10
gzip /tmp/f/engines.log
tar czf "$OUT/review.tgz" -C /tmp/f .
