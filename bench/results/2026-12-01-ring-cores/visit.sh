#!/usr/bin/env bash
# The ring's spin decision without a sysconf per request: main 682c3f7
# (.devrun-v/old: sysconf(_SC_NPROCESSORS_ONLN) on every ring dispatch and
# completion) against the count taken once at start. tests/gpu/cuda_latency
# on the reference model under MPS, old and new alternating, twice each.
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/f
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v
export LD_LIBRARY_PATH=$B/lib
export PROJD_TUNING_DIR=$PWD/config/tuning
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
timeout 20 nvidia-cuda-mps-control -d && echo "MPS up"
timeout 60 "$B/bin/projctl" mkmodel --preset reference --out /tmp/ref.safetensors >/dev/null
for run in 1 2; do
    for side in old new; do
        build=$B; [ $side = old ] && build=$B/old
        PJ_BUILD=$build timeout 100 "$B/tests/gpu/cuda_latency" --model /tmp/ref.safetensors \
            --out /tmp/f/$side-$run --reps 300 >/tmp/f/latency-$side-$run.log 2>&1
        echo "$side $run rc=$? $(grep 'PING round trip' /tmp/f/latency-$side-$run.log)"
    done
done
echo quit | timeout 20 nvidia-cuda-mps-control
tar czf "$OUT/cores.tgz" -C /tmp/f .
