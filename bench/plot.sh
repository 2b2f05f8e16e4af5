#!/usr/bin/env bash
# Draw the per-shape speedup bar chart of a projd-bench results folder:
# DIR/speedups.dat (written by projd-bench) -> DIR/speedups.png.
# gnuplot is not on the GPU host: run this here, on the copied results.
# Usage: bench/plot.sh DIR [TITLE]
set -euo pipefail
dir=${1:?usage: bench/plot.sh DIR [TITLE]}
title=${2:-projd engines vs the SGLang cuBLAS path, per shape}
dat=$dir/speedups.dat
[ -f "$dat" ] || { echo "plot.sh: $dat not found" >&2; exit 1; }
command -v gnuplot >/dev/null || { echo "plot.sh: gnuplot not installed" >&2; exit 1; }
score=""
if [ -f "$dir/bench.json" ]; then
    score=$(python3 -c 'import json,sys; b=json.load(open(sys.argv[1])); print("score %.3fx (95%% CI %.3f-%.3f), %s, commit %s" % (b["score"], b["score_ci_lo"], b["score_ci_hi"], b["device"], b["commit"]))' "$dir/bench.json" || true)
fi
gnuplot <<GP
set terminal pngcairo size 1400,600 font "sans,10" noenhanced
set output "$dir/speedups.png"
set title "$title\n$score"
set ylabel "speedup (baseline us / ours us)"
set style fill solid 0.85 border -1
set boxwidth 0.8
set xtics rotate by -60 scale 0
set grid ytics
set yrange [0:*]
set offsets 0, 0, 0.35, 0
set key off
engine_color(e) = (e eq "gemv") ? 0x1f77b4 : (e eq "gemvz") ? 0x2ca02c : (e eq "router") ? 0xff7f0e : (e eq "splitk") ? 0x9467bd : 0x7f7f7f
set label 1 "blue gemv, green gemvz, orange router, purple splitk, grey cublas" at graph 0.01, graph 0.97 left
plot "$dat" using 0:2:(engine_color(stringcolumn(3))):xtic(1) with boxes lc rgb variable, \
     1 with lines lc rgb "black" dt 2
GP
echo "$dir/speedups.png"
