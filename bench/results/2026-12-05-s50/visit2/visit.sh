#!/usr/bin/env bash
# Session 50, visit 2: does an MPS client need to write to the pipe
# directory? deploy/projd@.service runs projd under ProtectSystem=strict,
# which leaves /run/nvidia-mps (the MPS units' pipe directory) read-only
# to it. Here an MPS control daemon serves /tmp/mpsro; projd (cuda, the
# reference model) starts once with the directory writable and once in a
# mount namespace where it is a read-only bind mount, and each time
# nvidia-smi and the control daemon's server list say whether it ran as
# an MPS client. Last, the table bench/final-check.sh picks on this GPU.
. bench/visit-common.sh
pj_served_config || exit 1
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpsro CUDA_MPS_LOG_DIRECTORY=/tmp/mpslog
mkdir -p /tmp/mpsro /tmp/mpslog -m 0755 /tmp/v2
timeout 20 nvidia-cuda-mps-control -d || { echo "no MPS control daemon"; exit 1; }
ls -la /tmp/mpsro | head
one() { # TAG [ro]
    local tag=$1 ro=${2:-}
    local inner="exec $B/bin/projd --config $F/ref.json --backend cuda --socket ipc:///tmp/v2/$tag.sock"
    if [ -n "$ro" ]; then
        inner="mount --bind /tmp/mpsro /tmp/mpsro && mount -o remount,bind,ro /tmp/mpsro &&
               { touch /tmp/mpsro/probe 2>/dev/null && echo 'ro: STILL WRITABLE' || echo 'ro: read-only here'; } && $inner"
    fi
    if [ -n "$ro" ]; then
        timeout 120 unshare -m --propagation private sh -c "$inner" >"$OUT/projd-$tag.log" 2>&1 &
    else
        timeout 120 sh -c "$inner" >"$OUT/projd-$tag.log" 2>&1 &
    fi
    local pd=$! ok=0
    for _ in $(seq 300); do
        timeout 5 "$B/bin/projctl" --socket ipc:///tmp/v2/$tag.sock status >/dev/null 2>&1 && { ok=1; break; }
        kill -0 $pd 2>/dev/null || break
        sleep 0.1
    done
    echo "$tag: ready=$ok; $(grep -E 'ro:' "$OUT/projd-$tag.log")"
    timeout 20 "$B/bin/projctl" --socket ipc:///tmp/v2/$tag.sock project --layer qkv_gate --m 16 \
        --check --model "$F/ref.safetensors" 2>&1 | tail -1
    nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader
    nvidia-smi | grep -E 'projd|mps' | head -5
    echo "server list: $(echo get_server_list | timeout 10 nvidia-cuda-mps-control | tr '\n' ' ')"
    grep -iE 'mps|warn' "$OUT/projd-$tag.log" | cut -c25-200 | head -5
    pkill -TERM -f "ipc:///tmp/v2/$tag.sock"
    timeout 20 tail --pid=$pd -f /dev/null
}
one rw
one ro ro
echo "--- control.log"; tail -20 /tmp/mpslog/control.log
echo quit | timeout 20 nvidia-cuda-mps-control
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)
slug=$(printf '%s' "$gpu" | tr 'A-Z' 'a-z' | tr -c 'a-z0-9' '-')
echo "final-check's table on \"$gpu\": slug $slug; $(ls config/tuning/ | tr '\n' ' ')"
