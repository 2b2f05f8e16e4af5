#!/usr/bin/env bash
# The final check of session 23 (the fixes from this session's reviews:
# libprojd's redial and fork, limits.hello_timeout_ms, the cuda backend's
# table check, the tuning table's loader and writer, projd-bench's options,
# the model loader's auto format, --check-config; kernels and table as
# round 34): bench/final-check.sh (GPU suites, python_torch, the
# fatal-error test with the committed table, the benchmark twice), then a
# 120 s soak (bench/run-load-device.sh SOAK=120), then projd with a table
# written by projd-bench --tune-new (m = 1) loads it.
. bench/visit-common.sh
commit=${1:-final}
bash bench/final-check.sh "$B" "$F" "$commit"
grep -h "PING round trip" /tmp/backend/*.log | head -2
BIN=$B/bin TABLE=$PWD/config/tuning/h200.json SOAK=120 STEP=15 OUT=$F/soak \
    timeout 240 bash bench/run-load-device.sh >"$F/soak.log" 2>&1
echo "soak rc=$?"
timeout 120 "$B/bin/projd-bench" --table config/tuning/h200.json --tune-new --tune "$F/tn.json" \
    --tune-m 1-1 --tune-budget 10 --reps 30 --out "$F/tn" --commit "$commit" >"$F/tn.log" 2>&1
echo "tune-new rc=$? entries: $(grep -c '"layer"' "$F/tn.json" 2>/dev/null)"
mkdir -p /tmp/tnd/run && chmod 700 /tmp/tnd/run && cp "$F/tn.json" /tmp/tnd/h200.json
timeout 60 "$B/bin/projctl" mkmodel --preset reference --seed 1 --out /tmp/tnd/ref.st >/dev/null 2>&1
echo '{"device": {"backend": "cuda"}}' >/tmp/tnd/cfg.json
PROJD_TUNING_DIR=/tmp/tnd pj_daemon_start tnd /tmp/tnd/run/p.sock --model /tmp/tnd/ref.st \
    --config /tmp/tnd/cfg.json && pj_daemon_stop
echo "daemon with the tune-new table: $(grep -E 'tuning table: ' "$F/tnd.log" | head -1)"
echo "layers auto kept bf16: $(grep -c 'stored as bf16' "$F/tnd.log")"
gzip -f "$F/backend.log"
cp "$F/soak/summary.md" "$OUT/soak-summary.md" 2>/dev/null
tar czf "$OUT/final.tgz" -C "$F" .
tail -16 "$OUT/soak-summary.md"
