#!/bin/bash
# Session 38, visit 4: which host call waits for a held stream (sync_probe),
# lazy and eager module loading.
. bench/visit-common.sh
cd /tmp
which gdb eu-stack 2>&1 | head -2
for mode in LAZY EAGER; do
    echo "== CUDA_MODULE_LOADING=$mode"
    CUDA_MODULE_LOADING=$mode timeout 120 "$B/sync_probe" 2>&1
done | tee "$OUT/sync_probe.txt"
