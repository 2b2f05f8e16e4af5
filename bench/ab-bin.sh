#!/usr/bin/env bash
# ab-bin.sh — A/B of two builds in one device visit: the GPU correctness
# sweep of the new build, then the benchmark with one table run alternately
# by the old binary (projd-bench-old) and the new one (projd-bench), RUNS
# times each, so that drift of the machine during
# the visit falls on both. Prints the score and loads of each run; every
# run's log and JSON, and the test log, go to $OUT/r.tar.
# Runs from the device copy's root with PJ_DEV (default .devrun) holding
# projd-bench, projd-bench-old, test_engines and lib (bench/dev-bin.sh);
# the table is TABLE (default PJ_DEV/h200.json). Pack the old binary last
# (tar r), so that xz's window finds the new build's two binaries next to
# each other.
set -u
R=/tmp/r
OUT=${OUT:-/tmp/pj-out}
mkdir -p $R "$OUT"
# shellcheck source=bench/dev-bin.sh
. "$(dirname "$0")/dev-bin.sh"
dev_setup projd-bench projd-bench-old
TABLE=${TABLE:-$D/h200.json}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw \
    --format=csv > $R/device.log 2>&1
TE=$(dev_bin test_engines)
if [ -x "$TE" ]; then
    timeout --kill-after=5 "${TEST_TIMEOUT:-280}" "$TE" > $R/test.log 2>&1
    echo "test_engines exit $?" | tee -a $R/device.log
    grep -E "^(A|B|C) |FAIL|test_engines:" $R/test.log | tail -40
    gzip -f $R/test.log
fi
new_bin=$(dev_bin projd-bench)
old_bin=$(dev_bin projd-bench-old)
for i in $(seq 1 "${RUNS:-3}"); do
    for b in ${BINS:-old new}; do
        bin=$new_bin
        [ "$b" = old ] && bin=$old_bin
        timeout --kill-after=5 120 "$bin" --out $R/$b-$i --commit "$b" --reps 300 \
            --table "$TABLE" > $R/$b-$i.log 2>&1
        echo "$b run $i rc=$?"
        grep -E "^SCORE|^(decode|verify) " $R/$b-$i.log
    done
done
tar cf "$OUT/r.tar" -C $R .
