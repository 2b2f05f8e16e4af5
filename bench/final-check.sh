#!/usr/bin/env bash
# final-check.sh — the check of a build of main on the GPU host that ends a
# round: the GPU suites and the fatal-error test (bench/run-backend-device.sh)
# with the daemons finding the committed table (PROJD_TUNING_DIR) and
# test_engines checking the dispatcher's choices from it (PJ_TUNE_TABLE),
# then the benchmark of that table, twice. The table is this GPU's
# (bench/gpu-table.sh).
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
table=$(bash bench/gpu-table.sh)
export PROJD_TUNING_DIR=$PWD/config/tuning PJ_TUNE_TABLE=$PWD/$table
rm -rf /tmp/backend
OUT=/tmp/backend PJ_GPU_TEST_TIMEOUT=300 SUITES_TIMEOUT=380 timeout 450 \
    bash bench/run-backend-device.sh "$B" >"$F/backend.log" 2>&1
echo "backend rc=$?"
grep -E "GPU suites|checks passed|test_engines:|tuning table: .*entries|fatal|python_torch|python_sglang|^Ran |^OK" \
    "$F/backend.log" | sort | uniq -c | head -20
tar czf "$F/backend.tgz" -C /tmp/backend . 2>/dev/null
for i in 1 2; do
    # A folder kept from an earlier visit (a machine that kept /tmp) must not
    # pass its bench.json off as this run's.
    rm -rf "$F/bench-$i"
    timeout 100 "$B/bin/projd-bench" --out "$F/bench-$i" --reps 300 --table "$table" \
        --commit "$commit" >"$F/bench-$i.log" 2>&1
    echo "bench $i rc=$? $(grep -E '^SCORE' "$F/bench-$i.log")"
done
echo "entries that fell back: $(cat "$F"/bench-*.log | grep -c "falling back")"
