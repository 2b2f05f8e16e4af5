#!/bin/bash
# Session 38, visit 5: how a BlockingSync record shares the queue
# (queue_probe3); what eager module loading costs projd on the reference
# model (time to serve, device memory, the start-up report).
. bench/visit-common.sh
cd /tmp
timeout 60 "$B/queue_probe3" 2>&1 | tee "$OUT/queue_probe3.txt"
timeout 120 "$B/bin/projctl" mkmodel --out /tmp/ref.safetensors >/dev/null || exit 1
mkdir -p -m 700 /tmp/pjs
for mode in LAZY EAGER LAZY EAGER; do
    t0=$(date +%s.%N)
    CUDA_MODULE_LOADING=$mode pj_daemon_start "$mode" /tmp/pjs/$mode.sock --backend cuda --model /tmp/ref.safetensors || continue
    t1=$(date +%s.%N)
    mem=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | grep "^$PJ_DPID," | cut -d, -f2)
    echo "$mode: serving after $(echo "$t1 - $t0" | bc) s; nvidia-smi used$mem"
    grep -E 'startup|device memory' "$F/$mode.log" | cut -c1-400
    kill -TERM "$PJ_DPID"; wait "$PJ_DPID"
    cp "$F/$mode.log" "$OUT/projd-$mode.log"
done 2>&1 | tee "$OUT/eager.txt"
