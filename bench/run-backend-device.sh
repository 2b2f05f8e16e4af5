#!/usr/bin/env bash
# run-backend-device.sh — one visit to the GPU host for the cuda backend:
# the GPU suites (tests/run-gpu-tests.sh over the build folder: the cuda
# backend with host buffers, with CUDA IPC buffers, the quick latency run),
# then the latency table of the reference model, all under the MPS control
# daemon (shared/device/RUNNING.md), which is quit at the end.
#
# Usage (on the GPU host, from the folder that holds the build):
#   bench/run-backend-device.sh [BUILD]     BUILD: folder with bin/projd,
#                                           tests/gpu/* and lib/ (bundled
#                                           libraries); default: build
# Logs and latency.json go to $OUT (default /tmp/pj-backend-out). Every step
# that waits on another process has a timeout.
set -u
build=${1:-build}
build=$(cd "$build" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/pj-backend-out}
mkdir -p "$out"
export PJ_BUILD=$build
export LD_LIBRARY_PATH=$build/lib:${LD_LIBRARY_PATH:-}
export PJ_GPU_TEST_TIMEOUT=${PJ_GPU_TEST_TIMEOUT:-200}
log() { echo "[$(date +%H:%M:%S)] $*"; }

log "host: $(hostname), $(nproc) cores"
timeout 20 nvidia-smi --query-gpu=name,uuid,driver_version,memory.used,memory.total --format=csv 2>&1

# MPS: without it the daemon and a client that both launch kernels
# time-slice the GPU (hundreds of µs per switch).
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
mps_quit() {
    echo quit | timeout 20 nvidia-cuda-mps-control >/dev/null 2>&1
    log "MPS control daemon stopped"
}
if timeout 20 nvidia-cuda-mps-control -d; then
    trap mps_quit EXIT
    log "MPS control daemon started"
else
    log "MPS control daemon did not start; running without it"
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
fi

# 1. GPU suites (every binary in $build/tests/gpu, 77 = skipped).
runner=$here/run-gpu-tests.sh
[ -x "$runner" ] || runner=$here/../tests/run-gpu-tests.sh
log "GPU suites"
timeout "${SUITES_TIMEOUT:-260}" bash "$runner" "$build" 2>&1 | tee "$out/gpu-tests.log"
suites_rc=${PIPESTATUS[0]}

# 1b. When a suite failed, the same two suites with every engine forced to
# cuBLAS, to tell the backend's faults from the tuned kernels'.
if [ "$suites_rc" -ne 0 ]; then
    for t in test_cuda_backend test_cuda_ipc; do
        log "re-run $t with PROJD_FORCE_ENGINE=cublas"
        PROJD_FORCE_ENGINE=cublas timeout "${RERUN_TIMEOUT:-90}" "$build/tests/gpu/$t" 2>&1 |
            tee "$out/$t-cublas.log" | tail -40
    done
fi

# 2. Latency table on the reference model (generated here).
log "latency table"
timeout "${LATENCY_TIMEOUT:-200}" "$build/tests/gpu/cuda_latency" \
    --mkmodel /tmp/pj-reference.safetensors --out "$out" --reps "${REPS:-500}" 2>&1 |
    tee "$out/latency.log"
lat_rc=${PIPESTATUS[0]}
# The same through projd with every engine forced to cuBLAS (the in-process
# column's engine: the difference is the boundary alone), and with graph
# rebinding off (staging copies around the graphs instead).
log "latency, projd forced to cuBLAS"
PROJD_FORCE_ENGINE=cublas timeout "${LATENCY_TIMEOUT:-200}" "$build/tests/gpu/cuda_latency" \
    --model /tmp/pj-reference.safetensors --reps "${REPS:-500}" >"$out/latency-cublas.log" 2>&1
log "latency, projd without rebinding (PROJD_CUDA_NO_PATCH=1)"
PROJD_CUDA_NO_PATCH=1 timeout "${LATENCY_TIMEOUT:-200}" "$build/tests/gpu/cuda_latency" \
    --model /tmp/pj-reference.safetensors --reps "${REPS:-500}" >"$out/latency-nopatch.log" 2>&1
rm -f /tmp/pj-reference.safetensors

# 3. A sticky device error must make projd exit 1. Without MPS: a fault in
# one MPS client can take the server's other clients down with it.
mps_quit
trap - EXIT
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
log "fatal-error test (no MPS)"
timeout "${FAULT_TIMEOUT:-90}" "$build/tests/gpu/test_cuda_backend" --fault 2>&1 |
    tee "$out/gpu-fault.log"
fault_rc=${PIPESTATUS[0]}

log "summary"
grep -E "^(GPU suites|--- )" "$out/gpu-tests.log"
grep -hE "checks passed" "$out/gpu-tests.log" "$out/latency.log" "$out/gpu-fault.log"
echo "suites exit $suites_rc, latency exit $lat_rc, fault test exit $fault_rc"
[ "$suites_rc" -eq 0 ] && [ "$lat_rc" -eq 0 ] && [ "$fault_rc" -eq 0 ]
