#!/usr/bin/env bash
# Session 23, visit 1 (main b2b202a): a 270 s soak of projd on the cuda
# backend (bench/run-load-device.sh SOAK=270: projload runs of 15 s cycling
# decode/verify, ring/nng, 1/4/16 clients with CUDA IPC buffers, STATS and
# GPU memory sampled after each), then projd-bench --tune-new on m = 1 with
# the committed table (NEW must keep all 30 entries and load in projd).
. bench/visit-common.sh
git_commit=${1:-b2b202a}
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv
BIN=$B/bin TABLE=$PWD/config/tuning/h200.json SOAK=270 STEP=15 OUT=$F/soak \
    timeout 420 bash bench/run-load-device.sh >"$F/soak.log" 2>&1
echo "soak rc=$?"
cp "$F/soak/summary.md" "$OUT/soak-summary.md" 2>/dev/null
tail -30 "$F/soak.log" | grep -v '^|' | tail -8
timeout 170 "$B/bin/projd-bench" --table config/tuning/h200.json --tune-new --tune "$F/tn.json" \
    --tune-m 1-1 --tune-budget 20 --reps 60 --out "$F/tn" --commit "$git_commit" >"$F/tn.log" 2>&1
echo "tune-new rc=$? entries: $(grep -c '"layer"' "$F/tn.json" 2>/dev/null) $(grep -E '^SCORE' "$F/tn.log")"
tail -3 "$F/tn.log"
mkdir -p /tmp/tnd && cp "$F/tn.json" /tmp/tnd/h200.json 2>/dev/null
timeout 60 "$B/bin/projctl" mkmodel --preset reference --seed 1 --out /tmp/ref.st >/dev/null 2>&1
echo '{"device": {"backend": "cuda"}}' >/tmp/tnd.json
PROJD_TUNING_DIR=/tmp/tnd pj_daemon_start tnd /tmp/tnd.sock --model /tmp/ref.st --config /tmp/tnd.json
pj_daemon_stop
grep -c 'stored as bf16' "$F/tnd.log" | sed 's/^/reference model layers kept bf16 by auto: /'
timeout 60 "$B/bin/projd" --model /tmp/ref.st --config /tmp/tnd.json --check-config 2>&1 | tail -2
echo "check-config cuda rc=${PIPESTATUS[0]}"
CUDA_VISIBLE_DEVICES='' timeout 60 "$B/bin/projd" --model /tmp/ref.st --config /tmp/tnd.json --check-config 2>&1 | tail -1
echo "check-config cuda without a device rc=${PIPESTATUS[0]}"
echo "daemon with NEW: $(grep -E 'tuning table' "$F/tnd.log" | head -2)"
cd "$F" && tar czf "$OUT/visit.tgz" soak.log soak/load-results.tgz soak/summary.md tn.json tn.log tn tnd.log 2>/dev/null
cat "$OUT/soak-summary.md" | tail -28
