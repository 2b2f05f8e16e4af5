#!/usr/bin/env bash
# Session 40, visit 5: the session's last code. bench/final-check.sh (GPU
# suites under MPS with test_cuda_backend U, python_torch with
# test_under_torch_compile; the fault tests; the benchmark twice), then the
# reference model's start as systemd hears it, now step by step per layer.
# At most 8 files come back: the logs, bench-1's JSON and table, start.log.
. bench/visit-common.sh
V=bench/results/2026-12-04-s40/visit1
FC=/tmp/fc
bash bench/final-check.sh "$B" "$FC" "$(cat .devrun-pack/commit)"
mkdir -p "$OUT/final"
cp "$FC/backend.log" "$FC/bench-1.log" "$FC/bench-2.log" "$OUT/final/"
cp /tmp/backend/gpu-fault.log /tmp/backend/gpu-tests.log "$OUT/final/" 2>/dev/null
cp "$FC/bench-1/bench.json" "$OUT/final/bench.json"
cp "$FC/bench-1/bench.md" "$OUT/final/bench.md" 2>/dev/null
grep -E "^U:|== U|FAIL|checks passed|^--- |GPU suites|^Ran |^OK|torch " "$OUT/final/gpu-tests.log" "$OUT/final/gpu-fault.log" | cut -c1-200 | head -40
timeout 40 "$B/bin/projctl" mkmodel --out /tmp/ref.safetensors >/dev/null || exit 1
mkdir -p -m 700 /tmp/pjs
echo "== the reference model's start, as systemd hears it"
timeout 90 python3 $V/notify_log.py /tmp/pjs/n1 60 -- "$B/bin/projd" --socket ipc:///tmp/pjs/a.sock \
    --backend cuda --model /tmp/ref.safetensors 2>"$OUT/start.log" | cut -c1-200
grep -E 'startup|during the start|stopped' "$OUT/start.log" | cut -c1-300
ls -la /tmp/pjs
