set terminal pngcairo size 1000,640 noenhanced
set output 'sweep-verify/sweep.png'
set title 'projload: throughput and latency vs concurrency (closed loop)'
set xlabel 'concurrent clients'
set logscale x 2
set grid
set ylabel 'requests/s'
set y2label 'latency (us)'
set ytics nomirror
set y2tics
set key top left
set yrange [0:*]
set y2range [0:*]
plot 'sweep-verify/sweep.dat' using 1:2 with linespoints lw 2 title 'req/s', \
     'sweep-verify/sweep.dat' using 1:4 axes x1y2 with linespoints dt 2 title 'p50 (us)', \
     'sweep-verify/sweep.dat' using 1:5 axes x1y2 with linespoints dt 3 title 'p99 (us)'
