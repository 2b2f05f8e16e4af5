#!/usr/bin/env bash
# Session 58, visit 2: why session 42's table for Llama-3-8B shapes chose
# the bf16 GEMV over the 12-bit one at m = 1 for three of four layers. The
# 8B-shaped decoder layer of bench/visit-common.sh (pj_l8_model: qkv_proj
# 6144 x 4096, o_proj 4096 x 4096, gate_up_proj 28672 x 4096, down_proj
# 4096 x 14336, format auto) tuned by projd-bench at m = 1 / 8 / 16 / 32,
# with the tuner's whole log kept (every candidate's time), then the
# benchmark of that table against cuBLAS in the same run.
. bench/visit-common.sh
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)"
t0=$(date +%s)
pj_l8_model || exit 1
echo "model ready ($(($(date +%s) - t0)) s)"
cat >"$F/l8tune.json" <<'JSON'
{"model": {"path": "/tmp/l8/l8.safetensors",
  "layers": [
    {"name": "qkv_proj", "tensor": "qkv_proj.weight"},
    {"name": "o_proj", "tensor": "o_proj.weight"},
    {"name": "gate_up_proj", "tensor": "gate_up_proj.weight"},
    {"name": "down_proj", "tensor": "down_proj.weight"}]},
 "shapes": {"m": [1, 8, 16, 32]}}
JSON
timeout 440 "$B/bin/projd-bench" --config "$F/l8tune.json" --tune "$F/l8-table.json" \
    --tune-budget 240 --out "$F/l8" --reps 200 >"$F/l8.log" 2>&1
echo "projd-bench rc=$? ($(($(date +%s) - t0)) s)"
gzip -c "$F/l8/tune_log.csv" >"$OUT/tune_log.csv.gz"
cp "$F/l8/bench.json" "$F/l8-table.json" "$OUT/" 2>/dev/null
grep -v '^tuner: .* candidates' "$F/l8.log" | tail -40 >"$OUT/bench.log"
grep -E "^(m |SCORE)|^tuner: [0-9.]+ s" "$F/l8.log" | head -12
