#!/usr/bin/env bash
# Session 27, visit 4 (main 856a805): visit 3's failing section Z mended (a
# z12 layer keeps its bf16 copy when the z12 GEMV cannot take every m of
# it). First the review's case on the reference model: projd (cuda) with
# shapes.max_m = 32, each dense layer checked through projctl at m = 1, 16,
# 32 against the CPU reference, the copy bytes from STATS; then
# bench/final-check.sh.
. bench/visit-common.sh
pj_served_config || exit 1
cat >"$F/ref32.json" <<JSON
{"model": {"path": "$F/ref.safetensors",
  "layers": [
    { "name": "qkv_gate", "tensor": "qkv_gate.weight", "format": "auto" },
    { "name": "o",        "tensor": "o.weight",        "format": "auto" },
    { "name": "pooler",   "tensor": "pooler.weight",   "format": "auto" },
    { "name": "unpooler", "tensor": "unpooler.weight", "format": "auto", "max_n": 1024 },
    { "name": "router",   "tensor": "router.weight",   "format": "split" }]},
 "device": {"backend": "cuda"},
 "shapes": {"m": [1, 8, 16, 32], "max_m": 32}}
JSON
export PROJD_TUNING_DIR=$PWD/config/tuning
mkdir -p /tmp/pj32 && chmod 0755 /tmp/pj32
sock=/tmp/pj32/projd.sock
if pj_daemon_start ref32 "$sock" --config "$F/ref32.json"; then
    for l in qkv_gate o pooler unpooler router; do
        for m in 1 16 32; do
            r=$(timeout 60 "$B/bin/projctl" --socket "ipc://$sock" project --layer "$l" --m "$m" \
                --check --model "$F/ref.safetensors" 2>&1 | tail -1)
            echo "max_m 32: $l m=$m: $r"
        done
    done
    timeout 10 "$B/bin/projctl" --socket "ipc://$sock" stats 2>&1 |
        grep -E "bf16_copy|weights_stored" | head -3
    pj_daemon_stop
fi
grep -E "engine (qkv_gate|o|pooler) m=(16|32)|keeps a bf16|error" "$F/ref32.log" | cut -c1-160
cp "$F/ref32.log" "$OUT/"
timeout 330 bash bench/final-check.sh "$B" "$F/final" "$(cat .devrun-pack/commit 2>/dev/null || echo work)" 2>&1 |
    grep -E 'backend rc|GPU suites|test_engines:|checks passed|^Ran|bench [12]|fell back|FAIL'
grep -h "^Z: \|== Z\|^B z12" "$F/final/backend.log" | head
tar czf "$OUT/final.tgz" -C "$F/final" .
