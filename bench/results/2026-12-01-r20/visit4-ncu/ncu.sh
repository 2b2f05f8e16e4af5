#!/usr/bin/env bash
# Round 20 evidence: where pipe 7's time goes at m = 128 (DRAM and L2 bytes,
# reduction traffic) against cuBLAS on the same shape.
set -u
OUT=${OUT:-/tmp/pj-out}; mkdir -p /tmp/v "$OUT"
[ -d /tmp/v/.devrun-v ] || tar xJf .devrun-pack/v.tar.xz -C /tmp/v
B=/tmp/v/.devrun-v; export LD_LIBRARY_PATH=$B/lib
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
M=gpu__time_duration.sum,dram__bytes_read.sum,lts__t_bytes.sum,lts__t_sectors_op_red.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed
i=0
while read -r layer m eng knobs regex; do
  i=$((i+1))
  echo "=== $layer m=$m $eng $knobs"
  timeout 120 "$NCU" --clock-control none -k "regex:$regex" --launch-skip 4 --launch-count 1 \
     --metrics $M --csv $B/bin/projd-bench --out /tmp/one --one "$layer" "$m" "$eng" "$knobs" > /tmp/n$i.csv 2>&1
  echo "rc=$?"; grep -E '"(gpu__time|dram__bytes|lts__t_bytes|lts__t_sectors|sm__thr|lts__thr|dram__thr)' /tmp/n$i.csv | awk -F'","' '{print $(NF-2), $(NF-1), $NF}'
  cp /tmp/n$i.csv "$OUT/"
done <<'LIST'
o 128 splitk ks=1,pipe=7,tile=1,cl=0 tgemm_ws
o 128 splitk ks=4,pipe=7,tile=1,cl=0 tgemm_ws
o 128 splitk ks=4,pipe=7,tile=6,cl=0 tgemm_ws
o 128 splitk ks=2,pipe=3,tile=7,cl=1 tgemm_kernel
o 128 cublas algo=5 nvjet|xmma|cutlass|sm90
qkv_gate 128 splitk ks=1,pipe=7,tile=1,cl=0 tgemm_ws
qkv_gate 128 cublas algo=0 nvjet|xmma|cutlass|sm90
o 16 splitk ks=2,pipe=7,tile=9,cl=1 tgemm_ws
o 16 cublas algo=0 nvjet|xmma|cutlass|sm90
LIST
