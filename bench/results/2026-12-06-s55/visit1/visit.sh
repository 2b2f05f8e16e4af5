#!/usr/bin/env bash
# Session 55, visit 1: the session's last code on the GPU host.
#   1. tests/e2e_hardened.sh with the cuda backend on the reference model:
#      projd under deploy/projd@.service's file-system hardening (a mount
#      namespace; the units had never run on a GPU node), a projection
#      through /run/projd/projd-0.sock checked bit-exact;
#   2. the benchmark of this GPU's committed table, once (no kernel or
#      table changed this session: the score's figure for this code);
#   3. test_cuda_backend (the daemon's cuda backend end to end).
. bench/visit-common.sh
t0=$(date +%s)
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)"
export PROJD_TUNING_DIR=$PWD/config/tuning
"$B/bin/projctl" mkmodel --force --out "$F/ref.safetensors" >/dev/null || echo "visit: mkmodel failed"
PJ_HARDENED_BACKEND=cuda PJ_HARDENED_MODEL=$F/ref.safetensors timeout 150 \
    bash tests/e2e_hardened.sh "$B" >"$OUT/hardened.log" 2>&1
echo "hardened rc=$? ($(($(date +%s) - t0)) s)"
grep -E "^ok|^not ok|e2e_hardened" "$OUT/hardened.log" | cut -c1-300
table=$(bash bench/gpu-table.sh)
timeout 110 "$B/bin/projd-bench" --out "$OUT/bench" --reps 300 --table "$table" \
    --commit "$(cat .devrun-pack/commit)" >"$OUT/bench.log" 2>&1
echo "bench rc=$? ($(($(date +%s) - t0)) s) $(grep -E '^SCORE' "$OUT/bench.log")"
echo "entries that fell back: $(grep -c "falling back" "$OUT/bench.log")"
PJ_BUILD=$B timeout 100 "$B/tests/gpu/test_cuda_backend" >"$OUT/cuda_backend.log" 2>&1
echo "test_cuda_backend rc=$? ($(($(date +%s) - t0)) s): $(grep -E "checks|Checks" "$OUT/cuda_backend.log" | tail -2 | tr '\n' ' ')"
echo "--- table"
grep -E "^(decode|verify)|^SCORE|^ *load|speedup" "$OUT/bench.log" | head -20
