#!/usr/bin/env bash
# Session 38, visit 11: the final build (745a070): the GPU suites not run
# on it in visit 10 (test_cuda_ipc, cuda_latency, check_config,
# python_torch; test_cuda_backend ran there in full, test_engines' kernels
# are unchanged), under MPS; then projd's start-up report on the
# reference model (the warm-up now launches every engine's direct shapes).
. bench/visit-common.sh
export PJ_BUILD=$B
export PROJD_TUNING_DIR=$PWD/config/tuning PJ_TUNE_TABLE=$PWD/config/tuning/h200.json
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
timeout 20 nvidia-cuda-mps-control -d && echo "MPS started"
PJ_GPU_TEST_TIMEOUT=60 timeout 90 bash tests/run-gpu-tests.sh "$B" >"$OUT/gpu-tests.log" 2>&1
echo "suites rc=$?"
grep -E "FAIL|checks passed|check_config:|GPU suites|^OK|^Ran " "$OUT/gpu-tests.log" | head -12
timeout 40 "$B/bin/projctl" mkmodel --out /tmp/ref.safetensors >/dev/null || exit 1
mkdir -p -m 700 /tmp/pjs
pj_daemon_start ref /tmp/pjs/ref.sock --backend cuda --model /tmp/ref.safetensors && {
    grep -E 'startup|device memory' "$F/ref.log" | cut -c1-400
    kill -TERM "$PJ_DPID"; wait "$PJ_DPID"; echo "projd exit $?"
    cp "$F/ref.log" "$OUT/projd-ref.log"
}
echo quit | timeout 20 nvidia-cuda-mps-control >/dev/null 2>&1
