# Throughput against chunk size, from tools/compare-peers.sh's figures:
#   gnuplot -e "dat='compare-peers.dat'; out='compare-peers.png'" tools/compare-peers.gp
# Columns of dat: chunk bytes, then GB/s of pdbench, iperf3, UCX tcp tag_bw
# (NaN where one was skipped).
set terminal pngcairo size 900,560 font ",11"
set output out
set termoption noenhanced
set datafile missing "NaN"
set title "pdkv beside its peers, loopback TCP, one after another (" . system("nproc") . " cores)"
set xlabel "chunk size (bytes; iperf3 -l, ucx_perftest -s)"
set ylabel "GB/s"
set logscale x 2
set xtics ("4K" 4096, "16K" 16384, "64K" 65536, "256K" 262144, "1M" 1048576, "4M" 4194304, \
	   "16M" 16777216, "64M" 67108864)
set yrange [0:*]
set grid
set key top left
set pointsize 1.3
plot dat using 1:2 with linespoints lw 2 pt 7 title "pdkv: pdbench 1P1D, every byte checked", \
     dat using 1:3 with linespoints lw 2 pt 5 title "iperf3, 1 stream", \
     dat using 1:4 with linespoints lw 2 pt 9 title "UCX ucx_perftest tcp tag_bw"
