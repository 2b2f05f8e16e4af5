#!/usr/bin/env bash
# Session 39, visit 4: the session's last code (afdf0b2): after the review
# of the session's diff (projd_sglang's E_LIMIT retry polled, P with both
# sides in CUDA memory) and the operator review (the socket lock, the short
# private listener name, tuning.table refused when unreadable: T2):
# bench/final-check.sh (GPU suites under MPS, the fault tests, the
# benchmark twice), then projd on the reference model with a second start
# on the same socket.
. bench/visit-common.sh
bash bench/final-check.sh "$B" "$OUT/final" "$(cat .devrun-pack/commit)"
cp /tmp/backend/gpu-fault.log /tmp/backend/gpu-tests.log "$OUT/final/" 2>/dev/null
grep -E "^(B2|P|T2?):|== T2|FAIL|checks passed|^--- |GPU suites|^Ran|^OK" "$OUT/final/gpu-tests.log" "$OUT/final/gpu-fault.log" | cut -c1-200 | head -40
timeout 40 "$B/bin/projctl" mkmodel --out /tmp/ref.safetensors >/dev/null || exit 1
mkdir -p -m 700 /tmp/pjs
pj_daemon_start ref /tmp/pjs/ref.sock --backend cuda --model /tmp/ref.safetensors && {
    timeout 60 "$B/bin/projd" --socket ipc:///tmp/pjs/ref.sock --backend cuda --model /tmp/ref.safetensors >"$F/second.log" 2>&1
    echo "second projd on the same socket: exit $?"; tail -2 "$F/second.log" | cut -c1-250
    timeout 20 "$B/bin/projctl" --socket ipc:///tmp/pjs/ref.sock project --layer qkv_gate --m 16 --check --model /tmp/ref.safetensors 2>&1 | tail -2
    grep -E 'startup' "$F/ref.log" | cut -c1-300
    kill -TERM "$PJ_DPID"; wait "$PJ_DPID"; echo "projd exit $?"; ls /tmp/pjs
    cp "$F/ref.log" "$F/second.log" "$OUT/"
}
