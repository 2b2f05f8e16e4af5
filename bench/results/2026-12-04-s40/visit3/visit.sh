#!/usr/bin/env bash
# Session 40, visit 3: python_torch alone (the SGLang method under
# torch.compile, new in test_torch_gpu.py; SmallLimits' poll), no MPS.
. bench/visit-common.sh
timeout 200 bash tests/gpu/python_torch.sh "$B" >"$OUT/python_torch.log" 2>&1
echo "python_torch rc=$?"
grep -vE '^\s*$' "$OUT/python_torch.log" | tail -60 | cut -c1-300
