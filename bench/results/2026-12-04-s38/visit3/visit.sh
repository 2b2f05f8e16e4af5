#!/bin/bash
# Session 38, visit 3: is the staged direct request's 3 s a lazy module
# load (CUDA waits for the context's queued work before loading a kernel)?
# Q again with CUDA_MODULE_LOADING=EAGER; then what eager loading costs
# projd on the reference model: time to serve and device memory.
. bench/visit-common.sh
export PJ_BUILD=$B
cd /tmp
CUDA_MODULE_LOADING=EAGER timeout 200 "$B/tests/gpu/test_cuda_backend" --q "" 2>&1 | tee "$OUT/q-eager.log" | grep -E '^Q:|FAIL|passed|failed'
timeout 120 "$B/bin/projctl" mkmodel --out /tmp/ref.safetensors >/dev/null || exit 1
for mode in LAZY EAGER LAZY EAGER; do
    t0=$(date +%s.%N)
    CUDA_MODULE_LOADING=$mode pj_daemon_start "$mode" /tmp/pj-$mode.sock --backend cuda --model /tmp/ref.safetensors --config "$OLDPWD/config/default.json" || continue
    t1=$(date +%s.%N)
    mem=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | grep "^$PJ_DPID," | cut -d, -f2)
    echo "$mode: serving after $(echo "$t1 - $t0" | bc) s; nvidia-smi used $mem; $(grep -m1 'device memory' "$F/$mode.log" | cut -c1-200)"
    kill -TERM "$PJ_DPID"; wait "$PJ_DPID"
    cp "$F/$mode.log" "$OUT/projd-$mode.log"
done 2>&1 | tee "$OUT/eager.txt"
