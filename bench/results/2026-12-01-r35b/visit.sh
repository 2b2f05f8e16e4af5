#!/usr/bin/env bash
# Round 35b: every direct cuBLAS shape built at start-up (warm_direct),
# against main 887b915 (.devrun-v/old: round 35's caches only). The GPU
# suites of the cuda backend (tests/run-gpu-tests.sh over the pack), then
# projload's decode trace of the reference model (every m from 1 to 256)
# against the old and the new projd, alternating, twice each: closed loop at
# 1, 4 and 16 clients through rings, CUDA IPC buffers, 5 % checked; the
# start-up line of each daemon. Under MPS, the committed table.
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT" /tmp/f
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v
export LD_LIBRARY_PATH=$B/lib
export PROJD_TUNING_DIR=$PWD/config/tuning PJ_TUNE_TABLE=$PWD/config/tuning/h200.json
PJ_GPU_TEST_TIMEOUT=150 timeout 200 bash tests/run-gpu-tests.sh "$B" >/tmp/f/gpu-tests.log 2>&1
echo "gpu suites rc=$?"; grep -E "^--- |GPU suites|checks passed" /tmp/f/gpu-tests.log
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
timeout 20 nvidia-cuda-mps-control -d && echo "MPS up"
w=/tmp/w; mkdir -p $w
timeout 60 "$B/bin/projctl" mkmodel --preset reference --out $w/ref.safetensors >/dev/null
timeout 30 "$B/bin/projload" gen --kind decode --seed 1 --count 4000 --clients 16 \
    --out $w/decode.jsonl >/dev/null
for run in 1 2; do
    for side in old new; do
        bin=$B/bin; [ $side = old ] && bin=$B/old/bin
        sock=ipc://$w/projd.sock
        "$bin/projd" --model $w/ref.safetensors --socket "$sock" --backend cuda \
            --log-level info >/tmp/f/projd-$side-$run.log 2>&1 &
        pid=$!
        for _ in $(seq 1 100); do
            timeout 2 "$B/bin/projctl" --socket "$sock" --timeout 500 status >/dev/null 2>&1 && break
            sleep 0.2
        done
        timeout 90 "$B/bin/projload" --trace $w/decode.jsonl --socket "$sock" --buffers cuda \
            --transport ring --sweep 1,4,16 --warmup 30 --count 400 --duration 3 \
            --model $w/ref.safetensors --check-fraction 0.05 --no-progress \
            --json /tmp/f/load-$side-$run.json >/tmp/f/load-$side-$run.txt 2>&1
        echo "$side $run rc=$? $(grep -o 'warm-up [0-9.]* ms ([0-9]* direct cuBLAS shapes); backend total [0-9.]* ms' /tmp/f/projd-$side-$run.log)"
        sed -n '/^throughput vs concurrency/,$p' /tmp/f/load-$side-$run.txt | head -8
        kill -TERM $pid; wait $pid
    done
done
echo quit | timeout 20 nvidia-cuda-mps-control
tar czf "$OUT/r35b.tgz" -C /tmp/f .
