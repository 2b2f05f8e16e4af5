#!/usr/bin/env bash
# Session 50, visit 7: tables that state their compute capability. On
# this Hopper: test_cuda_backend's sections T (T3: a folder holding only
# another Hopper's table, now stating 9.0) and K; then a daemon whose only
# folder holds the other shipped table (now with "compute_capability":
# "9.0") takes it as the nearest, and one given that table with the key
# removed passes it over, says why, and runs the ladder. Each daemon is
# checked on every layer at m = 1 / 16 / 256.
. bench/visit-common.sh
export PJ_BUILD=$B
[ "${1:-}" = again ] || timeout 120 "$B/tests/gpu/test_cuda_backend" --t >"$OUT/t.log" 2>&1
echo "test_cuda_backend --t rc=$? $(tail -1 "$OUT/t.log")"
grep -E "^== T|FAIL" "$OUT/t.log" | head
pj_served_config || exit 1
mkdir -p -m 0755 /tmp/v7
run_one() { # TAG DIR
    PROJD_TUNING_DIR=$2 timeout 60 "$B/bin/projd" --config "$F/ref.json" --backend cuda \
        --socket ipc:///tmp/v7/$1.sock >"$OUT/daemon-$1.log" 2>&1 &
    local pd=$! L m ok=0
    for _ in $(seq 300); do
        timeout 5 "$B/bin/projctl" --socket ipc:///tmp/v7/$1.sock status >/dev/null 2>&1 && break
        sleep 0.1
    done
    for L in qkv_gate o pooler unpooler router; do
        for m in 1 16 256; do
            timeout 20 "$B/bin/projctl" --socket ipc:///tmp/v7/$1.sock project --layer $L --m $m \
                --check --model "$F/ref.safetensors" 2>&1 | tr '\n' ' ' | grep -q 'mismatches 0 *OK' && ok=$((ok + 1))
        done
    done
    kill -TERM $pd 2>/dev/null
    timeout 20 tail --pid=$pd -f /dev/null
    echo "$1: $ok of 15 exact"
    grep -E "tuning table|nearest installed|passed over|rejected|not used" "$OUT/daemon-$1.log" | cut -c25-300
}
other=h100-80gb-hbm3.json
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H100 && other=h200.json
mkdir -p /tmp/cc /tmp/nocc && cp config/tuning/$other /tmp/cc/
grep -v '"compute_capability"' config/tuning/$other >/tmp/nocc/$other
run_one cc /tmp/cc
run_one nocc /tmp/nocc
