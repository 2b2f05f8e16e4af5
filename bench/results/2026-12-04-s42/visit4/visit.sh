#!/usr/bin/env bash
# Session 42, visit 4: the session's last code (1024 layers a daemon, one
# workspace a lane, the review's fixes). SGLang's wheels installed first
# (bench/sglang-wheels.sh), so that the GPU suites run python_sglang too;
# then bench/final-check.sh (GPU suites under MPS, test_cuda_backend's
# section N among them; the fault tests; the benchmark of the committed
# table twice). At most 8 files come back.
. bench/visit-common.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
FC=/tmp/fc
bash bench/final-check.sh "$B" "$FC" "$(cat .devrun-pack/commit)"
mkdir -p "$OUT/final"
cp "$FC/backend.log" "$FC/bench-1.log" "$FC/bench-2.log" "$OUT/final/"
cp /tmp/backend/gpu-fault.log /tmp/backend/gpu-tests.log "$OUT/final/" 2>/dev/null
cp "$FC/bench-1/bench.json" "$OUT/final/bench.json"
cp "$FC/bench-1/bench.md" "$OUT/final/bench.md" 2>/dev/null
grep -E "^== N|^N:|python_sglang|FAIL|checks passed|^--- |GPU suites|^Ran |^OK" "$OUT/final/gpu-tests.log" "$OUT/final/gpu-fault.log" | cut -c1-220 | head -50
