#!/usr/bin/env bash
# Session 54, visit 6: main 9c93e1a's cuda backend on the served reference
# model with the GPU's table: the heavy-block note (now info, naming the
# z12 GEMV entries the dispatcher runs at some served m), and one checked
# projection per layer kind against the CPU reference.
. bench/visit-common.sh
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)"
pj_served_config || { echo "visit: no served config"; exit 1; }
mkdir -p /tmp/pjv
if PROJD_TUNING_DIR=$PWD/config/tuning pj_daemon_start served /tmp/pjv/s.sock --config "$F/ref.json"; then
    for l in qkv_gate o pooler unpooler router; do
        timeout 60 "$B/bin/projctl" --socket ipc:///tmp/pjv/s.sock project --layer $l --m 16 --check \
            --model "$F/ref.safetensors" 2>&1 | tr '\n' ' ' | grep -Eo "layer [a-z_]+|mismatches [0-9]+ *[A-Z]*" | tr '\n' ' '
        echo
    done
    pj_daemon_stop
fi
grep -E "16-row block|tuning table" "$F/served.log" | cut -c1-400
cp "$F/served.log" "$OUT/"
