#!/usr/bin/env bash
# ncu-deep.sh — per-instruction stall breakdown of a few kernels on the GPU
# host: an ncu report of each (one launch after four warm-ups, clocks left
# alone), then its details page (all metrics, stall reasons) and its SASS
# source page (samples and reasons per instruction) as text under $OUT.
# Runs from the device copy's root. The binaries come from PJ_DEV (default
# .devrun; bench/dev-bin.sh), the list from NCU_LIST (default
# PJ_DEV/ncu-deep.txt), lines: layer m engine knobs kernel-regex.
set -u
OUT=${OUT:-/tmp/pj-out}
mkdir -p "$OUT"
# shellcheck source=bench/dev-bin.sh
. "$(dirname "$0")/dev-bin.sh"
dev_setup projd-bench
BENCH=$(dev_bin projd-bench)
LIST=${NCU_LIST:-$D/ncu-deep.txt}
[ -r "$LIST" ] || { echo "ncu-deep: no list $LIST" >&2; exit 2; }
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"; "$NCU" --version | tail -1
i=0
while read -r layer m eng knobs regex; do
    [ -z "$layer" ] && continue
    i=$((i + 1))
    rep=/tmp/deep$i
    echo "=== $i $layer m=$m $eng $knobs"
    timeout --kill-after=5 150 "$NCU" --clock-control none -k "regex:$regex" --launch-skip 4 \
        --launch-count 1 --section SpeedOfLight --section Occupancy --section WarpStateStats \
        --section SchedulerStats --section InstructionStats --section SourceCounters \
        --section MemoryWorkloadAnalysis -f -o $rep \
        "$BENCH" --out /tmp/pj-one --one "$layer" "$m" "$eng" "$knobs" > "$OUT/deep$i.run" 2>&1
    echo "ncu exit $?"
    "$NCU" -i $rep.ncu-rep --page details --print-details all > "$OUT/deep$i-details.txt" 2>&1
    echo "details exit $?"
    "$NCU" -i $rep.ncu-rep --page source --csv --print-source sass > "$OUT/deep$i-sass.csv" 2>&1
    echo "source exit $? ($(wc -l < "$OUT/deep$i-sass.csv") lines)"
    "$NCU" -i $rep.ncu-rep --page raw --csv > "$OUT/deep$i-raw.csv" 2>&1
    grep -iE "stall|Warp Cycles Per Issued|Duration" "$OUT/deep$i-details.txt" | head -40
done < "$LIST"
