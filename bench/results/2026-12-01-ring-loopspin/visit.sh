#!/usr/bin/env bash
# The daemon's loop spinning while ring work is near (uv_idle while a ring
# request is in flight and for ring.spin_us after ring traffic) against the
# loop that sleeps in epoll: tests/gpu/cuda_latency on the reference model,
# the same daemon with the loop's spin off (PROJD_RING_LOOP_SPIN=0: the loop
# of main 72a4120) and on, alternating, three runs each, under MPS with the
# committed table; then projctl bench-ipc (cpu backend) once each way.
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
for run in 1 2 3; do
    for side in off on; do
        spin=1; [ $side = off ] && spin=0
        PROJD_RING_LOOP_SPIN=$spin PJ_BUILD=$B timeout 100 "$B/tests/gpu/cuda_latency" \
            --model /tmp/ref.safetensors --out /tmp/f/$side-$run --reps 300 \
            >/tmp/f/latency-$side-$run.log 2>&1
        echo "$side $run rc=$? $(grep 'PING round trip' /tmp/f/latency-$side-$run.log)"
    done
done
echo quit | timeout 20 nvidia-cuda-mps-control
for side in off on; do
    spin=1; [ $side = off ] && spin=0
    PROJD_RING_LOOP_SPIN=$spin timeout 60 bash bench/bench-ipc.sh "$B" 5000 \
        /tmp/f/bench-ipc-$side.json >/tmp/f/bench-ipc-$side.txt 2>&1
    echo "bench-ipc $side: $(tail -2 /tmp/f/bench-ipc-$side.txt | head -1)"
done
tar czf "$OUT/loopspin.tgz" -C /tmp/f .
