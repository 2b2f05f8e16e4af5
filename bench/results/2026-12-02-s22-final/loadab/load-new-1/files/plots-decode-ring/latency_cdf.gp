set terminal pngcairo size 1000,640 noenhanced
set output 'plots-decode-ring/latency_cdf.png'
set title 'projload: request latency CDF'
set xlabel 'latency (us)'
set ylabel 'fraction of requests'
set logscale x
set grid
set key bottom right
set yrange [0:1]
plot  'plots-decode-ring/latency_cdf_ring_c1.dat' using 1:2 with steps lw 2 title 'ring c=1', \
     'plots-decode-ring/latency_cdf_ring_c2.dat' using 1:2 with steps lw 2 title 'ring c=2', \
     'plots-decode-ring/latency_cdf_ring_c4.dat' using 1:2 with steps lw 2 title 'ring c=4', \
     'plots-decode-ring/latency_cdf_ring_c8.dat' using 1:2 with steps lw 2 title 'ring c=8', \
     'plots-decode-ring/latency_cdf_ring_c16.dat' using 1:2 with steps lw 2 title 'ring c=16'
