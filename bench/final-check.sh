#!/usr/bin/env bash
# final-check.sh — the check of a build of main on the GPU host that ends a
# round: the GPU suites and the fatal-error test (bench/run-backend-device.sh)
# with the daemons finding the committed table (PROJD_TUNING_DIR) and
# test_engines checking the dispatcher's choices from it (PJ_TUNE_TABLE),
# then the benchmark of that table, twice. The table is this GPU's
# (config/tuning/<name>.json, named as the daemon looks for it), else
# h200.json: the pool lends H100s too, and a run on one should score the
# table its daemons use. (A Hopper with no table of its name: its daemons
# take the nearest, daemon/tablepick.h; this script then scores h200.json.)
# From the device copy's root.
# Usage: bench/final-check.sh BUILD OUTDIR [COMMIT]
#   BUILD: the unpacked build (bin/, lib/, tests/gpu/); OUTDIR gets
#   backend.log, backend.tgz, bench-1/, bench-2/ and their logs.
set -u
B=${1:?usage: bench/final-check.sh BUILD OUTDIR [COMMIT]}
F=${2:?usage: bench/final-check.sh BUILD OUTDIR [COMMIT]}
commit=${3:-final}
mkdir -p "$F"
export LD_LIBRARY_PATH=$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null | head -1)
slug=$(printf '%s' "$gpu" | tr 'A-Z' 'a-z' | tr -c 'a-z0-9' '-')
table=config/tuning/h200.json
for t in "config/tuning/$slug.json" "config/tuning/${slug#nvidia-}.json"; do
    [ -n "$slug" ] && [ -f "$t" ] && table=$t && break
done
echo "device: ${gpu:-unknown}; table $table"
export PROJD_TUNING_DIR=$PWD/config/tuning PJ_TUNE_TABLE=$PWD/$table
rm -rf /tmp/backend
OUT=/tmp/backend PJ_GPU_TEST_TIMEOUT=300 SUITES_TIMEOUT=380 timeout 450 \
    bash bench/run-backend-device.sh "$B" >"$F/backend.log" 2>&1
echo "backend rc=$?"
grep -E "GPU suites|checks passed|test_engines:|tuning table: .*entries|fatal|python_torch|python_sglang|^Ran |^OK" \
    "$F/backend.log" | sort | uniq -c | head -20
tar czf "$F/backend.tgz" -C /tmp/backend . 2>/dev/null
for i in 1 2; do
    timeout 100 "$B/bin/projd-bench" --out "$F/bench-$i" --reps 300 --table "$table" \
        --commit "$commit" >"$F/bench-$i.log" 2>&1
    echo "bench $i rc=$? $(grep -E '^SCORE' "$F/bench-$i.log")"
done
echo "entries that fell back: $(cat "$F"/bench-*.log | grep -c "falling back")"
