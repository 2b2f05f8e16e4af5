#!/usr/bin/env bash
# Session 22: fixes from a review of the cuda backend's host code, on the
# H200. (1) test_cuda_ipc's new check (cuBLAS algo 1 forced, client
# pointers 2 bytes past 16-byte boundaries) against the daemon without the
# fallback to cublasGemmEx ($B/oldeng/bin/projd: HEAD's engine.cu) and
# then, in (2), with it; (2) the GPU suites and the fatal-error tests
# (bench/run-backend-device.sh, the committed table), among them
# test_cuda_backend --fault's new F2 (a fault under a request answered at
# launch must still stop the daemon) and B's refused knob.
. bench/visit-common.sh
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p /tmp/mps /tmp/mpslog
timeout 20 nvidia-cuda-mps-control -d && echo "MPS started"
mkdir -p "$B/oldeng/bin"
PJ_BUILD=$B/oldeng timeout 200 "$B/tests/gpu/test_cuda_ipc" >"$F/ipc-oldeng.log" 2>&1
echo "test_cuda_ipc with the old engine.cu: rc=$?"
grep -E "algo 1|checks passed|FAIL" "$F/ipc-oldeng.log" | head -5
echo quit | timeout 20 nvidia-cuda-mps-control
sleep 1
export PROJD_TUNING_DIR=$PWD/config/tuning PJ_TUNE_TABLE=$PWD/config/tuning/h200.json
rm -rf /tmp/backend
OUT=/tmp/backend PJ_GPU_TEST_TIMEOUT=300 SUITES_TIMEOUT=300 timeout 330 \
    bash bench/run-backend-device.sh "$B" >"$F/backend.log" 2>&1
echo "backend rc=$?"
grep -E "GPU suites|checks passed|test_engines:|fatal|F2|python_torch|^Ran |^OK|FAIL" \
    "$F/backend.log" | sort | uniq -c | head -24
gzip -f "$F/backend.log"
tar czf "$OUT/fix.tgz" -C "$F" . /tmp/backend 2>/dev/null
