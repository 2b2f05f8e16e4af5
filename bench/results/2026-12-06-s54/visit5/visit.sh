#!/usr/bin/env bash
# Session 54, visit 5: the final check of the session's last code
# (bench/final-check.sh: the GPU suites with python_sglang, the fault tests,
# the benchmark of the committed table twice), then a daemon on the served
# reference model with the GPU's table, whose log must say qkv_gate's heavy
# exception block under the table's z12 GEMV entries (daemon/backend_cuda.c
# note_heavy_block) and nothing of the kind for the other layers.
. bench/visit-common.sh
t0=$(date +%s)
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)"
pj_site_wheels || echo "visit: the SGLang wheels did not install"
pj_final_check
echo "final check took $(($(date +%s) - t0)) s"
pj_served_config || { echo "visit: no served config"; exit 1; }
mkdir -p /tmp/pjv
if pj_daemon_start served /tmp/pjv/served.sock --config "$F/ref.json"; then
    pj_daemon_stop
fi
grep -E "16-row block|tuning table" "$F/served.log" | cut -c1-400
cp "$F/served.log" "$OUT/"
