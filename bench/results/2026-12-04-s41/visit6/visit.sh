#!/usr/bin/env bash
# Session 41, visit 6: after the review of the session's change.
# test_cuda_backend --k (K: tuned_as with a table; K2: without one, the new
# warning) and python_sglang.sh (a dict's unknown name now refused when
# quant_config is called).
. bench/visit-common.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PJ_BUILD=$B
timeout 120 "$B/tests/gpu/test_cuda_backend" --k >"$OUT/backend-k.log" 2>&1
echo "k rc=$?"
grep -E "^== K|FAIL|checks passed" "$OUT/backend-k.log" | cut -c1-240
timeout 200 bash tests/gpu/python_sglang.sh "$B" >"$OUT/python_sglang.log" 2>&1
echo "python_sglang rc=$?"
grep -E "^python_sglang|^Ran |^OK|FAIL|Error" "$OUT/python_sglang.log" | cut -c1-220 | head -20
