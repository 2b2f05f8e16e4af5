#!/usr/bin/env bash
# Session 41, visit 4: the GPU suites (with SGLang's wheels, so that
# python_sglang runs) and the fatal-error test again, after visit 3:
# section K's expectation for layers without entries corrected (the ladder
# gives them the defaults or cuBLAS: anything but the table), and
# final-check.sh's time for the suites raised (visit 3's 330 s ran out
# before the fault test, python_sglang being new). Kernels and table
# unchanged since visit 3's benchmark, so it is not run again.
. bench/visit-common.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
export PROJD_TUNING_DIR=$PWD/config/tuning PJ_TUNE_TABLE=$PWD/config/tuning/h200.json
rm -rf /tmp/backend
OUT=/tmp/backend PJ_GPU_TEST_TIMEOUT=300 SUITES_TIMEOUT=380 timeout 450 \
    bash bench/run-backend-device.sh "$B" >"$OUT/backend.log" 2>&1
echo "backend rc=$?"
cp /tmp/backend/gpu-fault.log /tmp/backend/gpu-tests.log "$OUT/" 2>/dev/null
grep -E "^== K|^K:|python_sglang: ok|FAIL|checks passed|^--- |GPU suites|fault|exit" "$OUT/gpu-tests.log" "$OUT/gpu-fault.log" | cut -c1-220 | head -40
