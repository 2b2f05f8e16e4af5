#!/usr/bin/env bash
# One device visit: GPU correctness sweep, then the benchmark (tuning first,
# or with the committed table), optionally profiles; everything written under
# $OUT, a short table printed last. Runs from the repository root of the
# device copy with the prebuilt binaries in .devrun/ (see bench/README.md):
#   .devrun/test_engines  .devrun/projd-bench  .devrun/lib/*  [.devrun/h200.json]
# Usage: bench/run-device.sh [tune|tunenew|table|untuned] [--quick-tests] [--no-tests] [--ncu]
#   tune     tune, write $OUT/h200.json, benchmark with it (default)
#   tunenew  re-tune among the table's entries, cuBLAS, gemvz pipe=5 and the
#            cluster split-K forms (m in $TUNE_M, LO-HI, default all; with
#            TUNE_FULL=1 those shapes get every engine's candidates)
#   table    benchmark with .devrun/h200.json (else config/tuning/h200.json)
#   untuned  benchmark the untuned ladder
#   --ncu    afterwards profile the kernels named in .devrun/ncu.txt (one
#            "layer m engine knobs kernel-regex" per line) into $OUT/ncu.txt
# Never changes GPU settings; only reads them. ncu runs with --clock-control none.
set -u
mode=${1:-tune}
shift || true
tests=full
ncu=0
for a in "$@"; do
    case $a in
    --quick-tests) tests=quick ;;
    --no-tests) tests=none ;;
    --ncu) ncu=1 ;;
    esac
done
OUT=${OUT:-/tmp/pj-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.devrun/lib:${LD_LIBRARY_PATH:-}
commit=$(cat .devrun/COMMIT 2>/dev/null || echo unknown)
log=$OUT/device.log
{
    echo "== $(date -u +%FT%TZ) commit $commit mode $mode tests $tests"
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw \
        --format=csv 2>&1
} | tee "$log"

if [ "$tests" != none ]; then
    targ=""
    [ "$tests" = quick ] && targ=--quick
    timeout --kill-after=5 "${TEST_TIMEOUT:-240}" .devrun/test_engines $targ >"$OUT/test.log" 2>&1
    echo "test_engines exit $?" | tee -a "$log"
    grep -E "^(0|A|B|C) |FAIL|test_engines:|lost" "$OUT/test.log" | head -60 | tee -a "$log"
fi

args=(--out "$OUT" --commit "$commit" --reps 300)
case $mode in
tune) args+=(--tune "$OUT/h200.json" --tune-budget "${TUNE_BUDGET:-170}" --survey) ;;
tunenew)
    # Re-tune the shapes with m in $TUNE_M among the table's entry, cuBLAS,
    # gemvz with the prefetch (pipe=5) and the cluster split-K forms; the
    # other entries are kept; then benchmark.
    t=config/tuning/h200.json
    [ -f .devrun/h200.json ] && t=.devrun/h200.json
    args+=(--table "$t" --tune-new --tune "$OUT/h200.json" --tune-budget "${TUNE_BUDGET:-120}")
    [ -n "${TUNE_M:-}" ] && args+=(--tune-m "$TUNE_M")
    [ -n "${TUNE_FULL:-}" ] && args+=(--tune-full) # every engine's candidates
    ;;
table)
    t=config/tuning/h200.json
    [ -f .devrun/h200.json ] && t=.devrun/h200.json
    args+=(--table "$t")
    ;;
untuned) args+=(--survey) ;;
esac
timeout --kill-after=5 "${BENCH_TIMEOUT:-330}" .devrun/projd-bench "${args[@]}" >"$OUT/bench.log" 2>&1
rc=$?
echo "projd-bench exit $rc" | tee -a "$log"
# Exit 3: the results are written, but a shape was wrong after its timed
# replays (bench.json says which); they stay as they are. Another failure of
# a tuning run: keep what the tuner learnt (log) and still get timings of the
# ladder, in a folder of their own.
if [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ] && { [ "$mode" = tune ] || [ "$mode" = tunenew ]; }; then
    cp "$OUT/bench.log" "$OUT/bench-tune-failed.log"
    retry=()
    [ "$mode" = tunenew ] && retry=(--table "$t")
    timeout --kill-after=5 120 .devrun/projd-bench --out "$OUT/untuned" --commit "$commit" \
        --reps 200 "${retry[@]}" >"$OUT/bench.log" 2>&1
    echo "projd-bench (untuned retry, $OUT/untuned) exit $?" | tee -a "$log"
fi

if [ "$ncu" = 1 ] && [ -f .devrun/ncu.txt ]; then
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
    if [ -n "$NCU" ]; then
        while read -r layer m eng knobs regex; do
            [ -z "$layer" ] && continue
            echo "=== $layer m=$m $eng $knobs" >>"$OUT/ncu.txt"
            timeout --kill-after=5 90 "$NCU" --clock-control none -k "regex:$regex" \
                --launch-skip 4 --launch-count 1 --section SpeedOfLight \
                --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
                --section LaunchStats .devrun/projd-bench --out /tmp/pj-one --one "$layer" "$m" \
                "$eng" "$knobs" >>"$OUT/ncu.txt" 2>&1
            echo "ncu $layer $m $eng exit $?" | tee -a "$log"
        done <.devrun/ncu.txt
    else
        echo "ncu not found" | tee -a "$log"
    fi
fi
grep -E "^(tune|bench|survey|  )" "$OUT/bench.log" | tail -70
tail -42 "$OUT/bench.log"
