#!/usr/bin/env bash
# Round 22, visit 1: where the z12 GEMV's extra time at m = 16 goes (ncu,
# same knobs at m = 8 and 16), plus DRAM / L2 bytes.
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT"
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v; export LD_LIBRARY_PATH=$B/lib
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
M=gpu__time_duration.sum,dram__bytes_read.sum,lts__t_bytes.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
i=0
while read -r layer m eng knobs regex; do
  [ -z "$layer" ] && continue
  i=$((i+1)); rep=/tmp/deep$i
  echo "=== $i $layer m=$m $eng $knobs"
  timeout --kill-after=5 150 "$NCU" --clock-control none -k "regex:$regex" --launch-skip 4 --launch-count 1 \
     --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
     --section InstructionStats --section SourceCounters --section MemoryWorkloadAnalysis --metrics $M \
     -f -o $rep $B/bin/projd-bench --out /tmp/one --one "$layer" "$m" "$eng" "$knobs" > "$OUT/deep$i.run" 2>&1
  echo "ncu rc=$?"
  "$NCU" -i $rep.ncu-rep --page details --print-details all > "$OUT/deep$i-details.txt" 2>&1
  "$NCU" -i $rep.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > "$OUT/deep$i-sass.csv.gz"
  "$NCU" -i $rep.ncu-rep --page raw --csv 2>/dev/null | gzip > "$OUT/deep$i-raw.csv.gz"
  grep -E "^ +(Duration|DRAM Throughput|L2 Cache Throughput|Achieved Occupancy|Registers Per Thread|Dynamic Shared Memory Per Block|Block Limit Shared Mem|Issued Warp Per Scheduler|Warp Cycles Per Issued Instruction|Theoretical Occupancy) " "$OUT/deep$i-details.txt" | head -14
  grep -E "(dram__bytes_read.sum|lts__t_bytes.sum) " "$OUT/deep$i-details.txt" | head -3
done < .devrun-pack/r22-list.txt
