#!/usr/bin/env bash
# Session 60, visit 2 (visit 1 never ran: too little device time was left
# for the final check): the tables' "rows" on the GPU (a decode trace
# against the default layers, the unpooler at all 8192 rows, and against
# max_n 1024; the start's note), then the GPU suites and the fatal-error
# test on main (the 64-exception window rule of round 44 and "rows"),
# with the daemons finding the committed table, as bench/final-check.sh
# runs them, in the time left (${PJ_SUITES_S:-170} s).
. bench/visit-common.sh
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)"
t0=$(date +%s)
pj_served_config || exit 1
rows=$(pj_rows_trace 60)
echo "rows done ($(($(date +%s) - t0)) s)"
table=$(bash bench/gpu-table.sh)
export PROJD_TUNING_DIR=$PWD/config/tuning PJ_TUNE_TABLE=$PWD/$table
rm -rf /tmp/backend
OUT=/tmp/backend PJ_GPU_TEST_TIMEOUT=150 SUITES_TIMEOUT=$((${PJ_SUITES_S:-170} - 10)) \
    timeout "${PJ_SUITES_S:-170}" bash bench/run-backend-device.sh "$B" >"$F/backend.log" 2>&1
echo "backend rc=$? ($(($(date +%s) - t0)) s)"
mkdir -p "$OUT/suites"
cp "$F/backend.log" /tmp/backend/gpu-fault.log /tmp/backend/gpu-tests.log "$OUT/suites/" 2>/dev/null
echo "--- suites"
grep -E "^--- |checks passed|GPU suites|fatal|^Ran |^OK" "$F/backend.log" | sort | uniq -c | cut -c1-200 | head -24
echo "--- rows"
echo "$rows"
