#!/usr/bin/env bash
# Session 57, visit 3: the final check of main bdf3bc2 (visit 2 plus the
# review's fix of the reaper watch; kernels and tables
# unchanged since session 45's score of record): the GPU suites (their
# daemons run the watch) and the fatal-error test with the committed
# table, the benchmark of this GPU's table twice, and a daemon on the GPU
# whose reaper is blocked on purpose (it must drain and exit 1).
. bench/visit-common.sh
echo "device: $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)"
t0=$(date +%s)
pj_final_check
echo "final check done ($(($(date +%s) - t0)) s)"
mkdir -p "$OUT/reaper"
"$B/bin/projctl" mkmodel --force --out "$F/rw.safetensors" >/dev/null
s=$(date +%s%N)
PROJD_REAPWATCH_MS=100,1500 PROJD_REAPWATCH_BLOCK=3 timeout 60 "$B/bin/projd" \
    --socket "ipc://$F/rw.sock" --model "$F/rw.safetensors" >"$OUT/reaper/projd.log" 2>&1
rc=$?
echo "reaper blocked on the GPU: exit $rc after $((($(date +%s%N) - s) / 1000000)) ms;" \
    "$(grep -c 'nng has not retired a closed pipe' "$OUT/reaper/projd.log") error line(s)"
echo "--- table (bench 1)"
grep -E "^(decode|verify)|^SCORE" "$OUT/final/bench-1.log" | head -10
