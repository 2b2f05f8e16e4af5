#!/usr/bin/env bash
# Session 27, visit 6: the review's last two refactors on the GPU. test_engines
# builds its one-entry tables through one helper; upload adds a z12 layer's
# bf16 copy (pj_engup_add_bf16_copy) instead of uploading the layer again
# (test_cuda_backend section Z: the small model's o keeps its copy). The GPU
# suites and the fatal-error test with the committed table
# (bench/run-backend-device.sh, as bench/final-check.sh runs it); no benchmark.
. bench/visit-common.sh
export PROJD_TUNING_DIR=$PWD/config/tuning PJ_TUNE_TABLE=$PWD/config/tuning/h200.json
OUT=/tmp/backend PJ_GPU_TEST_TIMEOUT=300 SUITES_TIMEOUT=300 timeout 330 \
    bash bench/run-backend-device.sh "$B" >"$F/backend.log" 2>&1
echo "backend rc=$?"
grep -E "GPU suites:|test_engines:|^Z: |keeps a bf16|fault test|python_torch: ok" "$F/backend.log" | sort | uniq -c
cp "$F/backend.log" "$OUT/"
