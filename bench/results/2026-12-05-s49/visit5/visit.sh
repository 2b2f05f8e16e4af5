#!/usr/bin/env bash
# Session 49, visit 5: a GPU with no table of its name takes the nearest
# installed one (daemon/tablepick.h). test_cuda_backend under MPS (its
# section T3: a folder holding only another Hopper's table), then on this
# GPU a daemon whose tuning folder holds only h200.json (it must take it,
# as the nearest) and one whose folder holds both shipped tables (it must
# take its own by name), each checked on every layer at the loads' m.
. bench/visit-common.sh
export PJ_BUILD=$B PJ_GPU_TEST_TIMEOUT=200
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p /tmp/mps /tmp/mpslog
if timeout 20 nvidia-cuda-mps-control -d; then mps=1; else mps=0; unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY; fi
echo "MPS: $mps"
timeout 220 "$B/tests/gpu/test_cuda_backend" >"$OUT/test_cuda_backend.log" 2>&1
echo "test_cuda_backend rc=$? $(tail -1 "$OUT/test_cuda_backend.log")"
grep -E "^== T|T3|FAIL" "$OUT/test_cuda_backend.log" | head -12
[ "$mps" = 1 ] && echo quit | timeout 20 nvidia-cuda-mps-control >/dev/null 2>&1
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY

pj_served_config || exit 1
# As run, the sockets were in /tmp itself, which projd refuses (a shared
# directory): both daemons stopped at once. Corrected after; not run again.
mkdir -p -m 0755 /tmp/v5
run_one() { # TAG DIR
    PROJD_TUNING_DIR=$2 timeout 60 "$B/bin/projd" --config "$F/ref.json" --backend cuda \
        --socket ipc:///tmp/v5/$1.sock >"$OUT/daemon-$1.log" 2>&1 &
    local pd=$! L m r
    for _ in $(seq 200); do
        timeout 5 "$B/bin/projctl" --socket ipc:///tmp/v5/$1.sock status >/dev/null 2>&1 && break
        sleep 0.1
    done
    for L in qkv_gate o pooler unpooler router; do
        for m in 1 8 16 32 128 256; do
            r=$(timeout 20 "$B/bin/projctl" --socket ipc:///tmp/v5/$1.sock project --layer $L --m $m \
                --check --model "$F/ref.safetensors" 2>&1 | tail -2 | tr '\n' ' ')
            echo "check $L m=$m: $r"
        done
    done >"$OUT/checks-$1.txt"
    kill -TERM $pd 2>/dev/null
    timeout 20 tail --pid=$pd -f /dev/null
    echo "$1: $(grep -c 'mismatches 0 *OK' "$OUT/checks-$1.txt") of 30 exact"
    grep -E "tuning table|nearest installed|rejected|not used" "$OUT/daemon-$1.log" | cut -c25-330
}
mkdir -p /tmp/only200 && cp config/tuning/h200.json /tmp/only200/
run_one only200 /tmp/only200
run_one shipped "$PWD/config/tuning"
